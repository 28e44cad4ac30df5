"""Threads and faults of the in-process pipeline: its APIs used from several threads at once,
stages that fail or die mid-stream, close() while requests are in flight, and interrupts.

Every result is compared with an oracle: the outputs of the whole model (one onnxruntime
session) for the request's own inputs. Every blocking call has a timeout and every thread is
joined with one, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from test_pipeline import OUTPUTS, WIDTH, annotated_mlp, mlp, mlp_stages, request, stage_threads

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime import Pipeline, PipelineTimeoutError

WAIT = 30.0
"""Seconds any blocking call of a test may take before the test fails (a hang, not a result)."""


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    yield
    for thread in stage_threads():  # a closed pipeline's workers end: wait for that event
        thread.join(WAIT)
    assert stage_threads() == []


class Oracle:
    """The outputs of the whole model (one onnxruntime session) for given inputs."""

    def __init__(self, width: int = WIDTH) -> None:
        model = mlp(width=width)
        self._session = ort.InferenceSession(
            ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            values = self._session.run(OUTPUTS, inputs)
        return dict(zip(OUTPUTS, values, strict=True))

    def check(self, out: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
        expected = self(inputs)
        assert list(out) == OUTPUTS
        for name in OUTPUTS:
            np.testing.assert_allclose(out[name], expected[name], rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def two_stages(max_in_flight: int | None = None) -> Pipeline:
    """The MLP in two stages of one onnxruntime thread each."""
    return Pipeline(
        mlp_stages([2]), outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=max_in_flight
    )


def distinct_request(thread: int, k: int) -> dict[str, np.ndarray]:
    """A request no other (thread, k) sends, so a result given to the wrong caller shows."""
    return request(10_000 * (thread + 1) + k, batch=1 + (thread + k) % 3)


class Threads:
    """Start functions in threads; collect what they raise; join with a bound."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[tuple[str, BaseException]] = []

    def start(self, name: str, func, *args) -> None:
        def body():
            try:
                func(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by join()
                self.errors.append((name, exc))

        thread = threading.Thread(target=body, name=f"test-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def join(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0))
        hung = [t.name for t in self.threads if t.is_alive()]
        assert not hung, f"threads still running after {timeout} s: {hung}"


# ---------------------------------------------------------------------------------------------
# Item 3: run() in one thread, send_input/receive_output (and map) in others


def test_run_map_and_queue_api_from_several_threads_each_get_their_own_results(oracle):
    """Threads hammer run(), map() and the queue API at once; every result is the caller's."""
    rounds = 60
    with Pipeline(
        mlp_stages([1, 3]), outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=4
    ) as pipe:
        threads = Threads()
        results: dict[str, int] = {}

        def run_many(t: int) -> None:
            for k in range(rounds):
                inputs = distinct_request(t, k)
                oracle.check(pipe.run(inputs, timeout=WAIT), inputs)
            results[f"run{t}"] = rounds

        def queue_user(t: int) -> None:
            done = 0
            for k in range(0, rounds, 5):  # bursts of 5 sends, then 5 receives
                burst = [distinct_request(t, k + j) for j in range(5)]
                numbers = [pipe.send_input(r, timeout=WAIT) for r in burst]
                assert numbers == sorted(numbers)
                for r in burst:
                    oracle.check(pipe.receive_output(timeout=WAIT), r)
                    done += 1
            results[f"queue{t}"] = done

        def map_user(t: int) -> None:
            requests = [distinct_request(t, k) for k in range(rounds)]
            got = 0
            for out, r in zip(pipe.map(requests, timeout=WAIT), requests, strict=True):
                oracle.check(out, r)
                got += 1
            results[f"map{t}"] = got

        for t in range(3):
            threads.start(f"run{t}", run_many, t)
        threads.start("queue3", queue_user, 3)
        threads.start("map4", map_user, 4)
        threads.join()
        assert threads.errors == []
        assert results == {
            f"{name}{t}": rounds for t, name in enumerate(["run"] * 3 + ["queue", "map"])
        }
        assert pipe.in_flight == 0
        with pytest.raises(PipelineError, match="nothing to receive"):
            pipe.receive_output(timeout=WAIT)
        stats = pipe.stats()
        assert stats.requests == 5 * rounds and stats.failed == 0
        # one request at a time per stage, whichever thread ran it: utilisation stays <= 1
        for stage in stats.stages:
            assert stage.requests == 5 * rounds and stage.utilisation <= 1
            periods = sorted(stage.periods, key=lambda p: p.start)
            assert all(a.end <= b.start for a, b in itertools.pairwise(periods))


def test_run_and_map_while_requests_are_queued(oracle):
    """run() and map() no longer refuse while send_input requests wait: each keeps its own."""
    with two_stages() as pipe:
        queued = [distinct_request(0, k) for k in range(3)]
        numbers = [pipe.send_input(r) for r in queued]
        own = distinct_request(1, 0)
        oracle.check(pipe.run(own, timeout=WAIT), own)
        mapped = [distinct_request(2, k) for k in range(4)]
        for out, r in zip(pipe.map(mapped, timeout=WAIT), mapped, strict=True):
            oracle.check(out, r)
        assert pipe.in_flight == 3
        for r in queued:
            oracle.check(pipe.receive_output(timeout=WAIT), r)
        assert numbers == [0, 1, 2]
        assert pipe.in_flight == 0


def test_concurrent_senders_and_one_receiver_get_results_in_request_order(oracle):
    senders, per_sender = 4, 15
    with two_stages(max_in_flight=3) as pipe:
        sent: dict[int, dict[str, np.ndarray]] = {}
        received: list[dict[str, np.ndarray]] = []
        threads = Threads()

        def send(t: int) -> None:
            for k in range(per_sender):
                inputs = distinct_request(t, k)
                sent[pipe.send_input(inputs, timeout=WAIT)] = inputs

        def receive() -> None:
            while len(received) < senders * per_sender:
                try:
                    received.append(pipe.receive_output(timeout=WAIT))
                except PipelineError as exc:
                    if "nothing to receive" not in str(exc):
                        raise
                    time.sleep(0.001)  # the senders have not sent the next one yet

        for t in range(senders):
            threads.start(f"send{t}", send, t)
        threads.start("receive", receive)
        threads.join()
        assert threads.errors == []
    assert sorted(sent) == list(range(senders * per_sender))
    for number, out in enumerate(received):  # receive_output returns in request-number order
        oracle.check(out, sent[number])


# ---------------------------------------------------------------------------------------------
# Faults while other threads send


def bad(inputs: dict[str, np.ndarray], which: str) -> dict[str, np.ndarray]:
    """The request with a wrong shape for stage 0 (``x``) or the last stage (``scale``)."""
    inputs = dict(inputs)
    if which == "x":
        inputs["x"] = inputs["x"][:, :-1]
    else:
        inputs["scale"] = np.zeros(WIDTH + 1, np.float32)
    return inputs


def test_stage_failing_mid_stream_while_threads_send(oracle):
    senders, per_sender = 3, 12
    with two_stages() as pipe:
        sent: dict[int, tuple[dict[str, np.ndarray], str | None]] = {}
        threads = Threads()
        ran: dict[str, int] = {}

        def send(t: int) -> None:
            for k in range(per_sender):
                which = [None, "x", None, "scale"][(t + k) % 4]
                inputs = distinct_request(t, k)
                if which is not None:
                    inputs = bad(inputs, which)
                sent[pipe.send_input(inputs, timeout=WAIT)] = (inputs, which)

        def run_many(t: int) -> None:  # run() and map() beside the queue, some failing too
            for k in range(per_sender):
                inputs = distinct_request(t, k)
                if k % 3 == 1:
                    with pytest.raises(PipelineError) as info:
                        pipe.run(bad(inputs, "scale"), timeout=WAIT)
                    assert info.value.stage == 1
                else:
                    oracle.check(pipe.run(inputs, timeout=WAIT), inputs)
            ran["run"] = per_sender

        for t in range(senders):
            threads.start(f"send{t}", send, t)
        threads.start("run", run_many, senders)
        threads.join()
        assert threads.errors == []
        assert ran == {"run": per_sender}
        numbers = sorted(sent)
        assert len(numbers) == senders * per_sender
        for number in numbers:  # in request-number order
            inputs, which = sent[number]
            if which is None:
                oracle.check(pipe.receive_output(timeout=WAIT), inputs)
            else:
                with pytest.raises(PipelineError) as info:
                    pipe.receive_output(timeout=WAIT)
                assert info.value.request == number
                assert info.value.stage == (0 if which == "x" else 1)
        assert pipe.in_flight == 0
        stats = pipe.stats()
        assert stats.failed == senders * per_sender // 2 + per_sender // 3


def test_close_from_another_thread_while_threads_send_run_and_receive():
    width = 256  # requests of some milliseconds, so close() finds them in flight
    heavy = Oracle(width)
    stages = mlp_stages([2], width=width)
    pipe = Pipeline(stages, outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=4)
    threads = Threads()
    ok: dict[str, int] = {"run": 0, "map": 0}
    sent: dict[int, dict[str, np.ndarray]] = {}
    received: list[dict[str, np.ndarray]] = []
    started = threading.Event()
    ran, mapped = threading.Event(), threading.Event()

    def inputs_for(t: int, k: int) -> dict[str, np.ndarray]:
        return request(10_000 * (t + 1) + k, batch=64, width=width)

    def send(t: int) -> None:
        for k in itertools.count():
            inputs = inputs_for(t, k)
            sent[pipe.send_input(inputs, timeout=WAIT)] = inputs

    def receive() -> None:
        while True:
            try:
                received.append(pipe.receive_output(timeout=WAIT))
            except PipelineError as exc:
                if "nothing to receive" not in str(exc):
                    raise
                time.sleep(0.001)
                continue
            started.set()

    def run_many(t: int) -> None:
        for k in itertools.count():
            inputs = inputs_for(t, k)
            heavy.check(pipe.run(inputs, timeout=WAIT), inputs)
            ok["run"] += 1
            ran.set()

    def map_user(t: int) -> None:
        requests = (inputs_for(t, k) for k in itertools.count())
        for k, out in enumerate(pipe.map(requests, timeout=WAIT)):
            heavy.check(out, inputs_for(t, k))
            ok["map"] += 1
            mapped.set()

    threads.start("send", send, 0)
    threads.start("receive", receive)
    threads.start("run", run_many, 1)
    threads.start("map", map_user, 2)
    # every API has had a result, and all keep sending: close() finds requests in flight
    assert started.wait(WAIT) and ran.wait(WAIT) and mapped.wait(WAIT)
    pipe.close()
    threads.join()
    # every thread ended with "closed", none with a wrong result or another error
    assert sorted(name for name, _ in threads.errors) == ["map", "receive", "run", "send"]
    for name, exc in threads.errors:
        assert isinstance(exc, PipelineError), (name, exc)
        assert "closed" in str(exc), (name, exc)
        if name in ("run", "map"):  # nothing about the queue API they did not use
            assert "send_input" not in str(exc) and "receive" not in str(exc), (name, exc)
    assert received
    numbers = sorted(sent)
    # The queue's results, in request-number order (the close may leave some unreceived).
    for number, out in zip(numbers, received, strict=False):
        heavy.check(out, sent[number])
    for call in (
        lambda: pipe.send_input(inputs_for(0, 0)),
        lambda: pipe.run(inputs_for(0, 0)),
        lambda: pipe.map([inputs_for(0, 0)]),
        pipe.receive_output,
    ):
        with pytest.raises(PipelineError, match="closed"):
            call()


# ---------------------------------------------------------------------------------------------
# Item 15: messages after close() describe the state the pipeline is in


def test_messages_after_close_with_requests_in_flight():
    pipe = two_stages()
    for k in range(3):
        pipe.send_input(request(k))
    pipe.close()
    for call in (lambda: pipe.run(request(5)), lambda: pipe.map([request(5)])):
        with pytest.raises(PipelineError) as info:
            call()
        message = str(info.value)
        assert "closed" in message and "create a new one" in message
        assert "receive" not in message and "send_input" not in message
    with pytest.raises(PipelineError, match="closed") as info:
        pipe.receive_output()
    assert "3 requests" in str(info.value) and "dropped" in str(info.value)
    assert repr(pipe).endswith("closed)")


# ---------------------------------------------------------------------------------------------
# Item 12: a BaseException in a stage ends its worker; every pending and later request fails


def fail_stage(pipe: Pipeline, stage: int, after: int, exc: BaseException) -> None:
    """Make stage ``stage`` raise ``exc`` from its ``after``-th run on (fault injection)."""
    runner = pipe._engine._runners[stage]
    real = runner.run
    count = itertools.count()

    def run(env, **kwargs):
        if next(count) >= after:
            raise exc
        return real(env, **kwargs)

    runner.run = run


@pytest.mark.parametrize("stage", [0, 1])
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "interrupt"])
def test_dead_worker_fails_every_pending_and_later_request(oracle, stage, exc):
    with two_stages(max_in_flight=8) as pipe:
        fail_stage(pipe, stage, 2, exc)
        requests = [distinct_request(0, k) for k in range(8)]
        for r in requests:
            pipe.send_input(r, timeout=WAIT)
        for k, r in enumerate(requests):
            if k < 2:
                oracle.check(pipe.receive_output(timeout=WAIT), r)
                continue
            with pytest.raises(PipelineError) as info:
                pipe.receive_output(timeout=WAIT)  # a failure at once, never a timeout
            assert not isinstance(info.value, PipelineTimeoutError)
            message = str(info.value)
            assert info.value.stage == stage and info.value.request == k
            assert f"stage {stage}" in message and "cpu" in message
            assert type(exc).__name__ in message and "worker" in message
        assert pipe.in_flight == 0
        # later requests: refused at once, naming the stage, by every API
        for call in (
            lambda: pipe.send_input(requests[0], timeout=WAIT),
            lambda: pipe.run(requests[0], timeout=WAIT),
            lambda: list(pipe.map(requests, timeout=WAIT)),
        ):
            with pytest.raises(PipelineError) as info:
                call()
            assert not isinstance(info.value, PipelineTimeoutError)
            assert info.value.stage == stage
            assert f"stage {stage} on cpu" in str(info.value)
            assert type(exc).__name__ in str(info.value)
        assert "broken" in repr(pipe)


def test_dead_worker_while_threads_send_and_map(oracle):
    with two_stages(max_in_flight=4) as pipe:
        fail_stage(pipe, 1, 20, SystemExit(1))
        threads = Threads()
        outcome: dict[str, list[str]] = {}

        def check_failure(exc: PipelineError) -> None:
            assert not isinstance(exc, PipelineTimeoutError), exc
            assert exc.stage == 1 and "SystemExit" in str(exc), exc

        def map_user(t: int) -> None:
            seen = []
            requests = (distinct_request(t, k) for k in itertools.count())
            try:
                for k, out in enumerate(pipe.map(requests, timeout=WAIT)):
                    oracle.check(out, distinct_request(t, k))
                    seen.append("ok")
            except PipelineError as exc:
                check_failure(exc)
                seen.append("failed")
            outcome[f"map{t}"] = seen

        def send_and_receive(t: int) -> None:
            seen = []
            try:
                for k in itertools.count():
                    inputs = distinct_request(t, k)
                    pipe.send_input(inputs, timeout=WAIT)
                    pipe.send_input(inputs, timeout=WAIT)
                    oracle.check(pipe.receive_output(timeout=WAIT), inputs)
                    oracle.check(pipe.receive_output(timeout=WAIT), inputs)
                    seen.append("ok")
            except PipelineError as exc:
                check_failure(exc)
                seen.append("failed")
            outcome[f"queue{t}"] = seen

        threads.start("map0", map_user, 0)
        threads.start("map1", map_user, 1)
        threads.start("queue2", send_and_receive, 2)  # one queue user: the queue is shared
        threads.join()
        assert threads.errors == []
        assert sorted(outcome) == ["map0", "map1", "queue2"]
        assert all(seen[-1] == "failed" for seen in outcome.values())
        assert sum(seen.count("ok") for seen in outcome.values()) >= 5


def test_base_exception_in_a_stage_run_inline_reaches_the_caller(oracle):
    """run() on an idle pipeline runs the stages in the calling thread: the exception is the
    caller's own, the request is dropped, the workers live on and the pipeline stays usable."""
    with two_stages() as pipe:
        fail_stage(pipe, 1, 0, SystemExit(4))
        with pytest.raises(SystemExit):
            pipe.run(request(0), timeout=WAIT)
        del pipe._engine._runners[1].run  # the stage's own run again
        assert pipe.in_flight == 0
        oracle.check(pipe.run(request(1), timeout=WAIT), request(1))
        outs = list(pipe.map([request(2), request(3)], timeout=WAIT))
        oracle.check(outs[1], request(3))


# ---------------------------------------------------------------------------------------------
# Item 11: an interrupted map() leaves nothing behind


def book_is_clean(pipe: Pipeline) -> bool:
    """Nothing waits to be received and no result is kept, once the stages are idle."""
    book = pipe._book
    deadline = time.monotonic() + WAIT
    while book.inside and time.monotonic() < deadline:
        time.sleep(0.005)
    return not book.inside and not book.waiting and not book.results and not book.queue


@pytest.mark.parametrize("at", [0, 1, 5])
def test_keyboard_interrupt_in_the_map_consumer_leaves_nothing_behind(oracle, at):
    with two_stages(max_in_flight=4) as pipe:
        requests = (distinct_request(0, k) for k in itertools.count())
        with pytest.raises(KeyboardInterrupt):  # noqa: PT012  # interrupted mid-iteration
            for k, _ in enumerate(pipe.map(requests, timeout=WAIT)):
                if k == at:
                    raise KeyboardInterrupt
        assert pipe.in_flight == 0
        assert book_is_clean(pipe)
        inputs = distinct_request(1, 0)
        oracle.check(pipe.run(inputs, timeout=WAIT), inputs)
        outs = list(pipe.map([distinct_request(1, k) for k in range(3)], timeout=WAIT))
        oracle.check(outs[2], distinct_request(1, 2))
        with pytest.raises(PipelineError, match="nothing to receive"):
            pipe.receive_output(timeout=WAIT)


def interrupt_when_main_waits() -> None:
    """SIGINT this process once its main thread blocks in a ``threading`` wait (an event).

    Every stage is held busy, so the map() of the main thread comes to wait for a result
    that cannot arrive; the state is polled (``WAIT`` is only a hang guard).
    """
    main = threading.main_thread().ident
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main)
        if frame is not None and frame.f_code.co_name == "wait" and waits_in_pipeline(frame):
            break
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)


def waits_in_pipeline(frame) -> bool:
    """Whether a ``threading`` wait at ``frame`` was called by the pipeline's map()."""
    while frame is not None:
        if frame.f_code.co_name == "_map" and frame.f_code.co_filename.endswith("pipeline.py"):
            return True
        frame = frame.f_back
    return False


def test_sigint_while_map_waits_for_a_result_leaves_nothing_behind(oracle):
    """The interrupt lands inside map(), while it waits (the stages held busy, so it must)."""
    with two_stages(max_in_flight=4) as pipe:
        requests = [distinct_request(0, k) for k in range(12)]
        it = pipe.map(requests, timeout=WAIT)
        oracle.check(next(it), requests[0])
        got = 1
        locks = pipe._engine._stage_locks
        with locks[0], locks[1]:  # no stage runs: once map() waits, no result can end the wait
            with pytest.raises(KeyboardInterrupt):  # noqa: PT012  # interrupted while map() waits
                interrupter = threading.Thread(target=interrupt_when_main_waits, daemon=True)
                interrupter.start()
                for out in it:
                    oracle.check(out, requests[got])
                    got += 1
            interrupter.join(WAIT)
        assert 1 <= got < 12
        assert pipe.in_flight == 0
        assert book_is_clean(pipe)
        oracle.check(pipe.run(requests[11], timeout=WAIT), requests[11])
        assert [k for k, _ in enumerate(pipe.map(requests[:3], timeout=WAIT))] == [0, 1, 2]


def test_map_iterator_dropped_or_failing_leaves_nothing_behind(oracle):
    with two_stages(max_in_flight=4) as pipe:
        it = pipe.map([distinct_request(0, k) for k in range(10)], timeout=WAIT)
        oracle.check(next(it), distinct_request(0, 0))
        it.close()  # what `break` does
        assert book_is_clean(pipe)

        def requests():
            yield distinct_request(0, 0)
            yield distinct_request(0, 1)
            raise KeyboardInterrupt  # raised inside map(), while it reads the iterable

        with pytest.raises(KeyboardInterrupt):
            list(pipe.map(requests(), timeout=WAIT))
        assert book_is_clean(pipe)
        oracle.check(pipe.run(request(3), timeout=WAIT), request(3))


def test_run_timeout_drops_its_request(oracle):
    with two_stages() as pipe:
        with pipe._engine._stage_locks[0]:  # stage 0 busy: nothing completes meanwhile
            pipe.send_input(request(0))  # stages not idle: run() goes through the workers
            with pytest.raises(PipelineTimeoutError, match=r"run\(\) timed out") as info:
                pipe.run(request(1), timeout=0.05)
        assert "dropped" in str(info.value) and info.value.request == 1
        assert pipe.in_flight == 1
        oracle.check(pipe.receive_output(timeout=WAIT), request(0))
        assert book_is_clean(pipe)
        assert pipe.stats().requests == 2  # the dropped request ran, its result was discarded


# -- a real SIGINT


def readline(proc: subprocess.Popen, timeout: float, stream=None) -> str:
    """One line of the child's stdout (or ``stream``), or fail after ``timeout`` seconds
    (a hang guard: the line is the event waited for)."""
    stream = proc.stdout if stream is None else stream
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([stream], [], [], max(remaining, 0))
        if not ready:
            proc.kill()
            pytest.fail(f"no line from the child within {timeout} s (got {data!r})")
        chunk = os.read(stream.fileno(), 1)
        if not chunk:
            err = "" if stream is proc.stderr else proc.stderr.read().decode(errors="replace")
            pytest.fail(f"the child ended (got {data!r}); stderr:\n{err}")
        data += chunk
    return data.decode()


INTERRUPTED_MAP = """
import itertools, json, sys, time
import numpy as np
from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime import Pipeline
from test_pipeline import OUTPUTS, request, mlp_stages
from test_pipeline_threads import Oracle

oracle = Oracle()
with Pipeline(mlp_stages([1, 3]), outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=6) as pipe:
    for trial in range(int(sys.argv[1])):
        kind = trial % 3  # map with an idle consumer, with a busy one, or run() in a loop
        ready_after = 1 + trial % 4  # results before saying "ready": where the signal lands varies
        try:  # "ready" is said inside: the signal can only land in the loop
            if kind == 2:
                for k in itertools.count():
                    pipe.run(request(k))
                    if k + 1 == ready_after:
                        print("ready", trial, flush=True)
            for k, out in enumerate(pipe.map(request(k) for k in itertools.count())):
                if k + 1 == ready_after:
                    print("ready", trial, flush=True)
                if kind:
                    time.sleep(0.001)  # a busy consumer
        except KeyboardInterrupt:
            pass
        state = {"trial": trial, "in_flight": pipe.in_flight}
        try:
            inputs = request(100 + trial)
            oracle.check(pipe.run(inputs, timeout=30), inputs)
            outs = list(pipe.map([request(k) for k in range(3)], timeout=30))
            oracle.check(outs[2], request(2))
            state["usable"] = True
        except PipelineError as exc:
            state["usable"] = str(exc)
        try:
            pipe.receive_output(timeout=5)
            state["left"] = "a result"
        except PipelineError as exc:
            state["left"] = str(exc)
        print(json.dumps(state), flush=True)
"""


def test_sigint_during_map_leaves_nothing_behind(tmp_path):
    """A real SIGINT while map() streams (idle consumer, busy consumer) or run() loops."""
    trials = 12
    tests = os.path.dirname(__file__)
    path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_MAP, str(trials)],
        cwd=tests,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
    )
    try:
        for trial in range(trials):
            assert readline(proc, 60).split() == ["ready", str(trial)]
            proc.send_signal(signal.SIGINT)  # the child is streaming: it said so
            state = json.loads(readline(proc, 60))
            assert state["in_flight"] == 0, state
            assert state["usable"] is True, state
            assert "nothing to receive" in state["left"], state
        assert proc.wait(30) == 0, proc.stderr.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigint_to_omny_run_exits_130_promptly(tmp_path):
    """The real ``omny`` command (``python -m``, as the console script runs it), interrupted
    once it says (``--progress``) that it is timing requests: status 130, one line, no
    traceback, no ``terminate called`` (status 134) from onnxruntime threads at exit."""
    path = tmp_path / "mlp.onnx"
    annotated_mlp(path)
    for _ in range(2):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "onnx_ir_multidevice._cli",
                "run",
                str(path),
                "--shards",
                "2",
                "--threads",
                "1",
                "--requests",
                "100000000",
                "--warmup",
                "0",
                "--progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            lines = []
            while not (lines and "timing" in lines[-1]):
                lines.append(readline(proc, 120, stream=proc.stderr))
            proc.send_signal(signal.SIGINT)
            status = proc.wait(WAIT)  # a hang guard: the exit itself is prompt
            err = "".join(lines) + proc.stderr.read().decode(errors="replace")
            assert status == 130, err
            assert "omny: interrupted" in err and "Traceback" not in err, err
            assert "terminate called" not in err, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
