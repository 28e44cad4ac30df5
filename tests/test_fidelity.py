"""Lossless round trip of real files: what onnx-ir does not keep is recorded and put back.

Every corpus model (both torch exporters, Optimum, quantized and fp16 conversions, models from
PyPI wheels) must come back field by field and byte for byte, through ``roundtrip`` and through
``save(load(f))`` under the same file name. Hand-made protos cover each kind of loss on its own
(value_info presence and order, explicit defaults, typed subgraph outputs) and what happens when
the caller changes the model in between.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnx_ir_multidevice import load, save
from onnx_ir_multidevice._proto.convert import diff, from_proto, roundtrip, to_proto

CORPUS = Path(__file__).parent / "corpus"
CORPUS_FILES = sorted(CORPUS.glob("*.onnx"))


def _raw(proto: onnx.ModelProto) -> onnx.ModelProto:
    return ir.serde.serialize_model(ir.serde.deserialize_model(proto))


def test_corpus_is_there():
    assert len(CORPUS_FILES) >= 40


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_roundtrip_is_lossless(path):
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == data


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_save_of_load_gives_the_same_bytes(path, tmp_path):
    out = tmp_path / path.name
    save(load(path), out)
    assert out.read_bytes() == path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_corpus_has_files_onnx_ir_alone_changes():
    """The corpus exercises the fixes: onnx-ir alone changes most of these files."""
    changed = [
        p.stem
        for p in CORPUS_FILES
        if diff(onnx.load(p, load_external_data=False), _raw(onnx.load(p)))
    ]
    assert len(changed) >= 20, changed
    assert any("torchscript" in name for name in changed)
    assert any(name.startswith(("rapidocr", "silero", "magika", "onnx_light")) for name in changed)


# ---------------------------------------------------------------------------------------------
# Hand-made protos, one kind of loss each


def _weight(name: str, shape: tuple[int, ...]) -> TensorProto:
    return helper.make_tensor(
        name, TensorProto.FLOAT, shape, np.arange(int(np.prod(shape)), dtype=np.float32)
    )


def _quirky_model() -> onnx.ModelProto:
    """value_info out of onnx-ir's order, on an initializer too, and one naming nothing."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        initializer=[_weight("w", (4, 3)), _weight("b", (3,))],
        value_info=[
            helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("nowhere", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_value_info_order_initializer_entry_and_dangling_entry_are_kept():
    proto = _quirky_model()
    assert diff(proto, _raw(proto))  # onnx-ir alone reorders, adds "b", drops "nowhere"
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == proto.SerializeToString()


def test_no_value_info_stays_none():
    """A TorchScript-like file with no value_info: onnx-ir would add one entry per weight."""
    proto = _quirky_model()
    del proto.graph.value_info[:]
    assert len(_raw(proto).graph.value_info) == 2  # w and b, implied by the initializers
    assert roundtrip(proto).SerializeToString() == proto.SerializeToString()


def test_explicit_defaults_are_kept():
    proto = _quirky_model()
    proto.doc_string = ""
    proto.producer_version = ""
    proto.model_version = 0
    proto.domain = ""
    proto.graph.doc_string = ""
    proto.graph.node[0].domain = ""
    proto.graph.node[1].doc_string = ""
    proto.graph.node[2].name = ""
    for field in ("doc_string", "producer_version", "model_version", "domain"):
        assert proto.HasField(field)
    raw_diff = diff(proto, _raw(proto))
    assert "doc_string: '' != <unset>" in raw_diff
    assert "graph.node[0].domain: '' != <unset>" in raw_diff
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == proto.SerializeToString()


def _if_model() -> onnx.ModelProto:
    """An If whose branch outputs have no type, given instead by the branch's value_info."""

    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{name}_out"])],
            name,
            [],
            [onnx.ValueInfoProto(name=f"{name}_out")],
            value_info=[helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2])],
        )

    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["c"],
                ["y"],
                then_branch=branch("then", "Relu"),
                else_branch=branch("else", "Neg"),
            )
        ],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_subgraph_outputs_do_not_gain_types():
    proto = _if_model()
    raw_diff = diff(proto, _raw(proto))
    assert "graph.node[0].attribute[0].g.value_info: 1 items != 0 items" in raw_diff
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == proto.SerializeToString()


def test_empty_output_type_is_kept():
    """Silero VAD's If bodies: an output with a present but empty ``type``."""
    proto = _if_model()
    for attribute in proto.graph.node[0].attribute:
        attribute.g.output[0].type.SetInParent()
        del attribute.g.value_info[:]
    assert any("g.output[0].type: <TypeProto> != <unset>" in x for x in diff(proto, _raw(proto)))
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == proto.SerializeToString()


# ---------------------------------------------------------------------------------------------
# Changes made between load and save are written, not masked by the record


def _entries(proto: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    return {info.name: info for info in proto.graph.value_info}


def test_changed_type_is_written():
    model = from_proto(_quirky_model())
    r = next(v for v in model.graph.all_nodes() if v.name == "relu").outputs[0]
    r.shape = ir.Shape(["n", 7])
    out = to_proto(model)
    dims = _entries(out)["r"].type.tensor_type.shape.dim
    assert [d.dim_value or d.dim_param for d in dims] == ["n", 7]
    assert [info.name for info in out.graph.value_info] == ["r", "w", "nowhere", "h"]


def test_renamed_value_keeps_its_entry_under_the_new_name():
    model = from_proto(_quirky_model())
    model.graph.node(1).outputs[0].name = "relu_out"
    out = to_proto(model)
    assert [info.name for info in out.graph.value_info] == ["relu_out", "w", "nowhere", "h"]
    assert out.graph.node[1].output[0] == "relu_out"


def test_removed_value_loses_its_entry_and_new_typed_value_gains_one():
    model = from_proto(_quirky_model())
    graph = model.graph
    relu = graph.node(1)
    graph.node(2).replace_input_with(0, relu.inputs[0])
    graph.remove(relu, safe=True)
    sig = ir.node("Sigmoid", [graph.node(1).outputs[0]])
    sig.outputs[0].name = "s"
    sig.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    graph.append(sig)
    out = to_proto(model)
    assert [info.name for info in out.graph.value_info] == ["w", "nowhere", "h", "s"]


def test_value_type_given_after_load_is_written():
    proto = _quirky_model()
    del proto.graph.value_info[:]
    model = from_proto(proto)
    model.graph.node(0).outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    out = to_proto(model)
    assert [info.name for info in out.graph.value_info] == ["h"]


def test_subgraph_output_given_another_type_is_written():
    model = from_proto(_if_model())
    then_graph = model.graph.node(0).attributes["then_branch"].as_graph()
    then_graph.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    then_graph.outputs[0].shape = ir.Shape([3])
    out = to_proto(model)
    branches = {a.name: a.g for a in out.graph.node[0].attribute}
    assert branches["then_branch"].output[0].type.tensor_type.shape.dim[0].dim_value == 3
    assert not branches["else_branch"].output[0].HasField("type")


def test_model_built_in_memory_is_written_the_onnx_ir_way():
    model = ir.serde.deserialize_model(_quirky_model())
    assert (
        to_proto(model).SerializeToString() == ir.serde.serialize_model(model).SerializeToString()
    )


def test_explicit_default_replaced_after_load_is_written():
    proto = _quirky_model()
    proto.doc_string = ""
    proto.graph.node[0].domain = ""
    model = from_proto(proto)
    model.doc_string = "now documented"
    out = to_proto(model)
    assert out.doc_string == "now documented"
    assert out.graph.node[0].HasField("domain")


def _function_model() -> onnx.ModelProto:
    """A local function with value_info (IR 10), quantization annotations out of order."""
    function = helper.make_function(
        "custom",
        "F",
        ["a"],
        ["c"],
        [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["b"], ["c"])],
        [helper.make_opsetid("", 18)],
    )
    function.value_info.extend(
        [
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
        ]
    )
    graph = helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], domain="custom")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    for name in ("y", "x"):
        annotation = graph.quantization_annotation.add(tensor_name=name)
        annotation.quant_parameter_tensor_names.add(key="SCALE_TENSOR", value="x")
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("custom", 1)],
        functions=[function],
        ir_version=10,
    )


def test_function_value_info_and_quantization_annotation_order_are_kept():
    proto = _function_model()
    raw_diff = diff(proto, _raw(proto))
    assert "functions[0].value_info: 2 items != 1 items" in raw_diff
    assert "graph.quantization_annotation[0].tensor_name: 'y' != 'x'" in raw_diff
    again = roundtrip(proto)
    assert diff(proto, again) == []
    assert again.SerializeToString() == proto.SerializeToString()
