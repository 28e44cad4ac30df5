"""Engines as a protocol with a registry: an engine defined here runs a pipeline."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from test_pipeline import OUTPUTS, annotated_mlp, assert_outputs, mlp_stages, request

import onnx_ir_multidevice
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.runtime.engines import (
    Engine,
    InlineEngine,
    engines,
    get_engine,
    register_engine,
)
from onnx_ir_multidevice.runtime.engines.thread import ThreadEngine
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, failure_message


class SyncEngine:
    """Runs every request in the thread that submits it, stage after stage."""

    clock = staticmethod(time.perf_counter)

    def __init__(self, chain, devices, threads, recorder, on_done, *, spinning, tag="sync"):
        self.tag = tag
        self.closed = False
        self._chain = chain
        self._recorder = recorder
        self._on_done = on_done
        self._runners = [
            StageRunner(s, d, n) for s, d, n in zip(chain.stages, devices, threads, strict=True)
        ]

    def submit(self, request: int, env: dict) -> None:
        for i, runner in enumerate(self._runners):
            start = self.clock()
            try:
                env.update(runner.run(env))
            except Exception as exc:  # the request fails, the engine goes on
                self._on_done(request, StageFailure(i, failure_message(exc), exc))
                return
            finally:
                self._recorder.busy(i, request, start, self.clock())
        self._on_done(request, {name: env[name] for name in self._chain.graph_outputs})

    def close(self, timeout: float) -> None:
        self.closed = True
        for runner in self._runners:
            runner.close()


def test_an_engine_defined_here_runs_a_pipeline():
    register_engine("test-sync", SyncEngine, replace=True)
    assert "test-sync" in engines() and get_engine("test-sync") is SyncEngine
    pipe = Pipeline(mlp_stages([1, 3]), outputs=OUTPUTS, backend="test-sync")
    with pipe:
        engine = pipe._engine
        assert isinstance(engine, Engine) and not isinstance(engine, InlineEngine)
        assert pipe.backend == "test-sync"
        inputs = request(0)
        assert_outputs(pipe.run(inputs), inputs)
        requests = [request(k, batch=1 + k % 3) for k in range(5)]
        for out, r in zip(pipe.map(requests), requests, strict=True):
            assert_outputs(out, r)
        bad = request(9)
        bad["x"] = bad["x"][:, :-1]
        with pytest.raises(PipelineError) as info:
            pipe.run(bad)
        assert info.value.stage == 0 and info.value.request == 6
        assert_outputs(pipe.run(inputs), inputs)  # still usable
        stats = pipe.stats()
    assert engine.closed
    assert stats.backend == "test-sync" and stats.requests == 8 and stats.failed == 1
    assert [s.requests for s in stats.stages] == [8, 7, 7]


def test_engine_options_reach_the_factory():
    register_engine("test-sync", SyncEngine, replace=True)
    with Pipeline(mlp_stages([2]), backend="test-sync", engine_options={"tag": "x"}) as pipe:
        assert pipe._engine.tag == "x"
    with pytest.raises(PipelineError, match=r"'test-sync' does not take the option \['nope'\]"):
        Pipeline(mlp_stages([2]), backend="test-sync", engine_options={"nope": 1})
    with pytest.raises(PipelineError, match=r"'thread' does not take.*actor_options"):
        Pipeline(mlp_stages([2]), ray_actor_options={"num_cpus": 1})


def test_a_factory_function_registers_too():
    made = []

    def factory(chain, devices, threads, recorder, on_done, *, spinning):
        made.append(chain.num_stages)
        return SyncEngine(chain, devices, threads, recorder, on_done, spinning=spinning)

    register_engine("test-factory", factory, replace=True)
    with Pipeline(mlp_stages([2]), backend="test-factory") as pipe:
        assert_outputs(pipe.run(request(1)), request(1))
    assert made == [2]


def test_unknown_backend_lists_the_registered_engines(tmp_path, capsys):
    with pytest.raises(PipelineError, match=r"unknown backend 'mpi'.* 'ray', .*'thread'"):
        Pipeline(mlp_stages([2]), backend="mpi")
    path = tmp_path / "mlp.onnx"
    annotated_mlp(path)
    assert main(["run", str(path), "--shards", "2", "--backend", "mpi"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'mpi'" in err and "'thread'" in err and "'ray'" in err


def test_omny_run_uses_a_registered_engine(tmp_path, capsys):
    register_engine("test-sync", SyncEngine, replace=True)
    path = tmp_path / "mlp.onnx"
    annotated_mlp(path)
    code = main(["run", str(path), "--shards", "2", "--backend", "test-sync",
                 "--requests", "3", "--warmup", "0"])  # fmt: skip
    assert code == 0
    assert "3 requests (0 failed)" in capsys.readouterr().out


def test_register_engine_refuses_clashes_and_bad_arguments():
    register_engine("test-clash", SyncEngine, replace=True)
    register_engine("test-clash", SyncEngine)  # the same factory again: no clash
    with pytest.raises(ValueError, match="already registered"):
        register_engine("test-clash", ThreadEngine)
    register_engine("test-clash", ThreadEngine, replace=True)
    assert get_engine("test-clash") is ThreadEngine
    with pytest.raises(ValueError, match="non-empty"):
        register_engine(" ", SyncEngine)
    with pytest.raises(TypeError, match="callable"):
        register_engine("test-bad", 42)  # type: ignore[arg-type]
    assert get_engine("thread") is ThreadEngine


def test_builtin_engines_and_exports():
    assert {"thread", "ray"} <= set(engines())
    assert onnx_ir_multidevice.register_engine is register_engine
    assert onnx_ir_multidevice.Engine is Engine
    assert {"Engine", "register_engine"} <= set(onnx_ir_multidevice.__all__)
    with Pipeline(mlp_stages([2])) as pipe:
        assert isinstance(pipe._engine, InlineEngine)


def test_registering_ray_does_not_import_ray():
    script = (
        "import sys\n"
        "from onnx_ir_multidevice.runtime.engines import engines\n"
        "from onnx_ir_multidevice.runtime.engines.ray import RayEngine\n"
        "print(sorted(engines()), 'ray' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "['ray', 'thread'] False"
