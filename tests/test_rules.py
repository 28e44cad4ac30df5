"""Per-operator rules in registries: the registry itself, the shape-data rules against onnx's
reference evaluator, and the FLOPs rules each reachable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper
from onnx.reference import ReferenceEvaluator

from onnx_ir_multidevice.analysis import shape_data, shape_propagation
from onnx_ir_multidevice.analysis.element_types import RULES as ELEMENT_TYPE_RULES
from onnx_ir_multidevice.analysis.ops import SHAPE_ARITHMETIC_OPS
from onnx_ir_multidevice.analysis.precision import HALF_RULES, arithmetic_family
from onnx_ir_multidevice.analysis.rules import ANY_DOMAIN, RuleRegistry
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.tensor_classes import HEAVY_OPS
from onnx_ir_multidevice.planner import flops

# -- the registry ---------------------------------------------------------------------------


def test_registry_finds_rules_by_domain_and_op_type():
    rules: RuleRegistry[str] = RuleRegistry("test")

    @rules.register("Add", "Sub")
    def _binary() -> None: ...

    rules.add("ms", "FusedMatMul", domain="com.microsoft")
    rules.add("any", "MatMul", domain=ANY_DOMAIN)
    rules.add("onnx", "MatMul")
    assert rules.get("", "Add") is _binary and rules.get("ai.onnx", "Sub") is _binary
    assert rules.get("com.microsoft", "Add") is None and rules.get("", "Mul") is None
    assert rules.get("com.microsoft", "FusedMatMul") == "ms"
    assert rules.get("", "FusedMatMul") is None
    assert rules.get("", "MatMul") == "onnx"  # its own domain's rule first
    assert rules.get("custom", "MatMul") == "any"
    assert ("ai.onnx", "Add") in rules and ("", "Mul") not in rules
    assert sorted(rules) == [
        ("", "Add"),
        ("", "MatMul"),
        ("", "Sub"),
        ("*", "MatMul"),
        ("com.microsoft", "FusedMatMul"),
    ]
    assert len(rules) == 5
    assert rules.op_types() == {"Add", "Sub", "MatMul", "FusedMatMul"}
    rules.add("late", "Mul")  # answers remembered by get are forgotten when a rule comes
    assert rules.get("", "Mul") == "late" and rules.get("ai.onnx", "Mul") == "late"
    rules.add("custom", "MatMul", domain="custom")
    assert rules.get("custom", "MatMul") == "custom"
    with pytest.raises(ValueError, match="two test rules for 'Add'"):
        rules.add("again", "Add", domain="ai.onnx")
    with pytest.raises(ValueError, match="any domain"):
        rules.add("again", "MatMul", domain=ANY_DOMAIN)


# -- shape data -----------------------------------------------------------------------------

# Every op the if-chain of ``shape_data._evaluate`` computed before it became rules.
OLD_CHAIN_OPS = {
    "Constant", "Shape", "Size", "Reshape", "Add", "Sub", "Mul", "Div", "Pow", "Equal",
    "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Neg", "Abs",
    "Floor", "Ceil", "Sqrt", "Not", "Identity", "Sign", "Reciprocal", "Relu", "Mod", "Min",
    "Max", "Cast", "Gather", "Concat", "Unsqueeze", "Squeeze", "Slice", "Range",
    "ConstantOfShape", "Expand", "Where", "Transpose", "Tile", "ReduceProd", "ReduceSum",
    "ReduceMax", "ReduceMin",
}  # fmt: skip


def test_every_op_of_the_old_chain_has_a_shape_data_rule():
    registered = {op for domain, op in shape_data.RULES if domain == ""}
    assert registered == OLD_CHAIN_OPS
    for op in OLD_CHAIN_OPS:
        assert shape_data.RULES.get("ai.onnx", op) is not None, op
        assert shape_data.RULES.get("com.microsoft", op) is None, op


_Case = tuple[list[np.ndarray | None], dict[str, Any]]
"""Inputs (``None``: omitted) and attributes of one node."""

_SMALL = st.integers(-5, 5)


def _shape(draw: st.DrawFn, rank: tuple[int, int] = (0, 3)) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(1, 3), min_size=rank[0], max_size=rank[1])))


def _ints(
    draw: st.DrawFn, shape: tuple[int, ...], values: st.SearchStrategy[int] = _SMALL
) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    found = draw(st.lists(values, min_size=count, max_size=count))
    return np.asarray(found, dtype=np.int64).reshape(shape)


def _bools(draw: st.DrawFn, shape: tuple[int, ...]) -> np.ndarray:
    return _ints(draw, shape, st.integers(0, 1)).astype(bool)


def _pair(draw: st.DrawFn, b_values: st.SearchStrategy[int] = _SMALL) -> _Case:
    shape = _shape(draw)
    b_shape = draw(st.sampled_from([shape, (), shape[-1:]]))
    return [_ints(draw, shape), _ints(draw, b_shape, b_values)], {}


_NONZERO = st.integers(-5, 5).filter(bool)


@st.composite
def _case(draw: st.DrawFn, op: str) -> _Case:  # noqa: C901, PLR0911, PLR0912 (a test table)
    if op in ("Add", "Sub", "Mul", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        return _pair(draw)
    if op == "Div":
        return _pair(draw, _NONZERO)
    if op == "Mod":
        inputs, _ = _pair(draw, _NONZERO)
        return inputs, {"fmod": draw(st.integers(0, 1))}
    if op == "Pow":
        return _pair(draw, st.integers(0, 3))
    if op in ("And", "Or", "Xor"):
        shape = _shape(draw)
        return [_bools(draw, shape), _bools(draw, shape)], {}
    if op == "Not":
        return [_bools(draw, _shape(draw))], {}
    if op in ("Neg", "Abs", "Sign", "Relu", "Identity"):
        return [_ints(draw, _shape(draw))], {}
    if op in ("Floor", "Ceil"):
        return [(_ints(draw, _shape(draw)) / 2).astype(np.float32)], {}
    if op == "Sqrt":
        return [_ints(draw, _shape(draw), st.integers(0, 9)).astype(np.float32)], {}
    if op == "Reciprocal":
        return [_ints(draw, _shape(draw), _NONZERO).astype(np.float32)], {}
    if op in ("Min", "Max"):
        shape = _shape(draw)
        return [_ints(draw, shape) for _ in range(draw(st.integers(1, 3)))], {}
    if op == "Cast":
        to = draw(st.sampled_from([onnx.TensorProto.INT32, onnx.TensorProto.FLOAT]))
        return [_ints(draw, _shape(draw))], {"to": to}
    if op == "Where":
        shape = _shape(draw)
        return [_bools(draw, shape), _ints(draw, shape), _ints(draw, shape)], {}
    if op in ("Shape", "Size"):
        inputs: list[np.ndarray | None] = [_ints(draw, _shape(draw))]
        if op == "Size" or draw(st.booleans()):
            return inputs, {}
        # within [-rank, rank]: onnx's reference does not clamp an end below -rank (the spec
        # does, as Python slicing, and as this package)
        bound = st.integers(-len(inputs[0].shape), len(inputs[0].shape))  # type: ignore[union-attr]
        return inputs, {"start": draw(bound), "end": draw(bound)}
    if op == "Constant":
        kind = draw(st.sampled_from(["value", "value_int", "value_ints"]))
        if kind == "value_int":
            return [], {kind: draw(_SMALL)}
        if kind == "value_ints":
            return [], {kind: draw(st.lists(_SMALL, min_size=1, max_size=4))}
        return [], {kind: onnx.numpy_helper.from_array(_ints(draw, _shape(draw)))}
    if op == "Reshape":
        data = _ints(draw, (2, 3, 2))
        target = draw(st.sampled_from([[0, -1], [-1], [2, 0, 2], [3, 4], [0, 3, 2], [12, 1]]))
        return [data, np.asarray(target, np.int64)], {}
    if op == "Gather":
        data = _ints(draw, _shape(draw, (1, 3)))
        axis = draw(st.integers(-data.ndim, data.ndim - 1))
        size = data.shape[axis]
        indices = _ints(draw, _shape(draw, (0, 2)), st.integers(-size, size - 1))
        return [data, indices], {"axis": axis}
    if op == "Concat":
        shape = _shape(draw, (1, 3))
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        parts = []
        for _ in range(draw(st.integers(1, 3))):
            part = list(shape)
            part[axis] = draw(st.integers(0, 3))
            parts.append(_ints(draw, tuple(part)))
        return parts, {"axis": axis}
    if op == "Squeeze":
        shape = _shape(draw, (1, 3))
        data = _ints(draw, tuple(draw(st.sampled_from([1, d])) for d in shape))
        ones = [i for i, d in enumerate(data.shape) if d == 1]
        if not ones or draw(st.booleans()):
            return [data], {}
        axes = draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
        axes = [a - data.ndim if draw(st.booleans()) else a for a in axes]
        return [data, np.asarray(axes, np.int64)], {}
    if op == "Unsqueeze":
        data = _ints(draw, _shape(draw))
        rank = data.ndim + draw(st.integers(1, 2))
        axes = draw(st.lists(st.integers(0, rank - 1), min_size=rank - data.ndim,
                             max_size=rank - data.ndim, unique=True))  # fmt: skip
        axes = [a - rank if draw(st.booleans()) else a for a in axes]
        return [data, np.asarray(axes, np.int64)], {}
    if op == "Slice":
        data = _ints(draw, _shape(draw, (1, 3)))
        axes = draw(st.lists(st.integers(0, data.ndim - 1), min_size=1, unique=True))
        n = len(axes)

        def ints(values: st.SearchStrategy[int]) -> np.ndarray:
            return np.asarray(draw(st.lists(values, min_size=n, max_size=n)), np.int64)

        inputs = [data, ints(_SMALL), ints(_SMALL)]
        if draw(st.booleans()):
            inputs.append(np.asarray([a - data.ndim if a % 2 else a for a in axes], np.int64))
            if draw(st.booleans()):
                inputs.append(ints(_NONZERO))
        elif draw(st.booleans()):  # axes omitted, steps given
            inputs[1:] = [inputs[1][:1], inputs[2][:1], None, ints(_NONZERO)[:1]]
        return inputs, {}
    if op == "Range":
        start, limit, delta = draw(_SMALL), draw(_SMALL), draw(_NONZERO)
        return [np.asarray(x, np.int64) for x in (start, limit, delta)], {}
    if op == "ConstantOfShape":
        shape = np.asarray(draw(st.lists(st.integers(0, 3), max_size=3)), np.int64)
        if draw(st.booleans()):
            return [shape], {}
        fill = onnx.numpy_helper.from_array(np.asarray([draw(_SMALL)], np.int64))
        return [shape], {"value": fill}
    if op == "Expand":
        shape = _shape(draw, (1, 3))
        data = _ints(draw, tuple(draw(st.sampled_from([1, d])) for d in shape))
        target = [d if draw(st.booleans()) else 1 for d in shape]
        target = [draw(st.integers(1, 2))] * draw(st.integers(0, 1)) + target
        return [data, np.asarray(target, np.int64)], {}
    if op == "Transpose":
        data = _ints(draw, _shape(draw, (1, 3)))
        if draw(st.booleans()):
            return [data], {}
        return [data], {"perm": draw(st.permutations(range(data.ndim)))}
    if op == "Tile":
        data = _ints(draw, _shape(draw, (1, 3)))
        repeats = draw(st.lists(st.integers(0, 2), min_size=data.ndim, max_size=data.ndim))
        return [data, np.asarray(repeats, np.int64)], {}
    if op.startswith("Reduce"):
        data = _ints(draw, _shape(draw, (1, 3)))
        keep = {"keepdims": draw(st.integers(0, 1))}
        if draw(st.booleans()):
            return [data], keep
        axes = draw(st.lists(st.integers(-data.ndim, data.ndim - 1), min_size=1, max_size=1))
        return [data, np.asarray(axes, np.int64)], keep
    raise AssertionError(f"no test case for {op}")


def _model(op: str, inputs: list[np.ndarray | None], attributes: dict[str, Any]) -> onnx.ModelProto:
    names = ["" if x is None else f"x{i}" for i, x in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape)
            )
            for name, x in zip(names, inputs, strict=True)
            if x is not None
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", sorted(OLD_CHAIN_OPS))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_shape_data_rules_compute_what_onnx_reference_computes(op, data):
    inputs, attributes = data.draw(_case(op))
    proto = _model(op, inputs, attributes)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    (expected,) = ReferenceEvaluator(proto).run(None, feeds)
    graph = ir.serde.deserialize_model(proto).graph
    known = {value: feeds[value.name] for value in graph.inputs}
    shape_of: Callable[[ir.Value], tuple[int, ...] | None] = lambda v: (  # noqa: E731
        known[v].shape if v in known else None
    )
    computed = shape_data.evaluate_cone(list(graph), shape_of, known)
    (found,) = computed.values()
    expected = np.asarray(expected)
    assert found.dtype == expected.dtype, (found.dtype, expected.dtype)
    np.testing.assert_array_equal(found, expected, strict=True)


# -- FLOPs ----------------------------------------------------------------------------------


def _flops_node(domain: str, op_type: str) -> tuple[ir.Node, ValueSizes]:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    y = ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    node = ir.Node(domain, op_type, [x], outputs=[y], name="n")
    graph = ir.Graph([x], [y], nodes=[node], opset_imports={"": 21})
    return node, ValueSizes(graph, infer=False)


def test_every_flops_rule_is_reached_by_node_flops_and_nodes_flops(monkeypatch):
    keys = list(flops.RULES)
    assert ("", "Attention") in keys and (ANY_DOMAIN, "Attention") in keys
    assert {op for _, op in keys} == HEAVY_OPS - {"GatherBlockQuantized", "MoE", "QMoE"}
    for i, (domain, op_type) in enumerate(keys):
        sentinel = 10**9 + i

        def spy(node: ir.Node, shape: object, sentinel: int = sentinel) -> int:
            return sentinel

        with monkeypatch.context() as patch:
            patch.setattr(flops.RULES, "_resolved", {})  # what get remembers, restored after
            if domain == ANY_DOMAIN:
                patch.setitem(flops.RULES._any_domain, op_type, spy)
                domains = ["com.microsoft", "custom"]
            else:
                patch.setitem(flops.RULES._rules, (domain, op_type), spy)
                patch.setitem(flops.RULES._rules, ("ai.onnx", op_type), spy)
                domains = [domain, "ai.onnx"]
            for node_domain in domains:
                node, sizes = _flops_node(node_domain, op_type)
                assert flops.node_flops(node, sizes) == sentinel, (node_domain, op_type)
                assert flops.nodes_flops([node], sizes) == [sentinel], (node_domain, op_type)
    with monkeypatch.context() as patch:  # a rule registered late is reached in bulk too
        patch.setattr(flops, "RULES", RuleRegistry[flops.FlopsRule]("FLOPs"))
        flops.RULES.add(lambda node, shape: 7, "MyOp", domain="my.domain")
        node, sizes = _flops_node("my.domain", "MyOp")
        assert flops.nodes_flops([node], sizes) == [7] == [flops.node_flops(node, sizes)]
    node, sizes = _flops_node("", "Relu")  # no rule: element-wise, in bulk
    assert flops.RULES.get("", "Relu") is None
    assert flops.nodes_flops([node], sizes) == [6] == [flops.node_flops(node, sizes)]


# -- element types --------------------------------------------------------------------------

# Every ``(domain, op_type)`` of the table ELEMENT_TYPE_RULES was before it became a registry.
OLD_ELEMENT_TYPE_KEYS = {
    *(
        ("", op)
        for op in [
            "Cast",
            "Constant",
            "ConstantOfShape",
            "QuantizeLinear",
            "DequantizeLinear",
            "EyeLike",
            "RandomNormal",
            "RandomUniform",
            "RandomNormalLike",
            "RandomUniformLike",
            "Bernoulli",
            "Multinomial",
            "SimplifiedLayerNormalization",
        ]
    ),
    *(
        ("com.microsoft", op)
        for op in [
            "QuantizeLinear",
            "DequantizeLinear",
            "QLinearConv",
            "QLinearConcat",
            "QGemm",
            "MatMulIntegerToFloat",
            "DynamicQuantizeMatMul",
            "MatMulNBits",
            "SkipLayerNormalization",
            "SkipSimplifiedLayerNormalization",
            "SimplifiedLayerNormalization",
            "Attention",
            "MultiHeadAttention",
            "GroupQueryAttention",
            "QLinearAdd",
            "QLinearMul",
            "QLinearSigmoid",
            "QLinearLeakyRelu",
            "QLinearSoftmax",
            "QLinearGlobalAveragePool",
            "QLinearAveragePool",
            "QLinearReduceMean",
            "Gelu",
            "FastGelu",
            "BiasGelu",
            "QuickGelu",
            "FusedConv",
            "FusedMatMul",
            "FusedGemm",
            "BiasAdd",
            "RotaryEmbedding",
            "NhwcConv",
        ]
    ),
}


def test_element_type_rules_keep_every_op_of_the_old_table():
    assert set(ELEMENT_TYPE_RULES) == OLD_ELEMENT_TYPE_KEYS
    assert ELEMENT_TYPE_RULES.get("", "Cast") is ELEMENT_TYPE_RULES.get("ai.onnx", "Cast")
    assert ELEMENT_TYPE_RULES.get("com.microsoft", "Cast") is None


# -- precision ------------------------------------------------------------------------------


def test_half_precision_rules_are_found_in_every_domain():
    assert set(HALF_RULES) == {(ANY_DOMAIN, "Cast"), (ANY_DOMAIN, "Constant")}
    for domain in ("", "ai.onnx", "custom"):
        for to, family in ((ir.DataType.FLOAT16, "fp16"), (ir.DataType.DOUBLE, "fp32")):
            x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
            node = ir.Node(domain, "Cast", [x], [ir.AttrInt64("to", to)], name="c")
            graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 21})
            assert arithmetic_family(graph) == family, (domain, to)
    half = ir.tensor(np.zeros(2, np.float16))
    node = ir.Node("", "Constant", [], [ir.AttrTensor("value", half)], name="k")
    graph = ir.Graph([], node.outputs, nodes=[node], opset_imports={"": 21})
    assert arithmetic_family(graph) == "fp16"


# -- shape propagation ----------------------------------------------------------------------

# Every op of ``shape_propagation._RULES`` before it became a registry (``Constant`` was a
# special case of the walk).
OLD_PROPAGATION_OPS = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "BitShift", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Relu", "Erf", "Tanh",
    "Sigmoid", "Exp", "Log", "Sqrt", "Neg", "Abs", "Identity", "Softmax", "LogSoftmax",
    "Reciprocal", "Floor", "Ceil", "Sin", "Cos", "Not", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Elu", "Selu", "Softplus", "Clip", "Sign", "Round", "InstanceNormalization",
    "Mish", "Celu", "ThresholdedRelu", "Hardmax", "Max", "Min", "Sum", "Mean", "Where",
    "IsNaN", "IsInf", "Cast", "Dropout", "LayerNormalization", "BatchNormalization", "MatMul",
    "Gemm", "Transpose", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Concat", "Shape",
    "Size", "Gather", "Range", "ConstantOfShape", "Expand", "Slice", "ReduceMean", "ReduceSum",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "Constant",
}  # fmt: skip


def test_every_op_of_the_old_table_has_a_propagation_rule():
    registered = {op for domain, op in shape_propagation.RULES if domain == ""}
    assert registered == OLD_PROPAGATION_OPS
    for op in OLD_PROPAGATION_OPS:
        assert shape_propagation.RULES.get("ai.onnx", op) is not None, op
        assert shape_propagation.RULES.get("com.microsoft", op) is None, op


def test_both_shape_evaluators_have_a_rule_for_every_shape_arithmetic_op():
    for op in SHAPE_ARITHMETIC_OPS:
        assert shape_data.RULES.get("", op) is not None, op
        assert shape_propagation.RULES.get("", op) is not None, op


def _propagated(graph: ir.Graph, inputs: dict) -> dict[str, Any] | None:
    """The record of every node output of ``graph`` by name, or None where propagation gives up."""
    propagation = shape_propagation.Propagation(inputs)
    if not propagation.run(list(graph)):
        return None
    return {v.name: propagation._known[v] for node in graph for v in node.outputs}


@pytest.mark.parametrize("op", sorted(SHAPE_ARITHMETIC_OPS))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_propagation_rules_compute_what_onnx_reference_computes(op, data):
    """On static inputs (constants), the dtype, dims and (when carried) values of the output."""
    inputs, attributes = data.draw(_case(op))
    proto = _model(op, inputs, attributes)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    (expected,) = ReferenceEvaluator(proto).run(None, feeds)
    expected = np.asarray(expected)
    graph = ir.serde.deserialize_model(proto).graph
    for value in graph.inputs:
        value.const_value = ir.tensor(feeds[value.name], name=value.name)
    found = _propagated(graph, {})
    small_int_vectors = all(
        x.ndim <= 1 and x.size <= 64 and x.dtype == np.int64 for x in feeds.values()
    )
    if found is None:
        # Gives up only on what it does not cover: a scalar Constant attribute.
        assert op == "Constant" and "value" not in attributes, (op, attributes)
        return
    record = found["y"]
    assert record.dims == expected.shape
    assert record.dtype == ir.DataType.from_numpy(expected.dtype)
    if record.data is not None:
        assert list(record.data) == expected.reshape(-1).tolist()
    elif small_int_vectors and expected.ndim <= 1 and op not in ("Cast", "Size", "Constant"):
        # Values are carried for every op here but Max and Min of other than two inputs.
        assert op in ("Max", "Min") and len(feeds) != 2, f"{op} of small int vectors: no values"


def _shape_arithmetic_model(scale: int) -> onnx.ModelProto:
    """What exporters write around a Reshape: Shape -> Gather/Slice -> arithmetic -> Concat."""
    i64 = onnx.TensorProto.INT64

    def const(name: str, values: list[int]) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, i64, [len(values)], values)
        )

    nodes = [
        const("zero", [0]), const("one", [1]), const("two", [2]),
        const("scale", [scale]), const("minus", [-1]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["x"], ["size"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Slice", ["shape", "zero", "two"], ["lead"]),
        helper.make_node("Mul", ["seq", "scale"], ["seq_scaled"]),
        helper.make_node("Div", ["seq_scaled", "two"], ["seq_half"]),
        helper.make_node("Sub", ["seq_half", "one"], ["seq_less"]),
        helper.make_node("Add", ["lead", "seq"], ["lead_plus"]),
        helper.make_node("Max", ["seq_less", "one"], ["at_least_one"]),
        helper.make_node("Min", ["lead", "seq"], ["lead_min"]),
        helper.make_node("Squeeze", ["seq", "zero"], ["seq_scalar"]),
        helper.make_node("Unsqueeze", ["seq_scalar", "zero"], ["seq_again"]),
        helper.make_node("Identity", ["seq_again"], ["seq_same"]),
        helper.make_node("Cast", ["seq_same"], ["seq_i32"], to=onnx.TensorProto.INT32),
        helper.make_node("Concat", ["minus", "seq_same", "at_least_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["lead_plus", "minus"], ["flat"]),
    ]  # fmt: skip
    outputs = [n.output[0] for n in nodes[5:]]
    graph = helper.make_graph(
        nodes,
        "shape_arithmetic",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None) for name in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@settings(max_examples=40, deadline=None)
@given(
    batch=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    seq=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    scale=st.integers(-3, 3),
)
def test_propagated_shape_arithmetic_is_onnx_reference_at_both_bindings(batch, seq, scale):
    """Dual values (probe, doubled) of shape arithmetic: each side is what onnx computes."""
    proto = _shape_arithmetic_model(scale)
    graph = ir.serde.deserialize_model(proto).graph
    (x,) = graph.inputs

    def dual(pair: tuple[int, int]) -> Any:
        return pair[0] if pair[0] == pair[1] else pair

    found = _propagated(graph, {x: (ir.DataType.FLOAT, (dual(batch), dual(seq), 4))})
    assert found is not None
    names = [output.name for output in proto.graph.output]
    for side in (0, 1):
        feed = np.zeros((batch[side], seq[side], 4), np.float32)
        expected = dict(zip(names, ReferenceEvaluator(proto).run(None, {"x": feed}), strict=True))
        for name, value in expected.items():
            record = found[name]
            assert record.data is not None, name
            data = [d if type(d) is int else d[side] for d in record.data]
            assert data == np.asarray(value).reshape(-1).tolist(), (name, side)
            dims = tuple(d if type(d) is int else d[side] for d in record.dims)
            assert dims == np.asarray(value).shape, (name, side)
