"""Sharding states of values and the per-operator rules that propagate them (tensor parallelism).

A value computed by ``degree`` devices at once is in one of three states:

* :class:`Replicated`: every device holds the whole tensor;
* :class:`Split`: device ``k`` holds the ``k``-th of ``degree`` even slices of one axis
  (``blocks > 1``: the axis is ``blocks`` equal blocks, each sliced so, as a fused QKV
  projection's output is three blocks Q, K and V);
* :class:`Partial`: every device holds a tensor of the whole shape, and the value is their
  sum (a row-parallel ``MatMul``'s output, pending an ``AllReduce``).

:data:`RULES` holds one small function per operator family (registered with
``@RULES.register("MatMul")``, as :mod:`~onnx_ir_multidevice.analysis.shape_data` does): given
a node and the states of its inputs, it returns a :class:`RuleResult` (the outputs' states and
what the per-device copy of the node needs: weight slices, rewritten constant shapes or
attributes, a bias applied by one device only), or ``None`` when it cannot prove a sharded
computation equal to the whole one. ``None`` never gives a wrong result: the caller gathers
(``AllGather``) or reduces (``AllReduce``) the input first and the node runs replicated.
:data:`SEED_RULES` hold the starts of a region: column-parallel (a ``MatMul`` or ``Gemm``
by a constant weight, or a ``com.microsoft`` ``Attention`` with a packed QKV weight, fed a
replicated activation) and vocabulary-parallel (a ``Gather`` embedding by replicated ids:
each device looks up its rows, masks the others, and the output is :class:`Partial`; see
:class:`VocabMask`).

Axes of :class:`Split` are counted from the end (``-1`` is the last axis): they stay the same
under NumPy broadcasting, so elementwise rules need no rank. Shapes come from
:class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes` at one binding of the input dims.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "PARTIAL",
    "REPLICATED",
    "LOCAL_SHAPE_RULES",
    "RULES",
    "SEED_RULES",
    "AttributeRewrite",
    "BiasOnce",
    "LocalShape",
    "Partial",
    "Replicated",
    "RuleResult",
    "ShapeRewrite",
    "ShardState",
    "ShardingContext",
    "ShardingRule",
    "Split",
    "VOCAB_PARALLEL_MIN_BYTES",
    "VocabMask",
    "WeightSlice",
    "constant_array",
    "propagate",
]

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Union

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.rules import ANY_DOMAIN, RuleRegistry
from onnx_ir_multidevice.analysis.shapes import ValueShapes


@dataclasses.dataclass(frozen=True)
class Replicated:
    """Every device holds the whole tensor."""

    def __str__(self) -> str:
        return "Replicated"


@dataclasses.dataclass(frozen=True)
class Split:
    """Device ``k`` holds slice ``k`` of ``degree`` even slices of one axis."""

    axis: int
    """The axis, counted from the end: ``-1`` is the last axis (invariant under broadcasting)."""

    blocks: int = 1
    """How many equal blocks the axis is made of; each block is sliced, and device ``k`` holds
    slice ``k`` of every block (a fused QKV output is 3 blocks)."""

    def __str__(self) -> str:
        return (
            f"Split({self.axis})"
            if self.blocks == 1
            else f"Split({self.axis}, {self.blocks} blocks)"
        )


@dataclasses.dataclass(frozen=True)
class Partial:
    """Every device holds a tensor of the whole shape; the value is their sum.

    An ``AllReduce`` makes it :class:`Replicated`.
    """

    def __str__(self) -> str:
        return "Partial"


@dataclasses.dataclass(frozen=True)
class LocalShape:
    """Integer shape data computed from the ``Shape`` of a :class:`Split` value.

    Every device holds a tensor of the whole shape whose entries at :attr:`positions`
    (flattened) are the whole model's divided by the degree (the sharded axis's per-device
    size); the other entries equal the whole model's. A ``Reshape`` whose target has the
    per-device size at its split axis needs no rewrite. Such data never leaves a region: a
    node without a rule for it makes the region's attempt fail (no collective makes it whole).
    """

    positions: tuple[int, ...]
    """The flattened entries that are per-device sizes."""

    def __str__(self) -> str:
        return f"LocalShape{list(self.positions)}"


ShardState = Union[Replicated, Split, Partial, LocalShape]  # noqa: UP007  # a runtime alias for isinstance users
"""The state of one value under tensor parallelism."""

REPLICATED = Replicated()
"""The :class:`Replicated` state."""
PARTIAL = Partial()
"""The :class:`Partial` state."""


@dataclasses.dataclass(frozen=True)
class WeightSlice:
    """A constant each device holds one slice of."""

    value: ir.Value
    """The constant (an initializer or a ``Constant`` node's output)."""

    axis: int
    """The axis sliced, ``>= 0`` (of the constant's own rank)."""

    degree: int
    """How many slices."""

    blocks: int = 1
    """How many equal blocks the axis is made of (each block is sliced)."""

    node: ir.Node | None = None
    """The node reading the slice (set by the region finder; a constant may be read sliced by
    one node and whole by another, as a bias shared between layers)."""

    def take(self, array: np.ndarray, shard: int) -> np.ndarray:
        """Slice ``shard`` of ``array`` (the constant's whole value)."""
        return take_shard(array, self.axis, self.degree, shard, self.blocks)


def take_shard(
    array: np.ndarray, axis: int, degree: int, shard: int, blocks: int = 1
) -> np.ndarray:
    """Slice ``shard`` of ``degree`` of ``array`` along ``axis`` (of every one of ``blocks``)."""
    size = array.shape[axis]
    block = size // blocks
    piece = block // degree
    parts = [
        np.take(array, range(b * block + shard * piece, b * block + (shard + 1) * piece), axis=axis)
        for b in range(blocks)
    ]
    return parts[0] if blocks == 1 else np.concatenate(parts, axis=axis)


@dataclasses.dataclass(frozen=True)
class ShapeRewrite:
    """A shape-like input whose entry must change on every device (``Reshape`` target...)."""

    node: ir.Node
    """The node reading the shape."""

    input_index: int
    """Which input of :attr:`node` holds the shape."""

    position: int
    """The entry of the 1-D shape tensor that changes."""

    old: int
    """Its whole-model value (at the planning dims)."""

    new: int
    """Its value on every device."""

    constant: bool
    """Whether the shape is a constant (rewritten in place); else it is computed (``Concat`` of
    ``Shape`` pieces) and the rewrite replaces one entry of it."""


@dataclasses.dataclass(frozen=True)
class AttributeRewrite:
    """An attribute whose value changes on every device (``num_heads`` of a fused attention).

    An integer attribute, or a list of integers (``qkv_hidden_sizes``: a tuple).
    """

    node: ir.Node
    """The node."""

    name: str
    """The attribute."""

    old: int | tuple[int, ...]
    """Its whole-model value."""

    new: int | tuple[int, ...]
    """Its value on every device."""


@dataclasses.dataclass(frozen=True)
class BiasOnce:
    """A replicated constant added to a :class:`Partial` value by device 0 only.

    The other devices add zeros, else the ``AllReduce`` would sum it ``degree`` times.
    """

    node: ir.Node
    """The node adding it."""

    input_index: int
    """Which input of :attr:`node` is the constant."""


@dataclasses.dataclass(frozen=True)
class VocabMask:
    """A vocabulary-parallel ``Gather``: each device looks up the ids of its rows only.

    Device ``k`` holds rows ``[k * vocab / degree, (k + 1) * vocab / degree)`` of the
    embedding (a :class:`WeightSlice` on axis 0). It normalises negative ids
    (``Where(ids < 0, ids + vocab, ids)``, as ONNX ``Gather`` reads them), subtracts its first
    row :meth:`offset`, gathers the in-range ids (the others read row 0) and zeroes the rows of
    the ids outside its range: the devices' outputs sum to the whole lookup (:class:`Partial`).
    """

    node: ir.Node
    """The ``Gather``."""

    vocab: int
    """The embedding's row count (the whole model's)."""

    degree: int
    """How many devices."""

    OP_TYPES: ClassVar[tuple[str, ...]] = (
        *("Less", "Add", "Where", "Sub", "Less", "Less", "Not", "And", "Where", "Unsqueeze"),
        "Where",
    )
    """The op types of the nodes a split adds per device for one lookup (the last one, the
    mask, after the ``Gather``; the others before it)."""

    @property
    def rows(self) -> int:
        """The rows each device holds."""
        return self.vocab // self.degree

    def offset(self, shard: int) -> int:
        """The first row device ``shard`` holds."""
        return shard * self.rows


@dataclasses.dataclass(frozen=True)
class RuleResult:
    """What a sharding rule proves about one node."""

    outputs: tuple[ShardState, ...]
    """The state of each output."""

    weight_slices: tuple[WeightSlice, ...] = ()
    """Constants read by the node that each device slices."""

    shape_rewrites: tuple[ShapeRewrite, ...] = ()
    """Shape-like inputs whose entries change per device."""

    attribute_rewrites: tuple[AttributeRewrite, ...] = ()
    """Attributes whose values change per device."""

    bias_once: tuple[BiasOnce, ...] = ()
    """Constants added by device 0 only."""

    vocab_masks: tuple[VocabMask, ...] = ()
    """Vocabulary-parallel lookups: ids each device masks to its rows."""


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value of a constant (initializer, ``Constant`` output, ``Identity`` of one), or None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is not None:
        return tensor.numpy()
    producer = value.producer()
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type == "Identity":  # TorchScript shares equal weights through Identity
        return constant_array(producer.inputs[0])
    if producer.op_type != "Constant":
        return None
    for name, attribute in producer.attributes.items():
        if name == "value":
            return attribute.as_tensor().numpy()
        if name in ("value_float", "value_floats"):
            return np.array(attribute.value, dtype=np.float32)
        if name in ("value_int", "value_ints"):
            return np.array(attribute.value, dtype=np.int64)
    return None


class ShardingContext:
    """What the rules know about a graph: its degree, shapes and constants.

    Args:
        graph: The main graph.
        degree: How many devices share each tensor-parallel node (``>= 2``).
        shapes: The graph's shapes, at the planning dims.
    """

    def __init__(self, graph: ir.Graph, degree: int, shapes: ValueShapes) -> None:
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 2:
            raise ValueError(f"a tensor-parallel degree must be an integer >= 2, got {degree!r}")
        self.graph = graph
        self.degree = degree
        self.shapes = shapes
        self.shape_data = True
        """Whether ``Shape`` of a split value gives :class:`LocalShape` data (else no rule)."""
        self.split_hints: list[int] = []
        """Block counts a rule found would make a ``Split`` op shardable (see :class:`Split`)."""
        self._constants: dict[ir.Value, np.ndarray | None] = {}

    def constant(self, value: ir.Value | None) -> np.ndarray | None:
        """The value of a constant input, or ``None`` (cached)."""
        if value is None:
            return None
        if value not in self._constants:
            self._constants[value] = constant_array(value)
        return self._constants[value]

    def shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        """The shape at the planning dims (every symbol bound), or ``None``."""
        if value is None:
            return None
        array = self.constant(value)
        if array is not None:
            return tuple(array.shape)
        return self.shapes.estimate(value)

    def rank(self, value: ir.Value | None) -> int | None:
        """The rank, or ``None``."""
        if value is None:
            return None
        array = self.constant(value)
        if array is not None:
            return array.ndim
        return self.shapes.rank(value)

    def ints(self, value: ir.Value | None) -> list[int] | None:
        """A constant 1-D integer input as a list, or ``None``."""
        array = self.constant(value)
        if array is None or array.dtype.kind not in "iu":
            return None
        return [int(x) for x in array.reshape(-1)]


ShardingRule = Callable[[ShardingContext, ir.Node, Sequence[ShardState]], "RuleResult | None"]
"""A sharding rule: ``(context, node, input states) -> RuleResult | None``."""

RULES: RuleRegistry[ShardingRule] = RuleRegistry("sharding")
"""Sharding rules by op type: called when at least one input is not :class:`Replicated`."""

LOCAL_SHAPE_RULES: RuleRegistry[ShardingRule] = RuleRegistry("local shape data")
"""Rules for ops reading :class:`LocalShape` data (shape arithmetic on per-device sizes)."""

SeedRule = Callable[[ShardingContext, ir.Node, int], "RuleResult | None"]
SEED_RULES: RuleRegistry[SeedRule] = RuleRegistry("column-parallel seed")
"""Region starts: ``(context, node, blocks) -> RuleResult | None`` for a node whose
activation input is replicated; a column-parallel output's last axis is split in ``blocks``
blocks (a vocabulary-parallel ``Gather`` takes ``blocks == 1`` only; its output is
:class:`Partial`)."""


def propagate(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    """Apply the rule of ``node`` to its input states; ``None`` when no rule proves it.

    Args:
        context: The graph's context.
        node: The node.
        states: One state per input (a missing optional input is :data:`REPLICATED`).

    Returns:
        The rule's result with one state per output, or ``None``.
    """
    if all(type(state) is Replicated for state in states):
        return RuleResult((REPLICATED,) * len(node.outputs))
    local = [isinstance(state, LocalShape) for state in states]
    if any(local):
        if node.domain not in ("", "ai.onnx"):
            return None
        # A Reshape/Expand target of per-device sizes is read by the split rule itself.
        reads_target = node.op_type in ("Reshape", "Expand") and local == [False, True]
        rule = (
            RULES.get("", node.op_type) if reads_target else LOCAL_SHAPE_RULES.get("", node.op_type)
        )
    else:
        rule = RULES.get(node.domain, node.op_type)
    if rule is None:
        return None
    result = rule(context, node, states)
    if result is not None and len(result.outputs) != len(node.outputs):
        return None
    return result


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _attr_int(node: ir.Node, name: str, default: int) -> int:
    attribute = node.attributes.get(name)
    return default if attribute is None else int(attribute.value)


def _attr_ints(node: ir.Node, name: str) -> list[int] | None:
    attribute = node.attributes.get(name)
    return None if attribute is None else [int(x) for x in attribute.value]


def _positive(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _broadcasts(context: ShardingContext, value: ir.Value | None, axis: int) -> bool | None:
    """True: ``value`` has size 1 (or no dim) at ``axis``; False: it has more; None: unknown."""
    if value is None:
        return True
    shape = context.shape(value)
    if shape is None:
        return None
    return len(shape) < -axis or shape[len(shape) + axis] == 1


def _slice_replicated(
    context: ShardingContext, node: ir.Node, index: int, split: Split
) -> WeightSlice | bool | None:
    """How a replicated input of an elementwise node meets a :class:`Split` of ``split.axis``.

    True: it broadcasts (nothing to do); a :class:`WeightSlice`: a constant to slice;
    None: it cannot (a whole activation, or an unknown shape).
    """
    value = node.inputs[index]
    broadcasts = _broadcasts(context, value, split.axis)
    if broadcasts:
        return True
    if broadcasts is None or context.constant(value) is None:
        return None
    shape = context.shape(value)
    assert shape is not None
    axis = len(shape) + split.axis
    if shape[axis] % (context.degree * split.blocks):
        return None
    assert value is not None
    return WeightSlice(value, axis, context.degree, split.blocks)


def _all_same(states: Sequence[ShardState], kind: type) -> ShardState | None:
    found = [s for s in states if isinstance(s, kind)]
    if not found or any(s != found[0] for s in found):
        return None
    return found[0]


# ---------------------------------------------------------------------------------------------
# Elementwise and activations
# ---------------------------------------------------------------------------------------------

_UNARY = (
    "Relu", "Tanh", "Sigmoid", "Erf", "Gelu", "FastGelu", "QuickGelu", "BiasGelu", "Neg",
    "Sqrt", "Reciprocal", "Exp", "Log", "Abs", "Cast", "Identity", "Softplus", "Softsign",
    "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Mish", "Sin", "Cos",
    "Not", "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf", "Clip", "Silu",
)  # fmt: skip
_BINARY = (
    "Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "PRelu", "BitShift",
)  # fmt: skip
# Ops linear in every input that may be Partial (the others Replicated), by op: which inputs.
_LINEAR: Mapping[str, str] = {
    "Add": "sum",
    "Sub": "sum",
    "Mul": "one",
    "Div": "numerator",
    "Neg": "unary",
    "Identity": "unary",
}


@RULES.register(*_UNARY, *_BINARY, domain=ANY_DOMAIN)
def _elementwise(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    if any(isinstance(s, Partial) for s in states):
        return _elementwise_partial(context, node, states)
    split = _all_same(states, Split)
    if split is None:
        return None
    assert isinstance(split, Split)
    slices = []
    for index, state in enumerate(states):
        if isinstance(state, Replicated) and index < len(node.inputs):
            if node.op_type == "Clip" and index > 0:
                continue  # min and max are scalars
            found = _slice_replicated(context, node, index, split)
            if found is None:
                return None
            if isinstance(found, WeightSlice):
                slices.append(found)
    return RuleResult((split,) * len(node.outputs), weight_slices=tuple(slices))


def _elementwise_partial(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    kind = _LINEAR.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if kind is None or any(isinstance(s, Split) for s in states):
        return None
    partial = [isinstance(s, Partial) for s in states]
    if kind == "unary":
        return RuleResult((PARTIAL,))
    if kind == "one":  # Mul: linear in one factor only
        return RuleResult((PARTIAL,)) if sum(partial) == 1 else None
    if kind == "numerator":
        return RuleResult((PARTIAL,)) if partial == [True, False] else None
    # Add/Sub: a replicated constant term is added by device 0 only; an activation is not.
    once = []
    for index, is_partial in enumerate(partial):
        if not is_partial:
            if context.constant(node.inputs[index]) is None:
                return None
            once.append(BiasOnce(node, index))
    return RuleResult((PARTIAL,), bias_once=tuple(once))


# ---------------------------------------------------------------------------------------------
# Matrix products
# ---------------------------------------------------------------------------------------------


@RULES.register("MatMul")
def _matmul(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    a, b = node.inputs[0], node.inputs[1]
    sa, sb = states[0], states[1]
    if isinstance(sa, Partial) or isinstance(sb, Partial):
        return None
    weight = context.constant(b)
    if b is not None and weight is not None and weight.ndim == 2 and isinstance(sa, Split):
        if sa.axis == -1:  # row-parallel: the weight's input axis is sliced, the output is partial
            if weight.shape[0] % (context.degree * sa.blocks):
                return None
            return RuleResult(
                (PARTIAL,), weight_slices=(WeightSlice(b, 0, context.degree, sa.blocks),)
            )
        return RuleResult((sa,))  # rows or batch: the weight is replicated
    ra, rb = context.rank(a), context.rank(b)
    if ra is None or rb is None or ra < 2 or rb < 2:
        return None
    if isinstance(sa, Split) and isinstance(sb, Split):
        if sa == sb and sa.axis <= -3:  # per head (or batch) on both sides
            return RuleResult((sa,))
        if sa.axis == -1 and sb.axis == -2 and sa.blocks == sb.blocks:
            return RuleResult((PARTIAL,))  # contraction split on both sides
        return None
    if isinstance(sa, Split):  # b replicated
        if sa.axis == -2 or (sa.axis <= -3 and _broadcasts(context, b, sa.axis)):
            return RuleResult((sa,))
        return None
    assert isinstance(sb, Split)  # a replicated
    if sb.axis == -1 or (sb.axis <= -3 and _broadcasts(context, a, sb.axis)):
        return RuleResult((sb,))
    return None


@RULES.register("Gemm")
def _gemm(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    if _attr_int(node, "transA", 0) or any(not isinstance(s, Replicated) for s in states[1:]):
        return None
    sa = states[0]
    b = node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    if not isinstance(sa, Split):
        return None
    if sa.axis == -2:  # rows: C must broadcast along them
        if c is not None and not _broadcasts(context, c, -2):
            return None
        return RuleResult((sa,))
    weight = context.constant(b)
    if b is None or weight is None or weight.ndim != 2:
        return None
    axis = 1 if _attr_int(node, "transB", 0) else 0
    if weight.shape[axis] % (context.degree * sa.blocks):
        return None
    once: tuple[BiasOnce, ...] = ()
    if c is not None:
        if context.constant(c) is None:
            return None
        once = (BiasOnce(node, 2),)
    return RuleResult(
        (PARTIAL,),
        weight_slices=(WeightSlice(b, axis, context.degree, sa.blocks),),
        bias_once=once,
    )


@SEED_RULES.register("MatMul")
def _seed_matmul(context: ShardingContext, node: ir.Node, blocks: int) -> RuleResult | None:
    b = node.inputs[1]
    weight = context.constant(b)
    if (
        b is None
        or weight is None
        or weight.ndim != 2
        or weight.shape[1] % (context.degree * blocks)
    ):
        return None
    if (context.rank(node.inputs[0]) or 0) < 2 or context.constant(node.inputs[0]) is not None:
        return None
    return RuleResult(
        (Split(-1, blocks),),
        weight_slices=(WeightSlice(b, 1, context.degree, blocks),),
    )


@SEED_RULES.register("Gemm")
def _seed_gemm(context: ShardingContext, node: ir.Node, blocks: int) -> RuleResult | None:
    if _attr_int(node, "transA", 0) or context.constant(node.inputs[0]) is not None:
        return None
    b = node.inputs[1]
    weight = context.constant(b)
    axis = 0 if _attr_int(node, "transB", 0) else 1
    if (
        b is None
        or weight is None
        or weight.ndim != 2
        or weight.shape[axis] % (context.degree * blocks)
    ):
        return None
    slices = [WeightSlice(b, axis, context.degree, blocks)]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    if c is not None:
        found = _slice_replicated(context, node, 2, Split(-1, blocks))
        if found is None:
            return None
        if isinstance(found, WeightSlice):
            slices.append(found)
    return RuleResult((Split(-1, blocks),), weight_slices=tuple(slices))


_ID_TYPES = (ir.DataType.INT32, ir.DataType.INT64)

VOCAB_PARALLEL_MIN_BYTES = 1 << 20
"""The smallest table a vocabulary-parallel lookup slices: a smaller one (rotary ``cos`` /
``sin`` caches, token-type embeddings) stays replicated, its ``AllReduce`` per request costing
more than the memory it would save."""


@SEED_RULES.register("Gather")
def _seed_embedding(context: ShardingContext, node: ir.Node, blocks: int) -> RuleResult | None:
    """A vocabulary-parallel embedding: ``Gather(weight [V, H] constant, ids)`` on axis 0.

    Each device holds ``V / degree`` rows and looks up the ids in its range (the others give
    zeros); the output is :class:`Partial`. Negative ids are normalised first (see
    :class:`VocabMask`). Refused (``None``: the lookup stays replicated) unless the weight is
    a 2-D floating constant of at least :data:`VOCAB_PARALLEL_MIN_BYTES` whose row count
    divides by the degree, the ids are computed ``int32``/``int64`` values, and the axis is 0.
    """
    if blocks != 1 or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    weight_value, ids = node.inputs
    weight = context.constant(weight_value)
    if (
        weight_value is None
        or ids is None
        or weight is None
        or weight.ndim != 2
        or weight.dtype.kind != "f"
        or weight.shape[0] % context.degree
        or weight.shape[0] < context.degree
        or weight.nbytes < VOCAB_PARALLEL_MIN_BYTES
    ):
        return None
    if _positive(_attr_int(node, "axis", 0), 2) != 0:
        return None
    if context.constant(ids) is not None or context.shapes.dtype(ids) not in _ID_TYPES:
        return None
    return RuleResult(
        (PARTIAL,),
        weight_slices=(WeightSlice(weight_value, 0, context.degree),),
        vocab_masks=(VocabMask(node, int(weight.shape[0]), context.degree),),
    )


# ---------------------------------------------------------------------------------------------
# Shapes: Reshape, Transpose, Squeeze/Unsqueeze, Expand, Slice, Split, Concat, Gather
# ---------------------------------------------------------------------------------------------


def _only_first(states: Sequence[ShardState]) -> bool:
    return all(isinstance(s, Replicated) for s in states[1:])


@RULES.register("Reshape")
def _reshape(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    target_state = states[1] if len(states) > 1 else REPLICATED
    if not isinstance(target_state, (Replicated, LocalShape)):
        return None
    if isinstance(state, Partial) and isinstance(target_state, Replicated):
        return RuleResult((PARTIAL,))
    if not isinstance(state, Split):
        return None
    before, after = context.shape(node.inputs[0]), context.shape(node.outputs[0])
    if before is None or after is None:
        return None
    axis = len(before) + state.axis
    parts = context.degree * state.blocks
    if before[axis] % parts:
        return None
    prefix = int(np.prod(before[:axis], dtype=np.int64))
    running = 1
    b = -1
    for position, size in enumerate(after):
        if running == prefix and size > 1 and size % parts == 0:
            b = position
            break
        running *= size
    if b < 0:
        return None
    # Same prefix and both axes divisible: device k's elements are the same contiguous chunks.
    if isinstance(target_state, LocalShape):
        # Computed from per-device sizes: right as it is when exactly the split axis is one
        # (its other entries equal the whole model's), so it is not rewritten again.
        if target_state.positions != (b,):
            return None
        return RuleResult((Split(b - len(after), state.blocks),))
    target = context.ints(node.inputs[1])
    rewrites: tuple[ShapeRewrite, ...] = ()
    if target is None or target[b] not in (-1,):
        rewrites = (
            ShapeRewrite(node, 1, b, after[b], after[b] // context.degree, target is not None),
        )
    return RuleResult((Split(b - len(after), state.blocks),), shape_rewrites=rewrites)


@RULES.register("Transpose")
def _transpose(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,))
    assert isinstance(state, Split)
    perm = _attr_ints(node, "perm")
    if perm is None:
        rank = context.rank(node.inputs[0])
        if rank is None:
            return None
        perm = list(range(rank))[::-1]
    rank = len(perm)
    return RuleResult((Split(perm.index(rank + state.axis) - rank, state.blocks),))


def _squeeze_axes(context: ShardingContext, node: ir.Node) -> list[int] | None:
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        return context.ints(node.inputs[1])
    return _attr_ints(node, "axes")


@RULES.register("Unsqueeze")
def _unsqueeze(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if not _only_first(states):
        return None
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,))
    assert isinstance(state, Split)
    axes, rank = _squeeze_axes(context, node), context.rank(node.inputs[0])
    if axes is None or rank is None:
        return None
    out_rank = rank + len(axes)
    inserted = {_positive(a, out_rank) for a in axes}
    kept = [i for i in range(out_rank) if i not in inserted]
    return RuleResult((Split(kept[rank + state.axis] - out_rank, state.blocks),))


@RULES.register("Squeeze")
def _squeeze(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if not _only_first(states):
        return None
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,))
    assert isinstance(state, Split)
    axes, rank = _squeeze_axes(context, node), context.rank(node.inputs[0])
    if axes is None or rank is None:
        return None
    removed = {_positive(a, rank) for a in axes}
    axis = rank + state.axis
    if axis in removed:
        return None
    # Counted from the end, only the removed axes after it move it.
    return RuleResult((Split(state.axis + sum(1 for a in removed if a > axis), state.blocks),))


@RULES.register("Expand")
def _expand(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if not _only_first(states):
        return None
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,))
    assert isinstance(state, Split)
    before, after = context.shape(node.inputs[0]), context.shape(node.outputs[0])
    if before is None or after is None or len(after) < -state.axis:
        return None
    if after[len(after) + state.axis] != before[len(before) + state.axis]:
        return None
    target = context.ints(node.inputs[1])
    position = len(target) + state.axis if target is not None else len(after) + state.axis
    rewrites: tuple[ShapeRewrite, ...] = ()
    if target is None or target[position] != 1:
        size = after[len(after) + state.axis]
        rewrites = (
            ShapeRewrite(node, 1, position, size, size // context.degree, target is not None),
        )
    return RuleResult((state,), shape_rewrites=rewrites)


@RULES.register("Slice")
def _slice(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if not _only_first(states):
        return None
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,))
    assert isinstance(state, Split)
    rank = context.rank(node.inputs[0])
    if rank is None:
        return None
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        axes = context.ints(node.inputs[3])
    else:
        starts = context.shape(node.inputs[1])
        axes = list(range(starts[0])) if starts is not None else None
    if axes is None or rank + state.axis in {_positive(a, rank) for a in axes}:
        return None
    return RuleResult((state,))


@RULES.register("Split")
def _split(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    count = len(node.outputs)
    if not _only_first(states):
        return None
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,) * count)
    assert isinstance(state, Split)
    rank = context.rank(node.inputs[0])
    if rank is None:
        return None
    if _positive(_attr_int(node, "axis", 0), rank) != rank + state.axis:
        return RuleResult((state,) * count)
    sizes = (
        context.ints(node.inputs[1])
        if len(node.inputs) > 1 and node.inputs[1] is not None
        else None
    )
    if sizes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        return None
    if sizes is not None and len(set(sizes)) != 1:
        return None
    if state.blocks % count:
        context.split_hints.append(count * state.blocks)
        return None
    rewrites = tuple(
        ShapeRewrite(node, 1, i, size, size // context.degree, True)
        for i, size in enumerate(sizes or ())
    )
    return RuleResult((Split(state.axis, state.blocks // count),) * count, shape_rewrites=rewrites)


def _slice_whole_input(
    context: ShardingContext, value: ir.Value | None, split: Split
) -> WeightSlice | None:
    """A constant or graph input each device reads slice ``k`` of, to meet ``split``."""
    if value is None or split.blocks != 1:
        return None
    if context.constant(value) is None and value not in context.graph.inputs:
        return None
    shape = context.shape(value)
    if shape is None or len(shape) < -split.axis:
        return None
    axis = len(shape) + split.axis
    if shape[axis] % context.degree:
        return None
    return WeightSlice(value, axis, context.degree)


@RULES.register("Concat")
def _concat(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    if all(isinstance(s, Partial) for s in states):
        return RuleResult((PARTIAL,))
    split = _all_same(states, Split)
    if split is None or any(isinstance(s, Partial) for s in states):
        return None
    assert isinstance(split, Split)
    rank = context.rank(node.outputs[0]) or context.rank(node.inputs[0])
    if rank is None:
        return None
    if _positive(_attr_int(node, "axis", 0), rank) != rank + split.axis:
        # A replicated graph input or constant beside split pieces is sliced on the split
        # axis (past keys/values concatenated with the new ones, split by heads).
        slices = []
        for index, state in enumerate(states):
            if isinstance(state, Split):
                continue
            found = _slice_whole_input(context, node.inputs[index], split)
            if found is None:
                return None
            slices.append(found)
        return RuleResult((split,), weight_slices=tuple(slices))
    if not all(isinstance(s, Split) for s in states):
        return None
    # Concatenating equal Split inputs along their axis gives blocks (the inverse of Split).
    shapes = [context.shape(v) for v in node.inputs]
    sizes = {shape[rank + split.axis] if shape else None for shape in shapes}
    if len(sizes) != 1 or None in sizes:
        return None
    return RuleResult((Split(split.axis, split.blocks * len(node.inputs)),))


@RULES.register("Gather")
def _gather(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if not _only_first(states) or not isinstance(state, Split):
        return None
    rank = context.rank(node.inputs[0])
    indices_rank = context.rank(node.inputs[1])
    if rank is None or indices_rank is None:
        return None
    axis = _positive(_attr_int(node, "axis", 0), rank)
    split_axis = rank + state.axis
    if split_axis == axis:
        return None
    if split_axis > axis:
        return RuleResult((state,))
    out_rank = rank - 1 + indices_rank
    return RuleResult((Split(split_axis - out_rank, state.blocks),))


@RULES.register("Shape")
def _shape(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    if isinstance(state, Partial):
        return RuleResult((REPLICATED,))  # a partial sum has the whole shape
    assert isinstance(state, Split)
    rank = context.rank(node.inputs[0])
    if rank is None:
        return None
    start = _positive(_attr_int(node, "start", 0), rank)
    end_attr = node.attributes.get("end")
    end = rank if end_attr is None else min(_positive(int(end_attr.value), rank), rank)
    if start <= rank + state.axis < end:
        if not context.shape_data:
            return None
        return RuleResult((LocalShape((rank + state.axis - start,)),))
    return RuleResult((REPLICATED,))


# ---------------------------------------------------------------------------------------------
# Shape arithmetic on per-device sizes (LocalShape): where the sized entries go
# ---------------------------------------------------------------------------------------------


def _local(positions: Sequence[int]) -> ShardState:
    return LocalShape(tuple(sorted(set(positions)))) if positions else REPLICATED


def _local_size(context: ShardingContext, value: ir.Value | None) -> int | None:
    shape = context.shape(value)
    return None if shape is None else int(np.prod(shape, dtype=np.int64))


@LOCAL_SHAPE_RULES.register("Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Cast")
def _local_same_order(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    """The elements keep their flattened order: the per-device entries stay where they are."""
    state = states[0]
    if not isinstance(state, LocalShape) or not _only_first(states):
        return None
    if node.op_type == "Cast":
        to = node.attributes.get("to")
        if to is None or not ir.DataType(int(to.value)).is_integer():
            return None  # a per-device size divided later would not be an integer division
    return RuleResult((state,))


@LOCAL_SHAPE_RULES.register("Gather")
def _local_gather(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    size = _local_size(context, node.inputs[0])
    indices = context.constant(node.inputs[1])
    if (
        not isinstance(state, LocalShape)
        or not _only_first(states)
        or context.rank(node.inputs[0]) != 1
        or size is None
        or indices is None
    ):
        return None
    picked = [int(i) + size if int(i) < 0 else int(i) for i in indices.reshape(-1)]
    return RuleResult((_local([j for j, i in enumerate(picked) if i in state.positions]),))


@LOCAL_SHAPE_RULES.register("Slice")
def _local_slice(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    size = _local_size(context, node.inputs[0])
    if (
        not isinstance(state, LocalShape)
        or not _only_first(states)
        or context.rank(node.inputs[0]) != 1
        or size is None
    ):
        return None
    bounds = [context.ints(v) if v is not None else None for v in node.inputs[1:5]]
    bounds += [None] * (4 - len(bounds))
    starts, ends, axes, steps = bounds
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        return None
    if (axes is not None and axes not in ([0], [-1])) or (steps is not None and len(steps) != 1):
        return None
    step = steps[0] if steps is not None else 1
    if step == 0:
        return None
    clamp = 2**62  # ONNX clamps out-of-range bounds as Python slices do
    kept = list(range(size))[
        slice(max(-clamp, min(starts[0], clamp)), max(-clamp, min(ends[0], clamp)), step)
    ]
    return RuleResult((_local([j for j, i in enumerate(kept) if i in state.positions]),))


@LOCAL_SHAPE_RULES.register("Concat")
def _local_concat(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    if any(isinstance(s, (Split, Partial)) for s in states):
        return None
    positions: list[int] = []
    offset = 0
    for value, state in zip(node.inputs, states, strict=True):
        if value is None or context.rank(value) != 1:
            return None
        size = _local_size(context, value)
        if size is None:
            return None
        if isinstance(state, LocalShape):
            positions += [offset + p for p in state.positions]
        offset += size
    return RuleResult((_local(positions),))


# ---------------------------------------------------------------------------------------------
# Softmax, normalisations, reductions
# ---------------------------------------------------------------------------------------------


@RULES.register("Softmax", "LogSoftmax", domain=ANY_DOMAIN)
def _softmax(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    rank = context.rank(node.inputs[0])
    if not isinstance(state, Split) or rank is None:
        return None
    axis = _positive(_attr_int(node, "axis", -1), rank)
    if rank + state.axis >= axis:  # opset < 13 flattens [axis, rank); >= 13 uses axis only
        return None
    return RuleResult((state,))


@RULES.register(
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    domain=ANY_DOMAIN,
)
def _normalization(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    """A normalisation over trailing axes: a region boundary, unless split on a leading axis."""
    state = states[0]
    rank = context.rank(node.inputs[0])
    if not isinstance(state, Split) or rank is None or not _only_first(states):
        return None
    if node.op_type.startswith("Skip"):
        return None
    if rank + state.axis >= _positive(_attr_int(node, "axis", -1), rank):
        return None
    return RuleResult((state,) * len(node.outputs))


@RULES.register("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2")
def _reduce(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    state = states[0]
    rank = context.rank(node.inputs[0])
    if rank is None or not _only_first(states):
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = context.ints(node.inputs[1])
    else:
        axes = _attr_ints(node, "axes")
    if axes is None:
        axes = list(range(rank))  # no axes: every axis
    keep = _attr_int(node, "keepdims", 1)
    if isinstance(state, Partial):
        return RuleResult((PARTIAL,)) if node.op_type in ("ReduceMean", "ReduceSum") else None
    assert isinstance(state, Split)
    removed = {_positive(a, rank) for a in axes}
    axis = rank + state.axis
    if axis in removed:
        return None
    if keep:
        return RuleResult((state,))
    return RuleResult((Split(state.axis + sum(1 for a in removed if a > axis), state.blocks),))


# ---------------------------------------------------------------------------------------------
# Fused attention: split by heads
# ---------------------------------------------------------------------------------------------


def _heads(context: ShardingContext, node: ir.Node, name: str) -> AttributeRewrite | bool | None:
    attribute = node.attributes.get(name)
    if attribute is None:
        return True
    heads = int(attribute.value)
    if heads <= 0 or heads % context.degree:
        return None
    return AttributeRewrite(node, name, heads, heads // context.degree)


def _read(value: ir.Value | None) -> bool:
    """Whether ``value`` is read by a node or is a graph output."""
    return value is not None and (bool(value.uses()) or value.is_graph_output())


_HEAD_AXIS = Split(-3)
"""Past and present keys/values ``[batch, kv_heads, seq, head_size]`` are split by heads."""


def _past_slices(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState], indices: Sequence[int]
) -> list[WeightSlice] | None:
    """How each rank reads the past keys/values at ``indices`` (by heads, axis ``-3``).

    A past already split by heads is read as it is; a replicated one (a graph input or a
    constant, whole) is sliced per rank on its head axis (the splitter inserts a ``Slice``);
    ``None`` when a past is neither, or its head axis does not divide by the degree.
    """
    slices = []
    for index in indices:
        if index >= len(node.inputs) or node.inputs[index] is None:
            continue
        state = states[index]
        if state == _HEAD_AXIS:
            continue
        if not isinstance(state, Replicated) or context.rank(node.inputs[index]) != 4:
            return None
        found = _slice_whole_input(context, node.inputs[index], _HEAD_AXIS)
        if found is None:
            return None
        slices.append(found)
    return slices


def _qkv_bias_slice(context: ShardingContext, node: ir.Node, index: int) -> WeightSlice | None:
    """A constant ``[3 * hidden]`` bias of Q, K and V, each of its 3 blocks sliced by heads."""
    value = node.inputs[index]
    bias = context.constant(value)
    if value is None or bias is None or bias.ndim != 1 or bias.shape[0] % (3 * context.degree):
        return None
    return WeightSlice(value, 0, context.degree, 3)


@RULES.register("MultiHeadAttention", "GroupQueryAttention", domain="com.microsoft")
def _contrib_attention(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    """Separate Q, K and V ``[batch, seq, heads * head_size]`` split on their last axis.

    Past keys/values (``MultiHeadAttention`` inputs 6 and 7, ``GroupQueryAttention`` inputs 3
    and 4, ``[batch, kv_heads, past_seq, head_size]``) are split by heads: already so, or
    replicated graph inputs or constants each rank slices; the present ones (outputs 1 and 2)
    are split by heads. ``GroupQueryAttention``'s ``kv_num_heads`` must divide by the degree
    as ``num_heads`` does (the query heads of rank ``k`` then share its KV heads only). A
    ``MultiHeadAttention`` bias ``[3 * hidden]`` (a constant) is sliced in its 3 blocks.
    Every other input (masks, sequence lengths, rotary caches) must be replicated and
    broadcast over heads; a packed QKV, a relative position bias, a cache indirection or
    attention sinks are not handled (the node then runs replicated).
    """
    if len(node.inputs) < 3 or any(states[i] != Split(-1) for i in range(3)):
        return None
    if any(context.rank(node.inputs[i]) not in (3, None) for i in range(3)):
        return None  # keys/values [batch, heads, seq, size]: their last axis is no head axis
    used = {i for i, v in enumerate(node.inputs) if v is not None}
    mha = node.op_type == "MultiHeadAttention"
    past = (6, 7) if mha else (3, 4)
    allowed = {0, 1, 2, 3, 4, 6, 7} if mha else {0, 1, 2, 3, 4, 5, 6, 7, 8}
    whole = used - {0, 1, 2, *past}
    if not used <= allowed or any(not isinstance(states[i], Replicated) for i in whole):
        return None
    if mha and 4 in used and (context.rank(node.inputs[4]) or 0) > 2:
        return None  # a [batch, heads...] mask would need slicing
    slices = _past_slices(context, node, states, past)
    if slices is None:
        return None
    if mha and 3 in used:
        bias = _qkv_bias_slice(context, node, 3)
        widths = {(context.shape(node.inputs[i]) or (0,))[-1] for i in range(3)}
        shape = context.shape(node.inputs[3])
        if bias is None or shape is None or widths != {shape[0] // 3}:
            return None  # Q, K and V of unequal widths: the bias's blocks are not equal
        slices.append(bias)
    rewrites = [_heads(context, node, "num_heads")]
    if node.op_type == "GroupQueryAttention":
        rewrites.append(_heads(context, node, "kv_num_heads"))
    if any(r is None or r is True for r in rewrites):
        return None
    outputs: list[ShardState] = [Split(-1)]
    outputs += [_HEAD_AXIS] * (len(node.outputs) - 1)  # present key/value [batch, heads, seq, size]
    return RuleResult(
        tuple(outputs),
        weight_slices=tuple(slices),
        attribute_rewrites=tuple(r for r in rewrites if isinstance(r, AttributeRewrite)),
    )


@SEED_RULES.register("Attention", domain="com.microsoft")
def _seed_packed_attention(
    context: ShardingContext, node: ir.Node, blocks: int
) -> RuleResult | None:
    """``com.microsoft`` ``Attention``: a packed QKV projection and attention, split by heads.

    The weights ``[hidden, 3 * hidden]`` are sliced on their output axis in 3 blocks (Q, K
    and V, each by heads), the bias ``[3 * hidden]`` likewise, ``num_heads`` divided by the
    degree (and equal ``qkv_hidden_sizes``); the output ``[batch, seq, heads * head_size]``
    is split on its last axis: a column-parallel start that the output projection (a
    row-parallel ``MatMul``) closes with one ``AllReduce``. A past
    ``[2, batch, heads, past_seq, head_size]`` (a graph input or a constant, whole) is sliced
    per rank on its heads axis; the present is split on it. Refused (the node runs
    replicated): ``num_heads`` not divisible by the degree, unequal ``qkv_hidden_sizes``, a
    mask with a heads axis, a past computed in the graph, a relative position bias, a past
    sequence length or a buffer shared by past and present.
    """
    inputs = node.inputs
    if blocks != 1 or len(inputs) < 2 or context.constant(inputs[0]) is not None:
        return None
    weight = context.constant(inputs[1])
    heads = _heads(context, node, "num_heads")
    if inputs[1] is None or weight is None or weight.ndim != 2 or weight.shape[1] % 3:
        return None
    if not isinstance(heads, AttributeRewrite) or not isinstance(heads.old, int):
        return None
    width = weight.shape[1] // 3
    if width % heads.old:
        return None  # no whole head size
    rewrites = [heads]
    sizes = _attr_ints(node, "qkv_hidden_sizes")
    if sizes is not None:
        if sizes != [width] * 3:
            return None  # unequal Q, K and V widths: the weight's blocks are not equal
        part = width // context.degree
        rewrites.append(AttributeRewrite(node, "qkv_hidden_sizes", tuple(sizes), (part,) * 3))
    used = {i for i, v in enumerate(inputs) if v is not None}
    if not used <= {0, 1, 2, 3, 4} or _attr_int(node, "past_present_share_buffer", 0):
        return None  # a relative position bias, a past sequence length, a shared buffer
    if 3 in used:
        mask_rank = context.rank(inputs[3])
        if mask_rank is None or (mask_rank == 4 and not _broadcasts(context, inputs[3], -3)):
            return None  # a [batch, heads, ...] mask would need slicing
    slices = [WeightSlice(inputs[1], 1, context.degree, 3)]
    if 4 in used:  # the past [2, batch, heads, past_seq, head_size]: each rank its heads
        past = _slice_whole_input(context, inputs[4], _HEAD_AXIS)
        if past is None or context.rank(inputs[4]) != 5:
            return None
        slices.append(past)
    if 2 in used:
        bias = _qkv_bias_slice(context, node, 2)
        if bias is None or context.shape(inputs[2]) != (3 * width,):
            return None
        slices.append(bias)
    return RuleResult(
        (Split(-1),) + (_HEAD_AXIS,) * (len(node.outputs) - 1),
        weight_slices=tuple(slices),
        attribute_rewrites=tuple(rewrites),
    )


@RULES.register("Attention")
def _onnx_attention(
    context: ShardingContext, node: ir.Node, states: Sequence[ShardState]
) -> RuleResult | None:
    """ONNX ``Attention`` (opset 23): Q, K, V split by heads.

    4-D inputs ``[batch, heads, seq, size]`` split on axis ``-3``; 3-D inputs
    ``[batch, seq, heads * size]`` split on their last axis, with ``q_num_heads`` and
    ``kv_num_heads`` rewritten. The mask must broadcast over heads. Past keys/values (inputs 4
    and 5, ``[batch, kv_heads, past_seq, size]``) are split by heads: already so, or
    replicated graph inputs or constants each rank slices; the present ones (outputs 1 and 2)
    are split by heads. The QK product output (3) is not handled.
    """
    q_rank = context.rank(node.inputs[0])
    if q_rank not in (3, 4) or len(node.inputs) < 3:
        return None
    head_axis = -3 if q_rank == 4 else -1
    if any(states[i] != Split(head_axis) for i in range(3)):
        return None
    rewrites: list[AttributeRewrite] = []
    if q_rank == 3:
        for name in ("q_num_heads", "kv_num_heads"):
            found = _heads(context, node, name)
            if not isinstance(found, AttributeRewrite):
                return None
            rewrites.append(found)
    used = {i for i, v in enumerate(node.inputs) if v is not None}
    if not used <= {0, 1, 2, 3, 4, 5}:
        return None
    # The mask is [batch or 1, heads or 1, q_seq, kv_seq] (or shorter): heads are axis -3.
    if 3 in used and (
        not isinstance(states[3], Replicated) or not _broadcasts(context, node.inputs[3], -3)
    ):
        return None
    slices = _past_slices(context, node, states, (4, 5))
    if slices is None:
        return None
    if len(node.outputs) > 3 and _read(node.outputs[3]):
        return None  # the QK product: not handled
    outputs: list[ShardState] = [Split(head_axis)]
    outputs += [_HEAD_AXIS] * min(2, len(node.outputs) - 1)  # present key/value
    outputs += [REPLICATED] * (len(node.outputs) - len(outputs))
    return RuleResult(
        tuple(outputs), weight_slices=tuple(slices), attribute_rewrites=tuple(rewrites)
    )
