"""Values of the small integer tensors that shapes are computed from, at concrete dims.

Exporters compute ``Reshape``, ``Expand``, ``Slice``, ``Range`` and ``ConstantOfShape``
targets from ``Shape`` of activations (TorchScript: ``arange(seq)``, ``mask[:, :seq]``,
``cls_token.expand(batch, -1, -1)``). ONNX shape inference with data propagation follows
``Shape -> Gather -> Concat -> Reshape`` but not every op (``Range``, or a ``Slice`` whose
bounds come from arithmetic), and then a whole region of the graph has no shape. This module
*computes* those tensors with NumPy at one binding of the input dims: :func:`shape_cone` finds
the nodes whose outputs feed a shape-like input (the *cone*), :func:`evaluate_cone` evaluates
those it can from constants and the concrete shapes given for ``Shape``/``Size`` inputs.

Only small tensors are computed (:data:`MAX_ELEMENTS`); an op outside the table below or an
input without a value leaves its outputs unknown. Semantics follow the ONNX operators
(integer ``Div`` truncates, ``Mod`` follows ``fmod``, ``Reshape`` copies ``0`` dims...).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["MAX_ELEMENTS", "evaluate_cone", "shape_cone"]

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

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
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            outputs = _evaluate(node, get, shape_of)
        except Exception:  # noqa: BLE001 (an op we cannot compute here: unknown)
            outputs = None
        if outputs is None:
            continue
        for value, array in zip(node.outputs, outputs):
            if array is not None and array.size <= MAX_ELEMENTS:
                data[value] = array
    return {v: a for v, a in data.items() if v.producer() is not None}


def _attr(node: ir.Node, name: str, default: Any = None) -> Any:
    attr = node.attributes.get(name)
    if attr is None:
        return default
    return attr.value


def _ints(array: np.ndarray | None) -> list[int] | None:
    return None if array is None else [int(x) for x in np.asarray(array).reshape(-1)]


def _binary(op_type: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op_type == "Add":
        return a + b
    if op_type == "Sub":
        return a - b
    if op_type == "Mul":
        return a * b
    if op_type == "Div":
        if np.issubdtype(a.dtype, np.integer):
            quotient = np.trunc(np.true_divide(a, b))
            return quotient.astype(np.result_type(a, b))
        return a / b
    if op_type == "Pow":
        return np.power(a, b).astype(a.dtype)
    if op_type == "Equal":
        return np.equal(a, b)
    if op_type == "Less":
        return np.less(a, b)
    if op_type == "Greater":
        return np.greater(a, b)
    if op_type == "LessOrEqual":
        return np.less_equal(a, b)
    if op_type == "GreaterOrEqual":
        return np.greater_equal(a, b)
    if op_type == "And":
        return np.logical_and(a, b)
    if op_type == "Or":
        return np.logical_or(a, b)
    if op_type == "Xor":
        return np.logical_xor(a, b)
    raise KeyError(op_type)


_BINARY = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "And", "Or", "Xor",
    }
)  # fmt: skip
_UNARY: dict[str, Callable[[np.ndarray], Any]] = {
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
}


def _evaluate(  # noqa: C901, PLR0911, PLR0912
    node: ir.Node,
    get: Callable[[ir.Value | None], Any],  # an array or None; each op checks what it reads
    shape_of: Callable[[ir.Value], tuple[int, ...] | None],
) -> list[np.ndarray | None] | None:
    op = node.op_type
    inputs = node.inputs
    if op == "Constant":
        for name in ("value", "value_int", "value_ints", "value_float", "value_floats"):
            attr = node.attributes.get(name)
            if attr is None:
                continue
            if name == "value":
                return [attr.value.numpy()]
            dtype = np.int64 if "int" in name else np.float32
            return [np.asarray(attr.value, dtype=dtype)]
        return None
    if op in ("Shape", "Size"):
        shape: Sequence[int] | None = None if inputs[0] is None else shape_of(inputs[0])
        if shape is None:
            return None
        if op == "Size":
            return [np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
        start = _attr(node, "start", 0)
        end = _attr(node, "end", None)
        return [np.asarray(shape[start:end], dtype=np.int64)]
    args = [get(v) for v in inputs]
    if op == "Reshape":
        data, target = args
        if data is None or target is None:
            return None
        dims = [int(d) for d in target.reshape(-1)]
        if not _attr(node, "allowzero", 0):
            dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return [data.reshape(dims)]
    present = [a for a in args if a is not None]
    if any(a is None for i, a in enumerate(args) if inputs[i] is not None):
        return None
    if op in _BINARY:
        return [_binary(op, args[0], args[1])]
    if op in _UNARY:
        return [np.asarray(_UNARY[op](args[0]))]
    if op == "Mod":
        a, b = args
        if _attr(node, "fmod", 0):
            return [np.fmod(a, b)]
        return [np.mod(a, b)]
    if op in ("Min", "Max"):
        result = present[0]
        for other in present[1:]:
            result = np.minimum(result, other) if op == "Min" else np.maximum(result, other)
        return [result]
    if op == "Cast":
        to = ir.DataType(_attr(node, "to"))
        return [args[0].astype(to.numpy())]
    if op == "Gather":
        axis = _attr(node, "axis", 0)
        return [np.take(args[0], args[1], axis=axis)]
    if op == "Concat":
        axis = _attr(node, "axis", 0)
        return [np.concatenate(present, axis=axis)]
    if op in ("Unsqueeze", "Squeeze"):
        axes = _ints(args[1]) if len(args) > 1 and args[1] is not None else _attr(node, "axes")
        data = args[0]
        if op == "Squeeze":
            if axes is None:
                return [np.squeeze(data)]
            return [np.squeeze(data, axis=tuple(a % data.ndim for a in axes))]
        assert axes is not None  # Unsqueeze always has axes
        rank = data.ndim + len(axes)
        result = data
        for axis in sorted(a % rank for a in axes):
            result = np.expand_dims(result, axis)
        return [result]
    if op == "Slice":
        data = args[0]
        if len(args) > 1:
            starts, ends = _ints(args[1]), _ints(args[2])
            axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else None
            steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else None
        else:
            starts, ends, axes = _attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes")
            steps = None
        assert starts is not None and ends is not None  # required inputs
        axes = list(axes) if axes is not None else list(range(len(starts)))
        steps = list(steps) if steps is not None else [1] * len(starts)
        index = [slice(None)] * data.ndim
        for start, end, axis, step in zip(starts, ends, axes, steps):
            index[axis % data.ndim] = slice(start, end, step)
        return [data[tuple(index)]]
    if op == "Range":
        start, limit, delta = (a.item() for a in args)
        return [np.arange(start, limit, delta, dtype=args[0].dtype)]
    if op == "ConstantOfShape":
        shape = _ints(args[0])
        assert shape is not None  # the required input, read above
        if int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
            return None
        value = node.attributes.get("value")
        fill = value.value.numpy().reshape(-1) if value is not None else np.zeros(1, np.float32)
        return [np.full(shape, fill[0], dtype=fill.dtype)]
    if op == "Expand":
        shape = _ints(args[1])
        assert shape is not None  # the required input, read above
        data = args[0]
        target = np.broadcast_shapes(data.shape, tuple(shape))
        if int(np.prod(target, dtype=np.int64)) > MAX_ELEMENTS:
            return None
        return [np.broadcast_to(data, target).copy()]
    if op == "Where":
        return [np.where(args[0], args[1], args[2])]
    if op == "Transpose":
        perm = _attr(node, "perm")
        return [np.transpose(args[0], perm)]
    if op == "Tile":
        repeats = _ints(args[1])
        assert repeats is not None  # the required input, read above
        return [np.tile(args[0], repeats)]
    if op in ("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin"):
        axes = _ints(args[1]) if len(args) > 1 and args[1] is not None else _attr(node, "axes")
        keep = bool(_attr(node, "keepdims", 1))
        functions: dict[str, Callable[..., Any]]
        functions = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
                     "ReduceMin": np.min}  # fmt: skip
        function = functions[op]
        axis = None if not axes else tuple(axes)
        return [np.asarray(function(args[0], axis=axis, keepdims=keep), dtype=args[0].dtype)]
    return None
