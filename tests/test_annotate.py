"""Tests of annotate(): inputs, idempotence, the check gate."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from test_check import DATA, chain, configuration, node, plan

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import BindingError, CheckError, OmnyIOError
from onnx_ir_multidevice._proto.files import save
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.runtime.sessions import ModelSession
from onnx_ir_multidevice.testing import zoo


def _planned() -> ir.Model:
    model = chain(6)
    plan(model, [["h3"], ["h2", "h4"]])
    return model


def _stages(model: ir.Model, name: str) -> list[int | None]:
    conf = configuration(model, name)
    return [
        next((e.pipeline_stage for e in n.device_configurations if e.configuration is conf), None)
        for n in model.graph
    ]


def test_annotate_model_in_place():
    model = _planned()
    assert annotate(model) is model
    assert _stages(model, "omny/2-shards") == [0, 0, 0, 1, 1, 1]
    assert _stages(model, "omny/3-shards") == [0, 0, 1, 1, 2, 2]


def test_annotate_twice_changes_nothing():
    model = annotate(_planned(), device_names=["a", "b", "c"])
    before = ir.to_proto(model).SerializeToString()
    annotate(model, device_names=["a", "b", "c"])
    assert ir.to_proto(model).SerializeToString() == before
    assert configuration(model, "omny/3-shards").device_names == ("a", "b", "c")


def test_annotate_proto_returns_new_model_and_keeps_proto():
    proto = ir.to_proto(_planned())
    before = proto.SerializeToString()
    model = annotate(proto, configurations=[3])
    assert isinstance(model, ir.Model)
    assert [c.name for c in model.device_configurations] == ["omny/3-shards"]
    assert proto.SerializeToString() == before


def test_annotate_path_does_not_modify_file(tmp_path: Path):
    path = tmp_path / "model.omny"
    save(_planned(), path)
    before = path.read_bytes()
    model = annotate(path)
    assert _stages(model, "omny/2-shards") == [0, 0, 0, 1, 1, 1]
    assert path.read_bytes() == before
    model = annotate(str(path), configurations={2})
    assert [c.name for c in model.device_configurations] == ["omny/2-shards"]
    with pytest.raises(OmnyIOError):
        annotate(tmp_path / "missing.omny")
    with pytest.raises(TypeError):
        annotate(3.5)  # type: ignore[arg-type]


def test_annotated_model_runs_in_onnxruntime(tmp_path: Path):
    import numpy as np
    import onnxruntime as ort

    model = zoo.gpt(layers=2)
    plan(model, [["layer.0.out"]])
    annotate(model, relaxed_cuts=True)
    assert model.ir_version == 11
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto)
    ids = np.zeros((1, 16), dtype=np.int64)
    try:
        raw = proto.SerializeToString()
        session = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime 1.20 to 1.22 read IR 10 at most
        assert "max supported IR version: 10" in str(error)
    else:
        (logits,) = session.run(None, {session.get_inputs()[0].name: ids})
        assert logits.shape[0] == 1
    # the package's hand-off gives any onnxruntime the model without its multi-device fields
    with ModelSession(model) as owner:
        (logits,) = owner.session.run(None, {"input_ids": ids})
    assert logits.shape[0] == 1


def test_check_gate_blocks_strict_cut_with_side_activations():
    model = zoo.gpt(layers=2)
    plan(model, [["layer.0.out"]])
    with pytest.raises(CheckError) as info:
        annotate(model)
    assert {d.code for d in info.value.diagnostics} == {"OMNY320"}
    assert "causal.future" in str(info.value)  # the causal mask, sliced from attn.bias
    assert model.device_configurations == ()  # nothing written when the gate fails
    annotate(model, check=False)
    assert [c.name for c in model.device_configurations] == ["omny/2-shards"]


def _spec_example_model() -> ir.Model:
    """A chain named like the spec's example: encoder.layer.<k> -> hidden_states_<k>."""
    x = ir.Value(
        name="image", shape=ir.Shape([1, 3, 1024, 1024]), type=ir.TensorType(ir.DataType.FLOAT)
    )
    nodes, h = [], x
    for k in range(1, 25):
        out = ir.Value(
            name=f"hidden_states_{k}",
            shape=ir.Shape([1, 64, 64, 768]),
            type=ir.TensorType(ir.DataType.FLOAT),
        )
        op = "Conv" if k == 1 else "Relu"
        nodes.append(ir.Node("", op, [h], outputs=[out], name=f"encoder.layer.{k}"))
        h = out
    masks = ir.Value(
        name="masks", shape=ir.Shape([1, 4, 256, 256]), type=ir.TensorType(ir.DataType.FLOAT)
    )
    nodes.append(ir.Node("", "Relu", [h], outputs=[masks], name="decoder"))
    model = ir.Model(ir.Graph([x], [masks], nodes=nodes, opset_imports={"": 17}), ir_version=11)
    model.metadata_props["omnynet_version"] = "1.0"
    model.metadata_props["omnynet_metadata"] = (DATA / "spec_example.json").read_text()
    return model


def test_spec_example_blocks_only_the_broken_configuration():
    model = _spec_example_model()
    with pytest.raises(CheckError, match="cut_3"):
        annotate(model)
    annotate(model, configurations=[2])  # the 2-shard configuration is fine
    assert _stages(model, "omny/2-shards")[:25] == [0] * 24 + [1]
    with pytest.raises(BindingError, match="cut_3"):
        annotate(model, configurations=[4], check=False)


def test_gate_ignores_errors_of_an_annotation_it_rewrites():
    model = annotate(_planned())
    node(model, "L0").set_pipeline_stage(configuration(model, "omny/2-shards"), 1)  # OMNY300
    annotate(model)
    assert _stages(model, "omny/2-shards") == [0, 0, 0, 1, 1, 1]
    assert omny.read(model) is not None
