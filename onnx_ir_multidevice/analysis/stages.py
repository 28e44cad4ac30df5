"""Pipeline stage of every node: from cut tensors, or read back from IR v11 annotations.

:func:`assign_stages` places nodes *as soon as possible* given the cut tensors:

* a node's stage is the largest stage among the values it reads (outer-scope captures of its
  bodies included), where cut ``j`` (0-based position in ``cuts``) counts as stage ``j + 1``
  for its consumers, any other node output counts as its producer's stage, and graph inputs,
  initializers and outer values count as stage 0 (no reads: stage 0);
* then a node whose outputs are all *replicable* (see
  :mod:`~onnx_ir_multidevice.analysis.tensor_classes`) moves to the earliest stage that
  consumes it, so each stage recomputes what it needs instead of receiving it. A graph output
  counts as consumed by the last stage. Nodes that produce a cut never move, and a dead
  replicable node (no consumer, not an output) keeps its as-soon-as-possible stage.

Stages are 0-based; with ``n`` cuts there are ``n + 1`` stages and cut ``j`` separates stage
``j`` from stage ``j + 1``. Cuts must be listed in pipeline order: the producer of cut ``j``
must land in a stage ``<= j``, which fails exactly when cut ``j`` is computed from a later
cut. A later cut that does not depend on an earlier one is accepted (it simply crosses more
boundaries). Nodes inside subgraph bodies run with their parent and get no stage of their own.

Runs in O(N + E).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "StageAssignmentError",
    "assign_stages",
    "stages_from_annotations",
]

from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, classify_values
from onnx_ir_multidevice.analysis.uses import (
    AnalysisError,
    graph_uses,
    topological_order,
    value_consumers,
)


class StageAssignmentError(AnalysisError):
    """Cut tensors or stage numbers that do not describe a valid pipeline.

    It is both an :class:`~onnx_ir_multidevice._errors.OmnyError` and a :class:`ValueError`.
    """


def _label(value: ir.Value) -> str:
    producer = value.producer()
    where = f" (output of node {producer.name or producer.op_type!r})" if producer else ""
    return f"{value.name!r}{where}"


def _validate_cuts(graph: ir.Graph, cuts: Sequence[ir.Value]) -> dict[ir.Value, int]:
    """Return cut value -> 0-based position, after checking each is a main-graph node output."""
    positions: dict[ir.Value, int] = {}
    for j, value in enumerate(cuts):
        if not isinstance(value, ir.Value):
            raise StageAssignmentError(
                f"cut {j} is a {type(value).__name__}, not an onnx_ir.Value; "
                "pass the ir.Value objects of the cut tensors"
            )
        producer = value.producer()
        if producer is None:
            raise StageAssignmentError(
                f"cut {j} {_label(value)} is not produced by a node (a graph input, an "
                "initializer or a detached value); a cut must be the output of a node "
                f"of graph {graph.name!r}"
            )
        if producer.graph is not graph:
            raise StageAssignmentError(
                f"cut {j} {_label(value)} is produced inside a subgraph or another graph, not "
                f"directly in graph {graph.name!r}; cut after the node that holds the subgraph"
            )
        if value in positions:
            raise StageAssignmentError(
                f"cut {j} {_label(value)} repeats cut {positions[value]}; each tensor may "
                "be cut once"
            )
        positions[value] = j
    return positions


def assign_stages(
    graph: ir.Graph,
    cuts: Sequence[ir.Value],
    *,
    classes: Mapping[ir.Value, TensorClass] | None = None,
) -> dict[ir.Node, int]:
    """Assign a 0-based pipeline stage to every node of ``graph`` from its cut tensors.

    Args:
        graph: The main graph.
        cuts: The cut tensors in pipeline order: cut ``j`` separates stage ``j`` from
            stage ``j + 1``.
        classes: The :func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values` of
            ``graph`` when already computed (a value missing from it counts as an activation).

    Returns:
        The stage of each node directly in ``graph``, in topological order.

    Raises:
        StageAssignmentError: If a cut is not a node output of ``graph``, is repeated, or is
            computed from a later cut (cuts out of pipeline order). The message names the
            value.
        AnalysisError: If the graph has a cycle.
    """
    cut_positions = _validate_cuts(graph, cuts)
    if classes is None:
        classes = classify_values(graph)
    uses = graph_uses(graph)
    order = topological_order(graph, uses)
    stage: dict[ir.Node, int] = {}

    def read_stage(value: ir.Value) -> int:
        position = cut_positions.get(value)
        if position is not None:
            return position + 1
        producer = value.producer()
        return stage.get(producer, 0) if producer is not None else 0

    for node in order:
        stage[node] = max((read_stage(v) for v in uses[node]), default=0)

    for value, j in cut_positions.items():
        producer_stage = stage[value.producer()]  # type: ignore[index]
        if producer_stage > j:
            later = cuts[producer_stage - 1]
            raise StageAssignmentError(
                f"cut {j} {_label(value)} is computed from cut {producer_stage - 1} "
                f"{_label(later)}, which comes later in the list; list cuts in pipeline order"
            )

    _sink_replicable(graph, order, uses, stage, cut_positions, classes, len(cuts))
    return stage


def _sink_replicable(
    graph: ir.Graph,
    order: Sequence[ir.Node],
    uses: Mapping[ir.Node, Sequence[ir.Value]],
    stage: dict[ir.Node, int],
    cut_positions: Mapping[ir.Value, int],
    classes: Mapping[ir.Value, TensorClass],
    last_stage: int,
) -> None:
    """Move replicable-only nodes to their earliest consumer's stage (reverse topological)."""
    consumers = value_consumers(uses)
    outputs = set(graph.outputs)
    for node in reversed(order):
        if not node.outputs or any(
            classes.get(v) is not TensorClass.REPLICABLE or v in cut_positions for v in node.outputs
        ):
            continue
        earliest: int | None = None
        for value in node.outputs:
            for consumer in consumers.get(value, ()):
                if earliest is None or stage[consumer] < earliest:
                    earliest = stage[consumer]
            if value in outputs and (earliest is None or last_stage < earliest):
                earliest = last_stage
        if earliest is not None:
            stage[node] = earliest


def stages_from_annotations(
    graph: ir.Graph, configuration: ir.ModelConfiguration
) -> dict[ir.Node, int | None]:
    """Read each node's ``pipeline_stage`` for ``configuration`` from its annotations.

    The node's :attr:`~onnx_ir.Node.device_configurations` entry for ``configuration`` is
    found by object identity, as onnx-ir binds it; failing that, by equality (same name,
    device count and device names). Nodes inside subgraph bodies are not listed: they run
    with their parent.

    Args:
        graph: The main graph.
        configuration: One of the model's ``device_configurations``.

    Returns:
        The stage of each node directly in ``graph``, in graph order: ``None`` when the node
        has no entry for ``configuration`` or its entry has no pipeline stage.
    """
    result: dict[ir.Node, int | None] = {}
    for node in graph:
        found: ir.NodeDeviceConfiguration | None = None
        for entry in node.device_configurations:
            if entry.configuration is configuration:
                found = entry
                break
            if found is None and entry.configuration == configuration:
                found = entry
        result[node] = found.pipeline_stage if found is not None else None
    return result
