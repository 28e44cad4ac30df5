"""Which values a node reads, outer-scope captures of its subgraphs included.

A node with subgraph attributes (``If``, ``Loop``, ``Scan``...) reads more than its
:attr:`~onnx_ir.Node.inputs`: its bodies may read values of the enclosing graphs directly
(outer-scope captures), and a body's output may even *be* an outer value. For stage
assignment and boundary analysis such a read is a use of the parent node, because a body
runs with its parent. The helpers here list those reads once per node, in
O(size of the node and its bodies), so a whole graph costs O(N + E).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "AnalysisError",
    "CutListCache",
    "holds_subgraphs",
    "GraphIndex",
    "ResultKey",
    "graph_uses",
    "node_subgraphs",
    "node_uses",
    "topological_order",
    "value_consumers",
]

import dataclasses
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, islice, repeat
from typing import Any, Generic, TypeVar, cast

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyError
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.graph.fingerprint import GraphCache, node_list

_T = TypeVar("_T")
_INDEX_KEY = "GraphIndex.for_model"
"""Key of the index :meth:`GraphIndex.for_model` keeps in the graph's cache."""


class AnalysisError(OmnyError, ValueError):
    """A graph cannot be analysed as given (a cycle, a value read before it exists...)."""


_ATTRIBUTES = operator.attrgetter("attributes")
_PRODUCER = operator.methodcaller("producer")
_OUTPUTS = operator.attrgetter("outputs")
_INPUTS = operator.attrgetter("inputs")
_IO_ATTRIBUTES = operator.attrgetter("inputs", "outputs", "attributes.data")
_FIRST = operator.itemgetter(0)
_NAME = operator.attrgetter("name")


def _fast_name_getter() -> operator.attrgetter:
    """A getter of node and value names that skips the ``name`` property where it can.

    onnx-ir's :attr:`~onnx_ir.Node.name` and :attr:`~onnx_ir.Value.name` getters return the
    ``_name`` slot; reading the slot directly is several times faster on large graphs. Falls
    back to the property when a probe shows otherwise.
    """
    try:
        node = ir.Node("", "Identity", [], name="probe_node")
        value = ir.Value(name="probe_value")
        if node._name == node.name and value._name == value.name:
            return operator.attrgetter("_name")
    except Exception:  # noqa: BLE001 (any change in onnx-ir: use the property)
        pass
    return _NAME


#: ``name`` of a node or a value (see :func:`_fast_name_getter`).
_NAME_OF = _fast_name_getter()


def _fast_node_getter(*names: str) -> operator.attrgetter:
    """``attrgetter(*names)`` for nodes, reading the slots behind the properties where it can.

    onnx-ir's ``Node.inputs``, ``outputs``, ``attributes`` and ``op_type`` return the
    ``_inputs``... slots; a probe checks that before the slots are used.
    """
    public = operator.attrgetter(*names)
    try:
        private = operator.attrgetter(*("_" + name for name in names))
        probe = ir.Node("", "Identity", [ir.Value(name="probe_in")], name="probe_node")
        mine, theirs = private(probe), public(probe)
        if len(names) == 1:
            mine, theirs = (mine,), (theirs,)
        if all(a is b for a, b in zip(mine, theirs, strict=True)):
            return private
    except Exception:  # noqa: BLE001 (any change in onnx-ir: use the properties)
        pass
    return public


_FAST_IO_ATTRIBUTES = _fast_node_getter("inputs", "outputs", "attributes.data")
#: ``op_type`` of a node (see :func:`_fast_node_getter`).
OP_TYPE_OF = _fast_node_getter("op_type")
#: ``(domain, op_type, inputs, outputs, attributes)`` of a node, the attributes as a plain
#: ``dict`` (see :func:`_fast_node_getter`).
NODE_FIELDS_OF = _fast_node_getter("domain", "op_type", "inputs", "outputs", "attributes.data")
try:
    NODE_FIELDS_OF(ir.Node("", "Identity", [], name="probe_node"))
except AttributeError:  # attributes without a plain dict behind them: the mapping itself
    NODE_FIELDS_OF = operator.attrgetter("domain", "op_type", "inputs", "outputs", "attributes")
_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def _data(mapping: Any) -> Any:
    """The plain ``dict`` behind a :class:`collections.UserDict` (the mapping itself otherwise)."""
    return getattr(mapping, "data", mapping)


def holds_subgraphs(node: ir.Node) -> bool:
    """Whether ``node`` has a graph-valued attribute, without walking anything.

    Cheap for the common node with no attributes (one length test).
    """
    attributes = _data(node.attributes)
    if not attributes:
        return False
    for attr in attributes.values():
        if (
            isinstance(attr, ir.Attr)
            and (attr.type is _GRAPH or attr.type is _GRAPHS)
            and attr.value is not None
        ):
            return True
    return False


_VALUES = operator.methodcaller("values")
_TYPE = operator.attrgetter("type")


def _may_hold_graphs(attributes: Sequence[Any]) -> bool:
    """Whether an attribute mapping of ``attributes`` has a graph-typed attribute, in bulk."""
    if not any(attributes):
        return False
    try:
        types = set(map(_TYPE, chain.from_iterable(map(_VALUES, compress(attributes, attributes)))))
    except AttributeError:  # not onnx-ir attributes: ask each node
        return True
    return _GRAPH in types or _GRAPHS in types


def nodes_with_subgraphs(nodes: Sequence[ir.Node]) -> list[ir.Node]:
    """The nodes of ``nodes`` that :func:`holds_subgraphs`, the common case (none) in bulk."""
    attributes = list(map(_data, map(_ATTRIBUTES, nodes)))
    if not _may_hold_graphs(attributes):
        return []
    return [node for node in compress(nodes, attributes) if holds_subgraphs(node)]


def node_subgraphs(node: ir.Node) -> Iterator[ir.Graph]:
    """Yield the graphs held directly by ``node``'s attributes (not nested ones).

    Reference attributes (:class:`~onnx_ir.RefAttr`, inside functions) hold no graph and
    are skipped.
    """
    for attr in node.attributes.values():
        if not isinstance(attr, ir.Attr):
            continue
        if attr.type == ir.AttributeType.GRAPH and attr.value is not None:
            yield attr.value
        elif attr.type == ir.AttributeType.GRAPHS and attr.value is not None:
            yield from attr.value


def _captures(node: ir.Node) -> list[ir.Value]:
    """Return the values read inside ``node``'s bodies but defined outside them."""
    defined: set[ir.Value] = set()
    reads: list[ir.Value] = []
    stack = list(node_subgraphs(node))
    while stack:
        body = stack.pop()
        defined.update(body.inputs)
        defined.update(body.initializers.values())
        for inner in body:
            defined.update(inner.outputs)
            reads.extend(v for v in inner.inputs if v is not None)
            stack.extend(node_subgraphs(inner))
        reads.extend(body.outputs)
    seen: set[ir.Value] = set()
    result = []
    for value in reads:
        if value not in defined and value not in seen:
            seen.add(value)
            result.append(value)
    return result


def node_uses(node: ir.Node) -> tuple[ir.Value, ...]:
    """Return the values of the enclosing scopes that ``node`` reads, without duplicates.

    These are the node's non-empty inputs followed by every value its subgraph bodies
    (recursively) read from outside themselves: outer-scope captures, including a body
    output that is an outer value. For a node of the main graph these are main-graph values.

    Args:
        node: The node.

    Returns:
        The values in first-read order: inputs first, then captures.
    """
    result: dict[ir.Value, None] = {v: None for v in node.inputs if v is not None}
    if holds_subgraphs(node):
        for value in _captures(node):
            result.setdefault(value, None)
    return tuple(result)


def _plain_uses(inputs: Sequence[ir.Value | None]) -> tuple[ir.Value, ...]:
    """:func:`node_uses` of a node without subgraphs, from its inputs (fast paths first)."""
    if len(inputs) == 1:
        return (inputs[0],) if inputs[0] is not None else ()
    if not inputs:
        return ()
    unique = tuple(dict.fromkeys(inputs))
    if None in unique:
        return tuple(v for v in unique if v is not None)
    return cast("tuple[ir.Value, ...]", unique)  # None is not in it


def graph_uses(graph: ir.Graph) -> dict[ir.Node, tuple[ir.Value, ...]]:
    """Return :func:`node_uses` for every node directly in ``graph``, in graph order.

    Runs in O(N + E) over the graph and all its subgraphs (each body is walked once, for the
    node that holds it).
    """
    return {node: node_uses(node) for node in graph}


def _flat_reads(
    nodes: list[ir.Node],
    inputs_list: list[Sequence[ir.Value | None]],
    outputs_list: list[Sequence[ir.Value]],
) -> tuple[list, list, dict[ir.Value, int], bool, tuple | None] | None:
    """Uses and slots of nodes without subgraphs, in C-level passes over flat lists.

    Returns ``(uses, reads, external_slot, in_graph_order, flat_arrays)`` (``flat_arrays``:
    the reads as :attr:`GraphIndex.flat_reads` gives them, when no node repeats a value or
    has an empty input), or ``None`` when an input
    tuple is not a plain tuple (then :func:`_node_reads` does the work). Same results as
    :func:`_node_reads` for such nodes.
    """
    n = len(nodes)
    if n and type(inputs_list[0]) is not tuple:  # onnx-ir keeps every node's inputs as a tuple
        return None
    # Slot of each node output: its producer's position.
    out_counts = list(map(len, outputs_list))
    if out_counts.count(1) == n:
        slot_of = dict(zip(map(_FIRST, outputs_list), range(n), strict=True))
    else:
        slot_of = dict(
            zip(
                chain.from_iterable(outputs_list),
                chain.from_iterable(map(repeat, range(n), out_counts)),
                strict=True,
            )
        )
    counts = list(map(len, inputs_list))
    flat = list(chain.from_iterable(inputs_list))
    has_none = None in flat
    if has_none:
        slot_of[None] = -2
    slot_array = np.fromiter(map(slot_of.get, flat, repeat(-1)), np.int64, len(flat))
    # In graph order when every read of a node output comes from an earlier node.
    owners = np.repeat(np.arange(n, dtype=np.int64), counts)
    in_order = not bool((slot_array >= owners).any())
    # Values produced by no node of the graph, numbered in first-read order.
    is_external = slot_array == -1
    external_slot: dict[ir.Value, int] = {}
    if is_external.any():
        # An external read is never None (None has the slot -2).
        external_reads = cast("list[ir.Value]", list(compress(flat, is_external.tolist())))
        external = dict.fromkeys(external_reads)
        external_slot = dict(zip(external, range(n, n + len(external)), strict=True))
        slot_of.update(external_slot)
        slot_array[is_external] = np.fromiter(
            map(external_slot.__getitem__, external_reads), np.int64, len(external_reads)
        )
    slots = slot_array.tolist()
    flat_iter = iter(slots)
    reads: list = list(map(tuple, map(islice, repeat(flat_iter), counts)))
    uses: list = inputs_list.copy()
    # Nodes reading a value twice, or with an empty (None) input: drop repeats and Nones.
    unique = list(map(len, map(set, reads)))
    odd = list(compress(range(n), map(operator.ne, unique, counts)))
    if has_none:
        odd = sorted({*odd, *compress(range(n), map(operator.contains, inputs_list, repeat(None)))})
    for i in odd:
        node_uses_ = _plain_uses(inputs_list[i])
        uses[i] = node_uses_
        reads[i] = tuple(map(slot_of.__getitem__, node_uses_))
    # The reads as flat arrays (GraphIndex.flat_reads), when they are exactly ``reads``.
    flat_arrays = None if odd else (slot_array, owners)
    return uses, reads, external_slot, in_order, flat_arrays


def _node_reads(
    graph_nodes: list[ir.Node],
    inputs_list: list[Sequence[ir.Value | None]],
    position: dict[ir.Node, int],
    holders: set[ir.Node],
) -> tuple[list, list, dict[ir.Value, int], list, bool]:
    """Uses and slots node by node (nodes with subgraphs read their bodies' captures)."""
    n = len(graph_nodes)
    pos_get = position.get
    external_slot: dict[ir.Value, int] = {}
    ext_get = external_slot.get
    uses: list[tuple[ir.Value, ...]] = []
    reads: list[tuple[int, ...]] = []
    bodies: list[tuple[ir.Node, tuple[ir.Graph, ...]]] = []
    in_order = True
    for i, node in enumerate(graph_nodes):
        inputs = inputs_list[i]
        if holders and node in holders:
            bodies.append((node, tuple(node_subgraphs(node))))
            node_reads = node_uses(node)
        elif len(inputs) == 1 and inputs[0] is not None and type(inputs) is tuple:
            node_reads = inputs
        else:
            node_reads = _plain_uses(inputs)
        uses.append(node_reads)
        slots = tuple(map(pos_get, map(_PRODUCER, node_reads)))
        if None in slots:
            fixed = []
            for value, known in zip(node_reads, slots, strict=True):
                slot = known
                if slot is None:
                    slot = ext_get(value)
                    if slot is None:
                        slot = external_slot[value] = n + len(external_slot)
                fixed.append(slot)
            slots = tuple(fixed)
            if any(i <= p < n for p in fixed):
                in_order = False
        elif slots and max(slots) >= i:  # type: ignore[type-var, operator]  # None is not in slots
            in_order = False
        reads.append(slots)  # type: ignore[arg-type]  # any None was replaced by an external slot
    return uses, reads, external_slot, bodies, in_order


class CutListCache(Generic[_T]):
    """Results computed from a list of cut values of one graph, keyed by the cut values.

    A key is the cut values in order, by identity. An entry keeps its values alive, so a key
    never matches another list whose values merely reuse the ids of dead ones.

    .. versionadded:: 0.1
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], tuple[tuple[ir.Value, ...], _T]] = {}

    def get(self, cuts: Sequence[ir.Value]) -> _T | None:
        """The result stored for ``cuts``, or ``None``."""
        entry = self._entries.get(tuple(map(id, cuts)))
        return None if entry is None else entry[1]

    def __contains__(self, cuts: Sequence[ir.Value]) -> bool:
        return tuple(map(id, cuts)) in self._entries

    def put(self, cuts: Sequence[ir.Value], result: _T) -> None:
        """Store ``result`` for ``cuts``."""
        self._entries[tuple(map(id, cuts))] = (tuple(cuts), result)


class ResultKey(Generic[_T]):
    """The key of one kind of analysis result kept on a :class:`GraphIndex`.

    The module that computes the result creates the key once, at import, with the result's
    type, and keeps it (usually private): only that module reads and fills the result, so the
    graph layer knows neither the analysis nor its types. Keys compare by identity; a copy of
    a key is the key itself.

    .. versionadded:: 0.1
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name
        """What the key stands for (for ``repr`` only)."""

    def __repr__(self) -> str:
        return f"ResultKey({self.name!r})"

    def __copy__(self) -> ResultKey[_T]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultKey[_T]:
        del memo
        return self


@dataclasses.dataclass(eq=False)
class GraphIndex:
    """Per-graph analysis index, built once in O(N + E) and shared by the analyses.

    :func:`~onnx_ir_multidevice.binding.bind.bind`,
    :func:`~onnx_ir_multidevice.analysis.stages.assign_stages`,
    :func:`~onnx_ir_multidevice.analysis.boundaries.boundary_crossings`,
    :func:`~onnx_ir_multidevice.analysis.boundaries.edge_violations`,
    :func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values`, the checker, the
    annotation passes and the split accept it as ``index=`` so that the uses, the topological
    order, the name lookups and the tensor classes of a graph are computed once instead of
    once per call.

    Nodes are numbered by their position in the topological order. Every value a node reads
    has a *slot*: the position of its producer for a value produced by a node of the graph,
    or ``len(nodes) + k`` for the ``k``-th value read but produced by no node of the graph
    (graph inputs, initializers, outer-scope values), listed in :attr:`external`.

    The index describes the graph as it was when built: rebuild it after changing the graph's
    nodes, inputs, outputs or initializers (annotations, names and metadata do not count).

    Besides what it computes itself, the index keeps the results of the analyses above, each
    under a :class:`ResultKey` owned by the module that computes it (:meth:`result`,
    :meth:`keep`, :meth:`memo`): the index knows neither the analyses nor their result types.

    Build it with :meth:`build` (or :meth:`for_model`).

    .. versionadded:: 0.1
    """

    graph: ir.Graph
    """The indexed graph."""

    nodes: tuple[ir.Node, ...]
    """The nodes directly in :attr:`graph`, in topological order (graph order when sorted)."""

    position: dict[ir.Node, int]
    """Position of each node in :attr:`nodes`."""

    uses: tuple[tuple[ir.Value, ...], ...]
    """:func:`node_uses` of each node, by position."""

    reads: tuple[tuple[int, ...], ...]
    """The slots each node reads, by position, one per entry of :attr:`uses`."""

    external: tuple[ir.Value, ...]
    """Values read by the nodes but produced by none of them; ``external[k]`` is slot
    ``len(nodes) + k``."""

    external_slot: dict[ir.Value, int]
    """Slot of each value of :attr:`external`."""

    bodies: tuple[tuple[ir.Node, tuple[ir.Graph, ...]], ...]
    """The nodes that hold subgraphs, with their bodies (graph order)."""

    in_graph_order: bool
    """Whether :attr:`nodes` is the graph's own order (the graph is already sorted)."""

    functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None
    """The model-local functions the default tensor classes judge calls by (``None``: calls
    are judged by op)."""

    _results: dict[ResultKey[Any], Any] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    """The analysis results kept on the index (see :meth:`memo`)."""

    # -- the index's own lazily built lookups --

    _graph_nodes: tuple[ir.Node, ...] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _graph_outputs: list[Sequence[ir.Value]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _consumers: list[list[int]] | None = dataclasses.field(default=None, init=False, repr=False)
    _output_slots: frozenset[int] | None = dataclasses.field(default=None, init=False, repr=False)
    _uses_by_node: dict[ir.Node, tuple[ir.Value, ...]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _node_names: dict[str, list[ir.Node]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _value_names: dict[str, list[ir.Value]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _nodes_named: dict[frozenset[str], dict[str, list[ir.Node]]] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _values_named: dict[frozenset[str], dict[str, list[ir.Value]]] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _inner_names: tuple[dict[str, ir.Node], frozenset[str]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _input_positions: dict[ir.Value, int] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _initializer_set: frozenset[ir.Value] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _graph_positions: dict[ir.Node, int] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _flat_reads: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _readers_of: dict[tuple[int, ...], dict[int, list[int]]] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _outputs_at: list[Sequence[ir.Value]] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    _op_types: list[str] | None = dataclasses.field(default=None, init=False, repr=False)

    cache: GraphCache | None = dataclasses.field(default=None, init=False, repr=False)
    """The results of other analyses of :attr:`graph` in the state this index describes (its
    shapes...), when the index came from :meth:`for_model` (``None`` otherwise)."""

    @classmethod
    def build(
        cls,
        graph: ir.Graph,
        *,
        functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None,
    ) -> GraphIndex:
        """Index ``graph`` in O(N + E) over the graph and its subgraphs.

        Args:
            graph: The graph (normally a model's main graph).
            functions: The model's local functions, used by :attr:`classes` to judge calls
                from their bodies.

        Raises:
            AnalysisError: If the nodes form a cycle.
        """
        # The index allocates many small tuples and no cycles: pause the cyclic collector,
        # whose full scans of a large model would make the build superlinear.
        with gc_paused():
            return cls._build(graph, functions)

    @classmethod
    def _build_unsorted(cls, graph: ir.Graph) -> GraphIndex:
        """Index ``graph`` in graph order even when it is not sorted (a cycle is no error).

        For name lookups only (:func:`~onnx_ir_multidevice.binding.bind.bind` of a graph
        with a cycle): :attr:`nodes` is then not a topological order, which the analyses
        need.
        """
        with gc_paused():
            return cls._build(graph, None, sort=False)

    @classmethod
    def _build(
        cls,
        graph: ir.Graph,
        functions: Mapping[ir.OperatorIdentifier, ir.Function] | None,
        *,
        sort: bool = True,
    ) -> GraphIndex:
        graph_nodes = node_list(graph)
        n = len(graph_nodes)
        position = dict(zip(graph_nodes, range(n), strict=True))
        # One pass over the nodes for their inputs, outputs and attributes.
        if n and hasattr(graph_nodes[0].attributes, "data"):
            inputs_list, outputs_list, attributes = map(
                list, zip(*map(_FAST_IO_ATTRIBUTES, graph_nodes), strict=True)
            )
        else:
            inputs_list = list(map(_INPUTS, graph_nodes))
            outputs_list = list(map(_OUTPUTS, graph_nodes))
            attributes = list(map(_data, map(_ATTRIBUTES, graph_nodes)))
        holders = (
            {
                graph_nodes[i]
                for i in compress(range(n), attributes)
                if holds_subgraphs(graph_nodes[i])
            }
            if _may_hold_graphs(attributes)
            else set()
        )
        fast = None if holders else _flat_reads(graph_nodes, inputs_list, outputs_list)
        flat_arrays = None
        if fast is not None:
            uses, reads, external_slot, in_order, flat_arrays = fast
            bodies: list[tuple[ir.Node, tuple[ir.Graph, ...]]] = []
        else:
            uses, reads, external_slot, bodies, in_order = _node_reads(
                graph_nodes, inputs_list, position, holders
            )
        index = cls(
            graph=graph,
            nodes=tuple(graph_nodes),
            position=position,
            uses=tuple(uses),
            reads=tuple(reads),
            external=tuple(external_slot),
            external_slot=external_slot,
            bodies=tuple(bodies),
            in_graph_order=in_order,
            functions=functions,
        )
        index._graph_nodes = index.nodes
        # Each node's outputs in graph order, for the name lookups.
        index._graph_outputs = outputs_list
        if not in_order and sort:
            index._sort()
        elif flat_arrays is not None:
            for array in flat_arrays:
                array.flags.writeable = False
            index._flat_reads = flat_arrays
        return index

    @classmethod
    def for_model(cls, model: ir.Model) -> GraphIndex:
        """Index ``model.graph``, judging calls by ``model.functions``.

        The index is kept with the graph (:class:`~onnx_ir_multidevice.graph.fingerprint.
        GraphCache`) and returned again, analysis results included, while the graph is
        unchanged: ``annotate()`` and a later ``check()`` of one model index it once. A
        model with local functions is indexed anew each time (their bodies are not in the
        graph's fingerprint).
        """
        graph = model.graph
        if model.functions:
            return cls.build(graph, functions=model.functions)
        cache = GraphCache.of(graph)
        index = cache.get(_INDEX_KEY, lambda: cls.build(graph, functions=model.functions))
        index.cache = cache
        return index

    def _sort(self) -> None:
        """Reorder the index topologically (Kahn, first-in first-out, seeded in graph order)."""
        n = len(self.nodes)
        pending = [0] * n
        successors: list[list[int]] = [[] for _ in range(n)]
        for i, slots in enumerate(self.reads):
            for p in set(slots):
                if p < n:
                    pending[i] += 1
                    successors[p].append(i)
        ready = deque(i for i in range(n) if pending[i] == 0)
        order: list[int] = []
        while ready:
            i = ready.popleft()
            order.append(i)
            for successor in successors[i]:
                pending[successor] -= 1
                if pending[successor] == 0:
                    ready.append(successor)
        if len(order) != n:
            stuck = self.nodes[next(i for i in range(n) if pending[i] > 0)]
            raise AnalysisError(
                f"graph {self.graph.name!r} has a cycle through node "
                f"{stuck.name or stuck.op_type!r}; ONNX graphs must be acyclic"
            )
        new_of = [0] * n
        for new, old in enumerate(order):
            new_of[old] = new
        self.nodes = tuple(self.nodes[old] for old in order)
        self.position = dict(zip(self.nodes, range(n), strict=True))
        self.uses = tuple(self.uses[old] for old in order)
        self.reads = tuple(
            tuple(new_of[p] if p < n else p for p in self.reads[old]) for old in order
        )

    def check_graph(self, graph: ir.Graph) -> None:
        """Raise :class:`ValueError` when this index was built for another graph."""
        if graph is not self.graph:
            raise ValueError(
                f"the GraphIndex was built for graph {self.graph.name!r}, not for graph "
                f"{graph.name!r}; build one with GraphIndex.build(graph)"
            )

    def result(self, key: ResultKey[_T]) -> _T | None:
        """The analysis result kept under ``key``, or ``None`` when none is kept yet."""
        return cast("_T | None", self._results.get(key))

    def keep(self, key: ResultKey[_T], result: _T) -> _T:
        """Keep ``result`` under ``key`` (replacing any result kept there) and return it."""
        self._results[key] = result
        return result

    def memo(self, key: ResultKey[_T], factory: Callable[[], _T]) -> _T:
        """The analysis result kept under ``key``, made by ``factory()`` and kept the first time.

        Results describe the graph as it was when the index was built, like the index itself.
        """
        results = self._results
        if key in results:
            return cast("_T", results[key])
        made = results[key] = factory()
        return made

    @property
    def graph_nodes(self) -> tuple[ir.Node, ...]:
        """The nodes in graph order."""
        cached = self._graph_nodes
        if cached is None:
            cached = self._graph_nodes = tuple(node_list(self.graph))
        return cached

    @property
    def graph_positions(self) -> dict[ir.Node, int]:
        """Position of each node in graph order (:attr:`position` when the graph is sorted)."""
        if self.in_graph_order:
            return self.position
        cached = self._graph_positions
        if cached is None:
            nodes = self.graph_nodes
            cached = self._graph_positions = dict(zip(nodes, range(len(nodes)), strict=True))
        return cached

    def slot_of(self, value: ir.Value) -> int | None:
        """The slot of ``value`` (see the class), or ``None`` when no node reads or makes it."""
        slot = self.position.get(value.producer())  # type: ignore[arg-type]  # no producer: get gives None
        return slot if slot is not None else self.external_slot.get(value)

    @property
    def consumers(self) -> list[list[int]]:
        """Positions of the nodes reading each slot, in topological order (built once)."""
        cached = self._consumers
        if cached is None:
            cached = [[] for _ in range(len(self.nodes) + len(self.external))]
            for i, slots in enumerate(self.reads):
                for p in slots:
                    readers = cached[p]
                    if not readers or readers[-1] != i:
                        readers.append(i)
            self._consumers = cached
        return cached

    @property
    def outputs_at(self) -> list[Sequence[ir.Value]]:
        """Each node's outputs, by position (read once; do not modify)."""
        cached = self._outputs_at
        if cached is None:
            if self.in_graph_order and self._graph_outputs is not None:
                cached = self._graph_outputs
            else:
                cached = list(map(_OUTPUTS, self.nodes))
            self._outputs_at = cached
        return cached

    @property
    def op_types(self) -> list[str]:
        """Each node's op type, by position (read once; do not modify)."""
        cached = self._op_types
        if cached is None:
            cached = self._op_types = list(map(OP_TYPE_OF, self.nodes))
        return cached

    @property
    def flat_reads(self) -> tuple[np.ndarray, np.ndarray]:
        """Every read as two ``int64`` arrays: the slot read, and the reader's position.

        In order of :attr:`reads` (readers ascending); built once. Read only.
        """
        cached = self._flat_reads
        if cached is None:
            reads = self.reads
            counts = np.fromiter(map(len, reads), np.int64, len(reads))
            slots = np.fromiter(chain.from_iterable(reads), np.int64, int(counts.sum()))
            readers = np.repeat(np.arange(len(reads), dtype=np.int64), counts)
            slots.flags.writeable = False
            readers.flags.writeable = False
            cached = self._flat_reads = (slots, readers)
        return cached

    def readers_of(self, slots: Sequence[int]) -> dict[int, list[int]]:
        """Positions of the nodes reading each of ``slots`` (ascending), like :attr:`consumers`.

        Without building :attr:`consumers` for every slot when only a few are asked about;
        the answer for one list of slots is kept (do not modify it).
        """
        if self._consumers is not None:
            return {p: self._consumers[p] for p in slots}
        key = tuple(slots)
        cached = self._readers_of.get(key)
        if cached is not None:
            return cached
        flat_slots, flat_readers = self.flat_reads
        wanted = np.asarray(slots, dtype=np.int64)
        hit = np.isin(flat_slots, wanted)
        found: dict[int, list[int]] = {p: [] for p in slots}
        for p, reader in zip(flat_slots[hit].tolist(), flat_readers[hit].tolist(), strict=True):
            readers = found[p]
            if not readers or readers[-1] != reader:
                readers.append(reader)
        self._readers_of[key] = found
        return found

    def value_readers(self, value: ir.Value) -> list[int]:
        """Positions of the nodes whose :attr:`uses` include ``value``, in order."""
        if self._consumers is not None:
            slot = self.slot_of(value)
            if slot is None:
                return []
            return [i for i in self._consumers[slot] if value in self.uses[i]]
        position = self.position
        readers = {position[c] for c in value.consumers() if c in position}
        for node, _ in self.bodies:
            i = position[node]
            if value in self.uses[i]:
                readers.add(i)
        return sorted(readers)

    @property
    def output_slots(self) -> frozenset[int]:
        """Positions of the nodes that produce a graph output."""
        cached = self._output_slots
        if cached is None:
            pos_get = self.position.get
            producers = (v.producer() for v in self.graph.outputs)
            cached = self._output_slots = frozenset(
                p for p in map(pos_get, filter(None, producers)) if p is not None
            )
        return cached

    @property
    def uses_by_node(self) -> dict[ir.Node, tuple[ir.Value, ...]]:
        """:func:`graph_uses` of the graph (graph order), from the index."""
        cached = self._uses_by_node
        if cached is None:
            by_node = dict(zip(self.nodes, self.uses, strict=True))
            if not self.in_graph_order:
                by_node = {node: by_node[node] for node in self.graph_nodes}
            cached = self._uses_by_node = by_node
        return cached

    def uses_of(self, node: ir.Node) -> tuple[ir.Value, ...]:
        """:func:`node_uses` of ``node``, a node of the graph."""
        return self.uses[self.position[node]]

    @property
    def graph_input_positions(self) -> dict[ir.Value, int]:
        """Each graph input with its position in ``graph.inputs``."""
        cached = self._input_positions
        if cached is None:
            cached = self._input_positions = {v: i for i, v in enumerate(self.graph.inputs)}
        return cached

    @property
    def initializer_set(self) -> frozenset[ir.Value]:
        """The graph's initializers, as a set."""
        cached = self._initializer_set
        if cached is None:
            cached = self._initializer_set = frozenset(_data(self.graph.initializers).values())
        return cached

    @property
    def node_names(self) -> dict[str, list[ir.Node]]:
        """Nodes of the graph by name (graph order; unnamed nodes left out)."""
        cached = self._node_names
        if cached is None:
            cached = {}
            for node in self.graph_nodes:
                name = node.name
                if name:
                    found = cached.get(name)
                    if found is None:
                        cached[name] = [node]
                    else:
                        found.append(node)
            self._node_names = cached
        return cached

    def nodes_named(self, names: Iterable[str]) -> dict[str, list[ir.Node]]:
        """:attr:`node_names` restricted to ``names`` (a scan when the full index is not built)."""
        full = self._node_names
        wanted = frozenset(names)
        if full is not None:
            return {name: full[name] for name in wanted if name in full}
        found = self._nodes_named.get(wanted)
        if found is None:
            found = {}
            nodes = self.graph_nodes
            for node in compress(nodes, map(wanted.__contains__, map(_NAME_OF, nodes))):
                found.setdefault(node.name, []).append(node)  # type: ignore[arg-type]  # a wanted name: a str
            self._nodes_named[wanted] = found
        return {name: list(nodes) for name, nodes in found.items()}

    def values_named(self, names: Iterable[str]) -> dict[str, list[ir.Value]]:
        """:attr:`value_names` restricted to ``names`` (a scan when the full index is not built)."""
        full = self._value_names
        wanted = frozenset(names) - {""}
        if full is not None:
            return {name: full[name] for name in wanted if name in full}
        cached = self._values_named.get(wanted)
        if cached is None:
            cached = self._values_named[wanted] = self._scan_values(wanted)
        return {name: list(values) for name, values in cached.items()}

    def _scan_values(self, wanted: frozenset[str]) -> dict[str, list[ir.Value]]:
        graph = self.graph
        initializers = _data(graph.initializers)
        candidates = [v for v in graph.inputs if v.name in wanted]
        candidates.extend(value for value in map(initializers.get, wanted) if value is not None)
        outputs = list(chain.from_iterable(self._outputs_in_graph_order()))
        candidates.extend(compress(outputs, map(wanted.__contains__, map(_NAME_OF, outputs))))
        found: dict[str, list[ir.Value]] = {}
        for value in candidates:
            same = found.setdefault(value.name, [])  # type: ignore[arg-type]  # a wanted name: a str
            if value not in same:
                same.append(value)
        return found

    def _outputs_in_graph_order(self) -> Sequence[Sequence[ir.Value]]:
        """Each node's outputs, in graph order."""
        cached = self._graph_outputs
        if cached is None:
            cached = self._graph_outputs = list(map(_OUTPUTS, self.graph_nodes))
        return cached

    @property
    def value_names(self) -> dict[str, list[ir.Value]]:
        """Main-graph values by name: inputs, initializers, then node outputs (graph order)."""
        cached = self._value_names
        if cached is None:
            graph = self.graph
            values = [
                *dict.fromkeys([*graph.inputs, *_data(graph.initializers).values()]),
                *chain.from_iterable(self._outputs_in_graph_order()),
            ]
            names = list(map(_NAME_OF, values))
            # First value of each name (reversed, so the first one wins), then the duplicates.
            first = dict(zip(reversed(names), reversed(values), strict=True))
            first.pop(None, None)
            first.pop("", None)
            cached = {name: [value] for name, value in first.items()}
            if len(first) != len(values) - names.count(None) - names.count(""):
                for name, value in zip(names, values, strict=True):
                    if name:
                        found = cached[name]
                        if value not in found:
                            found.append(value)
            self._value_names = cached
        return cached

    def _inner(self) -> tuple[dict[str, ir.Node], frozenset[str]]:
        cached = self._inner_names
        if cached is None:
            nodes: dict[str, ir.Node] = {}
            values: set[str] = set()
            stack = [body for _, bodies in self.bodies for body in bodies]
            while stack:
                body = stack.pop()
                values.update(v.name for v in body.inputs if v.name)
                values.update(name for name in body.initializers if name)
                for inner in body:
                    if inner.name:
                        nodes.setdefault(inner.name, inner)
                    values.update(v.name for v in inner.outputs if v.name)
                    stack.extend(node_subgraphs(inner))
            cached = self._inner_names = (nodes, frozenset(values))
        return cached

    @property
    def inner_node_names(self) -> dict[str, ir.Node]:
        """Nodes inside the control-flow bodies of the graph (nested ones too), by name."""
        return self._inner()[0]

    @property
    def inner_value_names(self) -> frozenset[str]:
        """Names of the values defined inside the control-flow bodies of the graph."""
        return self._inner()[1]


def value_consumers(
    uses: Mapping[ir.Node, Sequence[ir.Value]],
) -> dict[ir.Value, list[ir.Node]]:
    """Invert :func:`graph_uses`: map each read value to the nodes reading it, in node order."""
    consumers: dict[ir.Value, list[ir.Node]] = {}
    for node, values in uses.items():
        for value in values:
            consumers.setdefault(value, []).append(node)
    return consumers


def topological_order(
    graph: ir.Graph,
    uses: Mapping[ir.Node, Sequence[ir.Value]] | None = None,
    *,
    index: GraphIndex | None = None,
) -> list[ir.Node]:
    """Return the nodes of ``graph`` in a topological order of their uses, in O(N + E).

    A thin wrapper over :class:`GraphIndex`, which holds the one topological sort of the
    package: a well-formed ONNX graph is already sorted and its order is returned unchanged;
    an unsorted graph is sorted with Kahn's algorithm (first-in first-out, seeded in graph
    order), where a node depends on the producers of everything it reads, outer-scope
    captures of its bodies included.

    Args:
        graph: The graph whose direct nodes are ordered.
        uses: Ignored (the index computes the uses); kept for callers that pass
            :func:`graph_uses`.
        index: A :class:`GraphIndex` of ``graph``, when already built.

    Raises:
        AnalysisError: If the nodes form a cycle.
        ValueError: If ``index`` was built for another graph.
    """
    del uses  # the index computes them
    if index is None:
        index = GraphIndex.build(graph)
    else:
        index.check_graph(graph)
    return list(index.nodes)
