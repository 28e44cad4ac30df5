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

Runs in O(N + E) per cut list, whatever the number of cuts (:data:`FUSED_CUTS` bounds the
work of the shared walk that stages several lists at once).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "StageAssignmentError",
    "assign_stages",
    "precompute_stages",
    "stages_from_annotations",
]

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.tensor_classes import (
    MARK_SHIFT,
    TensorClass,
    kept_default_classes,
    propagate_marks,
    slot_classes,
    staging_reads,
)
from onnx_ir_multidevice.graph.index import AnalysisError, CutListCache, GraphIndex, ResultKey

_ENTRIES = operator.attrgetter("device_configurations")

# Results kept on a GraphIndex (only this module reads and fills them).
_STAGES: ResultKey[CutListCache[dict[ir.Node, int]]] = ResultKey("stages.by_cuts")
"""Default stage assignment of each cut list (see :func:`assign_stages`)."""
_REPLICABLE_POSITIONS: ResultKey[list[int]] = ResultKey("stages.replicable_positions")
"""Positions of the nodes whose outputs are all replicable under the default classes."""


def stage_cache(index: GraphIndex) -> CutListCache[dict[ir.Node, int]]:
    """The default stages of each cut list computed so far for ``index`` (do not modify them).

    Filled by :func:`assign_stages` and :func:`precompute_stages`.
    """
    return index.memo(_STAGES, CutListCache)


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
    index: GraphIndex | None = None,
) -> dict[ir.Node, int]:
    """Assign a 0-based pipeline stage to every node of ``graph`` from its cut tensors.

    Args:
        graph: The main graph.
        cuts: The cut tensors in pipeline order: cut ``j`` separates stage ``j`` from
            stage ``j + 1``.
        classes: The :func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values` of
            ``graph`` when already computed (a value missing from it counts as an activation).
            Default: the classes of ``index`` (computed once per index).
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``, when
            already built (built here otherwise).

    Returns:
        The stage of each node directly in ``graph``, in topological order.

    Raises:
        StageAssignmentError: If a cut is not a node output of ``graph``, is repeated, or is
            computed from a later cut (cuts out of pipeline order). The message names the
            value.
        AnalysisError: If the graph has a cycle.
        ValueError: If ``index`` was built for another graph.
    """
    cut_positions = _validate_cuts(graph, cuts)
    if index is None:
        index = GraphIndex.build(graph)
    else:
        index.check_graph(graph)
    if classes is None or classes is kept_default_classes(index):
        # Same cuts, same index, default classes: the same stages (cached on the index).
        cache = stage_cache(index)
        cached = cache.get(cuts)
        if cached is None:
            _fused_stages(index, [(cuts, cut_positions)])
            cached = cache.get(cuts)
        if cached is None:
            # The stage list also holds the slots of external values and cuts, after the nodes.
            stage = _stage_list(index, cuts, cut_positions, None)
            cached = dict(zip(index.nodes, stage, strict=False))
            cache.put(cuts, cached)
        return cached.copy()
    return dict(zip(index.nodes, _stage_list(index, cuts, cut_positions, classes), strict=False))


def precompute_stages(
    graph: ir.Graph, cut_lists: Sequence[Sequence[ir.Value]], *, index: GraphIndex
) -> None:
    """Compute the default :func:`assign_stages` of several cut lists in one graph walk.

    The results are cached on ``index``, so that ``assign_stages(graph, cuts, index=index)``
    of each list is then a lookup; the default tensor classes are computed in the same walk
    when not computed yet. Lists that are invalid (see :func:`assign_stages`) are skipped:
    :func:`assign_stages` reports them.

    Raises:
        ValueError: If ``index`` was built for another graph.
    """
    index.check_graph(graph)
    todo = []
    cache = stage_cache(index)
    for cuts in cut_lists:
        if cuts in cache:
            continue
        try:
            cut_positions = _validate_cuts(graph, cuts)
        except StageAssignmentError:
            continue
        todo.append((cuts, cut_positions))
    if todo:
        _fused_stages(index, todo)


#: At most this many distinct cut tensors share one graph walk in :func:`_fused_stages`. Each
#: node then carries a mark of at most this many bits (a few machine words), so that walk is
#: O(N + E) whatever the number of configurations; a cut list longer than this is staged by
#: :func:`_stage_list` on its own (also O(N + E)).
FUSED_CUTS = 60


def _fused_stages(
    index: GraphIndex, todo: Sequence[tuple[Sequence[ir.Value], Mapping[ir.Value, int]]]
) -> None:
    """Stages of validated cut lists (``(cuts, positions)``), cached on ``index``.

    Lists of at most :data:`FUSED_CUTS` cuts are grouped so that each group has at most
    :data:`FUSED_CUTS` distinct cut tensors, and each group is staged in one graph walk
    (:func:`_fused_group`); a longer list is staged on its own by :func:`_stage_list`. Lists
    whose cuts are out of pipeline order are left out of the cache (:func:`_stage_list`
    names the offending cuts when :func:`assign_stages` is called). Each list costs
    O(N + E): linear in the graph, whatever the number of cuts.
    """
    group: list[tuple[Sequence[ir.Value], Mapping[ir.Value, int]]] = []
    distinct: set[ir.Value] = set()
    for cuts, cut_positions in todo:
        if len(cut_positions) > FUSED_CUTS:
            try:
                stage = _stage_list(index, cuts, cut_positions, None)
            except StageAssignmentError:
                continue
            stage_cache(index).put(cuts, dict(zip(index.nodes, stage, strict=False)))
            continue
        new = distinct.union(cut_positions)
        if len(new) > FUSED_CUTS:
            _fused_group(index, group)
            group, new = [], set(cut_positions)
        group.append((cuts, cut_positions))
        distinct = new
    if group:
        _fused_group(index, group)


def _fused_group(
    index: GraphIndex, todo: Sequence[tuple[Sequence[ir.Value], Mapping[ir.Value, int]]]
) -> None:
    """Stages of cut lists with at most :data:`FUSED_CUTS` distinct cuts, in one graph walk.

    Each distinct cut tensor gets a mark bit that
    :func:`~onnx_ir_multidevice.analysis.tensor_classes.propagate_marks` ORs down the graph
    (with the tensor classes, when not computed yet): a node's marks are the cuts it depends
    on, and its stage in a configuration is ``j + 1`` for the last cut ``j`` of that
    configuration among them (the stages of :func:`_stage_list` before sinking). Needs
    single-output cut producers (then a read of the producer is a read of the cut); leaves
    the cache untouched otherwise, or for cuts out of pipeline order.
    """
    nodes = index.nodes
    position = index.position
    n = len(nodes)
    bit_of: dict[ir.Value, int] = {}
    marks_at: dict[int, int] = {}
    for cuts, _ in todo:
        for value in cuts:
            if value in bit_of:
                continue
            p = position.get(value.producer())  # type: ignore[arg-type]  # no producer: get gives None
            if p is None or len(nodes[p].outputs) != 1:
                return
            bit = bit_of[value] = 1 << (MARK_SHIFT + len(bit_of))
            marks_at[p] = bit
    marks = [0] * n
    for p, bit in marks_at.items():
        marks[p] = bit
    flags = propagate_marks(index, marks)
    del flags[n:]
    distinct = set(flags)
    for cuts, cut_positions in todo:
        stage_of = _last_cut(bit_of[value] for value in cuts)
        table = {f: stage_of(f) for f in distinct}
        stage = list(map(table.__getitem__, flags))
        in_order = True
        for value, j in cut_positions.items():
            p = position[value.producer()]  # type: ignore[index]  # a cut value is a node output
            # The producer's own mark is what its readers get, not a read of its own.
            stage[p] = stage_of(flags[p] & ~bit_of[value])
            if stage[p] > j:
                in_order = False
        if not in_order:
            continue  # _stage_list names the offending cuts
        _sink_replicable(index, stage, cut_positions, None, len(cuts))
        stage_cache(index).put(cuts, dict(zip(nodes, stage, strict=False)))


def _last_cut(bits: Iterable[int]) -> Callable[[int], int]:
    """Map marks to a stage: ``j + 1`` for the last cut ``j`` (of ``bits``) among them, else 0.

    ``bits`` are the mark bits of one cut list, in its order (at most :data:`FUSED_CUTS`).
    When they increase along the list (the usual case: bits are given in order of first
    use), the highest set bit decides, in O(1); otherwise the set bits are visited, at
    most :data:`FUSED_CUTS` of them.
    """
    bits = list(bits)
    mask = sum(bits)
    stage_by_bit = {bit.bit_length(): j + 1 for j, bit in enumerate(bits)}
    if bits == sorted(bits):

        def highest(marked: int) -> int:
            return stage_by_bit.get((marked & mask).bit_length(), 0)

        return highest

    def largest(marked: int) -> int:
        marked &= mask
        best = 0
        while marked:
            low = marked & -marked
            best = max(best, stage_by_bit[low.bit_length()])
            marked ^= low
        return best

    return largest


def _stage_list(
    index: GraphIndex,
    cuts: Sequence[ir.Value],
    cut_positions: Mapping[ir.Value, int],
    classes: Mapping[ir.Value, TensorClass] | None,
) -> list[int]:
    """Stage of each node by position (see :func:`assign_stages`); cuts already validated.

    One walk in topological order: O(N + E), whatever the number of cuts.
    """
    nodes = index.nodes
    n = len(nodes)
    base = n + len(index.external)
    # Slot base + j holds cut j, read at stage j + 1 by its consumers.
    stage = [0] * base + [j + 1 for j in range(len(cuts))]
    # A replicable node reads no activation for staging (a proven shape read: see
    # tensor_classes.staging_reads).
    staged = staging_reads(index, classes)
    reads = list(staged)
    position = index.position
    cut_slot = {value: base + j for value, j in cut_positions.items()}
    # A read of a cut producer's slot may be a read of the cut: those nodes read cut slots
    # instead (from their values, so a multi-output producer's other outputs stay as they are).
    producers = {position[value.producer()] for value in cut_positions}  # type: ignore[index]  # cut values are node outputs
    if producers:
        is_producer = producers.__contains__
        uses = index.uses
        slot_of = index.slot_of
        all_reads = index.reads
        for reader, slots in enumerate(staged):
            if any(map(is_producer, slots)):
                values = uses[reader]
                if slots is not all_reads[reader]:  # some reads removed for staging
                    values = tuple(v for v in values if slot_of(v) in slots)
                reads[reader] = tuple(
                    cut_slot.get(v) or slot_of(v)  # type: ignore[misc]  # a read value has a slot
                    for v in values
                )
    get = stage.__getitem__
    for i, slots in enumerate(reads):
        if slots:
            stage[i] = max(map(get, slots))

    for value, j in cut_positions.items():
        producer_stage = stage[position[value.producer()]]  # type: ignore[index]  # a cut value is a node output
        if producer_stage > j:
            later = cuts[producer_stage - 1]
            raise StageAssignmentError(
                f"cut {j} {_label(value)} is computed from cut {producer_stage - 1} "
                f"{_label(later)}, which comes later in the list; list cuts in pipeline order"
            )

    _sink_replicable(index, stage, cut_positions, classes, len(cuts))
    return stage


def _replicable_positions(
    index: GraphIndex, classes: Mapping[ir.Value, TensorClass] | None
) -> list[int]:
    """Positions of the nodes whose outputs are all replicable (and that have outputs)."""
    replicable = TensorClass.REPLICABLE
    if classes is None or classes is kept_default_classes(index):
        cached = index.result(_REPLICABLE_POSITIONS)
        if cached is None:
            by_slot = slot_classes(index)
            cached = index.keep(
                _REPLICABLE_POSITIONS,
                [
                    i
                    for i, node_class in enumerate(by_slot)
                    if node_class is replicable and index.nodes[i].outputs
                ],
            )
        return cached
    get = classes.get
    return [
        i
        for i, node in enumerate(index.nodes)
        if node.outputs and all(get(v) is replicable for v in node.outputs)
    ]


def _sink_replicable(
    index: GraphIndex,
    stage: list[int],
    cut_positions: Mapping[ir.Value, int],
    classes: Mapping[ir.Value, TensorClass] | None,
    last_stage: int,
) -> None:
    """Move replicable-only nodes to their earliest consumer's stage (reverse topological)."""
    candidates = _replicable_positions(index, classes)
    if not candidates:
        return
    consumers = index.readers_of(candidates)
    outputs = index.output_slots
    position = index.position
    cut_producers = {position[v.producer()] for v in cut_positions}  # type: ignore[index]  # cut values are node outputs
    get = stage.__getitem__
    for i in reversed(candidates):
        if i in cut_producers:
            continue
        readers = consumers[i]
        earliest = min(map(get, readers)) if readers else None
        if i in outputs and (earliest is None or last_stage < earliest):
            earliest = last_stage
        if earliest is not None:
            stage[i] = earliest


def stages_from_annotations(
    graph: ir.Graph,
    configuration: ir.ModelConfiguration,
    *,
    index: GraphIndex | None = None,
) -> dict[ir.Node, int | None]:
    """Read each node's ``pipeline_stage`` for ``configuration`` from its annotations.

    The node's :attr:`~onnx_ir.Node.device_configurations` entry for ``configuration`` is
    found by object identity, as onnx-ir binds it; failing that, by equality (same name,
    device count and device names). Nodes inside subgraph bodies are not listed: they run
    with their parent.

    Args:
        graph: The main graph.
        configuration: One of the model's ``device_configurations``.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph`` (only
            its node list is used).

    Returns:
        The stage of each node directly in ``graph``, in graph order: ``None`` when the node
        has no entry for ``configuration`` or its entry has no pipeline stage.
    """
    nodes = index.graph_nodes if index is not None else tuple(graph)
    if index is not None:
        index.check_graph(graph)
    return dict(zip(nodes, annotated_stage_list(nodes, configuration), strict=True))


def annotated_stage_list(
    nodes: Sequence[ir.Node],
    configuration: ir.ModelConfiguration,
    *,
    entries_list: Sequence[Sequence[ir.NodeDeviceConfiguration]] | None = None,
) -> list[int | None]:
    """:func:`stages_from_annotations` of ``nodes``, as a list in the same order.

    Args:
        nodes: The nodes.
        configuration: The configuration whose stages are read.
        entries_list: The ``device_configurations`` of each node of ``nodes``, when already
            read (to share one read between several configurations).
    """
    if entries_list is None:
        entries_list = list(map(_ENTRIES, nodes))
    # Entry tuples shared between nodes (as annotate() writes them) are looked up once.
    distinct = dict(zip(map(id, entries_list), entries_list, strict=True))
    stage_of: dict[int, int | None] = {}
    for key, entries in distinct.items():
        found: ir.NodeDeviceConfiguration | None = None
        for entry in entries:
            if entry.configuration is configuration:
                found = entry
                break
        else:
            for entry in entries:
                if entry.configuration == configuration:
                    found = entry
                    break
        stage_of[key] = found.pipeline_stage if found is not None else None
    return list(map(stage_of.__getitem__, map(id, entries_list)))
