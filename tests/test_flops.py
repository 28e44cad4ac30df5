"""FLOPs of recurrent, quantised, attention and Einsum nodes against hand counts (issue 9)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx_ir.convenience import convert_attributes
from test_cut_points import random_graphs

from onnx_ir_multidevice.analysis.cut_points import analyse_cut_points
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.planner.flops import node_flops
from onnx_ir_multidevice.planner.memory import MemoryModel
from onnx_ir_multidevice.planner.partition import partition

F32, U8, I32 = ir.DataType.FLOAT, ir.DataType.UINT8, ir.DataType.INT32
MS = "com.microsoft"


def value(name: str, shape, dtype=F32) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape))


def weight(name: str, shape, dtype=np.float32) -> ir.Value:
    return ir.Value(name=name, const_value=ir.tensor(np.zeros(shape, dtype), name=name))


def count(op: str, inputs, outputs, domain: str = "", **attributes) -> int | None:
    """The FLOPs of one node built into a graph with onnx-ir (shapes as stated)."""
    fresh: dict[ir.Value, ir.Value] = {}  # a value belongs to one graph: copy per node
    for v in inputs:
        if v is not None and v not in fresh:
            fresh[v] = ir.Value(name=v.name, type=v.type, shape=v.shape, const_value=v.const_value)
    inputs = [None if v is None else fresh[v] for v in inputs]
    node = ir.Node(domain, op, inputs, attributes=convert_attributes(attributes))
    for out, (name, shape, *dtype) in zip(node.outputs, outputs, strict=False):
        out.name, out.shape, out.type = name, ir.Shape(shape), ir.TensorType(*(dtype or [F32]))
    graph_inputs = [v for v in fresh.values() if v.const_value is None]
    weights = [v for v in fresh.values() if v.const_value is not None]
    graph = ir.Graph(
        graph_inputs,
        list(node.outputs[:1]),
        nodes=[node],
        initializers=weights,
        opset_imports={"": 23, MS: 1},
    )
    return node_flops(node, ValueSizes(graph, infer=False))


def lstm_by_loops(seq, batch, directions, gates, inputs, hidden) -> int:
    """Brute-force count: every step, sample, direction and gate does two matrix-vector products."""
    total = 0
    for _step in range(seq):
        for _sample in range(batch):
            for _direction in range(directions):
                for _gate in range(gates):
                    total += 2 * hidden * inputs + 2 * hidden * hidden
    return total


@pytest.mark.parametrize(("op", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_layers_count_every_gate_step_and_direction(op, gates, layout):
    seq, batch, features, hidden, directions = 5, 2, 3, 4, 2
    x = value("x", [batch, seq, features] if layout else [seq, batch, features])
    w = weight("W", [directions, gates * hidden, features])
    r = weight("R", [directions, gates * hidden, hidden])
    out = [seq, directions, batch, hidden] if not layout else [batch, seq, directions, hidden]
    found = count(
        op, [x, w, r], [("y", out)], hidden_size=hidden, direction="bidirectional", layout=layout
    )
    # 2 * 5 * 2 * 2 * G * 4 * (3 + 4): 1120 per gate
    assert found == lstm_by_loops(seq, batch, directions, gates, features, hidden) == 1120 * gates


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(1, 6),
    st.integers(1, 6),
    st.sampled_from([("LSTM", 4), ("GRU", 3), ("RNN", 1)]),
)
def test_recurrent_flops_match_the_loop_count(seq, batch, directions, features, hidden, kind):
    op, gates = kind
    x = value("x", [seq, batch, features])
    w = weight("W", [directions, gates * hidden, features])
    r = weight("R", [directions, gates * hidden, hidden])
    found = count(op, [x, w, r], [("y", [seq, directions, batch, hidden])], hidden_size=hidden)
    assert found == lstm_by_loops(seq, batch, directions, gates, features, hidden)


def test_quantised_convolutions_count_like_float_ones():
    x = value("x", [1, 3, 8, 8], U8)
    w = weight("w", [6, 3, 3, 3], np.uint8)
    hand = 2 * (6 * 6 * 6) * (3 * 3 * 3)  # output elements x multiply-adds per element
    assert count("ConvInteger", [x, w], [("y", [1, 6, 6, 6], I32)]) == hand == 11664
    scale, zero = weight("s", [], np.float32), weight("z", [], np.uint8)
    qlinear = [x, scale, zero, w, scale, zero, scale, zero]
    assert count("QLinearConv", qlinear, [("y", [1, 6, 6, 6], U8)]) == hand
    assert (
        count("Conv", [value("f", [1, 3, 8, 8]), weight("wf", [6, 3, 3, 3])], [("y", [1, 6, 6, 6])])
        == hand
    )


def test_quantised_matrix_products_count_their_multiply_adds():
    a = value("a", [2, 8, 16], U8)
    b = weight("b", [16, 4], np.uint8)
    hand = 2 * 2 * 8 * 4 * 16
    assert count("MatMulInteger", [a, b], [("y", [2, 8, 4], I32)]) == hand
    scale, zero = weight("s", [], np.float32), weight("z", [], np.uint8)
    assert (
        count(
            "QLinearMatMul", [a, scale, zero, b, scale, zero, scale, zero], [("y", [2, 8, 4], U8)]
        )
        == hand
    )
    f = value("f", [2, 8, 16])
    assert count("DynamicQuantizeMatMul", [f, b, scale], [("y", [2, 8, 4])], MS) == hand
    assert count("MatMulIntegerToFloat", [a, b, scale, scale], [("y", [2, 8, 4])], MS) == hand


def test_fused_attention_counts_projection_scores_and_context():
    batch, seq, hidden, heads = 2, 8, 16, 4
    x = value("x", [batch, seq, hidden])
    w, bias = weight("w", [hidden, 3 * hidden]), weight("b", [3 * hidden])
    head = hidden // heads
    projection = 2 * batch * seq * hidden * 3 * hidden
    scores = context = 2 * batch * heads * seq * seq * head
    expected = projection + scores + context  # 24576 + 4096 + 4096
    assert (
        count("Attention", [x, w, bias], [("y", [batch, seq, hidden])], MS, num_heads=heads)
        == expected
        == 32768
    )
    q8 = value("q", [batch, seq, hidden], U8)
    w8 = weight("w8", [hidden, 3 * hidden], np.uint8)
    s = weight("s", [], np.float32)
    assert (
        count(
            "QAttention", [q8, w8, bias, s, s], [("y", [batch, seq, hidden])], MS, num_heads=heads
        )
        == expected
    )


def test_multi_head_attention_counts_scores_and_context():
    q, k, v = value("q", [2, 8, 16]), value("k", [2, 10, 16]), value("v", [2, 10, 24])
    scores = 2 * 2 * 8 * 10 * 16  # every query row against every key, over the 16 query widths
    context = 2 * 2 * 8 * 10 * 24  # the weights against every value, over the 24 value widths
    assert (
        count("MultiHeadAttention", [q, k, v], [("y", [2, 8, 24])], MS, num_heads=4)
        == scores + context
    )
    packed = value("qkv", [2, 8, 4, 3, 4])  # [batch, seq, heads, 3, head_size]
    assert (
        count("MultiHeadAttention", [packed], [("y", [2, 8, 16])], MS, num_heads=4)
        == 2 * 2 * 8 * 8 * 32
    )


def test_group_query_attention_counts_past_and_new_keys():
    q, k, v = value("q", [1, 8, 32]), value("k", [1, 8, 16]), value("v", [1, 8, 16])
    past_k, past_v = value("pk", [1, 2, 5, 8]), value("pv", [1, 2, 5, 8])
    # 4 query heads of 8 against 5 past + 8 new keys, scores and context
    hand = 2 * (2 * 1 * 4 * 8 * 13 * 8)
    found = count(
        "GroupQueryAttention",
        [q, k, v, past_k, past_v],
        [("y", [1, 8, 32])],
        MS,
        num_heads=4,
        kv_num_heads=2,
    )
    assert found == hand == 13312


def test_onnx_attention_of_rank_4_and_3():
    q, k, v = value("q", [1, 4, 8, 16]), value("k", [1, 2, 10, 16]), value("v", [1, 2, 10, 16])
    hand = 2 * (2 * 1 * 4 * 8 * 10 * 16)
    assert count("Attention", [q, k, v], [("y", [1, 4, 8, 16])]) == hand == 20480
    q3, k3, v3 = value("q3", [1, 8, 64]), value("k3", [1, 10, 32]), value("v3", [1, 10, 32])
    found = count("Attention", [q3, k3, v3], [("y", [1, 8, 64])], q_num_heads=4, kv_num_heads=2)
    assert found == hand


def test_einsum_counts_its_index_space():
    a, b = value("a", [2, 3, 4]), value("b", [2, 4, 5])
    assert count("Einsum", [a, b], [("y", [2, 3, 5])], equation="bij,bjk->bik") == 2 * 2 * 3 * 4 * 5


def test_unknown_shapes_give_none_and_an_estimate_on_request():
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape([1, "seq", 3]))
    w, r = weight("W", [1, 16, 3]), weight("R", [1, 16, 4])
    node = ir.Node(
        "", "LSTM", [x, w, r], attributes=convert_attributes({"hidden_size": 4, "layout": 1})
    )
    graph = ir.Graph(
        [x], [node.outputs[0]], nodes=[node], initializers=[w, r], opset_imports={"": 21}
    )
    sizes = ValueSizes(graph)
    assert node_flops(node, sizes) is None  # seq is unbound
    estimate = node_flops(node, sizes, estimate=True)
    seq = sizes.shapes.estimate(x)[1]
    assert estimate == 2 * seq * (16 * 3 + 16 * 4)


@settings(max_examples=40, deadline=None)
@given(random_graphs(), st.integers(2, 4))
def test_flops_add_up_over_stages(graph, n):
    memory = MemoryModel(analyse_cut_points(graph, relaxed=True, side_limit_bytes=64))
    sizes = memory.sizes
    # The nodes stages run (replicable ones, recomputed from weights and inputs, are not cut)
    whole = sum(node_flops(node, sizes) or 0 for node in memory.analysis.order)
    assert int(memory.flops([0], [memory.num_segments])[0]) == whole
    try:
        found = partition(memory, n)
    except Exception:  # noqa: BLE001 - too few cuts: nothing to add up
        return
    assert sum(found.flops) == whole
    for balance in ("memory", "compute"):
        assert sum(partition(memory, n, balance=balance).flops) == whole
