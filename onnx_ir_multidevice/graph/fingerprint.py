"""A structural fingerprint of a graph, and analysis results kept while it is unchanged.

onnx-ir 1.1 keeps no modification counter and sends no change events (its
:mod:`onnx_ir.journaling` wraps the IR classes globally, a debugging aid, not a hook to leave
on). What it does let us observe cheaply: a node's inputs and outputs are tuples that every
change replaces (``replace_input_with``, ``resize_inputs``...), attributes are
:class:`onnx_ir.Attr` objects whose value cannot be set, and every other field is an object
reference. :class:`GraphFingerprint` records, for a graph and every subgraph of its nodes
(``If``/``Loop``/``Scan`` bodies):

* its nodes in order (the objects), and of each: domain, op type, overload, opset version,
  name, inputs and outputs (the tuples) and attributes (name and :class:`~onnx_ir.Attr`;
  graph attributes recursively);
* of every value its nodes produce, and of its inputs and initializers: name, type and dtype
  (a type's dtype can be set in place), shape (its dims copied: an :class:`onnx_ir.Shape` can
  be changed in place) and ``const_value``;
* its inputs, outputs, initializers (by name) and opset imports.

Two fingerprints compare equal when nothing an analysis reads has changed; a fingerprint
holds references to what it records, so no object identity can be reused by another object
in between. Not recorded, because no analysis reads them: annotations (``metadata_props``,
``meta``, doc strings, device configurations, pipeline stages, sharding specs), and writes
into a tensor's buffer (tensors are treated as values: replace ``const_value``).

:class:`GraphCache` keeps the results of analyses of one graph (its
:class:`~onnx_ir_multidevice.graph.index.GraphIndex`, its shapes...) in the graph's
:attr:`~onnx_ir.Graph.meta` store, with the fingerprint taken when they were computed:
:meth:`GraphCache.of` compares it with the graph's fingerprint now and starts empty when they
differ, so a result is never reused after the graph changed. :meth:`GraphCache.invalidate` is
the explicit hook (onnx-ir's ``meta.invalidate``) for a pass that knows it changed the graph.
Taking a fingerprint costs one pass over the nodes and values, a small fraction of building
the index.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["GraphCache", "GraphFingerprint", "node_list"]

import operator
from collections.abc import Callable, Hashable
from itertools import chain, compress, repeat
from typing import Any, TypeVar

import onnx_ir as ir

_T = TypeVar("_T")
_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def _slot_getter(public: tuple[str, ...], probe: Any) -> Callable[[Any], tuple]:
    """``attrgetter`` of the slots behind onnx-ir's properties, when a probe shows they match.

    Reading ``_inputs`` instead of the ``inputs`` property is several times faster on large
    graphs; any change in onnx-ir falls back to the properties.
    """
    getter = operator.attrgetter(*public)
    try:
        private = operator.attrgetter(*("_" + name for name in public))
        mine, theirs = private(probe), getter(probe)
        if len(public) == 1:
            mine, theirs = (mine,), (theirs,)
        if all(a is b or a == b for a, b in zip(mine, theirs, strict=True)):
            return private
    except Exception:  # noqa: BLE001 (any change in onnx-ir: the public properties)
        pass
    return getter


_NODE_FIELDS = _slot_getter(
    ("domain", "op_type", "overload", "version", "name", "inputs", "outputs"),
    ir.Node("probe", "Identity", [ir.Value(name="probe_in")], name="probe_node", version=1),
)
_VALUE_FIELDS = _slot_getter(
    ("name", "type", "shape", "const_value"),
    ir.Value(name="probe", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1])),
)


_OUTPUTS_OF = operator.itemgetter(6)
_TYPE_OF = operator.itemgetter(1)
_SHAPE_OF = operator.itemgetter(2)
_ITEMS = operator.methodcaller("items")
_VALUES = operator.methodcaller("values")
_KIND_OF = _slot_getter(("type",), ir.AttrInt64("probe", 1))
_GRAPH_KINDS = frozenset((_GRAPH, _GRAPHS))
_DTYPE_OF = _slot_getter(("dtype",), ir.TensorType(ir.DataType.FLOAT))
_FROZEN = _slot_getter(("frozen",), ir.Shape([1], frozen=True))


def _attributes_getter() -> Callable[[Any], Any]:
    """A node's attributes as the plain ``dict`` behind them, where onnx-ir has one."""
    probe = ir.Node("", "Identity", [], attributes=[ir.AttrInt64("axis", 1)], name="probe")
    for path in ("_attributes.data", "attributes.data"):
        try:
            getter = operator.attrgetter(path)
            if getter(probe) == {"axis": probe.attributes["axis"]}:
                return getter
        except Exception:  # noqa: BLE001 (any change in onnx-ir: the mapping itself)
            continue
    return operator.attrgetter("attributes")


_ATTRIBUTES = _attributes_getter()


def _node_list_reader() -> Callable[[ir.Graph | ir.Function], list[ir.Node]] | None:
    """A C-level reader of a graph's nodes in order, where onnx-ir's node list allows one.

    onnx-ir keeps a graph's nodes in a doubly linked list (``DoublyLinkedSet``) whose Python
    iterator costs about a tenth of a microsecond per node in generator steps. The list also
    keeps a dict from each node's id to its link, in insertion order; when that order is the
    list's order (every node appended, as a loaded or built graph is), the nodes can be read
    with C-level ``map`` calls, and one C-level comparison of each link's ``next`` with the
    following link proves the order. Otherwise (or if onnx-ir changes) the caller iterates.
    """
    try:
        probe = ir.Graph([], [], nodes=[ir.Node("", "Identity", [], name=str(i)) for i in range(2)])
        links = probe._nodes  # noqa: SLF001 (checked against the public iterator below)
        boxes = list(links._value_ids_to_boxes.values())  # noqa: SLF001
        getter = operator.attrgetter("value")
        following = operator.attrgetter("next")
        if list(map(getter, boxes)) != list(probe) or following(boxes[0]) is not boxes[1]:
            return None
    except Exception:  # noqa: BLE001 (any change in onnx-ir: iterate)
        return None

    def read(graph: ir.Graph | ir.Function) -> list[ir.Node]:
        links = graph._nodes  # type: ignore[union-attr]  # noqa: SLF001
        boxes = list(links._value_ids_to_boxes.values())  # noqa: SLF001
        if not boxes:
            return []
        root = links._root  # noqa: SLF001
        nexts = list(map(following, boxes))
        if following(root) is boxes[0] and nexts[-1] is root and nexts[:-1] == boxes[1:]:
            return list(map(getter, boxes))
        return list(graph)

    return read


_READ_NODES = _node_list_reader()


def node_list(graph: ir.Graph | ir.Function) -> list[ir.Node]:
    """The nodes directly in ``graph``, in order: ``list(graph)``, read at C speed when possible.

    .. versionadded:: 0.2
    """
    if _READ_NODES is None:
        return list(graph)
    try:
        return _READ_NODES(graph)
    except AttributeError:  # a graph-like object without onnx-ir's node list
        return list(graph)


def _values_state(values: list[ir.Value]) -> tuple:
    """Name, type, dtype, shape and ``const_value`` of each value.

    The fields are object references; a type's dtype can be set in place, so the dtypes are
    recorded too, and so are the dims of a shape that is not frozen (a frozen
    :class:`onnx_ir.Shape` cannot change). Written with C-level iteration: a large graph has
    tens of thousands of values.
    """
    fields = list(map(_VALUE_FIELDS, values))
    types = list(map(_TYPE_OF, fields))
    types = list(compress(types, map(operator.is_not, types, repeat(None))))
    shapes = list(map(_SHAPE_OF, fields))
    shapes = list(compress(shapes, map(operator.is_not, shapes, repeat(None))))
    frozen = list(map(_FROZEN, shapes))
    if all(frozen):
        unfrozen: tuple = ()
    else:
        unfrozen = tuple(
            tuple(shape) for shape, done in zip(shapes, frozen, strict=True) if not done
        )
    return (tuple(fields), tuple(map(_DTYPE_OF, types)), tuple(frozen), unfrozen)


def _attributes_state(nodes: list[ir.Node]) -> tuple:
    """The attributes of ``nodes``: each node's dict, its items, and subgraphs recursively."""
    dicts = list(filter(None, map(_ATTRIBUTES, nodes)))
    attributes = tuple(chain.from_iterable(map(_VALUES, dicts)))
    # Flat: the dicts, their sizes, then every key and every Attr in order.
    state: list[Any] = [
        tuple(dicts),
        tuple(map(len, dicts)),
        tuple(chain.from_iterable(dicts)),
        attributes,
    ]
    if not _GRAPH_KINDS.isdisjoint(map(_KIND_OF, attributes)):
        for attr in attributes:
            kind = attr.type
            if kind == _GRAPH:
                state.append(_graph_state(attr.value))
            elif kind == _GRAPHS:
                state.extend(_graph_state(g) for g in attr.value)
    return tuple(state)


def _graph_state(graph: ir.Graph | ir.Function) -> tuple:
    """Everything the fingerprint records of ``graph`` (see the module docstring)."""
    nodes = node_list(graph)
    fields = list(map(_NODE_FIELDS, nodes))
    outputs = list(chain.from_iterable(map(_OUTPUTS_OF, fields)))
    state = [tuple(nodes), tuple(fields), _attributes_state(nodes), _values_state(outputs)]
    state.append(_values_state(list(graph.inputs)))
    state.append(tuple(graph.outputs))
    if isinstance(graph, ir.Graph):
        initializers = graph.initializers
        plain = getattr(initializers, "data", initializers)  # the dict behind the UserDict
        state.append(tuple(plain))
        state.append(_values_state(list(plain.values())))
    state.append(tuple(graph.opset_imports.items()))
    return tuple(state)


class GraphFingerprint:
    """What the analyses of a graph read from it, recorded so that any change shows.

    Equal fingerprints of one graph object mean it has not changed in anything an analysis
    reads (see the module docstring for what is and is not recorded).

    Args:
        graph: The graph (normally a model's main graph).

    .. versionadded:: 0.1
    """

    __slots__ = ("_graph", "_state")

    def __init__(self, graph: ir.Graph) -> None:
        self._graph = graph
        self._state = _graph_state(graph)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GraphFingerprint):
            return NotImplemented
        return self._graph is other._graph and self._state == other._state

    # Compared, not hashed: it holds references to mutable objects.
    __hash__ = None  # type: ignore[assignment]


_META_KEY = "onnx_ir_multidevice.graph_cache"


class GraphCache:
    """Results of analyses of one graph, kept while its :class:`GraphFingerprint` is unchanged.

    Get it with :meth:`of` (which checks the fingerprint) at the start of an operation, and
    ask it for results with :meth:`get`; the graph must not change while the results are in
    use (rebuild with :meth:`of` after changing it).

    .. versionadded:: 0.1
    """

    __slots__ = ("_results", "fingerprint", "graph")

    def __init__(self, graph: ir.Graph, fingerprint: GraphFingerprint) -> None:
        self.graph = graph
        """The graph the results describe."""
        self.fingerprint = fingerprint
        """The graph's fingerprint when the results were computed."""
        self._results: dict[Hashable, Any] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> GraphCache:
        """An empty cache for no graph: a deep copy of a model does not copy the results."""
        del memo
        return GraphCache(None, self.fingerprint)  # type: ignore[arg-type]

    @classmethod
    def of(cls, graph: ir.Graph) -> GraphCache:
        """The cache of ``graph``: its results so far, or none when the graph has changed."""
        fingerprint = GraphFingerprint(graph)
        meta = graph.meta
        cache = meta.get(_META_KEY)
        if (
            isinstance(cache, GraphCache)
            and cache.graph is graph
            and meta.is_valid(_META_KEY)
            and cache.fingerprint == fingerprint
        ):
            return cache
        cache = meta[_META_KEY] = cls(graph, fingerprint)
        return cache

    @staticmethod
    def invalidate(graph: ir.Graph) -> None:
        """Drop the results kept for ``graph`` (a pass that changed it may say so)."""
        graph.meta.invalidate(_META_KEY)

    def get(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """The result kept under ``key``, computed by ``compute()`` the first time."""
        try:
            return self._results[key]
        except KeyError:
            result = self._results[key] = compute()
            return result

    def __contains__(self, key: Hashable) -> bool:
        return key in self._results
