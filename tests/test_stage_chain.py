"""Names in the runtime: a *plan* is the planner's .omny plan; a pipeline runs a StageChain."""

from __future__ import annotations

import importlib

import pytest
from test_pipeline import mlp_stages

from onnx_ir_multidevice.runtime import Pipeline, StageChain, load_stages, sessions
from onnx_ir_multidevice.runtime.devices import Device, parse_device


@pytest.mark.parametrize(
    "module", ["onnx_ir_multidevice.runtime", "onnx_ir_multidevice.runtime.stages"]
)
def test_old_names_are_deprecated_aliases(module):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="use StageChain") as record:
        assert mod.StagePlan is StageChain
    assert record[0].filename == __file__  # the warning points at the caller
    with pytest.warns(DeprecationWarning, match="use load_stages"):
        assert mod.load_plan is load_stages
    with pytest.raises(AttributeError):
        mod.NoSuchName  # noqa: B018


def test_pipeline_chain_and_deprecated_plan():
    with Pipeline(mlp_stages([2])) as pipe:
        assert isinstance(pipe.chain, StageChain) and pipe.chain.num_stages == 2
        with pytest.warns(DeprecationWarning, match="Pipeline.chain"):
            assert pipe.plan is pipe.chain


def test_devices_have_a_module_of_their_own():
    assert parse_device("cuda:1") == Device("cuda", 1)
    from onnx_ir_multidevice import runtime

    assert runtime.parse_device is parse_device and runtime.Device is Device


def test_large_stages_keep_their_ir_model(monkeypatch):
    monkeypatch.setattr(sessions, "PROTO_LIMIT_BYTES", 1)
    chain = load_stages(mlp_stages([2]))
    assert "source=<onnx_ir.Model 'stage0'>" in repr(chain.stages[0])
    monkeypatch.undo()
    assert "bytes>" in repr(load_stages(mlp_stages([2])).stages[0])
