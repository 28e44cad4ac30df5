"""A fast shape propagation for common graphs, at two bindings of the input dims at once.

:class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes` needs, for every value a graph does
not type, its shape at two bindings of the input symbols (the probe dims and the same doubled,
see its module docstring). ONNX shape inference gives them, at the cost of a serialized copy
of the graph and two runs; on the transformer-shaped graphs exporters write (no
``value_info``, symbolic ``batch``/``seq``) that cost dominated ``plan``. This module walks the
graph once in Python and carries each dimension as a *dual*: an ``int`` for a static size, or
the pair ``(at probe dims, at doubled dims)`` for a symbolic one, so both bindings come out of
one pass, with the small integer tensors shapes are computed from (``Shape``, ``Gather``,
``Concat``...) propagated as data.

It covers the ops such graphs are made of (elementwise arithmetic with broadcasting,
activations, ``MatMul``/``Gemm``, ``Reshape``, ``Transpose``, ``Gather``, ``Concat``,
``Slice``, ``Unsqueeze``/``Squeeze``, reductions, normalisations, ``Shape``, ``Range``,
``Expand``...) and gives up, returning ``None``, at the first node it does not cover or whose
inputs it cannot tell: the shape layer then runs ONNX shape inference, which is the
reference. A test checks that both agree wherever this module answers.

The ops covered are rules in :data:`RULES` (one small function per op or op family, registered
with ``@RULES.register``, ONNX domain). Of those, the shape arithmetic of
:data:`~onnx_ir_multidevice.analysis.ops.SHAPE_ARITHMETIC_OPS` is also evaluated by
:mod:`~onnx_ir_multidevice.analysis.shape_data`, on other data: here, integer vectors of at
most 64 elements whose entries are duals (both bindings at once), as tuples, beside the dims
of every tensor; there, NumPy arrays of any rank and dtype at one concrete binding, for the
shape cone only. The rules of both are checked against onnx's reference evaluator.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["RULES", "Propagation", "PropagationRule", "propagate"]

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.rules import RuleRegistry
from onnx_ir_multidevice.graph.dtypes import INTEGER_DTYPES as _INTEGERS
from onnx_ir_multidevice.graph.index import NODE_FIELDS_OF

Dual = Any  # int, or (int, int): the size at the probe dims and at the doubled dims
_MAX_DATA = 64  # integer tensors of at most this many elements carry their values

_BOOL = ir.DataType.BOOL
_INT64 = ir.DataType.INT64


class _GiveUp(Exception):
    """A node this module does not cover: the caller falls back to ONNX inference."""


class _T:
    """What is known of one tensor: dtype, dims (duals), values (duals) for small ints."""

    __slots__ = ("data", "dims", "dtype", "key")

    def __init__(self, dtype: ir.DataType, dims: tuple, data: tuple | None = None) -> None:
        self.dtype = dtype
        self.dims = dims
        self.data = data
        # (dtype, dims), set when interned (Any: read only from interned records)
        self.key: Any = None


def _lift(f: Callable[..., int], *args: Dual) -> Dual:
    for a in args:
        if type(a) is not int:
            break
    else:
        return f(*args)
    p = f(*[a if type(a) is int else a[0] for a in args])
    s = f(*[a if type(a) is int else a[1] for a in args])
    return p if p == s else (p, s)


def _broadcast_dim(a: Dual, b: Dual) -> Dual:
    if b in (a, 1):
        return a
    if a == 1:
        return b
    raise _GiveUp("broadcast")


def _broadcast(shapes: Sequence[tuple]) -> tuple:
    if len(shapes) == 2:  # the common cases: equal shapes, or a scalar
        a, b = shapes
        if len(a) >= len(b) and (not b or a[len(a) - len(b) :] == b):
            return a
        if not a or b[len(b) - len(a) :] == a:
            return b
    rank = max(map(len, shapes))
    result = [1] * rank
    for shape in shapes:
        offset = rank - len(shape)
        for axis, dim in enumerate(shape):
            result[offset + axis] = _broadcast_dim(result[offset + axis], dim)
    return tuple(result)


def _ints(t: _T | None) -> list[int] | None:
    """Static integer values of a tensor (``None`` when not all known and static)."""
    if t is None or t.data is None or any(type(d) is not int for d in t.data):
        return None
    return list(t.data)


def _attr(node: ir.Node, name: str, default: Any = None) -> Any:
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def _numel(dims: Sequence[Dual]) -> Dual:
    return _lift(lambda *d: math.prod(d), *dims) if dims else 1


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _GiveUp("axis")
    return axis % rank


# ---------------------------------------------------------------------------------------------
# Op rules: (node, input records) -> output records

PropagationRule = Callable[[ir.Node, list], list]
"""``rule(node, ins)``: the output records of ``node`` from the records of its inputs
(``None`` for an omitted optional input); raises :class:`_GiveUp` (or a ``ValueError``...)
where the op is not covered."""

RULES: RuleRegistry[PropagationRule] = RuleRegistry("shape propagation")
"""The ops :class:`Propagation` covers, by ``(domain, op_type)``; one rule per op family."""

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "BitShift")
_COMPARISONS = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
_UNARY = (
    "Relu", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Neg", "Abs", "Identity",
    "Softmax", "LogSoftmax", "Reciprocal", "Floor", "Ceil", "Sin", "Cos", "Not", "Gelu",
    "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Softplus", "Clip", "Sign", "Round",
    "InstanceNormalization", "Mish", "Celu", "ThresholdedRelu", "Hardmax",
)  # fmt: skip
_BOOLEAN_RESULTS = frozenset(_COMPARISONS)
_REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2")


@RULES.register("Constant")
def _constant(node: ir.Node, ins: list) -> list:
    attr = node.attributes.get("value")
    if attr is None or attr.type != ir.AttributeType.TENSOR:
        raise _GiveUp("Constant")
    return [_tensor_record(attr.value)]


@RULES.register(*_ELEMENTWISE, *_COMPARISONS)
def _elementwise(node: ir.Node, ins: list) -> list:
    a, b = ins[0], ins[1]
    dims = _broadcast([a.dims, b.dims])
    op = node.op_type
    dtype = _BOOL if op in _BOOLEAN_RESULTS else a.dtype
    data = None
    if a.data is not None and b.data is not None and op in _DATA_OPS:
        f = _DATA_OPS[op]
        if len(a.data) == len(b.data):
            data = tuple(_lift(f, x, y) for x, y in zip(a.data, b.data, strict=True))
        elif len(b.data) == 1:
            data = tuple(_lift(f, x, b.data[0]) for x in a.data)
        elif len(a.data) == 1:
            data = tuple(_lift(f, a.data[0], y) for y in b.data)
    return [_T(dtype, dims, data)]


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        raise _GiveUp("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_DATA_OPS: dict[str, Callable[[int, int], int]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _trunc_div,
    "Max": max,
    "Min": min,
}


@RULES.register("Sum", "Mean")
def _variadic(node: ir.Node, ins: list) -> list:
    return [_T(ins[0].dtype, _broadcast([t.dims for t in ins]))]


@RULES.register("Max", "Min")
def _min_max(node: ir.Node, ins: list) -> list:
    """Of two inputs: elementwise, with data (shape arithmetic); of more: dims only."""
    return _elementwise(node, ins) if len(ins) == 2 else _variadic(node, ins)


@RULES.register("Where")
def _where(node: ir.Node, ins: list) -> list:
    return [_T(ins[1].dtype, _broadcast([t.dims for t in ins]))]


@RULES.register(*_UNARY)
def _same(node: ir.Node, ins: list) -> list:
    t = ins[0]
    return [_T(t.dtype, t.dims, t.data if node.op_type == "Identity" else None)]


@RULES.register("IsNaN", "IsInf")
def _to_bool(node: ir.Node, ins: list) -> list:
    return [_T(_BOOL, ins[0].dims)]


@RULES.register("Cast")
def _cast(node: ir.Node, ins: list) -> list:
    t = ins[0]
    to = ir.DataType(_attr(node, "to"))
    keep = t.data is not None and to in _INTEGERS and t.dtype in _INTEGERS
    return [_T(to, t.dims, t.data if keep else None)]


@RULES.register("Dropout")
def _dropout(node: ir.Node, ins: list) -> list:
    t = ins[0]
    return [_T(t.dtype, t.dims), _T(_BOOL, t.dims)][: len(node.outputs)]


@RULES.register("LayerNormalization")
def _layer_norm(node: ir.Node, ins: list) -> list:
    t = ins[0]
    rank = len(t.dims)
    axis = _axis(_attr(node, "axis", -1), rank)
    stats = tuple(d if i < axis else 1 for i, d in enumerate(t.dims))
    stash = ir.DataType(_attr(node, "stash_type", 1))
    return [_T(t.dtype, t.dims), _T(stash, stats), _T(stash, stats)][: len(node.outputs)]


@RULES.register("BatchNormalization")
def _batch_norm(node: ir.Node, ins: list) -> list:
    if len(node.outputs) > 1:
        raise _GiveUp("training-mode BatchNormalization")
    return [_T(ins[0].dtype, ins[0].dims)]


@RULES.register("MatMul")
def _matmul(node: ir.Node, ins: list) -> list:
    a, b = ins[0].dims, ins[1].dims
    if not a or not b:
        raise _GiveUp("scalar MatMul")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise _GiveUp("MatMul inner dims")
    batch = _broadcast([a2[:-2], b2[:-2]]) if len(a2) > 2 or len(b2) > 2 else ()
    dims = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        dims = dims[:-2] + dims[-1:]
    if len(b) == 1:
        dims = dims[:-1]
    return [_T(ins[0].dtype, dims)]


@RULES.register("Gemm")
def _gemm(node: ir.Node, ins: list) -> list:
    a, b = ins[0].dims, ins[1].dims
    if len(a) != 2 or len(b) != 2:
        raise _GiveUp("Gemm rank")
    m = a[1] if _attr(node, "transA", 0) else a[0]
    n = b[0] if _attr(node, "transB", 0) else b[1]
    return [_T(ins[0].dtype, (m, n))]


@RULES.register("Transpose")
def _transpose(node: ir.Node, ins: list) -> list:
    t = ins[0]
    perm = _attr(node, "perm")
    perm = list(reversed(range(len(t.dims)))) if perm is None else list(perm)
    if sorted(perm) != list(range(len(t.dims))):
        raise _GiveUp("perm")
    return [_T(t.dtype, tuple(t.dims[p] for p in perm))]


@RULES.register("Reshape")
def _reshape(node: ir.Node, ins: list) -> list:
    t, target = ins[0], ins[1]
    if target is None or target.data is None:
        raise _GiveUp("Reshape target")
    allowzero = _attr(node, "allowzero", 0)
    dims: list[Dual] = []
    unknown = None
    for i, d in enumerate(target.data):
        if type(d) is int and d == 0 and not allowzero:
            if i >= len(t.dims):
                raise _GiveUp("Reshape 0")
            dims.append(t.dims[i])
        elif type(d) is int and d == -1:
            if unknown is not None:
                raise _GiveUp("two -1")
            unknown = i
            dims.append(1)
        elif type(d) is int and d < 0:
            raise _GiveUp("Reshape negative")
        else:
            dims.append(d)
    if unknown is not None:
        total, known = _numel(t.dims), _numel(dims)

        def divide(a: int, b: int) -> int:
            if b == 0 or a % b:
                raise _GiveUp("Reshape -1")
            return a // b

        dims[unknown] = _lift(divide, total, known)
    return [_T(t.dtype, tuple(dims), t.data if len(dims) <= 1 else None)]


@RULES.register("Flatten")
def _flatten(node: ir.Node, ins: list) -> list:
    t = ins[0]
    axis = _attr(node, "axis", 1)
    axis = axis % len(t.dims) if axis < 0 else axis
    return [_T(t.dtype, (_numel(t.dims[:axis]), _numel(t.dims[axis:])))]


def _axes(node: ir.Node, ins: list, slot: int) -> list[int] | None:
    if len(ins) > slot and ins[slot] is not None:
        axes = _ints(ins[slot])
        if axes is None:
            raise _GiveUp("axes")
        return axes
    axes = _attr(node, "axes")
    return None if axes is None else list(axes)


@RULES.register("Unsqueeze")
def _unsqueeze(node: ir.Node, ins: list) -> list:
    t = ins[0]
    axes = _axes(node, ins, 1)
    if axes is None:
        raise _GiveUp("Unsqueeze axes")
    rank = len(t.dims) + len(axes)
    positions = sorted(_axis(a, rank) for a in axes)
    dims = list(t.dims)
    for p in positions:
        dims.insert(p, 1)
    data = t.data if t.data is not None and len(dims) <= 1 else None
    return [_T(t.dtype, tuple(dims), data)]


@RULES.register("Squeeze")
def _squeeze(node: ir.Node, ins: list) -> list:
    t = ins[0]
    axes = _axes(node, ins, 1)
    rank = len(t.dims)
    if axes is None:
        if any(type(d) is not int for d in t.dims):
            raise _GiveUp("Squeeze of a symbolic dim")
        drop = {i for i, d in enumerate(t.dims) if d == 1}
    else:
        drop = {_axis(a, rank) for a in axes}
    dims = tuple(d for i, d in enumerate(t.dims) if i not in drop)
    data = t.data if t.data is not None and len(dims) <= 1 else None
    return [_T(t.dtype, dims, data)]


@RULES.register("Concat")
def _concat(node: ir.Node, ins: list) -> list:
    present = [t for t in ins if t is not None]
    rank = len(present[0].dims)
    axis = _axis(_attr(node, "axis"), rank)
    dims = list(present[0].dims)
    total: Dual = 0
    for t in present:
        if len(t.dims) != rank:
            raise _GiveUp("Concat rank")
        total = _lift(lambda a, b: a + b, total, t.dims[axis])
        for i in range(rank):
            if i != axis and t.dims[i] != dims[i]:
                raise _GiveUp("Concat dims")
    dims[axis] = total
    data = None
    if rank == 1 and all(t.data is not None for t in present):
        data = tuple(d for t in present for d in t.data)
    return [_T(present[0].dtype, tuple(dims), data)]


@RULES.register("Shape")
def _shape(node: ir.Node, ins: list) -> list:
    dims = ins[0].dims
    rank = len(dims)
    start = _attr(node, "start", 0)
    end = _attr(node, "end", None)
    start = max(0, start + rank if start < 0 else min(start, rank))
    end = rank if end is None else max(0, end + rank if end < 0 else min(end, rank))
    data = tuple(dims[start:end])
    return [_T(_INT64, (len(data),), data)]


@RULES.register("Size")
def _size(node: ir.Node, ins: list) -> list:
    return [_T(_INT64, (), (_numel(ins[0].dims),))]


@RULES.register("Gather")
def _gather(node: ir.Node, ins: list) -> list:
    data, indices = ins[0], ins[1]
    rank = len(data.dims)
    axis = _axis(_attr(node, "axis", 0), rank)
    dims = (*data.dims[:axis], *indices.dims, *data.dims[axis + 1 :])
    values = None
    if data.data is not None and rank == 1 and indices.data is not None:
        picked = []
        size = len(data.data)
        for i in indices.data:
            if type(i) is not int or not -size <= i < size:
                raise _GiveUp("Gather index")
            picked.append(data.data[i])
        values = tuple(picked)
    return [_T(data.dtype, dims, values)]


@RULES.register("Range")
def _range(node: ir.Node, ins: list) -> list:
    start, limit, delta = (t.data[0] if t.data else None for t in ins)
    if start is None or limit is None or delta is None or ins[0].dtype not in _INTEGERS:
        raise _GiveUp("Range")

    def count(a: int, b: int, c: int) -> int:
        if c == 0:
            raise _GiveUp("Range delta")
        return max(0, -(-(b - a) // c))

    return [_T(ins[0].dtype, (_lift(count, start, limit, delta),))]


@RULES.register("ConstantOfShape")
def _constant_of_shape(node: ir.Node, ins: list) -> list:
    shape = ins[0]
    if shape.data is None:
        raise _GiveUp("ConstantOfShape")
    value = node.attributes.get("value")
    dtype = value.value.dtype if value is not None else ir.DataType.FLOAT
    return [_T(dtype, tuple(shape.data))]


@RULES.register("Expand")
def _expand(node: ir.Node, ins: list) -> list:
    t, shape = ins[0], ins[1]
    if shape.data is None:
        raise _GiveUp("Expand shape")
    return [_T(t.dtype, _broadcast([t.dims, tuple(shape.data)]))]


@RULES.register(*_REDUCTIONS)
def _reduce(node: ir.Node, ins: list) -> list:
    t = ins[0]
    rank = len(t.dims)
    axes = _axes(node, ins, 1)
    keep = _attr(node, "keepdims", 1)
    if not axes:
        if axes is not None and _attr(node, "noop_with_empty_axes", 0):
            return [_T(t.dtype, t.dims)]
        axes = list(range(rank))
    chosen = {_axis(a, rank) for a in axes}
    if keep:
        dims = tuple(1 if i in chosen else d for i, d in enumerate(t.dims))
    else:
        dims = tuple(d for i, d in enumerate(t.dims) if i not in chosen)
    return [_T(t.dtype, dims)]


@RULES.register("Slice")
def _slice(node: ir.Node, ins: list) -> list:
    t = ins[0]
    starts, ends = _ints(ins[1]), (ins[2].data if ins[2] is not None else None)
    if starts is None or ends is None:
        raise _GiveUp("Slice bounds")
    axes = _axes(node, ins, 3) or list(range(len(starts)))
    steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    if steps is None:
        raise _GiveUp("Slice steps")
    dims = list(t.dims)
    rank = len(dims)

    def length(size: int, start: int, end: int, step: int) -> int:
        return len(range(*slice(start, end, step).indices(size)))

    for start, end, given_axis, step in zip(starts, ends, axes, steps, strict=False):
        axis = _axis(given_axis, rank)
        dims[axis] = _lift(lambda d, e, s=start, k=step: length(d, s, e, k), dims[axis], end)
    data = None
    if t.data is not None and rank == 1 and all(type(e) is int for e in ends):
        data = tuple(t.data[slice(starts[0], ends[0], steps[0])])
    return [_T(t.dtype, tuple(dims), data)]


# ---------------------------------------------------------------------------------------------


def _tensor_record(tensor: ir.TensorProtocol, value: ir.Value | None = None) -> _T:
    """The record of a constant; the value's own dtype and shape first (no tensor read)."""
    dtype = value.dtype if value is not None else None
    shape = value.shape if value is not None else None
    dims: Any = None  # ints only (a symbolic dim gives up the value's shape)
    if dtype is not None and shape is not None:
        dims = shape.dims
        for d in dims:
            if type(d) is not int:
                dims = None
                break
    if dims is None:
        dtype, dims = tensor.dtype, tuple(tensor.shape.dims)
    data = None
    if dtype in _INTEGERS and len(dims) <= 1 and math.prod(dims) <= _MAX_DATA:
        data = tuple(int(x) for x in np.asarray(tensor.numpy()).reshape(-1))
    return _T(dtype, dims, data)  # type: ignore[arg-type]  # dtype is the tensor's when the value had none


def propagate(
    nodes: Sequence[ir.Node],
    inputs: Mapping[ir.Value, tuple[ir.DataType, tuple[Dual, ...]]],
) -> dict[ir.Value, tuple[ir.DataType, tuple[Dual, ...]]] | None:
    """Dtype and dual dims of every node output, or ``None`` at the first node not covered.

    Args:
        nodes: The main graph's nodes in topological order.
        inputs: Dtype and dual dims of each graph input.

    Returns:
        ``{value: (dtype, dims)}`` for every output of ``nodes``.

    .. versionadded:: 0.1
    """
    propagation = Propagation(inputs)
    return propagation.result if propagation.run(nodes) else None


class Propagation:
    """A :func:`propagate` that can be continued: nodes are added as questions come.

    :meth:`run` walks the nodes it is given (each node's inputs must be graph inputs,
    constants or outputs of nodes already run); :attr:`result` grows with every run. A node
    that is not covered stops its run; what was found before it stays valid (each record
    follows from its own inputs only).

    Args:
        inputs: Dtype and dual dims of each graph input.

    .. versionadded:: 0.1
    """

    def __init__(self, inputs: Mapping[ir.Value, tuple[ir.DataType, tuple[Dual, ...]]]) -> None:
        self._known: dict[ir.Value, _T] = {
            v: _T(dtype, dims) for v, (dtype, dims) in inputs.items()
        }
        self.result: dict[ir.Value, tuple[ir.DataType, tuple[Dual, ...]]] = {}
        """``{value: (dtype, dims)}`` of every output of the nodes run so far."""
        # Records are interned (one object per dtype, dims and data), so that a node whose
        # op, attributes and input records repeat an earlier node's (the layers of a
        # transformer) reuses its output records instead of running its rule again.
        self._interned: dict[tuple, _T] = {}
        self._memo: dict[tuple, list[_T]] = {}

    def _intern(self, record: _T) -> _T:
        key = (record.dtype, record.dims, record.data)
        found = self._interned.get(key)
        if found is None:
            found = self._interned[key] = record
            record.key = (record.dtype, record.dims)
        return found

    def _constant(self, value: ir.Value) -> _T | None:
        """The interned record of a constant input (``None``: not a constant).

        A weight carries no data: its record is found by dtype and dims alone, without
        building one first (a large model reads tens of thousands of weights).
        """
        tensor = value.const_value
        if tensor is None:
            return None
        dtype, shape = value.dtype, value.shape
        if dtype is not None and shape is not None:
            dims = shape.dims
            if dtype not in _INTEGERS or len(dims) > 1:  # no data: dtype and dims say all
                found = self._interned.get((dtype, dims, None))
                if found is not None:
                    return found
        return self._intern(_tensor_record(tensor, value))

    def run(self, nodes: Sequence[ir.Node]) -> bool:
        """Propagate through ``nodes`` (topological order); ``False`` at a node not covered."""
        known = self._known
        known_get = known.get
        rules_get = RULES.get
        result = self.result
        memo = self._memo
        intern = self._intern
        try:
            for node in nodes:
                domain, op, node_inputs, outputs, attributes = NODE_FIELDS_OF(node)
                rule = rules_get(domain, op)
                if rule is None:
                    return False
                ins: list[_T | None] = list(map(known_get, node_inputs))
                if None in ins:
                    for k, value in enumerate(node_inputs):
                        if ins[k] is None and value is not None:
                            constant = self._constant(value)
                            if constant is None:
                                return False  # an outer-scope or unknown value
                            ins[k] = known[value] = constant
                if ins and ins[0] is None:
                    return False
                attribute_key = _attribute_key(attributes) if attributes else ()
                key = (
                    None
                    if attribute_key is None
                    else (op, len(outputs), attribute_key, *map(id, ins))
                )
                outs = None if key is None else memo.get(key)
                if outs is None:
                    outs = rule(node, ins)
                    if len(outs) < len(outputs):
                        return False
                    outs = list(map(intern, outs))
                    if key is not None:
                        memo[key] = outs
                for value, record in zip(outputs, outs, strict=False):
                    known[value] = record
                    result[value] = record.key
        except (_GiveUp, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
            return False
        return True


_PLAIN_ATTRIBUTE_VALUES = (int, float, str)
_PLAIN_TYPES = frozenset(_PLAIN_ATTRIBUTE_VALUES)


def _attribute_key(attributes: Mapping[str, Any]) -> tuple | None:
    """A node's attributes as a hashable key (``None``: a value that is not plain data)."""
    key = []
    for name, attr in attributes.items():
        if not isinstance(attr, ir.Attr):
            return None
        value = attr.value
        kind = type(value)
        if kind is list or kind is tuple:
            if not _PLAIN_TYPES.issuperset(map(type, value)):
                return None
            value = tuple(value)
        elif kind not in _PLAIN_TYPES and not isinstance(value, _PLAIN_ATTRIBUTE_VALUES):
            return None
        key.append((name, attr.type, value))
    return tuple(key)
