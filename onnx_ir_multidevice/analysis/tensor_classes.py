"""Tensor classes: what a value costs when it is needed on a later pipeline stage.

Rules, applied to every value of a graph (see ``ARCHITECTURE.md``, "Tensor classes"):

* **forwarded** -- graph inputs (and, when a subgraph is analysed on its own, the outer-scope
  values it reads). Every stage may read them; the runtime hands them to each stage. A graph
  input that also has an initializer (a default value, as in IR < 4 models) is forwarded: the
  caller may override it.
* **replicable** -- values a stage can recompute itself, so they never count as a transfer:

  - *constant-derived*: no graph input in the value's cone (initializers, ``Constant``
    outputs, anything computed only from them, however expensive);
  - *cheap input-derived*: the cone contains graph inputs but no large constant (an
    initializer or ``Constant`` of at least ``large_constant_bytes``) and no heavy op
    (:data:`HEAVY_OPS`): masks, position ids, shape arithmetic.

* **activation** -- everything else. A value whose cone contains a non-deterministic op
  (:data:`NONDETERMINISTIC_OPS`) is always an activation: two stages recomputing it would
  disagree.

The cone of a value is everything it is computed from, outer-scope values read inside
subgraph bodies included. A node with subgraphs (``If``, ``Loop``, ``Scan``) is judged as
one op: it is heavy when its op type is heavy or any node in its bodies (recursively) is
heavy, reads a large constant or is non-deterministic; so a cheap body over replicable inputs
gives replicable outputs. A call to a model-local function is judged the same way from the
function's body when ``functions`` is given. All of a node's outputs get the same class.

One pass in topological order: O(N + E) over the graph and its subgraphs.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_LARGE_CONSTANT_BYTES",
    "HEAVY_OPS",
    "NONDETERMINISTIC_OPS",
    "TensorClass",
    "classify_values",
    "graph_uses",
    "node_uses",
]

import enum
from collections.abc import Collection, Iterable, Mapping

import onnx_ir as ir

from onnx_ir_multidevice.analysis.uses import (
    graph_uses,
    node_subgraphs,
    node_uses,
    topological_order,
)


class TensorClass(enum.Enum):
    """How a value reaches a stage that needs it."""

    FORWARDED = "forwarded"
    """A graph input: the runtime hands it to every stage."""

    REPLICABLE = "replicable"
    """Recomputed by each stage that needs it (constant-derived or cheap input-derived)."""

    ACTIVATION = "activation"
    """Computed once, by one stage; a later stage needs it sent over."""


HEAVY_OPS: frozenset[str] = frozenset(
    {
        # Matrix products and convolutions (float and quantised).
        "MatMul",
        "Gemm",
        "Einsum",
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "DeformConv",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "MatMulInteger16",
        "MatMulIntegerToFloat",
        "MatMulNBits",
        "MatMulBnb4",
        "FusedMatMul",
        "FusedConv",
        "FusedGemm",
        "QGemm",
        "DynamicQuantizeMatMul",
        "GatherBlockQuantized",
        # Attention and recurrent layers.
        "Attention",
        "MultiHeadAttention",
        "GroupQueryAttention",
        "PackedAttention",
        "PackedMultiHeadAttention",
        "QAttention",
        "DecoderMaskedMultiHeadAttention",
        "SparseAttention",
        "LSTM",
        "GRU",
        "RNN",
        "MoE",
        "QMoE",
    }
)
"""Op types (any domain) whose presence in a cone makes an input-derived value an activation."""

NONDETERMINISTIC_OPS: frozenset[str] = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)
"""Op types (any domain) whose outputs two stages could not recompute identically."""

DEFAULT_LARGE_CONSTANT_BYTES = 1024
"""An initializer or ``Constant`` of at least this many bytes (1 KiB) counts as large.

Cheap input-derived values (masks, position ids, shape arithmetic) are built from scalars,
shape vectors and small index tables; a value that reads a weight-sized tensor (an embedding
table, even a LayerNorm scale or a bias of 256 float32) is model computation. The default is
far below any real weight and above any shape vector. A constant whose size is unknown (no
tensor attached) counts as large.
"""

# Cone flags, OR-ed along the graph.
_INPUT = 1  # a graph input (or an outer value) is in the cone
_COSTLY = 2  # a heavy op or a large constant is in the cone
_PINNED = 4  # a non-deterministic op is in the cone


class _Judge:
    """Per-node and per-constant flags, with the per-function cache."""

    def __init__(
        self,
        heavy_ops: Collection[str],
        nondeterministic_ops: Collection[str],
        large_constant_bytes: int,
        functions: Mapping[ir.OperatorIdentifier, ir.Function] | None,
    ) -> None:
        self.heavy_ops = frozenset(heavy_ops)
        self.nondeterministic_ops = frozenset(nondeterministic_ops)
        self.large_constant_bytes = large_constant_bytes
        self.functions = functions or {}
        self._function_flags: dict[ir.OperatorIdentifier, int] = {}

    def constant_flags(self, value: ir.Value) -> int:
        """Flags of an initializer: costly when large or of unknown size."""
        tensor = value.const_value
        if tensor is None or tensor.nbytes >= self.large_constant_bytes:
            return _COSTLY
        return 0

    def _constant_node_flags(self, node: ir.Node) -> int:
        attr = node.attributes.get("value")
        if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
            tensor = attr.value
            if tensor is not None and tensor.nbytes < self.large_constant_bytes:
                return 0
            return _COSTLY
        if attr is None and any(
            name in node.attributes
            for name in ("value_float", "value_floats", "value_int", "value_ints", "value_string")
        ):
            return 0  # scalars and short lists held in attributes are small
        if attr is None and "value_strings" in node.attributes:
            return 0
        return _COSTLY  # sparse or reference-attribute constants: size not known here

    def own_flags(self, node: ir.Node) -> int:
        """Flags a node adds to the cone by itself (its bodies included, not its inputs)."""
        flags = 0
        if node.op_type in self.heavy_ops:
            flags |= _COSTLY
        if node.op_type in self.nondeterministic_ops:
            flags |= _PINNED
        if node.op_type == "Constant" and node.domain == "":
            flags |= self._constant_node_flags(node)
        function_id = node.op_identifier()
        if function_id in self.functions:
            flags |= self._function(function_id)
        for body in node_subgraphs(node):
            flags |= self._body_flags(body)
        return flags

    def _body_flags(self, body: ir.Graph | ir.Function) -> int:
        flags = 0
        if isinstance(body, ir.Graph):
            for initializer in body.initializers.values():
                flags |= self.constant_flags(initializer)
        for inner in body:
            flags |= self.own_flags(inner)  # recurses into nested bodies
        return flags & (_COSTLY | _PINNED)

    def _function(self, function_id: ir.OperatorIdentifier) -> int:
        cached = self._function_flags.get(function_id)
        if cached is not None:
            return cached
        self._function_flags[function_id] = 0  # breaks (invalid) recursive calls
        flags = self._body_flags(self.functions[function_id])
        self._function_flags[function_id] = flags
        return flags


def _class_of(flags: int) -> TensorClass:
    if flags & _PINNED:
        return TensorClass.ACTIVATION
    if flags & _INPUT and flags & _COSTLY:
        return TensorClass.ACTIVATION
    return TensorClass.REPLICABLE


def classify_values(
    graph: ir.Graph,
    *,
    heavy_ops: Iterable[str] = HEAVY_OPS,
    nondeterministic_ops: Iterable[str] = NONDETERMINISTIC_OPS,
    large_constant_bytes: int = DEFAULT_LARGE_CONSTANT_BYTES,
    functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None,
) -> dict[ir.Value, TensorClass]:
    """Classify every value of ``graph`` as forwarded, replicable or activation.

    Args:
        graph: The graph (normally the main graph of a model).
        heavy_ops: Op types that make an input-derived value an activation.
        nondeterministic_ops: Op types whose outputs (and everything computed from them)
            are always activations.
        large_constant_bytes: Initializers and ``Constant`` tensors of at least this many
            bytes are large: an input-derived value reading one is an activation.
        functions: The model's local functions (``model.functions``), so that a call is
            judged from the function body. Without it a call is judged by its op type only.

    Returns:
        A class for each graph input, initializer and node output of ``graph``, and for the
        outer-scope values its nodes read when ``graph`` is a subgraph (forwarded). Insertion
        order: inputs, initializers, outer values, then node outputs in topological order.

    Raises:
        AnalysisError: If the graph has a cycle.
    """
    judge = _Judge(tuple(heavy_ops), tuple(nondeterministic_ops), large_constant_bytes, functions)
    uses = graph_uses(graph)
    flags: dict[ir.Value, int] = {}
    classes: dict[ir.Value, TensorClass] = {}
    for value in graph.inputs:
        flags[value] = _INPUT
        classes[value] = TensorClass.FORWARDED
    for value in graph.initializers.values():
        if value not in flags:
            flags[value] = judge.constant_flags(value)
            classes[value] = TensorClass.REPLICABLE
    order = topological_order(graph, uses)
    produced = {output for node in order for output in node.outputs}
    for node in order:
        for value in uses[node]:
            if value not in flags and value not in produced:
                # Outer-scope (or dangling) value: it comes from outside this graph.
                flags[value] = _INPUT
                classes[value] = TensorClass.FORWARDED
    for node in order:
        node_flags = judge.own_flags(node)
        for value in uses[node]:
            node_flags |= flags[value]
        node_class = _class_of(node_flags)
        for output in node.outputs:
            flags[output] = node_flags
            classes[output] = node_class
    return classes
