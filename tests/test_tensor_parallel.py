"""Tensor-parallel regions: the rules, the region finder, and the numeric oracle on each region."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tp_corpus_report import CORPUS, feeds_for
from tp_oracle import check_region, whole_values

from onnx_ir_multidevice.analysis import sharding
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    PARTIAL,
    REPLICATED,
    Partial,
    ShardingContext,
    Split,
    propagate,
)
from onnx_ir_multidevice.analysis.tensor_parallel import find_regions
from onnx_ir_multidevice.testing.zoo import synthetic_transformer

F32 = ir.DataType.FLOAT
DIMS = {"batch": 2, "seq": 5}

# Ops that are linear in a partial-sum input: the only ones a Partial may reach in a region.
LINEAR_OPS = {
    "Add", "Sub", "Mul", "Div", "Neg", "Identity", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Expand", "Slice", "Split", "Concat", "ReduceSum", "ReduceMean", "Shape",
}  # fmt: skip


def assert_no_partial_reaches_nonlinear(regions) -> None:
    for region in regions:
        for node in region.nodes:
            for state in region.input_states[node]:
                if isinstance(state, Partial):
                    assert node.op_type in LINEAR_OPS, (
                        f"{node.name} ({node.op_type}) reads a Partial"
                    )


# ---------------------------------------------------------------------------------------------
# Corpus exports and the synthetic transformer: every region confirmed by the oracle
# ---------------------------------------------------------------------------------------------

# model -> least regions expected at degree 2 and 4 (attention blocks and MLPs found).
CORPUS_REGIONS = {
    "gpt2_dynamo": (4, 4),
    "llama_gqa_dynamo": (4, 2),  # 2 KV heads: attention is not split 4 ways
    "bert_dynamo": (4, 4),
    "vit_dynamo": (4, 4),
    # TorchScript: Reshape targets from Shape of split values (LocalShape data), weights
    # shared through Identity; as many regions as their dynamo twins (ALBERT shares layers).
    "bert_torchscript": (4, 4),
    "vit_torchscript": (4, 4),
    "albert_torchscript": (8, 8),
    "gpt2_torchscript": (4, 4),
}


@pytest.mark.parametrize("name", sorted(CORPUS_REGIONS))
def test_corpus_regions_are_confirmed_by_the_oracle(name: str):
    model = ir.load(CORPUS / f"{name}.onnx")
    whole = whole_values(model, feeds_for(model, DIMS))
    for degree, least in zip((2, 4), CORPUS_REGIONS[name], strict=True):
        regions = find_regions(model, degree, dims=DIMS)
        assert len(regions) >= least
        assert_no_partial_reaches_nonlinear(regions)
        for region in regions:
            check_region(model, region, whole)
            assert all(c.kind == "AllReduce" for c in region.collectives)


@pytest.mark.parametrize("degree", [2, 4])
def test_synthetic_transformer_one_region_per_attention_and_mlp(degree: int, monkeypatch):
    monkeypatch.setattr(sharding, "VOCAB_PARALLEL_MIN_BYTES", 0)  # the tables here are small
    model = synthetic_transformer(2, hidden=32, heads=4, vocab=64)
    regions = find_regions(model, degree, dims=DIMS)
    # The position embedding is vocabulary-parallel; the token embedding, tied with the LM
    # head (a Transpose reads it whole), stays replicated.
    lookups = [r for r in regions if r.vocab_masks]
    assert [r.nodes[0].name for r in lookups] == ["wpe"]
    assert len(regions) == 4 + len(lookups)
    for region in regions:
        assert [c.kind for c in region.collectives] == ["AllReduce"]
        assert len(region.weight_slices) >= (1 if region.vocab_masks else 2)
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(0, 64, (2, 5)).astype(np.int64),
        "attention_mask": np.ones((2, 5), np.int64),
    }
    whole = whole_values(model, feeds)
    for region in regions:
        check_region(model, region, whole)


def test_gpt2_fused_qkv_is_split_in_three_blocks():
    model = ir.load(CORPUS / "gpt2_dynamo.onnx")
    attention = next(r for r in find_regions(model, 2, dims=DIMS) if not r.vocab_masks)
    qkv = attention.weight_slices[0]
    assert qkv.value.name.endswith("c_attn.weight")
    assert (qkv.axis, qkv.blocks) == (1, 3)
    assert attention.weight_slices[-1].axis == 0  # c_proj: row-parallel
    assert "AllReduce" in attention.summary()


# ---------------------------------------------------------------------------------------------
# Random small MLP and attention graphs (hypothesis): oracle, and the negative property
# ---------------------------------------------------------------------------------------------

AFTER_ROW = ["Relu", "Softmax", "LayerNormalization", "AddBias", "Residual", "Scale", "Tanh"]


def _const(name: str, array: np.ndarray) -> ir.Value:
    dtype = ir.TensorType(ir.DataType.from_numpy(array.dtype))
    tensor = ir.tensor(array, name=name)
    return ir.Value(name=name, type=dtype, shape=ir.Shape(array.shape), const_value=tensor)


def random_block(
    seed: int, hidden: int, inner: int, activation: str, after: str, bias: bool, attention: bool
) -> ir.Model:
    """x -> [attention or MLP: column-parallel, activation, row-parallel] -> ``after`` -> y."""
    rng = np.random.default_rng(seed)
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape([2, 3, hidden]))
    nodes: list[ir.Node] = []
    inits: list[ir.Value] = []
    count = 0

    def op(op_type: str, *inputs: ir.Value, **attributes) -> ir.Value:
        nonlocal count
        count += 1
        node = ir.Node(
            "",
            op_type,
            inputs,
            attributes=ir.convenience.convert_attributes(attributes),
            name=f"n{count}",
        )
        node.outputs[0].name = f"v{count}"
        nodes.append(node)
        return node.outputs[0]

    def weight(name: str, shape: tuple[int, ...]) -> ir.Value:
        value = _const(name, rng.standard_normal(shape).astype(np.float32) / 4)
        inits.append(value)
        return value

    def linear(name: str, h: ir.Value, n_in: int, n_out: int) -> ir.Value:
        h = op("MatMul", h, weight(f"{name}.w", (n_in, n_out)))
        return op("Add", h, weight(f"{name}.b", (n_out,))) if bias else h

    if attention:
        heads, size = 4, inner // 4
        shape = _const("heads_shape", np.array([0, 0, heads, size], np.int64))
        merge = _const("merge_shape", np.array([0, 0, inner], np.int64))
        inits += [shape, merge]
        q, k, v = (
            op("Transpose", op("Reshape", linear(n, x, hidden, inner), shape), perm=[0, 2, 1, 3])
            for n in "qkv"
        )
        scores = op("MatMul", q, op("Transpose", k, perm=[0, 1, 3, 2]))
        probs = op("Softmax", op("Mul", scores, _scalar(inits, "scale", 0.5)), axis=-1)
        h = op("Reshape", op("Transpose", op("MatMul", probs, v), perm=[0, 2, 1, 3]), merge)
    else:
        h = op(activation, linear("up", x, hidden, inner))
    h = linear("down", h, inner, hidden)
    if after == "AddBias":
        h = op("Add", h, weight("post.b", (hidden,)))
    elif after == "Residual":
        h = op("Add", h, x)
    elif after == "Scale":
        h = op("Mul", h, _scalar(inits, "post.s", 2.0))
    elif after == "LayerNormalization":
        h = op(after, h, weight("ln.w", (hidden,)), weight("ln.b", (hidden,)), axis=-1)
    else:
        h = op(after, h)
    y = op("Relu", h)
    graph = ir.Graph([x], [y], nodes=nodes, initializers=inits, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def _scalar(inits: list[ir.Value], name: str, number: float) -> ir.Value:
    value = _const(name, np.array(number, np.float32))
    inits.append(value)
    return value


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 1000),
    hidden=st.sampled_from([8, 12, 16]),
    inner=st.sampled_from([8, 16, 24]),
    activation=st.sampled_from(["Relu", "Tanh", "Sigmoid", "Erf", "Identity"]),
    after=st.sampled_from(AFTER_ROW),
    bias=st.booleans(),
    attention=st.booleans(),
    degree=st.sampled_from([2, 4]),
)
def test_random_blocks_oracle(seed, hidden, inner, activation, after, bias, attention, degree):
    model = random_block(seed, hidden, inner, activation, after, bias, attention)
    regions = find_regions(model, degree)
    assert len(regions) == (1 if inner % degree == 0 else 0)
    assert_no_partial_reaches_nonlinear(regions)
    x = np.random.default_rng(seed).standard_normal((2, 3, hidden)).astype(np.float32)
    whole = whole_values(model, {"x": x})
    for region in regions:
        check_region(model, region, whole)
        (collective,) = region.collectives
        assert collective.kind == "AllReduce"
        reader = {u.node.op_type for u in collective.value.uses()}
        # The reduce comes before the first op not linear in the partial sum, never after.
        if after in ("Relu", "Softmax", "LayerNormalization", "Residual", "Tanh"):
            assert collective.value.producer().op_type in ("Add", "MatMul")
            assert reader & {after, "Add", "Relu", "Softmax", "LayerNormalization", "Tanh"}
        else:  # a bias (added once) and a scale are linear: the reduce moves past them
            assert reader == {"Relu"}


# ---------------------------------------------------------------------------------------------
# Single rules
# ---------------------------------------------------------------------------------------------


def _context(model: ir.Model, degree: int = 2) -> ShardingContext:
    return ShardingContext(model.graph, degree, ValueShapes(model.graph, {}))


def _node(model: ir.Model, op_type: str, which: int = 0) -> ir.Node:
    return [n for n in model.graph if n.op_type == op_type][which]


def test_rules_softmax_over_the_split_axis_has_no_rule():
    model = random_block(0, 8, 8, "Relu", "Softmax", False, True)
    context = _context(model)
    softmax = _node(model, "Softmax")
    assert propagate(context, softmax, [Split(-3)]).outputs == (Split(-3),)  # type: ignore[union-attr]
    assert propagate(context, softmax, [Split(-1)]) is None
    assert propagate(context, softmax, [PARTIAL]) is None


def test_rules_reshape_transpose_and_matmul_per_head():
    model = random_block(0, 8, 16, "Relu", "Relu", False, True)
    context = _context(model)
    reshape = _node(model, "Reshape")
    result = propagate(context, reshape, [Split(-1), REPLICATED])
    assert result is not None and result.outputs == (Split(-2),)
    (rewrite,) = result.shape_rewrites
    assert (rewrite.position, rewrite.old, rewrite.new, rewrite.constant) == (2, 4, 2, True)
    transpose = _node(model, "Transpose")
    assert propagate(context, transpose, [Split(-2)]).outputs == (Split(-3),)  # type: ignore[union-attr]
    scores = _node(model, "MatMul", 3)
    assert propagate(context, scores, [Split(-3), Split(-3)]).outputs == (Split(-3),)  # type: ignore[union-attr]
    assert propagate(context, scores, [Split(-3), REPLICATED]) is None  # K has every head


def test_rules_partial_plus_activation_needs_the_reduce_first():
    model = random_block(0, 8, 8, "Relu", "Residual", True, False)
    context = _context(model)
    residual = [n for n in model.graph if n.op_type == "Add"][-1]
    assert propagate(context, residual, [PARTIAL, REPLICATED]) is None
    bias = [n for n in model.graph if n.op_type == "Add"][1]
    result = propagate(context, bias, [PARTIAL, REPLICATED])
    assert result is not None and result.outputs == (PARTIAL,)
    assert [(b.node, b.input_index) for b in result.bias_once] == [(bias, 1)]


def test_degree_below_two_is_refused():
    with pytest.raises(ValueError, match="degree"):
        find_regions(synthetic_transformer(1), 1)


# ---------------------------------------------------------------------------------------------
# Fused attention (com.microsoft MultiHeadAttention, run by onnxruntime)
# ---------------------------------------------------------------------------------------------


def _mha_model(heads: int = 4, hidden: int = 16) -> ir.Model:
    rng = np.random.default_rng(1)
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape([2, 3, hidden]))
    inits = []
    nodes = []
    projections = []
    for name in "qkv":
        w = _const(f"{name}.w", rng.standard_normal((hidden, hidden)).astype(np.float32) / 4)
        inits.append(w)
        node = ir.Node("", "MatMul", [x, w], name=f"{name}_proj")
        node.outputs[0].name = name
        nodes.append(node)
        projections.append(node.outputs[0])
    mha = ir.Node("com.microsoft", "MultiHeadAttention", projections, name="mha",
                  attributes=[ir.AttrInt64("num_heads", heads)])  # fmt: skip
    mha.outputs[0].name = "attended"
    wo = _const("o.w", rng.standard_normal((hidden, hidden)).astype(np.float32) / 4)
    inits.append(wo)
    out = ir.Node("", "MatMul", [mha.outputs[0], wo], name="o_proj")
    out.outputs[0].name = "projected"
    relu = ir.Node("", "Relu", [out.outputs[0]], name="relu")
    relu.outputs[0].name = "y"
    relu.outputs[0].type = ir.TensorType(F32)
    nodes += [mha, out, relu]
    graph = ir.Graph([x], [relu.outputs[0]], nodes=nodes, initializers=inits,
                     opset_imports={"": 18, "com.microsoft": 1})  # fmt: skip
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("degree", [2, 4])
def test_multi_head_attention_split_by_heads(degree: int):
    model = _mha_model()
    (region,) = find_regions(model, degree)
    assert [n.name for n in region.nodes] == ["q_proj", "k_proj", "v_proj", "mha", "o_proj"]
    (rewrite,) = region.attribute_rewrites
    assert (rewrite.name, rewrite.old, rewrite.new) == ("num_heads", 4, 4 // degree)
    x = np.random.default_rng(0).standard_normal((2, 3, 16)).astype(np.float32)
    whole = whole_values(model, {"x": x}, engine="ort")
    check_region(model, region, whole, engine="ort")


def test_multi_head_attention_heads_not_divisible_stays_replicated():
    assert find_regions(_mha_model(heads=2), 4) == []
