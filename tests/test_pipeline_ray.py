"""Tests of the Ray backend of the pipeline runtime (one actor per stage)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import onnx_ir as ir
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs ray (pip install '.[ray]')")

from test_pipeline import OUTPUTS, WIDTH, assert_outputs, mlp_stages, request  # noqa: E402

from onnx_ir_multidevice import save_split  # noqa: E402
from onnx_ir_multidevice._errors import PipelineError  # noqa: E402
from onnx_ir_multidevice.runtime import Pipeline  # noqa: E402
from onnx_ir_multidevice.runtime.engines.ray import _pipeline_folder  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_run_map_and_queue_match_oracle():
    with Pipeline(mlp_stages([2]), backend="ray", intra_op_num_threads=1) as pipe:
        assert pipe.backend == "ray"
        inputs = request(0)
        assert_outputs(pipe.run(inputs), inputs)
        requests = [request(k, batch=1 + k % 4) for k in range(10)]
        for out, r in zip(pipe.map(requests), requests, strict=True):
            assert_outputs(out, r)
        for r in requests[:4]:
            pipe.send_input(r)
        for r in requests[:4]:
            assert_outputs(pipe.receive_output(), r)
        stats = pipe.stats()
    assert stats.backend == "ray" and stats.requests == 15
    for stage in stats.stages:
        assert stage.requests == 15 and 0 < stage.utilisation <= 1
        assert [p.request for p in stage.periods] == list(range(15))


def test_three_stages_forward_graph_inputs():
    # 3 stages on a 2-CPU instance: ask for less than one CPU each.
    with Pipeline(
        mlp_stages([1, 3]),
        outputs=OUTPUTS,
        backend="ray",
        max_in_flight=3,
        ray_actor_options={"num_cpus": 0.5},
    ) as pipe:
        requests = [request(k) for k in range(6)]
        for out, r in zip(pipe.map(requests), requests, strict=True):
            assert_outputs(out, r)


def test_bad_request_mid_stream():
    requests = [request(k) for k in range(6)]
    requests[3] = {**requests[3], "scale": np.zeros(WIDTH + 1, np.float32)}  # read by stage 1
    with Pipeline(mlp_stages([2]), backend="ray") as pipe:
        for r in requests:
            pipe.send_input(r)
        for k, r in enumerate(requests):
            if k == 3:
                with pytest.raises(PipelineError) as info:
                    pipe.receive_output()
                assert (info.value.stage, info.value.request) == (1, 3)
                assert "INVALID_ARGUMENT" in str(info.value)
            else:
                assert_outputs(pipe.receive_output(), r)
        assert_outputs(pipe.run(request(7)), request(7))


def test_close_while_in_flight():
    stages = mlp_stages([2], width=800)
    inputs = {"x": np.ones((800, 800), np.float32), "scale": np.ones(800, np.float32)}
    pipe = Pipeline(stages, backend="ray", intra_op_num_threads=1, max_in_flight=8)
    for _ in range(8):
        pipe.send_input(inputs)
    errors: list[BaseException] = []

    def receive_all():
        try:
            while True:
                pipe.receive_output()
        except PipelineError as exc:
            errors.append(exc)

    receiver = threading.Thread(target=receive_all)
    receiver.start()
    pipe.close()
    receiver.join(60)  # a hang guard: close() wakes the receiver
    assert not receiver.is_alive() and len(errors) == 1 and "closed" in str(errors[0])
    assert pipe.stats().requests < 8  # cancelled and dropped, not waited for


def test_resources_beyond_the_cluster_fail_fast():
    """Refused by a check of the cluster's resources (the error names the demand), not by
    the actors' start timeout (``start_timeout``, whose message says "did not start")."""
    with pytest.raises(PipelineError, match="ask for 4 CPU") as info:
        Pipeline(mlp_stages([2]), backend="ray", intra_op_num_threads=2)
    assert "did not start" not in str(info.value)


@pytest.mark.parametrize("stage", [0, 1])
def test_dead_actor_fails_every_pending_and_later_request(stage, tmp_path):
    """A stage actor that dies (killed here) breaks the pipeline: the requests that need it
    fail at once, naming the stage and its device, and later requests are refused. Its
    stage's files (an IR model with external data, saved by the driver into the pipeline's
    folder) are removed when the pipeline closes."""
    stages = []
    for k, model in enumerate(mlp_stages([2])):
        ir.save(model, tmp_path / f"s{k}.onnx", external_data=f"s{k}.data", size_threshold_bytes=0)
        stages.append(ir.load(tmp_path / f"s{k}.onnx"))  # weights: external data
    with Pipeline(stages, backend="ray", intra_op_num_threads=1, max_in_flight=4) as pipe:
        assert_outputs(pipe.run(request(0)), request(0))
        folder = _pipeline_folder(pipe._engine.pipeline_id)  # one node: this machine's
        assert len(os.listdir(folder)) == 2  # one folder per stage
        actor = pipe._engine._actors[stage]
        ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # dead now, not only told to die (kill is async)
            try:
                ray.get(actor.ready.remote(), timeout=60)
            except ray.exceptions.RayActorError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the killed actor still answers after 60 s")
        sent = 0
        with pytest.raises(PipelineError) as refused:  # noqa: PT012  # sends until refused
            for k in range(1000):  # until the pipeline learns of the death and refuses
                pipe.send_input(request(k), timeout=60)
                sent += 1
        assert sent >= 1
        for _ in range(sent):
            with pytest.raises(PipelineError) as info:
                pipe.receive_output(timeout=60)
            assert info.value.stage == stage
            assert "failed on cpu: the stage's Ray actor on node " in str(info.value)
            assert ") died (" in str(info.value)
        assert refused.value.stage == stage
        assert f"stage {stage} on cpu can run no more requests" in str(refused.value)
        with pytest.raises(PipelineError, match="broken"):
            pipe.run(request(1), timeout=60)
    assert not os.path.exists(folder)  # the killed actor's files too


def test_base_exception_in_a_stage_actor_is_fatal_for_the_requests_that_need_it():
    """The stage actor's own logic, run in this process: SystemExit from the stage fails the
    request fatally, and every later request reaching that actor fails the same way."""
    from onnx_ir_multidevice.runtime import load_stages, parse_device
    from onnx_ir_multidevice.runtime.engines.ray import _StageActor

    chain = load_stages(mlp_stages([2]))
    device = parse_device("cpu")
    actor = _StageActor(chain.stages[0], device, 1, False, chain.keep_after[0], None, "test")
    try:
        env, periods = actor.run(0, (dict(request(0)), []))
        assert set(env) == chain.keep_after[0] and [p[0] for p in periods] == [0]
        assert periods[0][3] == sum(value.nbytes for value in env.values())  # bytes passed on

        def exit_(env, **kwargs):
            raise SystemExit(2)

        actor._runner.run = exit_
        for k in (1, 2):
            failure, periods = actor.run(k, (dict(request(k)), []))
            assert failure.fatal and failure.stage == 0
            assert "SystemExit: 2" in failure.message and "Ray actor" in failure.message
        del actor._runner.run
        failure, _ = actor.run(3, (dict(request(3)), []))  # still refused: the stage is dead
        assert failure.fatal and "SystemExit: 2" in failure.message
    finally:
        actor.close()


def test_tensor_parallel_stages_ask_for_a_cpu_per_rank_and_match_the_thread_engine(tmp_path):
    """One actor per tensor-parallel stage holds its ranks (here without shipping files: one
    node); it asks for threads x degree CPUs, so 2 stages of degree 2 do not fit 2 CPUs."""
    from test_tensor_parallel_folder import _planned_transformer  # the same fixture model

    model, _ = _planned_transformer(tmp_path)
    save_split(model, tmp_path / "out", 2)
    with pytest.raises(PipelineError, match=r"ask for 4 CPU in all \(\[2, 2\] per stage\)"):
        Pipeline(tmp_path / "out", backend="ray", intra_op_num_threads=1)
    with Pipeline(tmp_path / "out", backend="thread", intra_op_num_threads=1) as local:
        requests = [local.example_inputs(dims={"batch": 1, "seq": 16}, seed=k) for k in range(3)]
        expected = list(local.map(requests))
    with Pipeline(
        tmp_path / "out",
        backend="ray",
        intra_op_num_threads=1,
        ray_actor_options={"num_cpus": 1},
    ) as pipe:
        for out, want in zip(pipe.map(requests), expected, strict=True):
            for name in want:
                np.testing.assert_allclose(out[name], want[name], rtol=1e-5, atol=1e-6)
        assert pipe._engine._files is False  # nothing shipped on one node
