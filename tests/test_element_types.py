"""Element types without shapes (analysis.element_types), and the one "can a boundary be
written here" predicate shared by the cut finder (plan) and the split."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as onh

from onnx_ir_multidevice import SplitError, omny, plan, split, split_at, verify
from onnx_ir_multidevice.analysis.boundaries import boundary_problem
from onnx_ir_multidevice.analysis.cut_points import find_cut_points
from onnx_ir_multidevice.analysis.element_types import element_types
from onnx_ir_multidevice.analysis.shapes import ValueShapes

CORPUS = Path(__file__).parent / "corpus"
MANIFEST = {e["name"]: e for e in json.loads((CORPUS / "manifest.json").read_text())}


def _plan_quietly(model: ir.Model, **kwargs) -> omny.OmnyMetadata:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lower-bound memory figures: unknown sizes
        return plan(model, assign_names=True, **kwargs)


# ---------------------------------------------------------------------------------------------
# Oracle: wherever ONNX shape inference types a value, element_types gives the same dtype.


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_element_types_agree_with_onnx_inference_on_the_corpus(name):
    path = CORPUS / MANIFEST[name]["file"]
    proto = onnx.load(path)
    # ONNX inference walks the file order: sort first (one corpus file is not sorted).
    sorted_model = ir.from_proto(proto)
    ir.passes.common.TopologicalSortPass()(sorted_model)
    sorted_proto = ir.to_proto(sorted_model)
    try:
        inferred = onnx.shape_inference.infer_shapes(sorted_proto, strict_mode=False)
    except onnx.shape_inference.InferenceError:
        # yolo_like_fp16_dynamo: the fp16 converter left a value_info entry (float16) that
        # contradicts its producer (float32); ONNX refuses the file. Infer without them.
        del sorted_proto.graph.value_info[:]
        inferred = onnx.shape_inference.infer_shapes(sorted_proto, strict_mode=False)
    oracle = {
        info.name: info.type.tensor_type.elem_type
        for info in (*inferred.graph.value_info, *inferred.graph.output)
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type
    }
    model = ir.from_proto(proto)
    found = element_types(model.graph)
    untyped = [v for node in model.graph for v in node.outputs if v.type is None]
    compared = 0
    for value in untyped:
        expected = oracle.get(value.name)
        if expected is None:
            continue
        assert found.get(value) == ir.DataType(expected), (name, value.name)
        compared += 1
    if name.endswith("_torchscript"):
        assert compared > 0  # no value_info: the comparison covers the graph
    # And beyond ONNX inference (com.microsoft ops, what follows a node it refuses): every
    # value of every corpus model gets its type.
    assert [v.name for v in untyped if v not in found] == []


# ---------------------------------------------------------------------------------------------
# A model that is invalid at the planning dims, with every dtype inferable.


def _short_position_table_model(layers: int = 3, hidden: int = 16) -> onnx.ModelProto:
    """Token + position embeddings, the positions read from a 32-row table.

    ``position_ids[:, :seq]`` then ``pos_table[...]``: at the default planning length (128)
    the position embedding has 32 rows and the ``Add`` with the token embedding (128 rows)
    is invalid, so ONNX inference stops there; dtypes are all determined.
    """
    rng = np.random.default_rng(0)
    inits = [
        onh.from_array(rng.random((100, hidden), dtype=np.float32), "tok_table"),
        onh.from_array(rng.random((32, hidden), dtype=np.float32), "pos_table"),
        onh.from_array(np.arange(32, dtype=np.int64)[None], "position_ids"),
        onh.from_array(np.array([0], np.int64), "zero"),
        onh.from_array(np.array([1], np.int64), "one"),
        onh.from_array(np.array([2], np.int64), "two"),
    ]
    nodes = [
        oh.make_node("Shape", ["ids"], ["ids_shape"]),
        oh.make_node("Slice", ["ids_shape", "one", "two"], ["seq_len"]),
        oh.make_node("Slice", ["position_ids", "zero", "seq_len", "one"], ["positions"]),
        oh.make_node("Gather", ["tok_table", "ids"], ["tokens"]),
        oh.make_node("Gather", ["pos_table", "positions"], ["position_embeddings"]),
        oh.make_node("Add", ["tokens", "position_embeddings"], ["x0"]),
    ]
    current = "x0"
    for i in range(layers):
        inits.append(onh.from_array(rng.random((hidden, hidden), dtype=np.float32) / 4, f"w{i}"))
        nodes += [
            oh.make_node("MatMul", [current, f"w{i}"], [f"mm{i}"]),
            oh.make_node("Tanh", [f"mm{i}"], [f"t{i}"]),
            oh.make_node("Add", [f"t{i}", current], [f"x{i + 1}"]),
        ]
        current = f"x{i + 1}"
    nodes.append(oh.make_node("ReduceMean", [current], ["y"], keepdims=0, axes=[1]))
    graph = oh.make_graph(
        nodes,
        "short_positions",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_dtypes_do_not_depend_on_the_planning_dims():
    model = ir.from_proto(_short_position_table_model())
    by_name = {v.name: v for node in model.graph for v in node.outputs}
    at_128 = ValueShapes(model.graph)  # seq 128: ONNX inference fails at the Add
    at_16 = ValueShapes(model.graph, {"seq": 16})  # valid
    assert at_128.probe_dims["seq"] == 128
    for name in ("x0", "mm0", "x3", "y"):
        assert at_128.dtype(by_name[name]) is ir.DataType.FLOAT
        assert at_128.dtype(by_name[name]) == at_16.dtype(by_name[name])
    assert at_128.shape(by_name["x0"]) is None  # the shape stays unknown: never guessed
    assert at_16.shape(by_name["x0"]) == (1, 16, 16)


def test_plan_then_split_where_inference_fails_at_the_planning_dims():
    model = ir.from_proto(_short_position_table_model())
    metadata = _plan_quietly(model)  # no dims: seq planned at 128
    cut_names = [c.tensor_name for c in metadata.cut_points]
    assert {"x0", "x1", "x2", "x3"} <= set(cut_names)
    omny.write(model, metadata)
    for configuration in metadata.sharding.configurations:
        stages = split(model, configuration.num_shards)  # refused before: dtype of x0 unknown
        assert len(stages) == configuration.num_shards
        assert stages[1].graph.inputs[-1].dtype is ir.DataType.FLOAT
    result = verify(model, 2, dims={"seq": 16})  # onnxruntime, at dims the model accepts
    assert result.ok


# ---------------------------------------------------------------------------------------------
# QOperator chains with com.microsoft ops (no ONNX schema: rules of this package)


def _qoperator_model() -> onnx.ModelProto:
    """Quantize -> QLinearConv -> QLinearAdd -> QLinearGlobalAveragePool (channels_last=0)
    -> QLinearConv -> Dequantize: what onnxruntime's QOperator quantizer writes."""
    rng = np.random.default_rng(1)

    def q(name, value, dtype=np.uint8):
        return onh.from_array(np.array(value, dtype=dtype), name)

    inits = [
        q("s", 0.05, np.float32),
        q("zp", 128),
        q("w1", rng.integers(-20, 20, (8, 4, 3, 3)), np.int8),
        q("w1_s", 0.02, np.float32),
        q("w1_zp", 0, np.int8),
        q("w2", rng.integers(-20, 20, (6, 8, 1, 1)), np.int8),
        q("w2_s", 0.02, np.float32),
        q("w2_zp", 0, np.int8),
    ]
    ms = "com.microsoft"
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        oh.make_node(
            "QLinearConv", ["xq", "s", "zp", "w1", "w1_s", "w1_zp", "s", "zp"], ["c1"], pads=[1] * 4
        ),
        oh.make_node(
            "QLinearAdd", ["c1", "s", "zp", "c1", "s", "zp", "s", "zp"], ["a1"], domain=ms
        ),
        oh.make_node(
            "QLinearGlobalAveragePool",
            ["a1", "s", "zp", "s", "zp"],
            ["p1"],
            domain=ms,
            channels_last=0,
        ),
        oh.make_node("QLinearConv", ["p1", "s", "zp", "w2", "w2_s", "w2_zp", "s", "zp"], ["c2"]),
        oh.make_node("DequantizeLinear", ["c2", "s", "zp"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "qoperator",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "height", "width"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ms, 1)])


def test_contrib_op_dtypes_follow_their_rules():
    model = ir.from_proto(_qoperator_model())
    found = {v.name: d for v, d in element_types(model.graph).items()}
    assert found == {
        "xq": ir.DataType.UINT8,  # the zero point's type
        "c1": ir.DataType.UINT8,  # QLinearConv: y_zero_point
        "a1": ir.DataType.UINT8,  # com.microsoft QLinearAdd: like A
        "p1": ir.DataType.UINT8,  # com.microsoft QLinearGlobalAveragePool: like X
        "c2": ir.DataType.UINT8,
    }  # y is typed in the file (FLOAT, no shape)


def test_qoperator_chain_plans_splits_and_runs():
    model = ir.from_proto(_qoperator_model())
    metadata = _plan_quietly(model, dims={"height": 8, "width": 8})
    assert {"c1", "a1", "p1"} <= {c.tensor_name for c in metadata.cut_points}
    omny.write(model, metadata)
    for configuration in metadata.sharding.configurations:
        result = verify(model, configuration.num_shards, dims={"height": 8, "width": 8})
        assert result.ok
        assert max(o.max_abs_diff for o in result.outputs) == 0.0  # the same integer ops


# ---------------------------------------------------------------------------------------------
# One predicate: what the planner offers, the split accepts


def _custom_op_model() -> onnx.ModelProto:
    """A chain with an op of an unknown domain in the middle: its output type is unknowable."""
    rng = np.random.default_rng(2)
    inits = [onh.from_array(rng.random((8, 8), dtype=np.float32), f"w{i}") for i in range(3)]
    nodes = [
        oh.make_node("MatMul", ["x", "w0"], ["a"]),
        oh.make_node("Relu", ["a"], ["b"]),
        oh.make_node("Mystery", ["b"], ["c"], domain="example.custom"),
        oh.make_node("MatMul", ["c", "w1"], ["d"]),
        oh.make_node("Relu", ["d"], ["e"]),
        oh.make_node("MatMul", ["e", "w2"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "custom",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        inits,
    )
    return oh.make_model(
        graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("example.custom", 1)]
    )


def test_the_planner_offers_only_cuts_the_split_accepts():
    model = ir.from_proto(_custom_op_model())
    by_name = {v.name: v for node in model.graph for v in node.outputs}
    shapes = ValueShapes(model.graph)
    assert boundary_problem(by_name["c"], shapes) is not None
    assert boundary_problem(by_name["b"], shapes) is None
    cuts = [c.value.name for c in find_cut_points(model.graph)]
    assert "c" not in cuts
    assert {"a", "b", "d", "e"} <= set(cuts)  # MatMul of an unknown and a float: float
    for name in cuts:
        assert len(split_at(model, [name])) == 2
    with pytest.raises(SplitError, match=r"'c' .*example\.custom\.Mystery node"):
        split_at(model, ["c"])
    metadata = _plan_quietly(model)
    assert "c" not in {c.tensor_name for c in metadata.cut_points}
