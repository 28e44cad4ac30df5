"""Tests of the in-process pipeline runtime (onnx_ir_multidevice.runtime, backend="thread")."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice._errors import OmnyIOError, PipelineError
from onnx_ir_multidevice.runtime import (
    Device,
    Pipeline,
    PipelineTimeoutError,
    load_stages,
    parse_device,
)
from onnx_ir_multidevice.runtime.engines import register_engine

WIDTH = 16
OUTPUTS = ["layer.0.out", "y"]
F32 = ir.DataType.FLOAT


# ---------------------------------------------------------------------------------------------
# Models: an MLP whose layers can be cut by hand into stages that chain by name.
#   x[batch, W] -> layer.i.out = Relu(h @ W_i + b_i) ... -> y = layer.last.out * scale + x
#   graph outputs: y and layer.0.out; x is read by the first and the last stage (forwarded),
#   scale only by the last stage.


def _weights(i: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed * 1000 + i)
    w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    b = (rng.standard_normal(width) * 0.1).astype(np.float32)
    return w, b


def _value(name: str, width: int, batch: str | int = "batch") -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(F32), shape=ir.Shape([batch, width]))


def _graph(
    first: int,
    last: int,
    layers: int,
    width: int,
    seed: int,
    *,
    name: str,
) -> ir.Model:
    """Layers ``first..last-1``; the model reads and writes what a stage of the MLP needs."""
    nodes: list[ir.Node] = []
    inits: list[ir.Value] = []
    x = _value("x", width)
    inputs = []
    outputs = []
    if first == 0:
        h = x
        inputs.append(x)
    else:
        h = _value(f"layer.{first - 1}.out", width)
        inputs.append(h)
    for i in range(first, last):
        w_np, b_np = _weights(i, width, seed)
        w = ir.Value(
            name=f"layer.{i}.weight", const_value=ir.tensor(w_np, name=f"layer.{i}.weight")
        )
        b = ir.Value(name=f"layer.{i}.bias", const_value=ir.tensor(b_np, name=f"layer.{i}.bias"))
        w.type, w.shape = ir.TensorType(F32), ir.Shape(w_np.shape)
        b.type, b.shape = ir.TensorType(F32), ir.Shape(b_np.shape)
        inits += [w, b]
        mm = ir.Node(
            "", "MatMul", [h, w], outputs=[_value(f"layer.{i}.mm", width)], name=f"l{i}.mm"
        )
        add = ir.Node("", "Add", [mm.outputs[0], b], outputs=[_value(f"layer.{i}.add", width)])
        relu = ir.Node("", "Relu", [add.outputs[0]], outputs=[_value(f"layer.{i}.out", width)])
        nodes += [mm, add, relu]
        h = relu.outputs[0]
        if i == 0:
            outputs.append(h)
    if last == layers:
        scale = ir.Value(name="scale", type=ir.TensorType(F32), shape=ir.Shape([width]))
        if first != 0:
            inputs.append(x)
        inputs.append(scale)
        mul = ir.Node("", "Mul", [h, scale], outputs=[_value("scaled", width)])
        y = ir.Node("", "Add", [mul.outputs[0], x], outputs=[_value("y", width)])
        nodes += [mul, y]
        outputs.append(y.outputs[0])
    else:
        outputs.append(h)
    graph = ir.Graph(
        inputs, outputs, nodes=nodes, initializers=inits, opset_imports={"": 18}, name=name
    )
    return ir.Model(graph, ir_version=10)


def mlp(layers: int = 4, width: int = WIDTH, seed: int = 0) -> ir.Model:
    """The whole model."""
    return _graph(0, layers, layers, width, seed, name="mlp")


def mlp_stages(
    cuts: list[int], layers: int = 4, width: int = WIDTH, seed: int = 0
) -> list[ir.Model]:
    """Stage models cut by hand after the given layer counts (e.g. ``[2]``: 2 stages)."""
    bounds = [0, *cuts, layers]
    return [
        _graph(a, b, layers, width, seed, name=f"stage{k}")
        for k, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def reference(inputs: dict[str, np.ndarray], layers: int = 4, width: int = WIDTH, seed: int = 0):
    """numpy oracle: the outputs of the whole model."""
    h = inputs["x"]
    first = None
    for i in range(layers):
        w, b = _weights(i, width, seed)
        h = np.maximum(h @ w + b, 0)
        if i == 0:
            first = h
    return {"layer.0.out": first, "y": h * inputs["scale"] + inputs["x"]}


def request(k: int, batch: int = 3, width: int = WIDTH) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(k)
    return {
        "x": rng.standard_normal((batch, width)).astype(np.float32),
        "scale": rng.standard_normal(width).astype(np.float32),
    }


def assert_outputs(out: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
    expected = reference(inputs)
    assert list(out) == ["layer.0.out", "y"]
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=1e-5)


def stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("omny-pipeline-stage-")]


def wait_until_blocked_in_pipeline(thread: threading.Thread, timeout: float = 60.0) -> None:
    """Return once ``thread`` waits (a ``threading`` wait) inside a :class:`Pipeline` call.

    The state is polled; ``timeout`` is a hang guard, never part of a result.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        if frame is not None and frame.f_code.co_name == "wait":
            while frame is not None and not frame.f_code.co_filename.endswith("pipeline.py"):
                frame = frame.f_back
            if frame is not None:
                return
        time.sleep(0.001)
    pytest.fail(f"{thread.name} did not come to wait in the pipeline within {timeout} s")


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    yield
    for thread in stage_threads():  # a closed pipeline's workers end: wait for that event
        thread.join(60)
    assert stage_threads() == []


# ---------------------------------------------------------------------------------------------
# Plans


def test_plan_routes_inputs_and_drops_dead_tensors():
    # Without outputs=, a list of stages returns the last stage's outputs and the earlier
    # outputs no later stage reads.
    assert load_stages(mlp_stages([1, 3])).graph_outputs == ("y",)
    assert load_stages(mlp_stages([2])).graph_outputs == ("layer.0.out", "y")
    plan = load_stages(mlp_stages([1, 3]), outputs=OUTPUTS)
    assert plan.num_stages == 3
    assert plan.graph_inputs == ("x", "scale")
    assert plan.graph_outputs == ("layer.0.out", "y")
    assert plan.stages[1].inputs == ("layer.0.out",)
    assert plan.stages[2].inputs == ("layer.2.out", "x", "scale")
    # after stage 0 the request still needs x and scale (stage 2) and layer.0.out (an output)
    assert plan.keep_after[0] == {"layer.0.out", "x", "scale"}
    assert plan.keep_after[1] == {"layer.0.out", "layer.2.out", "x", "scale"}
    assert plan.keep_after[2] == {"layer.0.out", "y"}
    assert plan.input_specs["x"].shape == ("batch", WIDTH)
    assert plan.input_specs["x"].dtype == np.float32


def test_plan_rejects_stages_that_do_not_chain():
    stages = mlp_stages([2])
    with pytest.raises(
        PipelineError, match=r"stage 0 reads \['layer.1.out'\], which stage 1 produces"
    ) as info:
        load_stages([stages[1], stages[0]])
    assert info.value.stage == 0
    with pytest.raises(PipelineError, match="shards=3 but the source has 2 stages"):
        load_stages(stages, 3)
    with pytest.raises(PipelineError, match="shards= is required"):
        load_stages(mlp())
    with pytest.raises(PipelineError, match="the list is empty"):
        load_stages([])


def test_parse_device():
    assert parse_device("cpu") == Device("cpu")
    assert parse_device("cuda:1") == Device("cuda", 1)
    assert parse_device("CUDAExecutionProvider") == Device("cuda")
    assert str(parse_device("cuda:0")) == "cuda:0"
    assert parse_device("cuda:2").ort_providers() == [
        ("CUDAExecutionProvider", {"device_id": "2"}),
        "CPUExecutionProvider",
    ]
    assert parse_device("cpu").ort_providers() == ["CPUExecutionProvider"]
    for bad in ("tpu", "cuda:x", "cpu:1"):
        with pytest.raises(ValueError, match="device"):
            parse_device(bad)


# ---------------------------------------------------------------------------------------------
# Running


@pytest.mark.parametrize("cuts", [[], [2], [1, 3], [1, 2, 3]])
def test_run_matches_oracle(cuts):
    with Pipeline(mlp_stages(cuts), outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        assert pipe.num_stages == len(cuts) + 1
        for k in range(3):
            inputs = request(k, batch=k + 1)
            assert_outputs(pipe.run(inputs), inputs)


def test_whole_model_as_one_stage_and_split_model():
    model = mlp()
    with Pipeline(model, shards=1) as pipe:
        inputs = request(0)
        assert_outputs(pipe.run(inputs), inputs)
    # A planned model: pipeline annotations (IR v11 pipeline stages), split by _split.split.
    config = model.add_device_configuration("pipe2", num_devices=2)
    for node in model.graph:
        stage = 0 if node.outputs[0].name.startswith(("layer.0.", "layer.1.")) else 1
        node.set_pipeline_stage(config, stage)
    with Pipeline(model, shards=2, intra_op_num_threads=1) as pipe:
        assert pipe.num_stages == 2
        assert set(pipe.chain.stages[1].inputs) == {"layer.1.out", "x", "scale"}
        assert_outputs(pipe.run(inputs), inputs)


def test_split_directory_with_manifest(tmp_path):
    from onnx_ir_multidevice._split import build_manifest

    model = mlp()
    stages = mlp_stages([2])
    for i, stage in enumerate(stages):
        ir.save(stage, tmp_path / f"stage_{i}.onnx")
    build_manifest(model, stages).write(tmp_path)
    with Pipeline(tmp_path, providers="cpu", intra_op_num_threads=[1, 1]) as pipe:
        assert pipe.output_names == ("layer.0.out", "y")
        inputs = request(1)
        assert_outputs(pipe.run(inputs), inputs)
    # A broken manifest is named with its JSON path.
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["stages"][1]["file"] = "nope.onnx"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OmnyIOError, match=r"stages\[1\]\.file"):
        Pipeline(tmp_path)
    manifest["format"] = "something"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PipelineError, match="format"):
        Pipeline(tmp_path)


def test_queue_api_returns_in_order_with_back_pressure():
    with Pipeline(
        mlp_stages([1, 3]), outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=2
    ) as pipe:
        requests = [request(k) for k in range(10)]
        numbers = [pipe.send_input(r) for r in requests]  # blocks while 2 are inside
        assert numbers == list(range(10))
        assert pipe.in_flight == 10
        for r in requests:
            assert_outputs(pipe.receive_output(), r)
        assert pipe.in_flight == 0
        with pytest.raises(PipelineError, match="no request in flight"):
            pipe.receive_output()


def test_map_streams_in_order_and_stats_record_busy_periods():
    requests = [request(k) for k in range(12)]
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1, max_in_flight=3) as pipe:
        outputs = list(pipe.map(requests))
        stats = pipe.stats()
    assert len(outputs) == 12
    for out, r in zip(outputs, requests, strict=True):
        assert_outputs(out, r)
    assert stats.requests == 12 and stats.failed == 0
    assert stats.wall_s > 0 and stats.throughput == pytest.approx(12 / stats.wall_s)
    for stage in stats.stages:
        assert stage.requests == 12
        assert [p.request for p in stage.periods] == list(range(12))
        assert all(p.end >= p.start >= 0 for p in stage.periods)
        assert 0 < stage.utilisation <= 1
        assert stage.busy_s == pytest.approx(sum(p.duration for p in stage.periods))
    # stage 1 runs request k after stage 0 finished it
    for p0, p1 in zip(stats.stages[0].periods, stats.stages[1].periods, strict=True):
        assert p1.start >= p0.end
    assert "stage" in stats.format()
    assert stats.to_dict()["stages"][0]["requests"] == 12


class SerialEngine:
    """A control: runs each request through every stage in the submitting thread, in turn."""

    clock = staticmethod(time.perf_counter)

    def __init__(self, chain, devices, threads, recorder, on_done, *, spinning):
        from onnx_ir_multidevice.runtime import StageRunner

        self._chain, self._recorder, self._on_done = chain, recorder, on_done
        self._runners = [
            StageRunner(s, d, n) for s, d, n in zip(chain.stages, devices, threads, strict=True)
        ]

    def submit(self, request, env):
        for i, runner in enumerate(self._runners):
            start = self.clock()
            env.update(runner.run(env))
            self._recorder.busy(i, request, start, self.clock())
        self._on_done(request, {name: env[name] for name in self._chain.graph_outputs})

    def close(self, timeout):
        for runner in self._runners:
            runner.close()


def early_starts(backend: str, requests: int = 12, width: int = 512) -> tuple[int, int]:
    """How often stage 0 started request k+1 before stage 1 had finished request k.

    Every request is queued before the first completes, so stage 0 always has the next one
    at hand: an engine that pipelines starts it as soon as stage 0 is free, whenever the OS
    lets the threads run; an engine that runs a request's stages in turn never does.
    Returns (early starts, pairs).
    """
    inputs = {"x": np.ones((256, width), np.float32), "scale": np.ones(width, np.float32)}
    with Pipeline(
        mlp_stages([2], width=width),
        intra_op_num_threads=1,
        backend=backend,
        max_in_flight=requests,
    ) as pipe:
        for _ in range(requests):
            pipe.send_input(inputs, timeout=60)
        for _ in range(requests):
            pipe.receive_output(timeout=60)
        first, second = ({p.request: p for p in s.periods} for s in pipe.stats().stages)
    return sum(first[k + 1].start < second[k].end for k in range(requests - 1)), requests - 1


def test_stages_run_concurrently():
    """While stage 1 runs request k, stage 0 already runs request k+1.

    Measured on the order of the busy periods' starts and ends (a ~30 ms stage), not on
    whether the OS ran both threads at the same instant: on a loaded machine the periods
    of the two stages need not overlap, yet stage 0 still starts request k+1 before stage 1
    is done with request k. Most pairs must show it (an OS that preempts stage 0 right then
    for a whole stage run can hide one); the control, an engine that runs the stages of a
    request in turn, shows it for none.
    """
    early, pairs = early_starts("thread")
    assert early >= pairs // 2 + 1, (early, pairs)
    register_engine("test-serial", SerialEngine, replace=True)
    assert early_starts("test-serial", requests=4) == (0, 3)


def test_reset_stats_and_example_inputs():
    with Pipeline(mlp_stages([2])) as pipe:
        inputs = pipe.example_inputs({"batch": 5}, seed=1)
        assert inputs["x"].shape == (5, WIDTH) and inputs["x"].dtype == np.float32
        assert inputs["scale"].shape == (WIDTH,)
        pipe.run(inputs)
        assert pipe.stats().requests == 1
        pipe.reset_stats()
        assert pipe.stats().requests == 0
        pipe.run(inputs)
        assert pipe.stats().requests == 1
        assert [p.request for p in pipe.stats().stages[0].periods] == [1]


# ---------------------------------------------------------------------------------------------
# Faults


@pytest.mark.parametrize(
    ("bad_input", "stage"),
    [("x", 0), ("scale", 1)],  # x is read by stage 0 first; scale only by stage 1
)
def test_bad_request_mid_stream_raises_with_stage_and_request(bad_input, stage):
    requests = [request(k) for k in range(6)]
    requests[3] = dict(requests[3])
    requests[3][bad_input] = np.zeros((3, WIDTH + 1), np.float32)  # wrong shape
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1) as pipe:
        for r in requests:
            pipe.send_input(r)
        for k, r in enumerate(requests):
            if k == 3:
                with pytest.raises(PipelineError) as info:
                    pipe.receive_output()
                assert info.value.stage == stage
                assert info.value.request == 3
                assert f"stage {stage}" in str(info.value) and "request 3" in str(info.value)
                assert info.value.__cause__ is not None
            else:
                assert_outputs(pipe.receive_output(), r)
        assert pipe.stats().failed == 1
        # still usable
        assert_outputs(pipe.run(request(9)), request(9))


def test_map_stops_at_failure_and_pipeline_stays_usable():
    requests = [request(k) for k in range(8)]
    requests[2] = {"x": requests[2]["x"].astype(np.float64), "scale": requests[2]["scale"]}
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1) as pipe:
        got = []
        with pytest.raises(PipelineError) as info:  # noqa: PT012  # map() fails at the third
            for out in pipe.map(requests):
                got.append(out)  # noqa: PERF402  # keeps the results before the error
        assert len(got) == 2 and info.value.request == 2 and info.value.stage == 0
        assert pipe.in_flight == 0  # the rest were drained
        outs = list(pipe.map(requests[:2]))
        assert_outputs(outs[1], requests[1])


def test_bad_inputs_are_refused_before_sending():
    with Pipeline(mlp_stages([2])) as pipe:
        with pytest.raises(PipelineError, match=r"missing \['scale'\]"):
            pipe.send_input({"x": request(0)["x"]})
        with pytest.raises(PipelineError, match=r"unknown \['z'\]"):
            pipe.send_input({**request(0), "z": np.zeros(1)})
        assert pipe.in_flight == 0


def test_run_and_map_keep_their_own_results_while_requests_are_queued():
    # Formerly refused ("receive them first"); results are now delivered by request number.
    with Pipeline(mlp_stages([2])) as pipe:
        pipe.send_input(request(0))
        assert_outputs(pipe.run(request(1)), request(1))
        [mapped] = pipe.map([request(2)])
        assert_outputs(mapped, request(2))
        assert pipe.in_flight == 1
        assert_outputs(pipe.receive_output(), request(0))


def test_timeouts_are_clear_and_lose_nothing():
    inputs = request(0)
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1, max_in_flight=1) as pipe:
        # Stage 0 busy (its lock taken, as by a run in another thread): the request waits for
        # it, however fast or loaded the machine is.
        with pipe._engine._stage_locks[0]:
            pipe.send_input(inputs)
            with pytest.raises(PipelineTimeoutError, match="send_input timed out") as info:
                pipe.send_input(inputs, timeout=0)
            assert isinstance(info.value, TimeoutError)
            with pytest.raises(PipelineTimeoutError, match="still running"):
                pipe.receive_output(timeout=0)
            with pytest.raises(PipelineTimeoutError, match="still running"):
                pipe.receive_output(timeout=0.05)
        out = pipe.receive_output(timeout=30)  # the same request, received later
        assert_outputs(out, inputs)
        assert pipe.in_flight == 0


def _when_waiting(pipe: Pipeline, release: threading.Lock) -> threading.Thread:
    """A thread that releases ``release`` once a caller waits on the pipeline's condition."""

    def watch() -> None:
        seen = threading.Event()
        deadline = time.monotonic() + 60
        while not pipe._book.cond._waiters and time.monotonic() < deadline:
            seen.wait(0.001)  # polls an event (the caller blocking), not a duration
        release.release()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, threading.TIMEOUT_MAX])
def test_an_infinite_timeout_means_no_limit(timeout):
    inputs = request(1)
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1, max_in_flight=1) as pipe:
        lock = pipe._engine._stage_locks[0]
        lock.acquire()  # stage 0 busy: the calls below must wait, with no time limit
        pipe.send_input(inputs, timeout=timeout)
        watcher = _when_waiting(pipe, lock)
        assert_outputs(pipe.receive_output(timeout=timeout), inputs)  # no OverflowError
        watcher.join()
        lock.acquire()
        pipe.send_input(inputs, timeout=timeout)
        watcher = _when_waiting(pipe, lock)
        assert_outputs(pipe.run(inputs, timeout=timeout), inputs)  # waits for room, then runs
        watcher.join()
        assert_outputs(pipe.receive_output(timeout=timeout), inputs)
        [mapped] = pipe.map([inputs], timeout=timeout)
        assert mapped.keys() == {"layer.0.out", "y"}


@pytest.mark.parametrize("timeout", [float("nan"), "10", True])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused(timeout):
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1) as pipe:
        for call in (
            lambda: pipe.send_input(request(0), timeout=timeout),
            lambda: pipe.receive_output(timeout=timeout),
            lambda: pipe.run(request(0), timeout=timeout),
            lambda: pipe.map([request(0)], timeout=timeout),
        ):
            with pytest.raises(PipelineError, match="timeout"):
                call()
        assert pipe.in_flight == 0  # nothing was sent
        assert_outputs(pipe.run(request(0)), request(0))


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ({"x": [[1.0, 2.0], [3.0]], "scale": np.ones(WIDTH, np.float32)}, "'x': not an array"),
        ({"x": np.ones((3, WIDTH), np.float32), 1: np.ones(3)}, "must be input names"),
        ({("x",): 1, "scale": 2}, "must be input names"),
    ],
)
def test_ragged_lists_and_non_string_keys_are_refused_by_name(inputs, fragment):
    with Pipeline(mlp_stages([2]), intra_op_num_threads=1) as pipe:
        for call in (
            lambda: pipe.send_input(inputs),
            lambda: pipe.run(inputs),
            lambda: next(pipe.map([inputs])),
        ):
            with pytest.raises(PipelineError, match=fragment):
                call()
        assert pipe.in_flight == 0
        assert_outputs(pipe.run(request(0)), request(0))  # still usable


def test_close_with_requests_in_flight_is_prompt_and_wakes_receivers():
    # ~8 x 4 runs of a 1 GFLOP layer: seconds of work, which close() must cancel.
    stages = mlp_stages([1, 2, 3], width=800)
    inputs = {"x": np.ones((800, 800), np.float32), "scale": np.ones(800, np.float32)}
    pipe = Pipeline(stages, outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=8)
    assert len(stage_threads()) == 4
    pipe.run(inputs)
    one_request = pipe.stats().wall_s
    for _ in range(8):
        pipe.send_input(inputs)
    errors: list[BaseException] = []

    def receive_all():
        try:
            while True:
                pipe.receive_output()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    receiver = threading.Thread(target=receive_all)
    receiver.start()
    wait_until_blocked_in_pipeline(receiver)
    pipe.close()
    receiver.join(60)  # a hang guard: close() wakes it
    assert not receiver.is_alive()
    # the runs were cancelled and dropped, not waited for: fewer than the 8 sent completed
    assert one_request > 0 and pipe.stats().requests < 1 + 8
    assert len(errors) == 1 and isinstance(errors[0], PipelineError)
    assert "closed" in str(errors[0])
    assert stage_threads() == []
    with pytest.raises(PipelineError, match="closed"):
        pipe.send_input(inputs)
    with pytest.raises(PipelineError, match="closed"):
        pipe.receive_output()
    pipe.close()  # again: nothing happens


def test_close_wakes_a_blocked_sender():
    stages = mlp_stages([2], width=512)
    inputs = {"x": np.ones((512, 512), np.float32), "scale": np.ones(512, np.float32)}
    pipe = Pipeline(stages, intra_op_num_threads=1, max_in_flight=1)
    pipe.send_input(inputs)
    errors: list[BaseException] = []

    def send():
        try:
            for _ in range(5):
                pipe.send_input(inputs)
        except PipelineError as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    wait_until_blocked_in_pipeline(sender)  # waiting for room (max_in_flight=1)
    pipe.close()
    sender.join(60)  # a hang guard: close() wakes it
    assert not sender.is_alive() and len(errors) == 1


def test_unreferenced_pipeline_ends_its_threads():
    pipe = Pipeline(mlp_stages([2]))
    pipe.run(request(0))
    assert len(stage_threads()) == 2
    del pipe  # the finalizer closes it


def test_argument_errors():
    stages = mlp_stages([2])
    with pytest.raises(PipelineError, match="providers gives 3 values for 2 stages"):
        Pipeline(stages, providers=["cpu", "cpu", "cpu"])
    with pytest.raises(PipelineError, match="unknown device"):
        Pipeline(stages, providers="tpu")
    with pytest.raises(PipelineError, match="intra_op_num_threads"):
        Pipeline(stages, intra_op_num_threads=0)
    with pytest.raises(PipelineError, match="max_in_flight"):
        Pipeline(stages, max_in_flight=0)
    with pytest.raises(PipelineError, match="backend"):
        Pipeline(stages, backend="mpi")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(PipelineError, match="CUDAExecutionProvider") as info:
            Pipeline(stages, providers="cpu,cuda:0")
        assert info.value.stage == 1
    with pytest.raises(OmnyIOError, match="no such model file"):
        Pipeline("/nonexistent/model.onnx", shards=2)


# ---------------------------------------------------------------------------------------------
# Property: any cut, any stream with failures mixed in -> every result in order, every failure
# at the right request and stage (oracle: numpy).


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cuts=st.sets(st.integers(1, 3)).map(sorted),
    bad=st.lists(st.sampled_from([None, "x", "scale"]), min_size=1, max_size=7),
    max_in_flight=st.integers(1, 4),
    use_map=st.booleans(),
)
def test_streams_match_oracle(cuts, bad, max_in_flight, use_map):
    requests = []
    for k, which in enumerate(bad):
        r = request(k, batch=1 + k % 3)
        if which is not None:
            r[which] = np.zeros(WIDTH + 1, np.float32) if which == "scale" else r[which][:, :-1]
        requests.append(r)
    last_stage = len(cuts)
    with Pipeline(
        mlp_stages(cuts), outputs=OUTPUTS, intra_op_num_threads=1, max_in_flight=max_in_flight
    ) as pipe:
        if use_map:
            good = next((k for k, which in enumerate(bad) if which), None)
            got = []
            try:
                got.extend(pipe.map(requests))
            except PipelineError as exc:
                assert exc.request == good
                assert exc.stage == (0 if bad[good] == "x" else last_stage)
            assert len(got) == (len(requests) if good is None else good)
            for out, r in zip(got, requests, strict=False):
                assert_outputs(out, r)
        else:
            for r in requests:
                pipe.send_input(r)
            for k, (r, which) in enumerate(zip(requests, bad, strict=True)):
                if which is None:
                    assert_outputs(pipe.receive_output(), r)
                else:
                    with pytest.raises(PipelineError) as info:
                        pipe.receive_output()
                    assert info.value.request == k
                    assert info.value.stage == (0 if which == "x" else last_stage)
        assert pipe.in_flight == 0


def test_default_backend_needs_no_ray(tmp_path):
    """With ray not importable, the thread backend runs and backend='ray' says what to install."""
    import subprocess
    import sys

    model = tmp_path / "stage.onnx"
    ir.save(mlp(), model)
    script = f"""
import sys
sys.modules["ray"] = None  # import ray -> ImportError
import numpy as np
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice._errors import PipelineError
inputs = {{"x": np.ones((2, {WIDTH}), np.float32), "scale": np.ones({WIDTH}, np.float32)}}
with Pipeline([{str(model)!r}]) as pipe:
    print(pipe.run(inputs)["y"].shape)
try:
    Pipeline([{str(model)!r}], backend="ray")
except PipelineError as exc:
    print(exc)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    lines = result.stdout.splitlines()
    assert lines[0] == f"(2, {WIDTH})"
    assert "pip install 'onnx-ir-multidevice[ray]'" in lines[1]


# ---------------------------------------------------------------------------------------------
# omny run


def annotated_mlp(path, shards: int = 2) -> None:
    """Save the MLP with an IR v11 pipeline annotation (layers spread evenly over stages)."""
    model = mlp()
    model.ir_version = 11
    config = model.add_device_configuration(f"pipe{shards}", num_devices=shards)
    for node in model.graph:
        name = node.outputs[0].name
        layer = int(name.split(".")[1]) if name.startswith("layer.") else 3
        node.set_pipeline_stage(config, layer * shards // 4)
    ir.save(model, path)


def test_cli_run_model_file_and_split_directory(tmp_path, capsys):
    from onnx_ir_multidevice._cli import main

    path = tmp_path / "mlp.onnx"
    annotated_mlp(path)
    code = main(["run", str(path), "--shards", "2", "--requests", "6", "--threads", "1",
                 "--dim", "batch=4", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)["result"]
    assert report["num_stages"] == 2 and report["providers"] == ["cpu", "cpu"]
    assert report["requests"] == 6 and report["failed"] == 0
    assert report["input_shapes"] == {"x": [4, WIDTH], "scale": [WIDTH]}
    assert report["throughput"] > 0
    assert [s["requests"] for s in report["stages"]] == [6, 6]
    assert all(0 < s["utilisation"] <= 1 for s in report["stages"])

    outdir = tmp_path / "split"
    assert main(["split", str(path), str(outdir), "--shards", "2"]) == 0
    capsys.readouterr()
    assert main(["run", str(outdir), "--requests", "3", "--providers", "cpu,cpu"]) == 0
    text = capsys.readouterr().out
    assert "2 stages on cpu, cpu" in text and "3 requests (0 failed)" in text
    assert "util" in text.splitlines()[2]


def test_cli_run_errors(tmp_path, capsys):
    from onnx_ir_multidevice._cli import main

    path = tmp_path / "mlp.onnx"
    annotated_mlp(path)
    assert main(["run", str(path)]) == 2
    assert "--shards N is required" in capsys.readouterr().err
    assert main(["run", str(path), "--shards", "3"]) == 1  # no 3-stage plan
    assert "omny: error:" in capsys.readouterr().err
    assert main(["run", str(path), "--shards", "2", "--providers", "cpu,cpu,cpu"]) == 2
    assert "providers gives 3 values" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.onnx"), "--shards", "2"]) == 2
