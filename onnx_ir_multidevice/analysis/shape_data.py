"""Values of the small integer tensors that shapes are computed from, at concrete dims.

Exporters compute ``Reshape``, ``Expand``, ``Slice``, ``Range`` and ``ConstantOfShape``
targets from ``Shape`` of activations (TorchScript: ``arange(seq)``, ``mask[:, :seq]``,
``cls_token.expand(batch, -1, -1)``). ONNX shape inference with data propagation follows
``Shape -> Gather -> Concat -> Reshape`` but not every op (``Range``, or a ``Slice`` whose
bounds come from arithmetic), and then a whole region of the graph has no shape. This module
*computes* those tensors with NumPy at one binding of the input dims: :func:`shape_cone` finds
the nodes whose outputs feed a shape-like input (the *cone*), :func:`evaluate_cone` evaluates
those it can from constants and the concrete shapes given for ``Shape``/``Size`` inputs.

Only small tensors are computed (:data:`MAX_ELEMENTS`); an op without a rule in :data:`RULES`
(one small function per op or op family, registered with ``@_rule``) or an input without a
value leaves its outputs unknown. Semantics follow the ONNX operators
(integer ``Div`` truncates, ``Mod`` follows ``fmod``, ``Reshape`` copies ``0`` dims...).

:mod:`~onnx_ir_multidevice.analysis.shape_propagation` also evaluates the shape arithmetic of
:data:`~onnx_ir_multidevice.analysis.ops.SHAPE_ARITHMETIC_OPS`, on other data, so the two keep
their own rules: here, NumPy arrays of any rank and dtype (up to :data:`MAX_ELEMENTS`) at *one*
concrete binding of the input dims, for the cone of shape-like inputs only, an op it cannot
compute leaving its outputs unknown; there, Python tuples of *duals* (an ``int``, or the pair
of sizes at the probe and the doubled dims) for integer vectors of at most 64 elements, beside
the dims of every tensor, in one pass over the whole graph that gives up at the first node it
does not cover. Converting duals to arrays and back for each node would cost that pass
(a hot path of ``plan``) more than the rules it would share.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["MAX_ELEMENTS", "RULES", "ShapeDataRule", "evaluate_cone", "shape_cone"]

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.rules import RuleRegistry

MAX_ELEMENTS = 1 << 16
"""Largest tensor (elements) computed; bigger ones stay unknown."""

# Inputs that carry shapes, axes, bounds or counts, by op: what data propagation needs.
_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4),
    "ConstantOfShape": (0,),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "Pad": (1, 2, 3),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "TopK": (1,),
    "Split": (1,),
    "OneHot": (1,),
    "Trilu": (1,),
    "CumSum": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL2": (1,),
    "Gather": (1,),
    "GatherND": (1,),
    "Where": (0,),
}


def shape_cone(nodes: Sequence[ir.Node]) -> list[ir.Node]:
    """The nodes (in the order of ``nodes``) whose outputs reach a shape-like input.

    Walks back from every shape-like input (``Reshape`` shape, ``Slice`` bounds...) through
    producers in ``nodes``; ``Shape`` and ``Size`` nodes end the walk (their values come from
    the shapes given to :func:`evaluate_cone`).
    """
    members = set(nodes)
    wanted: set[ir.Node] = set()
    stack: list[ir.Node] = []
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        for slot in _SHAPE_INPUTS.get(node.op_type, ()):
            if slot < len(node.inputs):
                value = node.inputs[slot]
                producer = None if value is None else value.producer()
                if producer is not None and producer in members and producer not in wanted:
                    wanted.add(producer)
                    stack.append(producer)
    while stack:
        node = stack.pop()
        if node.op_type in ("Shape", "Size"):
            continue
        for value in node.inputs:
            producer = None if value is None else value.producer()
            if producer is not None and producer in members and producer not in wanted:
                wanted.add(producer)
                stack.append(producer)
    return [node for node in nodes if node in wanted]


def evaluate_cone(
    cone: Sequence[ir.Node],
    shape_of: Callable[[ir.Value], tuple[int, ...] | None],
    known: Mapping[ir.Value, np.ndarray] | None = None,
) -> dict[ir.Value, np.ndarray]:
    """Compute the outputs of the ``cone`` nodes that can be computed.

    Args:
        cone: Nodes in topological order (:func:`shape_cone`).
        shape_of: The concrete shape of a value, for ``Shape``/``Size`` (``None``: unknown).
        known: Values already known (initializers are read from the graph when small).

    Returns:
        ``{value: array}`` of every computed node output.
    """
    data: dict[ir.Value, np.ndarray] = dict(known or {})

    def get(value: ir.Value | None) -> np.ndarray | None:
        if value is None:
            return None
        found = data.get(value)
        if found is not None:
            return found
        tensor = value.const_value
        if tensor is not None and tensor.size <= MAX_ELEMENTS and value.producer() is None:
            try:
                array = tensor.numpy()
            except Exception:  # noqa: BLE001 (a tensor numpy cannot hold)
                return None
            data[value] = array
            return array
        return None

    for node in cone:
        rule = RULES.get(node.domain, node.op_type)
        if rule is None:
            continue
        outputs = rule.apply(node, get, shape_of)
        if outputs is None:
            continue
        for value, array in zip(node.outputs, outputs, strict=False):
            if array is not None and array.size <= MAX_ELEMENTS:
                data[value] = array
    return {v: a for v, a in data.items() if v.producer() is not None}


# The rules ------------------------------------------------------------------------------------

Outputs = list[np.ndarray | None] | None
"""The computed outputs of a node (``None``: not computable here)."""

ShapeOf = Callable[[ir.Value], tuple[int, ...] | None]
"""The concrete shape of a value (``None``: unknown)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ShapeDataRule:
    """How to compute the outputs of one op (or op family) from its inputs."""

    compute: Callable[[ir.Node, list[Any], ShapeOf], Outputs]
    """``compute(node, args, shape_of)``: ``args`` holds the array of every input (``None``
    only for an omitted optional input), or nothing when :attr:`reads_values` is false."""

    reads_values: bool = True
    """Whether the rule needs its inputs' values (every present one known); ``Shape`` does
    not: it reads ``shape_of``."""

    def apply(
        self,
        node: ir.Node,
        get: Callable[[ir.Value | None], np.ndarray | None],
        shape_of: ShapeOf,
    ) -> Outputs:
        """The outputs of ``node``: ``None`` when an input has no value or the op fails."""
        args: list[np.ndarray | None] = []
        if self.reads_values:
            args = [get(value) for value in node.inputs]
            if any(a is None and v is not None for a, v in zip(args, node.inputs, strict=True)):
                return None  # an input without a value
        try:
            return self.compute(node, args, shape_of)
        except Exception:  # noqa: BLE001 (an op we cannot compute here: unknown)
            return None


RULES: RuleRegistry[ShapeDataRule] = RuleRegistry("shape data")
"""The ops :func:`evaluate_cone` computes, by ``(domain, op_type)``; one rule per op family."""

_Compute = Callable[[ir.Node, list[Any], ShapeOf], Outputs]


def _rule(*op_types: str, reads_values: bool = True) -> Callable[[_Compute], _Compute]:
    """Register the decorated function as the rule of ``op_types`` (ONNX domain)."""

    def decorator(compute: _Compute) -> _Compute:
        RULES.add(ShapeDataRule(compute, reads_values), *op_types)
        return compute

    return decorator


def _attr(node: ir.Node, name: str, default: Any = None) -> Any:
    attr = node.attributes.get(name)
    if attr is None:
        return default
    return attr.value


def _ints(array: np.ndarray | None) -> list[int] | None:
    return None if array is None else [int(x) for x in np.asarray(array).reshape(-1)]


def _axes(node: ir.Node, args: list[Any]) -> list[int] | None:
    """``axes`` from input 1 (opset 13+) or the attribute (older opsets)."""
    return _ints(args[1]) if len(args) > 1 and args[1] is not None else _attr(node, "axes")


@_rule("Constant", reads_values=False)
def _constant(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    for name in ("value", "value_int", "value_ints", "value_float", "value_floats"):
        attr = node.attributes.get(name)
        if attr is None:
            continue
        if name == "value":
            return [attr.value.numpy()]
        dtype = np.int64 if "int" in name else np.float32
        return [np.asarray(attr.value, dtype=dtype)]
    return None


@_rule("Shape", reads_values=False)
def _shape(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    shape = None if node.inputs[0] is None else shape_of(node.inputs[0])
    if shape is None:
        return None
    return [np.asarray(shape[_attr(node, "start", 0) : _attr(node, "end", None)], dtype=np.int64)]


@_rule("Size", reads_values=False)
def _size(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    shape = None if node.inputs[0] is None else shape_of(node.inputs[0])
    if shape is None:
        return None
    return [np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]


@_rule("Reshape")
def _reshape(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    data, target = args
    dims = [int(d) for d in target.reshape(-1)]
    if not _attr(node, "allowzero", 0):
        dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return [data.reshape(dims)]


def _elementwise(function: Callable[..., Any]) -> _Compute:
    """The rule of an op that is one NumPy function of its inputs."""

    def compute(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
        return [np.asarray(function(*args))]

    return compute


_ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "Neg": np.negative,
    "Abs": np.abs,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sqrt": np.sqrt,
    "Not": np.logical_not,
    "Identity": lambda a: a,
    "Sign": np.sign,
    "Reciprocal": np.reciprocal,
    "Relu": lambda a: np.maximum(a, 0),
    "Where": np.where,
}
"""Ops that are one NumPy function of their inputs."""

for _op, _function in _ELEMENTWISE.items():
    _rule(_op)(_elementwise(_function))


@_rule("Div")
def _div(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    a, b = args
    if np.issubdtype(a.dtype, np.integer):  # integer Div truncates towards zero
        return [np.trunc(np.true_divide(a, b)).astype(np.result_type(a, b))]
    return [a / b]


@_rule("Pow")
def _pow(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    a, b = args
    return [np.power(a, b).astype(a.dtype)]


@_rule("Mod")
def _mod(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    a, b = args
    return [np.fmod(a, b) if _attr(node, "fmod", 0) else np.mod(a, b)]


@_rule("Min", "Max")
def _min_max(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    present = [a for a in args if a is not None]
    function = np.minimum if node.op_type == "Min" else np.maximum
    result = present[0]
    for other in present[1:]:
        result = function(result, other)
    return [result]


@_rule("Cast")
def _cast(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    return [args[0].astype(ir.DataType(_attr(node, "to")).numpy())]


@_rule("Gather")
def _gather(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    return [np.take(args[0], args[1], axis=_attr(node, "axis", 0))]


@_rule("Concat")
def _concat(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    present = [a for a in args if a is not None]
    return [np.concatenate(present, axis=_attr(node, "axis", 0))]


@_rule("Squeeze")
def _squeeze(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    axes, data = _axes(node, args), args[0]
    if axes is None:
        return [np.squeeze(data)]
    return [np.squeeze(data, axis=tuple(a % data.ndim for a in axes))]


@_rule("Unsqueeze")
def _unsqueeze(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    axes, result = _axes(node, args), args[0]
    assert axes is not None  # Unsqueeze always has axes
    rank = result.ndim + len(axes)
    for axis in sorted(a % rank for a in axes):
        result = np.expand_dims(result, axis)
    return [result]


@_rule("Slice")
def _slice(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    data = args[0]
    if len(args) > 1:  # opset 10+: bounds as inputs
        starts, ends = _ints(args[1]), _ints(args[2])
        axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else None
        steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else None
    else:
        starts, ends, axes = _attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes")
        steps = None
    assert starts is not None
    assert ends is not None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
        index[axis % data.ndim] = slice(start, end, step)
    return [data[tuple(index)]]


@_rule("Range")
def _range(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    start, limit, delta = (a.item() for a in args)
    return [np.arange(start, limit, delta, dtype=args[0].dtype)]


@_rule("ConstantOfShape")
def _constant_of_shape(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    shape = _ints(args[0])
    assert shape is not None  # the required input, read above
    if int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
        return None
    value = node.attributes.get("value")
    fill = value.value.numpy().reshape(-1) if value is not None else np.zeros(1, np.float32)
    return [np.full(shape, fill[0], dtype=fill.dtype)]


@_rule("Expand")
def _expand(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    shape = _ints(args[1])
    assert shape is not None  # the required input, read above
    target = np.broadcast_shapes(args[0].shape, tuple(shape))
    if int(np.prod(target, dtype=np.int64)) > MAX_ELEMENTS:
        return None
    return [np.broadcast_to(args[0], target).copy()]


@_rule("Transpose")
def _transpose(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    return [np.transpose(args[0], _attr(node, "perm"))]


@_rule("Tile")
def _tile(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    repeats = _ints(args[1])
    assert repeats is not None  # the required input, read above
    return [np.tile(args[0], repeats)]


_REDUCTIONS: dict[str, Callable[..., Any]] = {
    "ReduceProd": np.prod,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
}


@_rule(*_REDUCTIONS)
def _reduce(node: ir.Node, args: list[Any], shape_of: ShapeOf) -> Outputs:
    axes = _axes(node, args)
    keep = bool(_attr(node, "keepdims", 1))
    axis = None if not axes else tuple(axes)
    function = _REDUCTIONS[node.op_type]
    return [np.asarray(function(args[0], axis=axis, keepdims=keep), dtype=args[0].dtype)]
