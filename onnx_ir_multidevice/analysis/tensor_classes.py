"""Tensor classes: what a value costs when it is needed on a later pipeline stage.

Rules, applied to every value of a graph (see ``ARCHITECTURE.md``, "Tensor classes"):

* **forwarded** -- graph inputs (and, when a subgraph is analysed on its own, the outer-scope
  values it reads). Every stage may read them; the runtime hands them to each stage. A graph
  input that also has an initializer (a default value, as in IR < 4 models) is forwarded: the
  caller may override it.
* **replicable** -- values a stage can recompute itself, so they never count as a transfer:

  - *constant-derived*: no graph input in the value's cone (initializers, ``Constant``
    outputs, anything computed only from them, however expensive);
  - *cheap input-derived*: the cone contains graph inputs but no large constant and no
    heavy op (:data:`HEAVY_OPS`): masks, position ids, shape arithmetic, index tensors. A
    constant (an initializer or ``Constant``) is large at ``large_constant_bytes`` or more,
    except an *index table* (:data:`INDEX_TABLE_DTYPES`: ``int32``, ``int64``, ``bool``),
    large only at ``index_table_bytes`` or more: a gather from a table of positions or
    strides (the dynamo exporter's ``as_strided`` index, ``Range(batch)`` read through an
    ``int64`` table) is index arithmetic each stage redoes, not model computation.

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
    "DEFAULT_INDEX_TABLE_BYTES",
    "DEFAULT_LARGE_CONSTANT_BYTES",
    "HEAVY_OPS",
    "INDEX_TABLE_DTYPES",
    "NONDETERMINISTIC_OPS",
    "TensorClass",
    "classify_values",
    "default_classes",
    "graph_uses",
    "node_uses",
]

import enum
import math
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import compress, islice, repeat

import onnx_ir as ir

from onnx_ir_multidevice.analysis.ops import (
    ATTENTION_OPS,
    CONV_OPS,
    GEMM_OPS,
    MATMUL_OPS,
    OTHER_HEAVY_OPS,
    RECURRENT_OPS,
)
from onnx_ir_multidevice.analysis.shape_reads import (
    SHAPE_READ_OPS,
    ShapeRead,
    prove_shape_reads,
)
from onnx_ir_multidevice.graph.dtypes import dtype_bits
from onnx_ir_multidevice.graph.index import (
    GraphIndex,
    ResultKey,
    graph_uses,
    holds_subgraphs,
    node_subgraphs,
    node_uses,
)


class TensorClass(enum.Enum):
    """How a value reaches a stage that needs it."""

    FORWARDED = "forwarded"
    """A graph input: the runtime hands it to every stage."""

    REPLICABLE = "replicable"
    """Recomputed by each stage that needs it (constant-derived or cheap input-derived)."""

    ACTIVATION = "activation"
    """Computed once, by one stage; a later stage needs it sent over."""


HEAVY_OPS: frozenset[str] = (
    MATMUL_OPS | GEMM_OPS | CONV_OPS | ATTENTION_OPS | RECURRENT_OPS | OTHER_HEAVY_OPS
)
"""Op types (any domain) whose presence in a cone makes an input-derived value an activation.

Every family of :mod:`~onnx_ir_multidevice.analysis.ops`: matrix products, ``Gemm``,
convolutions, attention, recurrent layers and the other heavy ops.
"""

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

DEFAULT_INDEX_TABLE_BYTES = 4 << 20
"""An index table (:data:`INDEX_TABLE_DTYPES`) of at least this many bytes (4 MiB) is large.

Index tables are positions, strides, gather indices and masks: the dynamo exporter writes
the index of an ``as_strided`` as an ``int64`` table (1 KiB for 128 rows) read through
``Range(batch)``; GPT-2 keeps a causal mask per layer, a ``bool`` table of
``n_positions`` squared (1 MiB at 1,024 positions) sliced to the sequence length. Below
4 MiB a table is cheap for a stage to hold and read again, and recomputing from it spares
sending its result across every later boundary.
"""

INDEX_TABLE_DTYPES: frozenset[int] = frozenset(
    {int(ir.DataType.INT32), int(ir.DataType.INT64), int(ir.DataType.BOOL)}
)
"""``TensorProto`` data types of index tables: integer indices and boolean masks (weights are
floating point, and quantised weights ``int8``/``uint8``: those stay under
:data:`DEFAULT_LARGE_CONSTANT_BYTES`)."""

# Cone flags, OR-ed along the graph.
_INPUT = 1  # a graph input (or an outer value) is in the cone
_COSTLY = 2  # a heavy op or a large constant is in the cone
_PINNED = 4  # a non-deterministic op is in the cone
# A graph constant whose size was not computed yet is in the cone (see :func:`slot_flags`).
_UNSIZED = 8

_BITS: dict[int, int | None] = {}
"""Bits of one element by ``TensorProto`` data type (``None``: no fixed size), filled lazily."""
_CONST_VALUE = operator.attrgetter("const_value")
_OP_TYPE = operator.attrgetter("op_type")
_FIRST = operator.itemgetter(0)
_NAME = operator.attrgetter("name")
_OP_IDENTIFIER = operator.methodcaller("op_identifier")


def _bits(data_type: int) -> int | None:
    """Bits of one element of a ``TensorProto`` data type; ``None`` for strings."""
    try:
        return _BITS[data_type]
    except KeyError:
        pass
    try:
        bits: int | None = dtype_bits(ir.DataType(data_type))
    except ValueError:  # STRING, UNDEFINED or a type onnx-ir does not know
        bits = None
    _BITS[data_type] = bits
    return bits


def _nbytes(tensor: ir.TensorProtocol) -> tuple[int, int]:
    """``(tensor.nbytes, data type)``, without building a shape object for a proto tensor."""
    if type(tensor) is ir.TensorProtoTensor:
        proto = tensor.raw
        bits = _bits(proto.data_type)
        if bits is not None:
            return (math.prod(proto.dims) * bits + 7) // 8, proto.data_type
    return tensor.nbytes, int(tensor.dtype)


class _Judge:
    """Per-node and per-constant flags, with the per-function cache."""

    def __init__(
        self,
        heavy_ops: Collection[str],
        nondeterministic_ops: Collection[str],
        large_constant_bytes: int,
        functions: Mapping[ir.OperatorIdentifier, ir.Function] | None,
        index_table_bytes: int = DEFAULT_INDEX_TABLE_BYTES,
    ) -> None:
        self.heavy_ops = frozenset(heavy_ops)
        self.nondeterministic_ops = frozenset(nondeterministic_ops)
        self.large_constant_bytes = large_constant_bytes
        self.index_table_bytes = index_table_bytes
        self.functions = functions or {}
        self._function_flags: dict[ir.OperatorIdentifier, int] = {}

    def is_default(self) -> bool:
        """Whether the rules are the default ones (so results may be cached on an index)."""
        return (
            self.heavy_ops == HEAVY_OPS
            and self.nondeterministic_ops == NONDETERMINISTIC_OPS
            and self.large_constant_bytes == DEFAULT_LARGE_CONSTANT_BYTES
            and self.index_table_bytes == DEFAULT_INDEX_TABLE_BYTES
        )

    def is_large(self, tensor: ir.TensorProtocol | None) -> bool:
        """Whether a constant is large (an index table by its own limit); unknown: large."""
        if tensor is None:
            return True
        nbytes, data_type = _nbytes(tensor)
        if data_type in INDEX_TABLE_DTYPES:
            return nbytes >= self.index_table_bytes
        return nbytes >= self.large_constant_bytes

    def constant_flags(self, value: ir.Value) -> int:
        """Flags of an initializer: costly when large or of unknown size."""
        return _COSTLY if self.is_large(value.const_value) else 0

    def _constant_node_flags(self, node: ir.Node) -> int:
        attr = node.attributes.get("value")
        if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
            return _COSTLY if self.is_large(attr.value) else 0
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
        if holds_subgraphs(node):
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


#: Class of a node's outputs by their cone flags (flags are 0..15; see :func:`slot_flags`
#: for :data:`_UNSIZED`, which does not change the class where it is left).
_CLASS_BY_FLAGS: tuple[TensorClass, ...] = tuple(_class_of(f & ~_UNSIZED) for f in range(16))


def _external_flags(index: GraphIndex) -> list[int]:
    """Cone flags of the external slots: graph inputs, initializers, outer values.

    The graph's constants get :data:`_UNSIZED` (:func:`slot_flags` sizes the few that
    matter), which costs no tensor read.
    """
    graph = index.graph
    external = index.external
    inputs = graph.inputs
    initializers = getattr(graph.initializers, "data", graph.initializers)
    flags = [_INPUT] * len(external)  # graph inputs, outer-scope (or dangling) values
    n = len(index.nodes)
    external_slot = index.external_slot
    # Initializers of this graph that the nodes read (onnx-ir keeps each initializer under
    # its own name, so a lookup by identity is enough).
    constants = [
        slot - n for slot in map(external_slot.get, initializers.values()) if slot is not None
    ]
    overridable = {external_slot[v] - n for v in inputs if v in external_slot}
    if overridable.intersection(constants):
        # An initializer that is also a graph input is a default value: forwarded.
        constants = [k for k in constants if k not in overridable]
    for k in constants:
        flags[k] = _UNSIZED
    return flags


# The default-rule results kept on a GraphIndex (only this module reads and fills them).
_SLOT_FLAGS: ResultKey[list[int]] = ResultKey("tensor_classes.slot_flags")
"""Cone flags of each slot under the default rules (see :func:`slot_flags`)."""
_SLOT_CLASSES: ResultKey[list[TensorClass]] = ResultKey("tensor_classes.slot_classes")
"""Default class of each node's outputs, by position (see :func:`slot_classes`)."""
_DEFAULT_CLASSES: ResultKey[dict[ir.Value, TensorClass]] = ResultKey("tensor_classes.default")
"""Default class of every value (see :func:`default_classes`)."""


def slot_flags(index: GraphIndex, judge: _Judge, extra: Sequence[int] | None = None) -> list[int]:
    """Cone flags of every slot of ``index`` (node positions, then external values).

    The graph's constants are first left unsized (:data:`_UNSIZED`): their size only matters
    for a node whose cone holds a graph input and an unsized constant but no heavy op, large
    ``Constant`` or non-deterministic op. Only when such a node exists are sizes read and
    flags computed again, for the *undecided* nodes only (no :data:`_COSTLY` or
    :data:`_PINNED` in their cone: sizing cannot change the class of the others), which read
    nothing but undecided nodes and external values; only the constants they read are sized.
    Flags are meant for :data:`_CLASS_BY_FLAGS`: a node's class is the same either way (its
    flags, and those of the external slots, may keep :data:`_UNSIZED`).

    A ``Shape``/``Size`` node reading an activation whose requested dims the graph inputs'
    shapes determine (:mod:`~onnx_ir_multidevice.analysis.shape_reads`) counts as reading
    the graph inputs only: when there is one, the flags are propagated again with its reads
    replaced so (:func:`shape_read_positions` lists them).

    ``extra`` (by node position) is OR-ed into each node's own flags and propagates with
    them: bits above the 4 cone flags let a caller propagate its own marks (cut tensors) in
    the same walk; mask them off (``& 15``) before :data:`_CLASS_BY_FLAGS`.
    """
    own = _own_flags(index, judge)
    if extra is not None:
        own = list(map(operator.or_, own, extra))
    reads = index.reads
    flags = _flags_with(index, judge, own, reads)
    proven = _proven_shape_reads(index, flags)
    if not proven:
        return flags
    reads_list = list(reads)
    own = list(own)
    for i in proven:
        reads_list[i] = ()
        own[i] |= _INPUT
    return _flags_with(index, judge, own, reads_list)


def _flags_with(
    index: GraphIndex, judge: _Judge, own: Sequence[int], reads: Sequence[Sequence[int]]
) -> list[int]:
    """:func:`slot_flags` for given own flags and reads (``index.reads`` or a copy)."""
    flags = _propagate(reads, own, _external_flags(index))
    ambiguous = _INPUT | _UNSIZED
    n = len(index.nodes)
    undecided = list(
        compress(
            range(n), map(operator.not_, map(operator.and_, flags, repeat(_COSTLY | _PINNED, n)))
        )
    )
    if not any(flags[i] & ambiguous == ambiguous for i in undecided):
        return flags
    external = index.external
    for slot in {p for i in undecided for p in reads[i] if p >= n}:
        if flags[slot] == _UNSIZED:  # a constant of the graph (see _external_flags)
            flags[slot] = judge.constant_flags(external[slot - n])
    for i in undecided:  # in topological order; each reads only undecided and external slots
        value = own[i]
        for p in reads[i]:
            value |= flags[p]
        flags[i] = value
    return flags


_SHAPE_READS: ResultKey[dict[int, ShapeRead]] = ResultKey("tensor_classes.shape_reads")
"""Proven shape reads of an index, by position (every proof tried on that index, kept)."""

_NO_SHAPE_READS: dict[int, ShapeRead] = {}


def _proven_shape_reads(index: GraphIndex, flags: Sequence[int]) -> list[int]:
    """Positions of the ``Shape``/``Size`` nodes reading an activation, proven input reads.

    Proven by :func:`~.shape_reads.prove_shape_reads`, tried once per node and index.
    """
    op_types = index.op_types
    if "Shape" not in op_types and "Size" not in op_types:
        return []
    by_flags = _CLASS_BY_FLAGS
    activation = TensorClass.ACTIVATION
    candidates = [
        i
        for i, op_type in enumerate(op_types)
        if op_type in SHAPE_READ_OPS
        and not flags[i] & _PINNED
        and by_flags[flags[i] & _CONE_MASK] is activation
    ]
    if not candidates:
        return []
    tried = index.memo(_SHAPE_READS, dict)
    attempted = index.memo(_ATTEMPTED, set)
    todo = [i for i in candidates if i not in attempted]
    if todo:
        tried.update(prove_shape_reads(index, todo))
        attempted.update(todo)
    return [i for i in candidates if i in tried]


_ATTEMPTED: ResultKey[set[int]] = ResultKey("tensor_classes.shape_reads_attempted")
"""Positions of an index whose shape-read proof was tried."""


def shape_reads(index: GraphIndex) -> Mapping[ir.Node, ShapeRead]:
    """The proven shape reads of ``index`` that the default classes count as input reads.

    A node listed here is replicable although it reads an activation (see
    :func:`slot_flags`): a stage that does not hold the activation recomputes it from the
    graph inputs of :attr:`~.shape_reads.ShapeRead.dims`.
    """
    by_slot = slot_classes(index)
    nodes = index.nodes
    replicable = TensorClass.REPLICABLE
    return {
        nodes[i]: read
        for i, read in (index.result(_SHAPE_READS) or _NO_SHAPE_READS).items()
        if by_slot[i] is replicable
    }


def staging_reads(
    index: GraphIndex, classes: Mapping[ir.Value, TensorClass] | None = None
) -> Sequence[Sequence[int]]:
    """The slots each node reads *for staging*: a replicable node reads no activation.

    As :attr:`GraphIndex.reads`, except for those nodes. Under the default classes such a
    node is a proven shape read (:func:`shape_reads`): it is recomputed from the graph
    inputs' shapes wherever it runs, so it neither follows the activation's stage nor makes
    the activation cross a boundary.

    Args:
        index: The index of the graph.
        classes: The classes in use (default: the default classes of ``index``).

    Returns:
        ``index.reads`` itself when no node is such, else a copy with those reads removed.
    """
    n = len(index.nodes)
    activation, replicable = TensorClass.ACTIVATION, TensorClass.REPLICABLE
    if classes is None or classes is kept_default_classes(index):
        by_slot = slot_classes(index)
        readers = index.result(_SHAPE_READS)
        if not readers:
            return index.reads
        candidates: Iterable[int] = readers
    else:
        get = classes.get
        by_slot = [
            (get(node.outputs[0], activation) if node.outputs else activation)
            for node in index.nodes
        ]
        candidates = range(n)
    reads = index.reads
    result: list[tuple[int, ...]] | None = None
    for i in candidates:
        if by_slot[i] is not replicable:
            continue
        slots = reads[i]
        kept = tuple(p for p in slots if p >= n or by_slot[p] is not activation)
        if len(kept) != len(slots):
            if result is None:
                result = list(reads)
            result[i] = kept
    return reads if result is None else result


def _own_flags(index: GraphIndex, judge: _Judge) -> list[int]:
    """The flags each node adds by itself (:meth:`_Judge.own_flags`), by position."""
    nodes = index.nodes
    with_bodies = {node for node, _ in index.bodies}
    own_flags = judge.own_flags
    if judge.functions:
        # Calls to local functions are judged from their bodies: memo by op identifier.
        keys = list(map(_OP_IDENTIFIER, nodes))
        memo: dict = {}
        result = []
        for i, node in enumerate(nodes):
            key = keys[i]
            own = memo.get(key)
            if own is None or (with_bodies and node in with_bodies):
                own = own_flags(node)
                if not (key[1] == "Constant" and key[0] == "") and node not in with_bodies:
                    memo[key] = own
            result.append(own)
        return result
    # Without functions a node's own flags depend on its op type alone, except for
    # ``Constant`` (its tensor) and nodes with subgraphs (their bodies).
    op_types = index.op_types
    by_type: dict[str, int] = {}
    for op_type in set(op_types) - {"Constant"}:
        first = nodes[op_types.index(op_type)]
        by_type[op_type] = own_flags(first) if first not in with_bodies else -1
    special = with_bodies or "Constant" in op_types or -1 in by_type.values()
    if not special:
        return list(map(by_type.__getitem__, op_types))
    result = []
    for i, op_type in enumerate(op_types):
        own = by_type.get(op_type, -1)
        if own == -1 or (with_bodies and nodes[i] in with_bodies):
            own = own_flags(nodes[i])
        result.append(own)
    return result


def _propagate(
    reads: Sequence[Sequence[int]], own: Sequence[int], external_flags: list[int]
) -> list[int]:
    """OR each node's own flags with those of everything it reads, in topological order."""
    flags = [0] * len(own)
    flags.extend(external_flags)
    for i, slots in enumerate(reads):
        value = own[i]
        for p in slots:
            value |= flags[p]
        flags[i] = value
    return flags


def classify_values(
    graph: ir.Graph,
    *,
    heavy_ops: Iterable[str] = HEAVY_OPS,
    nondeterministic_ops: Iterable[str] = NONDETERMINISTIC_OPS,
    large_constant_bytes: int = DEFAULT_LARGE_CONSTANT_BYTES,
    functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None,
    index: GraphIndex | None = None,
    index_table_bytes: int = DEFAULT_INDEX_TABLE_BYTES,
) -> dict[ir.Value, TensorClass]:
    """Classify every value of ``graph`` as forwarded, replicable or activation.

    Args:
        graph: The graph (normally the main graph of a model).
        heavy_ops: Op types that make an input-derived value an activation.
        nondeterministic_ops: Op types whose outputs (and everything computed from them)
            are always activations.
        large_constant_bytes: Initializers and ``Constant`` tensors of at least this many
            bytes are large: an input-derived value reading one is an activation.
        index_table_bytes: The same limit for index tables (:data:`INDEX_TABLE_DTYPES`).
        functions: The model's local functions (``model.functions``), so that a call is
            judged from the function body. Without it a call is judged by its op type only.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``,
            when already built (its ``functions`` are ignored here: ``functions`` counts).

    Returns:
        A class for each graph input, initializer and node output of ``graph``, and for the
        outer-scope values its nodes read when ``graph`` is a subgraph (forwarded). Insertion
        order: inputs, initializers, outer values, then node outputs in topological order.

    Raises:
        AnalysisError: If the graph has a cycle.
        ValueError: If ``index`` was built for another graph.
    """
    judge = _Judge(
        tuple(heavy_ops),
        tuple(nondeterministic_ops),
        large_constant_bytes,
        functions,
        index_table_bytes,
    )
    if index is None:
        index = GraphIndex.build(graph, functions=functions)
    else:
        index.check_graph(graph)
    flags = slot_flags(index, judge)
    forwarded = TensorClass.FORWARDED
    replicable = TensorClass.REPLICABLE
    inputs = graph.inputs
    classes: dict[ir.Value, TensorClass] = dict.fromkeys(inputs, forwarded)
    # Initializers not already listed as inputs (an input keeps its place and class).
    classes.update(
        dict.fromkeys(getattr(graph.initializers, "data", graph.initializers).values(), replicable)
    )
    classes.update(dict.fromkeys(inputs, forwarded))
    # Outer-scope (or dangling) values: they come from outside this graph.
    external = index.external
    classes.update(
        dict.fromkeys(
            compress(external, map(operator.not_, map(classes.__contains__, external))), forwarded
        )
    )
    by_flags = _CLASS_BY_FLAGS
    nodes = index.nodes
    outputs_list = index.outputs_at
    node_classes = list(map(by_flags.__getitem__, islice(flags, len(nodes))))
    if list(map(len, outputs_list)).count(1) == len(nodes):
        classes.update(zip(map(_FIRST, outputs_list), node_classes, strict=True))
    else:
        for outputs, node_class in zip(outputs_list, node_classes, strict=True):
            for output in outputs:
                classes[output] = node_class
    if judge.is_default() and functions is index.functions and index.result(_SLOT_FLAGS) is None:
        index.keep(_SLOT_FLAGS, flags)
    return classes


def default_classes(index: GraphIndex) -> dict[ir.Value, TensorClass]:
    """:func:`classify_values` of ``index.graph`` with the default rules, computed once.

    Calls are judged by ``index.functions``. The result is kept on ``index``
    (see :meth:`~onnx_ir_multidevice.graph.index.GraphIndex.memo`) and shared by every
    caller: do not modify it.

    Args:
        index: The :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of the graph.

    Returns:
        The class of every value (see :func:`classify_values`).
    """
    cached = index.result(_DEFAULT_CLASSES)
    if cached is None:
        cached = classify_values(index.graph, functions=index.functions, index=index)
        index.keep(_DEFAULT_CLASSES, cached)
    return cached


def kept_default_classes(index: GraphIndex) -> dict[ir.Value, TensorClass] | None:
    """The :func:`default_classes` of ``index`` when already computed, else ``None``.

    A caller given classes tells the default ones (which it may read by slot, see
    :func:`slot_classes`) by identity with this result.
    """
    return index.result(_DEFAULT_CLASSES)


def has_default_flags(index: GraphIndex) -> bool:
    """Whether the cone flags behind :func:`slot_classes` are computed for ``index``."""
    return index.result(_SLOT_FLAGS) is not None


def slot_classes(index: GraphIndex) -> list[TensorClass]:
    """Class of the outputs of each node of ``index`` by position (default rules).

    Uses ``index.functions``; computed once per index.
    """
    cached = index.result(_SLOT_CLASSES)
    if cached is None:
        flags = index.result(_SLOT_FLAGS)
        if flags is None:
            judge = _Judge(
                HEAVY_OPS, NONDETERMINISTIC_OPS, DEFAULT_LARGE_CONSTANT_BYTES, index.functions
            )
            flags = index.keep(_SLOT_FLAGS, slot_flags(index, judge))
        by_flags = _CLASS_BY_FLAGS
        cached = index.keep(_SLOT_CLASSES, [by_flags[f] for f in flags[: len(index.nodes)]])
    return cached


#: Cone flags occupy the low 4 bits; callers' marks (see :func:`propagate_marks`) go above.
MARK_SHIFT = 4
_CONE_MASK = (1 << MARK_SHIFT) - 1


def propagate_marks(index: GraphIndex, marks: Sequence[int]) -> list[int]:
    """OR caller marks down the graph: each node gets the marks of everything it reads.

    ``marks[i]`` (by node position; multiples of ``1 << MARK_SHIFT``) is node ``i``'s own
    mark. When the default tensor classes of ``index`` are not computed yet, they are
    computed in the same walk (and cached for :func:`slot_classes`).

    Returns:
        By slot (node positions, then external values): the node's own marks OR-ed with
        those of every slot it reads, transitively. Bits below ``1 << MARK_SHIFT`` are not
        marks (mask them off).
    """
    n = len(index.nodes)
    if index.result(_SLOT_CLASSES) is None and index.result(_SLOT_FLAGS) is None:
        judge = _Judge(
            HEAVY_OPS, NONDETERMINISTIC_OPS, DEFAULT_LARGE_CONSTANT_BYTES, index.functions
        )
        flags = slot_flags(index, judge, marks)
        by_flags = _CLASS_BY_FLAGS
        index.keep(
            _SLOT_CLASSES,
            list(
                map(by_flags.__getitem__, map(operator.and_, islice(flags, n), repeat(_CONE_MASK)))
            ),
        )
        return flags
    flags = list(marks)
    flags.extend(repeat(0, len(index.external)))
    for i, slots in enumerate(staging_reads(index)):
        own = flags[i]
        for p in slots:
            own |= flags[p]
        flags[i] = own
    return flags
