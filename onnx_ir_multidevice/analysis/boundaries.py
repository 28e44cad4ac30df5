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

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "Boundary",
    "boundary_crossings",
    "edge_violations",
]

import dataclasses
from collections.abc import Iterator, Mapping

import onnx_ir as ir

from onnx_ir_multidevice.analysis.stages import StageAssignmentError
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, classify_values
from onnx_ir_multidevice.analysis.uses import graph_uses, topological_order


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
) -> list[Boundary]:
    """List the values crossing each boundary of a staged graph.

    Args:
        graph: The main graph.
        stages: The stage of every node directly in ``graph`` (from
            :func:`~onnx_ir_multidevice.analysis.stages.assign_stages` or
            :func:`~onnx_ir_multidevice.analysis.stages.stages_from_annotations`).
        classes: :func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values` of
            ``graph`` when already computed (a value missing from it counts as an activation).
        num_stages: Number of stages; defaults to the largest stage plus one. Must be larger
            than every stage.

    Returns:
        ``num_stages - 1`` boundaries, boundary ``k`` at index ``k``.

    Raises:
        StageAssignmentError: If a node of ``graph`` has no stage or a negative one, or
            ``num_stages`` is too small.
    """
    if classes is None:
        classes = classify_values(graph)
    uses = graph_uses(graph)
    order = topological_order(graph, uses)
    node_stage = {node: _checked_stage(node, stages) for node in order}
    largest = max(node_stage.values(), default=0)
    if num_stages is None:
        num_stages = largest + 1
    elif num_stages <= largest:
        raise StageAssignmentError(
            f"num_stages={num_stages} but a node is at stage {largest}; "
            "pass num_stages greater than every stage"
        )

    # Latest stage reading each value, in one pass over the uses.
    last_read: dict[ir.Value, int] = {}
    for node in order:
        stage = node_stage[node]
        for value in uses[node]:
            if last_read.get(value, -1) < stage:
                last_read[value] = stage

    tensors: list[list[tuple[ir.Value, TensorClass]]] = [[] for _ in range(num_stages - 1)]
    carried: list[list[tuple[ir.Value, TensorClass]]] = [[] for _ in range(num_stages - 1)]
    outputs = set(graph.outputs)
    for node in order:
        produced_at = node_stage[node]
        for value in node.outputs:
            value_class = classes.get(value, TensorClass.ACTIVATION)
            for k in range(produced_at, last_read.get(value, -1)):
                tensors[k].append((value, value_class))
            if value in outputs:
                for k in range(produced_at, num_stages - 1):
                    carried[k].append((value, value_class))
    return [
        Boundary(index=k, tensors=tuple(tensors[k]), outputs_carried=tuple(carried[k]))
        for k in range(num_stages - 1)
    ]


def edge_violations(
    graph: ir.Graph, stages: Mapping[ir.Node, int | None]
) -> Iterator[tuple[ir.Node, ir.Node, ir.Value]]:
    """Yield ``(producer, consumer, value)`` for every read that runs backwards.

    A read runs backwards when the consumer's stage is smaller than the producer's: the value
    would be needed before it exists. Outer-scope reads inside subgraph bodies count as reads
    by the parent node. Pairs where either node has no stage (missing or ``None``) are
    skipped; report those separately.

    Args:
        graph: The main graph.
        stages: The stage of the nodes directly in ``graph``.

    Yields:
        The violations in graph order of the consumers, then of their reads.
    """
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
