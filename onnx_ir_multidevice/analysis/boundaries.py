"""What crosses each stage boundary, and which edges run backwards.

Boundary ``k`` lies between stage ``k`` and stage ``k + 1``. A value *crosses* it when a node
at stage ``<= k`` produces it and a node at stage ``> k`` reads it (outer-scope reads inside
subgraph bodies count as reads by the parent node). Graph inputs, initializers and outer
values are produced by no stage: every stage reads them directly (forwarded) or holds its own
copy, so they never cross. Graph outputs are collected at the end of the pipeline: a graph
output produced at stage ``<= k`` is listed in :attr:`Boundary.outputs_carried` of boundary
``k`` (and in :attr:`Boundary.tensors` too when a later stage also reads it).

Each value's producer stage and latest consumer stage are computed once; the value is then
appended to the boundaries of its span, so the cost is O(N + E + size of the result).

Whether a boundary *can be written* where a value crosses is one predicate,
:func:`boundary_problem`, used by the cut finder (so the planner only offers such cuts) and by
the split (which refuses the others with its message): a stage input or output needs a
dtype, stated in the file or inferred (element types do not depend on the planning dims:
:mod:`~onnx_ir_multidevice.analysis.element_types`).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "Boundary",
    "boundary_crossings",
    "boundary_problem",
    "edge_violations",
]

import dataclasses
from collections.abc import Iterator, Mapping
from typing import cast

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.stages import StageAssignmentError
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, slot_classes, staging_reads
from onnx_ir_multidevice.graph.index import GraphIndex, graph_uses


@dataclasses.dataclass(frozen=True)
class Boundary:
    """The values that cross one stage boundary.

    .. versionadded:: 0.1
    """

    index: int
    """``k``: the boundary between stage ``k`` and stage ``k + 1`` (0-based)."""

    tensors: tuple[tuple[ir.Value, TensorClass], ...] = ()
    """Every value produced at a stage ``<= k`` and read at a stage ``> k``, with its class,
    in topological order of the producers."""

    outputs_carried: tuple[tuple[ir.Value, TensorClass], ...] = ()
    """Graph outputs produced at a stage ``<= k``: held until the pipeline ends."""

    @property
    def activations(self) -> tuple[ir.Value, ...]:
        """The crossing values of class activation: what must be sent to the next device."""
        return tuple(v for v, c in self.tensors if c is TensorClass.ACTIVATION)

    @property
    def is_strict(self) -> bool:
        """Whether exactly one activation crosses (what the ``.omny`` spec calls a valid cut)."""
        return len(self.activations) == 1


def boundary_problem(value: ir.Value, shapes: ValueShapes) -> str | None:
    """Why ``value`` cannot be written as a stage's input or output; ``None`` when it can.

    The one test of "a stage boundary can be written here": the cut finder drops cuts whose
    crossing values fail it, and the split raises with the reason it gives.

    Args:
        value: A value of the main graph that crosses a boundary (or a graph output).
        shapes: The shape layer of the graph (its dtypes, stated or inferred).

    Returns:
        A sentence (starting lower case) saying what is missing, or ``None``.

    .. versionadded:: 0.1
    """
    if value.type is not None or shapes.dtype(value) is not None:
        return None
    producer = value.producer()
    what = (
        f"a {producer.domain + '.' if producer.domain else ''}{producer.op_type} node"
        if producer is not None
        else "the graph"
    )
    return (
        f"its dtype is neither in the file nor inferable (made by {what} whose output "
        "types no ONNX schema or rule of this package tells); give the value a type in "
        "the model"
    )


def _checked_stage(node: ir.Node, stages: Mapping[ir.Node, int | None]) -> int:
    stage = stages.get(node)
    if stage is None or stage < 0:
        what = "has no stage" if stage is None else f"has negative stage {stage}"
        raise StageAssignmentError(
            f"node {node.name or node.op_type!r} {what}; every node of the main graph needs "
            "a stage >= 0 to compute stage boundaries"
        )
    return stage


def boundary_crossings(
    graph: ir.Graph,
    stages: Mapping[ir.Node, int | None],
    *,
    classes: Mapping[ir.Value, TensorClass] | None = None,
    num_stages: int | None = None,
    index: GraphIndex | None = None,
) -> list[Boundary]:
    """List the values crossing each boundary of a staged graph.

    Args:
        graph: The main graph.
        stages: The stage of every node directly in ``graph`` (from
            :func:`~onnx_ir_multidevice.analysis.stages.assign_stages` or
            :func:`~onnx_ir_multidevice.analysis.stages.stages_from_annotations`).
        classes: :func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values` of
            ``graph`` when already computed (a value missing from it counts as an activation).
            Default: the classes of ``index`` (computed once per index).
        num_stages: Number of stages; defaults to the largest stage plus one. Must be larger
            than every stage.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``, when
            already built (built here otherwise).

    Returns:
        ``num_stages - 1`` boundaries, boundary ``k`` at index ``k``.

    Raises:
        StageAssignmentError: If a node of ``graph`` has no stage or a negative one, or
            ``num_stages`` is too small.
        ValueError: If ``index`` was built for another graph.
    """
    if index is None:
        index = GraphIndex.build(graph)
    else:
        index.check_graph(graph)
    nodes = index.nodes
    n = len(nodes)
    # A missing (None) or negative stage raises in _checked_stage just below.
    node_stage = cast("list[int]", list(map(stages.get, nodes)))
    if None in node_stage or (node_stage and min(node_stage) < 0):
        for node in nodes:
            _checked_stage(node, stages)
    largest = max(node_stage, default=0)
    if num_stages is None:
        num_stages = largest + 1
    elif num_stages <= largest:
        raise StageAssignmentError(
            f"num_stages={num_stages} but a node is at stage {largest}; "
            "pass num_stages greater than every stage"
        )

    # Latest stage reading each slot, in one pass over the reads.
    stage_array = np.asarray(node_stage, dtype=np.int64)
    flat_slots, flat_readers = index.flat_reads
    # A replicable node that reads an activation (a proven shape read) recomputes it from the
    # graph inputs: that read makes nothing cross (tensor_classes.staging_reads).
    staged = staging_reads(index, classes)
    dropped: set[int] = set()
    if staged is not index.reads:
        all_reads = index.reads
        dropped = {i for i in range(n) if staged[i] is not all_reads[i]}
        # The removed reads are those of activation slots (one test per slot, whatever the
        # reader), so one mask over readers and one over slots select them exactly.
        reader_mask = np.zeros(n, dtype=bool)
        slot_mask = np.zeros(n + len(index.external), dtype=bool)
        for i in dropped:
            reader_mask[i] = True
            slot_mask[list(set(all_reads[i]).difference(staged[i]))] = True
        keep = ~(reader_mask[flat_readers] & slot_mask[flat_slots])
        flat_slots, flat_readers = flat_slots[keep], flat_readers[keep]
    latest = np.full(n + len(index.external), -1, dtype=np.int64)
    np.maximum.at(latest, flat_slots, stage_array[flat_readers])
    last_read = latest.tolist()

    if classes is None:
        by_slot: list[TensorClass] | None = slot_classes(index)
        get_class = None
    else:
        by_slot = None
        get_class = classes.get
    activation = TensorClass.ACTIVATION
    tensors: list[list[tuple[ir.Value, TensorClass]]] = [[] for _ in range(num_stages - 1)]
    carried: list[list[tuple[ir.Value, TensorClass]]] = [[] for _ in range(num_stages - 1)]
    outputs = set(graph.outputs)
    output_slots = index.output_slots
    crossing = np.flatnonzero(latest[:n] > stage_array).tolist()
    for p in sorted({*crossing, *output_slots}):
        node = nodes[p]
        produced_at: int = node_stage[p]
        node_outputs = node.outputs
        for value in node_outputs:
            if get_class is None:
                value_class = by_slot[p]  # type: ignore[index]  # set when get_class is None
            else:
                value_class = get_class(value, activation)
            if last_read[p] > produced_at:
                if len(node_outputs) == 1:
                    value_read = last_read[p]
                else:
                    value_read = max(
                        (
                            node_stage[c]
                            for c in index.value_readers(value)
                            if c not in dropped or p in staged[c]
                        ),
                        default=-1,
                    )
                for k in range(produced_at, value_read):
                    tensors[k].append((value, value_class))
            if value in outputs:
                for k in range(produced_at, num_stages - 1):
                    carried[k].append((value, value_class))
    return [
        Boundary(index=k, tensors=tuple(tensors[k]), outputs_carried=tuple(carried[k]))
        for k in range(num_stages - 1)
    ]


def edge_violations(
    graph: ir.Graph,
    stages: Mapping[ir.Node, int | None],
    *,
    index: GraphIndex | None = None,
) -> Iterator[tuple[ir.Node, ir.Node, ir.Value]]:
    """Yield ``(producer, consumer, value)`` for every read that runs backwards.

    A read runs backwards when the consumer's stage is smaller than the producer's: the value
    would be needed before it exists. Outer-scope reads inside subgraph bodies count as reads
    by the parent node. Pairs where either node has no stage (missing or ``None``) are
    skipped; report those separately.

    Args:
        graph: The main graph.
        stages: The stage of the nodes directly in ``graph``.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``, when
            already built. Without one the graph's uses are walked directly (which also
            works on a graph with a cycle).

    Yields:
        The violations in graph order of the consumers, then of their reads.

    Raises:
        ValueError: If ``index`` was built for another graph.
    """
    if index is None:
        yield from _edge_violations_unindexed(graph, stages)
        return
    index.check_graph(graph)
    nodes = index.nodes
    n = len(nodes)
    node_stage = list(map(stages.get, nodes))
    reads = index.reads
    found: list[int] = []
    for i, (stage, slots) in enumerate(zip(node_stage, reads, strict=True)):
        if stage is None:
            continue
        for p in slots:
            if p < n:
                producer_stage = node_stage[p]
                if producer_stage is not None and stage < producer_stage:
                    found.append(i)
                    break
    if not index.in_graph_order:
        graph_position = {node: k for k, node in enumerate(index.graph_nodes)}
        found.sort(key=lambda i: graph_position[nodes[i]])
    for i in found:
        consumer = nodes[i]
        consumer_stage = node_stage[i]
        for value in index.uses[i]:
            producer = value.producer()
            if producer is None:
                continue
            producer_stage = stages.get(producer)
            if producer_stage is not None and consumer_stage < producer_stage:  # type: ignore[operator]  # found: staged nodes only
                yield producer, consumer, value


def _edge_violations_unindexed(
    graph: ir.Graph, stages: Mapping[ir.Node, int | None]
) -> Iterator[tuple[ir.Node, ir.Node, ir.Value]]:
    for consumer, values in graph_uses(graph).items():
        consumer_stage = stages.get(consumer)
        if consumer_stage is None:
            continue
        for value in values:
            producer = value.producer()
            if producer is None:
                continue
            producer_stage = stages.get(producer)
            if producer_stage is not None and consumer_stage < producer_stage:
                yield producer, consumer, value
