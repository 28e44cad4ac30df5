"""Fused attention under tensor parallelism: packed QKV ``Attention`` and past keys/values.

Small models built with onnx-ir (seeded random weights) are split at degree 2 and 4, run per
rank by the package's runtime and compared with the whole model on onnxruntime (CPU); each
guard has a refused case that stays replicated and still verifies.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tp_oracle import check_region, whole_values

from onnx_ir_multidevice import annotate, check, omny
from onnx_ir_multidevice._split.tensor_parallel import rank_models
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    REPLICATED,
    ShardingContext,
    Split,
    propagate,
)
from onnx_ir_multidevice.analysis.tensor_parallel import find_regions
from onnx_ir_multidevice.omny import (
    TensorParallelConfiguration,
    TensorParallelRecord,
    write_tensor_parallel,
)
from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.runtime.tensor_parallel import verify_tensor_parallel

F32 = ir.DataType.FLOAT
I32 = ir.DataType.INT32
MS = "com.microsoft"
BATCH, SEQ, PAST, HEAD = 2, 3, 4, 8


def _const(name: str, array: np.ndarray) -> ir.Value:
    dtype = ir.TensorType(ir.DataType.from_numpy(array.dtype))
    return ir.Value(
        name=name, type=dtype, shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name)
    )


def _input(name: str, dtype: ir.DataType, shape: Sequence[int]) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(list(shape)))


def _node(domain: str, op: str, inputs, names: Sequence[str], **attributes) -> ir.Node:
    attrs = [
        ir.AttrInt64(k, v) if isinstance(v, int) else ir.AttrInt64s(k, list(v))
        for k, v in attributes.items()
    ]
    node = ir.Node(domain, op, inputs, attrs, num_outputs=len(names), name=f"{op}_{names[0]}")
    for value, name in zip(node.outputs, names, strict=True):
        value.name = name
    return node


def _model(inputs, outputs, nodes, initializers, opset: int = 18) -> ir.Model:
    graph = ir.Graph(
        inputs, outputs, nodes=nodes, initializers=initializers, name="attention",
        opset_imports={"": opset, MS: 1},
    )  # fmt: skip
    return ir.Model(graph, ir_version=10)


def _close(nodes: list[ir.Node], attended: ir.Value, hidden: int, rng, inits) -> ir.Value:
    """Output projection (row-parallel), then a non-linear op: one AllReduce between."""
    wo = _const("o.w", rng.standard_normal((hidden, hidden)).astype(np.float32) / 4)
    inits.append(wo)
    project = _node("", "MatMul", [attended, wo], ["projected"])
    relu = _node("", "Relu", [project.outputs[0]], ["y"])
    relu.outputs[0].type = ir.TensorType(F32)
    relu.outputs[0].shape = ir.Shape([BATCH, None, hidden])
    nodes += [project, relu]
    return relu.outputs[0]


# ---------------------------------------------------------------------------------------------
# com.microsoft Attention: packed QKV weights, a column-parallel start
# ---------------------------------------------------------------------------------------------


def packed_attention(
    heads: int = 4,
    hidden: int = 16,
    *,
    sizes: Sequence[int] | None = None,
    mask: str | None = None,
    bias: bool = True,
    unidirectional: int = 0,
    present_output: bool = False,
    past: bool = False,
    computed_past: bool = False,
    seed: int = 1,
) -> ir.Model:
    rng = np.random.default_rng(seed)
    nodes: list[ir.Node] = []
    x = _input("x", F32, [BATCH, SEQ, hidden])
    width = sum(sizes) if sizes is not None else 3 * hidden
    w = _const("qkv.w", rng.standard_normal((hidden, width)).astype(np.float32) / 4)
    inits = [w]
    inputs: list[ir.Value | None] = [x, w, None]
    graph_inputs = [x]
    if bias:
        b = _const("qkv.b", rng.standard_normal(width).astype(np.float32))
        inits.append(b)
        inputs[2] = b
    if mask == "2d":  # raw key mask [batch, total_seq]
        m = _input("mask", I32, [BATCH, SEQ])
        graph_inputs.append(m)
        inputs.append(m)
    elif mask == "heads":  # [batch, heads, seq, seq]: has a heads axis
        inputs.append(_const("mask", np.ones((BATCH, heads, SEQ, SEQ), np.int32)))
        inits.append(inputs[-1])  # type: ignore[arg-type]
    if past:
        while len(inputs) < 4:
            inputs.append(None)
        p = _input("past", F32, [2, BATCH, heads, PAST, hidden // heads])
        graph_inputs.append(p)
        if computed_past:  # a replicated activation, not a graph input: not sliced
            negate = _node("", "Neg", [p], ["past.neg"])
            nodes.append(negate)
            p = negate.outputs[0]
        inputs.append(p)
    attributes: dict = {"num_heads": heads}
    if sizes is not None:
        attributes["qkv_hidden_sizes"] = list(sizes)
    if unidirectional:
        attributes["unidirectional"] = 1
    names = ["attended", "present"] if present_output or past else ["attended"]
    attention = _node(MS, "Attention", inputs, names, **attributes)
    nodes.append(attention)
    y = _close(nodes, attention.outputs[0], hidden, rng, inits)
    outputs = [y]
    if present_output:
        total = SEQ + (PAST if past else 0)
        attention.outputs[1].type = ir.TensorType(F32)
        attention.outputs[1].shape = ir.Shape([2, BATCH, heads, total, hidden // heads])
        outputs.append(attention.outputs[1])
    return _model(graph_inputs, outputs, nodes, inits)


def _feeds(model: ir.Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.inputs:
        shape = [int(d) for d in value.shape]  # type: ignore[union-attr]
        if value.name == "mask":
            feeds["mask"] = (rng.random(shape) > 0.3).astype(np.int32)
            feeds["mask"][:, 0] = 1
        elif value.name == "seqlens_k":
            feeds["seqlens_k"] = np.full(shape, PAST + 1 - 1, np.int32)
        elif value.name == "total_sequence_length":
            feeds["total_sequence_length"] = np.array(PAST + 1, np.int32)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _verify(model: ir.Model, degree: int) -> None:
    report = verify_tensor_parallel(model, degree, _feeds(model), rtol=1e-4, atol=1e-4)
    assert report.ok, report.outputs


PACKED_CASES = {
    "plain": {},
    "no bias": {"bias": False},
    "equal qkv_hidden_sizes": {"sizes": (16, 16, 16)},
    "2-D key mask": {"mask": "2d"},
    "unidirectional": {"unidirectional": 1},
    "present output": {"present_output": True, "unidirectional": 1},
    "past": {"past": True, "present_output": True, "unidirectional": 1},
}


@pytest.mark.parametrize("degree", [2, 4])
@pytest.mark.parametrize("case", sorted(PACKED_CASES))
def test_packed_attention_is_split_by_heads(case: str, degree: int):
    model = packed_attention(**PACKED_CASES[case])
    (region,) = find_regions(model, degree, gather_outputs=True)
    assert [n.op_type for n in region.nodes] == ["Attention", "MatMul"]
    assert [c.kind for c in region.collectives].count("AllReduce") == 1
    sliced = {(p.value.name, p.axis, p.blocks) for p in region.weight_slices}
    expected = {("qkv.w", 1, 3), ("o.w", 0, 1)}
    if PACKED_CASES[case].get("bias", True):
        expected.add(("qkv.b", 0, 3))
    if PACKED_CASES[case].get("past"):
        expected.add(("past", 2, 1))  # [2, batch, heads, past, size]: each rank its heads
    assert sliced == expected
    gathers = [(c.value.name, c.state) for c in region.collectives if c.kind == "AllGather"]
    assert gathers == ([("present", Split(-3))] if "present_output" in PACKED_CASES[case] else [])
    rewrites = {r.name: (r.old, r.new) for r in region.attribute_rewrites}
    assert rewrites["num_heads"] == (4, 4 // degree)
    if "sizes" in PACKED_CASES[case]:
        assert rewrites["qkv_hidden_sizes"] == ((16,) * 3, (16 // degree,) * 3)
    feeds = _feeds(model)
    check_region(model, region, whole_values(model, feeds, engine="ort"), engine="ort")
    _verify(model, degree)


PACKED_REFUSED = {
    "heads not divisible": ({"heads": 2}, 4),
    "unequal qkv_hidden_sizes": ({"sizes": (8, 8, 16)}, 2),
    "computed past": ({"past": True, "computed_past": True, "unidirectional": 1}, 2),
}


@pytest.mark.parametrize("case", sorted(PACKED_REFUSED))
def test_packed_attention_refused_stays_replicated_and_verifies(case: str):
    arguments, degree = PACKED_REFUSED[case]
    model = packed_attention(**arguments)
    assert find_regions(model, degree, gather_outputs=True) == []
    _verify(model, degree)


def test_packed_attention_mask_with_heads_axis_is_refused():
    model = packed_attention(mask="heads")
    assert find_regions(model, 2) == []  # onnxruntime has no such mask: not run


# ---------------------------------------------------------------------------------------------
# Past keys/values: GroupQueryAttention, MultiHeadAttention, ONNX Attention-23
# ---------------------------------------------------------------------------------------------


def _projections(names: str, hidden: int, widths: Sequence[int], rng, inits, nodes, x):
    out = []
    for name, width in zip(names, widths, strict=True):
        w = _const(f"{name}.w", rng.standard_normal((hidden, width)).astype(np.float32) / 4)
        inits.append(w)
        node = _node("", "MatMul", [x, w], [name])
        nodes.append(node)
        out.append(node.outputs[0])
    return out


def _past_model(
    op: str,
    heads: int = 4,
    kv_heads: int = 4,
    *,
    computed_past: bool = False,
    mha_bias: bool = False,
    seed: int = 2,
) -> ir.Model:
    """A decode step (``seq`` 1 for GQA) with past keys/values as graph inputs."""
    rng = np.random.default_rng(seed)
    hidden = heads * HEAD
    seq = 1 if op == "GroupQueryAttention" else SEQ
    x = _input("x", F32, [BATCH, seq, hidden])
    inits: list[ir.Value] = []
    nodes: list[ir.Node] = []
    q, k, v = _projections("qkv", hidden, [hidden, kv_heads * HEAD, kv_heads * HEAD], rng,
                           inits, nodes, x)  # fmt: skip
    past_key = _input("past_key", F32, [BATCH, kv_heads, PAST, HEAD])
    past_value = _input("past_value", F32, [BATCH, kv_heads, PAST, HEAD])
    graph_inputs = [x, past_key, past_value]
    pasts: list[ir.Value] = [past_key, past_value]
    if computed_past:  # a replicated activation, not a graph input: not sliced
        pasts = []
        for value in (past_key, past_value):
            node = _node("", "Neg", [value], [f"{value.name}.neg"])
            nodes.append(node)
            pasts.append(node.outputs[0])
    names = ["attended", "present_key", "present_value"]
    if op == "GroupQueryAttention":
        seqlens = _input("seqlens_k", I32, [BATCH])
        total = _input("total_sequence_length", I32, [])
        graph_inputs += [seqlens, total]
        attention = _node(MS, op, [q, k, v, *pasts, seqlens, total], names,
                          num_heads=heads, kv_num_heads=kv_heads)  # fmt: skip
        opset = 18
    elif op == "MultiHeadAttention":
        bias = None
        if mha_bias:
            bias = _const("qkv.b", rng.standard_normal(3 * hidden).astype(np.float32))
            inits.append(bias)
        attention = _node(MS, op, [q, k, v, bias, None, None, *pasts], names, num_heads=heads)
        opset = 18
    else:
        attention = _node("", "Attention", [q, k, v, None, *pasts], names,
                          q_num_heads=heads, kv_num_heads=kv_heads)  # fmt: skip
        opset = 23
    nodes.append(attention)
    y = _close(nodes, attention.outputs[0], hidden, rng, inits)
    for present in attention.outputs[1:]:
        present.type = ir.TensorType(F32)
        present.shape = ir.Shape([BATCH, kv_heads, PAST + seq, HEAD])
    return _model(graph_inputs, [y, *attention.outputs[1:]], nodes, inits, opset)


PAST_CASES = {
    "GroupQueryAttention": {"op": "GroupQueryAttention", "kv_heads": 4},
    "GroupQueryAttention grouped": {"op": "GroupQueryAttention", "heads": 8, "kv_heads": 4},
    "MultiHeadAttention": {"op": "MultiHeadAttention"},
    "MultiHeadAttention bias": {"op": "MultiHeadAttention", "mha_bias": True},
    "Attention-23": {"op": "Attention"},
    "Attention-23 grouped": {"op": "Attention", "heads": 8, "kv_heads": 4},
}


@pytest.mark.parametrize("degree", [2, 4])
@pytest.mark.parametrize("case", sorted(PAST_CASES))
def test_past_keys_values_are_sliced_by_heads(case: str, degree: int):
    model = _past_model(**PAST_CASES[case])
    regions = find_regions(model, degree, gather_outputs=True)
    (region,) = regions
    attention = next(n for n in region.nodes if "Attention" in n.op_type)
    sliced = {p.value.name: (p.axis, p.blocks) for p in region.weight_slices}
    assert sliced["past_key"] == sliced["past_value"] == (1, 1)
    if PAST_CASES[case].get("mha_bias"):
        assert sliced["qkv.b"] == (0, 3)
    for present in attention.outputs[1:]:
        assert region.states[present] == Split(-3)
    gathers = {c.value.name: c.state for c in region.collectives if c.kind == "AllGather"}
    assert gathers == {"present_key": Split(-3), "present_value": Split(-3)}
    assert [c.kind for c in region.collectives].count("AllReduce") == 1
    _verify(model, degree)


PAST_REFUSED = {
    "GroupQueryAttention kv heads not divisible": ({"op": "GroupQueryAttention", "kv_heads": 2}, 4),
    "Attention-23 kv heads not divisible": ({"op": "Attention", "heads": 8, "kv_heads": 2}, 4),
    "computed past": ({"op": "MultiHeadAttention", "computed_past": True}, 2),
}


@pytest.mark.parametrize("case", sorted(PAST_REFUSED))
def test_past_refused_stays_replicated_and_verifies(case: str):
    arguments, degree = PAST_REFUSED[case]
    model = _past_model(**arguments)
    for region in find_regions(model, degree, gather_outputs=True):
        assert not any("Attention" in n.op_type for n in region.nodes)
    _verify(model, degree)


def test_past_already_split_by_heads_is_read_as_it_is():
    model = _past_model("GroupQueryAttention")
    attention = next(n for n in model.graph if n.op_type == "GroupQueryAttention")
    context = ShardingContext(model.graph, 2, ValueShapes(model.graph))
    states = [Split(-1)] * 3 + [Split(-3)] * 2 + [REPLICATED] * 2
    result = propagate(context, attention, states)
    assert result is not None
    assert result.outputs == (Split(-1), Split(-3), Split(-3))
    assert result.weight_slices == ()
    assert {(r.name, r.new) for r in result.attribute_rewrites} == {
        ("num_heads", 2),
        ("kv_num_heads", 2),
    }


# ---------------------------------------------------------------------------------------------
# Random packed attentions against the oracle; the record and the checker on fused attention
# ---------------------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 1000),
    heads=st.sampled_from([2, 4, 8]),
    head_size=st.sampled_from([2, 4]),
    bias=st.booleans(),
    unidirectional=st.sampled_from([0, 1]),
    degree=st.sampled_from([2, 4]),
)
def test_random_packed_attention_equals_whole(seed, heads, head_size, bias, unidirectional, degree):
    model = packed_attention(
        heads, heads * head_size, bias=bias, unidirectional=unidirectional, seed=seed
    )
    regions = find_regions(model, degree)
    if heads % degree:
        assert regions == []
    else:
        (region,) = regions
        feeds = _feeds(model, seed)
        check_region(model, region, whole_values(model, feeds, engine="ort"), engine="ort")
    _verify(model, degree)


@pytest.mark.parametrize(
    "build",
    [
        packed_attention,
        lambda: _past_model("GroupQueryAttention"),
        lambda: _past_model("Attention"),
    ],
    ids=["Attention", "GroupQueryAttention", "Attention-23"],
)
def test_record_of_fused_attention_is_annotated_and_checked(build):
    model = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sizes of contrib outputs: lower bounds
        result = plan_model(model, shards=[1], dims={})
    omny.write(model, result.metadata)
    omny.write_planning_dims(model, result.planning_dims)
    record = TensorParallelRecord(
        (TensorParallelConfiguration.contiguous("omny/1-shards", [2], result.planning_dims),)
    )
    write_tensor_parallel(model, record)
    annotate(model)
    attention = next(n for n in model.graph if "Attention" in n.op_type)
    (entry,) = attention.device_configurations
    assert any(spec.sharded_dims for spec in entry.sharding_specs)
    assert [str(d) for d in check(model) if d.is_error] == []


@pytest.mark.parametrize("degree", [2, 4])
def test_rank_models_slice_the_past_per_rank(degree: int):
    model = _past_model("GroupQueryAttention")
    for rank, ranked in enumerate(rank_models(model, degree, dims={})):
        onnx.checker.check_model(ir.to_proto(ranked))
        attention = next(n for n in ranked.graph if n.op_type == "GroupQueryAttention")
        assert attention.attributes["kv_num_heads"].value == 4 // degree
        for index in (3, 4):
            piece = attention.inputs[index]
            assert piece is not None
            cut = piece.producer()
            assert cut is not None and cut.op_type == "Slice"
            assert cut.inputs[0] in ranked.graph.inputs
            bounds = [int(v.const_value.numpy()[0]) for v in cut.inputs[1:4]]  # type: ignore[union-attr]
            step = 4 // degree
            assert bounds == [rank * step, (rank + 1) * step, 1]  # starts, ends, the heads axis
        gathers = [n for n in ranked.graph if n.op_type == "AllGather"]
        assert {n.outputs[0].name for n in gathers} == {"present_key", "present_value"}
