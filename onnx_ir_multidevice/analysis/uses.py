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
    "graph_uses",
    "node_subgraphs",
    "node_uses",
    "topological_order",
    "value_consumers",
]

from collections import deque
from collections.abc import Iterator, Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyError


class AnalysisError(OmnyError, ValueError):
    """A graph cannot be analysed as given (a cycle, a value read before it exists...)."""


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
    if any(True for _ in node_subgraphs(node)):
        for value in _captures(node):
            result.setdefault(value, None)
    return tuple(result)


def graph_uses(graph: ir.Graph) -> dict[ir.Node, tuple[ir.Value, ...]]:
    """Return :func:`node_uses` for every node directly in ``graph``, in graph order.

    Runs in O(N + E) over the graph and all its subgraphs (each body is walked once, for the
    node that holds it).
    """
    return {node: node_uses(node) for node in graph}


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
    graph: ir.Graph, uses: Mapping[ir.Node, Sequence[ir.Value]] | None = None
) -> list[ir.Node]:
    """Return the nodes of ``graph`` in a topological order of their uses, in O(N + E).

    A well-formed ONNX graph is already sorted; its order is then returned unchanged. An
    unsorted graph is sorted with Kahn's algorithm (first-in first-out, seeded in graph
    order), where a node depends on the producers of everything it reads, outer-scope
    captures of its bodies included.

    Args:
        graph: The graph whose direct nodes are ordered.
        uses: :func:`graph_uses` of the graph, when already computed.

    Raises:
        AnalysisError: If the nodes form a cycle.
    """
    if uses is None:
        uses = graph_uses(graph)
    nodes = list(graph)
    position = {node: i for i, node in enumerate(nodes)}

    def producers(node: ir.Node) -> Iterator[ir.Node]:
        for value in uses[node]:
            producer = value.producer()
            if producer is not None and producer in position:
                yield producer

    if all(position[producer] < position[node] for node in nodes for producer in producers(node)):
        return nodes
    pending = {node: 0 for node in nodes}
    successors: dict[ir.Node, list[ir.Node]] = {node: [] for node in nodes}
    for node in nodes:
        for producer in set(producers(node)):
            pending[node] += 1
            successors[producer].append(node)
    ready = deque(node for node in nodes if pending[node] == 0)
    order: list[ir.Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for successor in successors[node]:
            pending[successor] -= 1
            if pending[successor] == 0:
                ready.append(successor)
    if len(order) != len(nodes):
        stuck = next(node for node in nodes if pending[node] > 0)
        raise AnalysisError(
            f"graph {graph.name!r} has a cycle through node "
            f"{stuck.name or stuck.op_type!r}; ONNX graphs must be acyclic"
        )
    return order
