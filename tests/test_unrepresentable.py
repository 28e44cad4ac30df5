"""Valid ONNX models that onnx-ir 1.1 cannot represent: named precisely, with what to do.

The classifier below is shaped as skl2onnx exports scikit-learn classifiers by default (a
``ZipMap`` whose output is ``seq(map(int64, tensor(float)))``); it passes ``onnx.checker`` and
runs in onnxruntime, so it must not be called invalid.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import onnx_ir_multidevice as omd
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._proto.convert import from_proto
from onnx_ir_multidevice._proto.unrepresentable import find_unrepresentable, type_text

ZIPMAP_TYPE = "seq(map(int64,tensor(float)))"


def _zipmap_type() -> onnx.TypeProto:
    return oh.make_sequence_type_proto(
        oh.make_map_type_proto(TensorProto.INT64, oh.make_tensor_type_proto(TensorProto.FLOAT, []))
    )


def _classifier() -> onnx.ModelProto:
    """A linear classifier ending as skl2onnx's do: label (ArgMax) and a ZipMap of scores."""
    weights = nh.from_array(np.random.default_rng(0).random((4, 3), np.float32), "coef")
    nodes = [
        oh.make_node("MatMul", ["X", "coef"], ["scores"], name="linear"),
        oh.make_node("Softmax", ["scores"], ["probability_tensor"], name="softmax", axis=1),
        oh.make_node("ArgMax", ["probability_tensor"], ["label"], name="argmax", axis=1,
                     keepdims=0),
        oh.make_node("ZipMap", ["probability_tensor"], ["output_probability"], name="ZipMap",
                     domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]),
    ]  # fmt: skip
    graph = oh.make_graph(
        nodes,
        "classifier",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [
            oh.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            oh.make_value_info("output_probability", _zipmap_type()),
        ],
        [weights],
    )
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 3)]
    model = oh.make_model(graph, opset_imports=opsets, ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture
def classifier_file(tmp_path):
    path = tmp_path / "clf.onnx"
    onnx.save(_classifier(), path)
    # valid ONNX that onnxruntime runs: one dict of class probabilities per row
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    label, probabilities = session.run(None, {"X": np.ones((2, 4), np.float32)})
    assert label.shape == (2,) and sorted(probabilities[0]) == [0, 1, 2]
    return path


def test_load_names_the_map_output_its_type_its_writer_and_the_export_option(classifier_file):
    with pytest.raises(OmnyFormatError) as caught:
        omd.load(classifier_file)
    error = caught.value
    assert error.path == "graph.output[1]"
    message = str(error)
    assert f"'output_probability' of type {ZIPMAP_TYPE}" in message
    assert "written by ZipMap node 'ZipMap' (graph.node[3])" in message
    assert "valid ONNX" in message and "has no map types" in message
    assert "options={id(clf): {'zipmap': False}}" in message
    assert "not a valid ONNX model" not in message  # what it said before


def test_plan_cli_exits_2_with_the_message_and_writes_nothing(classifier_file, capsys):
    out = classifier_file.with_suffix(".omny")
    assert main(["plan", str(classifier_file), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "output_probability" in err and ZIPMAP_TYPE in err and "'zipmap': False" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_check_reports_it_once_without_calling_the_file_unreadable(classifier_file, capsys):
    assert main(["check", str(classifier_file), "--json"]) == 2
    document = json.loads(capsys.readouterr().out)["result"]
    codes = [d["code"] for d in document["diagnostics"]]
    assert codes == ["OMNY106"], codes
    assert ZIPMAP_TYPE in document["diagnostics"][0]["message"]
    assert main(["check", str(classifier_file)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"omny: error: {classifier_file}: cannot be loaded (see the errors above)"
    diagnostics = omd.check(_classifier())  # a proto: the same single finding
    assert [d.code for d in diagnostics] == ["OMNY106"]


def test_maps_in_subgraphs_functions_and_sparse_attributes_are_found():
    model = _classifier()
    # an If whose branches declare a map-typed value
    branch = oh.make_graph(
        [oh.make_node("Identity", ["probability_tensor"], ["inner"])],
        "branch",
        [],
        [oh.make_value_info("inner_map", _zipmap_type())],
    )
    model.graph.node.append(
        oh.make_node("If", ["cond"], ["unused"], then_branch=branch, else_branch=branch)
    )
    function = oh.make_function(
        "custom", "F", ["a"], ["b"], [oh.make_node("Identity", ["a"], ["b"])],
        [oh.make_opsetid("", 17)],
    )  # fmt: skip
    function.value_info.append(oh.make_value_info("b", _zipmap_type()))
    model.functions.append(function)
    sparse = oh.make_sparse_tensor(
        oh.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        oh.make_tensor("i", TensorProto.INT64, [1], [0]),
        [3],
    )
    model.graph.node.append(oh.make_node("Constant", [], ["dense"], sparse_value=sparse))
    found = find_unrepresentable(model)
    assert [(f.path, f.type) for f in found] == [
        ("graph.output[1]", ZIPMAP_TYPE),
        ("graph.node[4].attribute[0].g.output[0]", ZIPMAP_TYPE),
        ("graph.node[4].attribute[1].g.output[0]", ZIPMAP_TYPE),
        ("graph.node[5].attribute[0]", "sparse_tensor (attribute)"),
        ("functions[0].value_info[0]", ZIPMAP_TYPE),
    ]
    with pytest.raises(OmnyFormatError, match="no map types and no sparse tensor attributes"):
        from_proto(model)


def test_sequences_and_optionals_of_tensors_are_not_flagged():
    seq = oh.make_sequence_type_proto(oh.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    graph = oh.make_graph(
        [oh.make_node("SequenceConstruct", ["x", "x"], ["s"])],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [oh.make_value_info("s", seq)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    assert find_unrepresentable(model) == []
    assert from_proto(model).graph.outputs[0].name == "s"
    assert type_text(oh.make_optional_type_proto(seq)) == "optional(seq(tensor(float)))"
