"""The in-process engine: one worker thread per stage, connected by queues.

onnxruntime releases the GIL while it runs, so the stages run in parallel. Tensors go from
stage to stage as the :class:`onnxruntime.OrtValue` or numpy arrays a stage returned (on the
GPU for a CUDA stage), without copies. Registered as ``"thread"``, the default backend of
:class:`~onnx_ir_multidevice.runtime.Pipeline`.
"""

from __future__ import annotations

__all__ = ["ThreadEngine"]

import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from onnx_ir_multidevice.runtime.devices import Device
from onnx_ir_multidevice.runtime.engines.protocol import OnDone
from onnx_ir_multidevice.runtime.engines.registry import register_engine
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, as_numpy, failure_message
from onnx_ir_multidevice.runtime.stages import StageChain
from onnx_ir_multidevice.runtime.stats import StatsRecorder
from onnx_ir_multidevice.runtime.tensor_parallel import TensorParallelRunner, make_runner

_STOP = object()


class ThreadEngine:
    """One worker thread per stage, connected by queues.

    It is an :class:`~onnx_ir_multidevice.runtime.engines.InlineEngine`. Each queue holds at
    most ``max_in_flight`` requests, since no more are admitted. A stage runs one request at
    a time (a lock per stage), whether its worker runs it or a caller's thread
    (:meth:`run_inline`), so the busy periods of a stage never overlap.

    A worker ends only when the engine closes, or when a ``BaseException`` that is not an
    ``Exception`` (``SystemExit``, ``KeyboardInterrupt``...) escapes its stage: the request it
    ran fails with a fatal :class:`~onnx_ir_multidevice.runtime.runner.StageFailure` naming
    the stage (the pipeline then refuses later requests), and until the engine closes the
    worker fails every request that reaches the stage, at once; workers of earlier stages
    fail their requests without running them. Requests past that stage complete.

    Args:
        chain: The stages.
        devices: Device of each stage.
        threads: onnxruntime intra-op threads of each stage.
        recorder: Where busy periods go.
        on_done: Called with each request's outputs or failure.
        spinning: Whether onnxruntime's threads spin while idle.

    Raises:
        PipelineError: A stage's session cannot be made (those already made are closed).
    """

    name = "thread"
    clock = staticmethod(time.perf_counter)

    def __init__(
        self,
        chain: StageChain,
        devices: Sequence[Device],
        threads: Sequence[int | None],
        recorder: StatsRecorder,
        on_done: OnDone,
        *,
        spinning: bool,
    ) -> None:
        self._chain = chain
        self._devices = tuple(devices)
        self._recorder = recorder
        self._on_done = on_done
        self._runners: list[StageRunner | TensorParallelRunner] = []
        try:
            for stage, device, n in zip(chain.stages, devices, threads, strict=True):
                self._runners.append(make_runner(stage, device, n, spinning=spinning))
        except BaseException:
            for runner in self._runners:
                runner.close()
            raise
        self._queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in self._runners]
        self._stage_locks = [threading.Lock() for _ in self._runners]
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._inside: set[int] = set()
        """Requests submitted and not reported to ``on_done`` yet."""
        self._dead: tuple[int, StageFailure] | None = None
        """The first stage whose worker died, and the failure of the requests that need it."""
        self.threads = [
            threading.Thread(
                target=self._work, args=(i,), name=f"omny-pipeline-stage-{i}", daemon=True
            )
            for i in range(len(self._runners))
        ]
        for thread in self.threads:
            thread.start()

    def _enter(self, request: int) -> bool:
        """Track a new request; False (after failing it) if a stage is dead."""
        with self._lock:
            self._inside.add(request)
            dead = self._dead
        if dead is not None:
            self._deliver(request, dead[1])
            return False
        return True

    def _deliver(self, request: int, result: Any) -> None:
        """Report the end of ``request`` to the pipeline, once."""
        with self._lock:
            if request not in self._inside:
                return
            self._inside.discard(request)
        self._on_done(request, result)

    def submit(self, request: int, env: dict[str, Any]) -> None:
        """Queue the request for the first stage's worker."""
        if self._enter(request):
            self._queues[0].put((request, env))

    def _step(self, index: int, request: int, env: dict[str, Any]) -> dict[str, Any] | None:
        """Run stage ``index`` on one request: the tensors to pass on, or ``None`` if done.

        A failure (any ``Exception`` of the stage) is delivered to the caller here; so are
        the outputs after the last stage.
        """
        clock = self.clock
        runner = self._runners[index]
        with self._stage_locks[index]:
            start = clock()
            try:
                produced = runner.run(env, ort_values=True)
            except Exception as exc:  # any failure of the stage belongs to this request
                self._recorder.busy(index, request, start, clock())
                message = (
                    runner.describe_failure(exc, env)
                    if isinstance(runner, StageRunner)
                    else failure_message(exc)  # a tensor-parallel stage names its segment
                )
                self._deliver(request, StageFailure(index, message, exc))
                return None
            self._recorder.busy(index, request, start, clock())
        env.update(produced)
        if index + 1 == len(self._runners):
            outputs = {name: as_numpy(env[name]) for name in self._chain.graph_outputs}
            self._deliver(request, outputs)
            return None
        keep = self._chain.keep_after[index]
        return {k: v for k, v in env.items() if k in keep}

    def _work(self, index: int) -> None:
        inbox = self._queues[index]
        outbox = self._queues[index + 1] if index + 1 < len(self._queues) else None
        request = None
        try:
            while True:
                item = inbox.get()
                if item is _STOP:
                    return
                request, env = item
                dead = self._dead
                if self._stopping.is_set():
                    pass  # dropped: the pipeline is closed
                elif dead is not None and dead[0] > index:
                    self._deliver(request, dead[1])  # it could never pass the dead stage
                else:
                    try:
                        passed_on = self._step(index, request, env)
                    except Exception as exc:  # a bug of ours: fail the request, keep the worker
                        self._deliver(request, StageFailure(index, f"internal error: {exc!r}", exc))
                        passed_on = None
                    if passed_on is not None and outbox is not None:
                        outbox.put((request, passed_on))
                request = env = None
        except BaseException as exc:  # SystemExit, KeyboardInterrupt...: this stage is dead
            self._die(index, request, exc)

    def _die(self, index: int, request: int | None, exc: BaseException) -> None:
        """Fail the request at hand and, until the engine closes, every request reaching it."""
        failure = StageFailure(
            index,
            f"the stage's worker thread died ({failure_message(exc)}); the pipeline can run no "
            "more requests: close it and create a new one",
            exc,
            fatal=True,
        )
        with self._lock:
            if self._dead is None or self._dead[0] > index:
                self._dead = (index, failure)
        if request is not None:
            self._deliver(request, failure)
        inbox = self._queues[index]
        while True:
            item = inbox.get()
            if item is _STOP:
                return
            self._deliver(item[0], failure)

    def run_inline(self, request: int, env: dict[str, Any]) -> None:
        """Run one request through every stage in the calling thread (no hand-offs).

        For a lone request nothing runs concurrently anyway, and waking a worker thread per
        stage costs latency (most on a loaded machine). Each stage still runs one request at
        a time: a worker and a caller take turns. An exception that escapes a stage in the
        calling thread (``KeyboardInterrupt``...) propagates to the caller without a report
        to ``on_done``.
        """
        if not self._enter(request):
            return
        try:
            for index in range(len(self._runners)):
                if self._stopping.is_set():
                    return
                passed_on = self._step(index, request, env)
                if passed_on is None:
                    return
                env = passed_on
        except BaseException:
            with self._lock:
                self._inside.discard(request)
            raise

    def close(self, timeout: float) -> None:
        """Cancel the runs in progress, end the workers, close the stage sessions."""
        self._stopping.set()
        for runner in self._runners:
            runner.cancel()
        for inbox in self._queues:
            inbox.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        for runner in self._runners:
            runner.close()


register_engine("thread", ThreadEngine)
