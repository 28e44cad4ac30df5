"""Tensor-parallel regions of a graph: Megatron-style column-parallel in, row-parallel out.

:func:`find_regions` tries, for every activation read by ``MatMul``/``Gemm`` nodes with
constant weights (the Q, K and V projections of one attention block read the same normalised
input; so do an MLP's gate and up projections) or by a packed-QKV ``com.microsoft``
``Attention``, the column-parallel split of all of them
together, and propagates the :mod:`~onnx_ir_multidevice.analysis.sharding` rules forward in
topological order. A :class:`~onnx_ir_multidevice.analysis.sharding.Partial` value that meets
an op not linear in it (a residual ``Add`` of an activation, a normalisation, a non-linear
activation) is reduced by an ``AllReduce`` right after its producer; a
:class:`~onnx_ir_multidevice.analysis.sharding.Split` value that meets an op without a rule
would be gathered (``AllGather``): such an attempt is dropped unless ``allow_gather=True``.
The nodes reached form one :class:`Region`, with every value's state, the weight slices, the
rewritten constant shapes and attributes and the collectives.

A ``Gather`` of a constant embedding table by replicated ids starts a vocabulary-parallel
region of its own (each device looks up its rows; the partial sum is reduced right after the
lookup). These seeds are tried after all the others, so they never take a node from a
column-parallel region, and a lookup whose table another node reads whole (a tied LM head's
``Transpose``) is dropped: it would hold the table whole and sliced.

A ``Split`` node dividing a split axis into ``k`` equal outputs (GPT-2's fused QKV) makes the
attempt start again with the weight's output axis taken as ``k`` blocks, each sliced.

Each attempt visits each node at most once (a heap in topological order, from the seeds'
consumers); an attempt is retried at most twice: near-linear in the graph's size.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["Collective", "Region", "find_regions"]

import dataclasses
import heapq
from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    REPLICATED,
    SEED_RULES,
    AttributeRewrite,
    BiasOnce,
    LocalShape,
    Partial,
    Replicated,
    RuleResult,
    ShapeRewrite,
    ShardingContext,
    ShardState,
    Split,
    VocabMask,
    WeightSlice,
    propagate,
)
from onnx_ir_multidevice.graph.index import GraphIndex


@dataclasses.dataclass(frozen=True)
class Collective:
    """A collective a region needs: the devices' pieces of a value made whole."""

    kind: str
    """``"AllReduce"`` (a :class:`~onnx_ir_multidevice.analysis.sharding.Partial` value) or
    ``"AllGather"`` (a :class:`~onnx_ir_multidevice.analysis.sharding.Split` one)."""

    value: ir.Value
    """The value reduced or gathered."""

    after: ir.Node | None
    """The node producing :attr:`value` (the collective runs right after it)."""

    state: ShardState
    """The state of :attr:`value` before the collective."""

    nbytes: int | None
    """The whole value's size in bytes at the planning dims (``None``: unknown). A ring
    ``AllReduce`` moves ``2 * (degree - 1) / degree`` of it per device, an ``AllGather``
    ``(degree - 1) / degree``."""


@dataclasses.dataclass
class Region:
    """One tensor-parallel region: what each of ``degree`` devices computes, and how."""

    degree: int
    """How many devices share the region."""

    nodes: list[ir.Node]
    """The nodes, in topological order: every device runs its copy of each."""

    states: dict[ir.Value, ShardState]
    """The state of every value read or written by :attr:`nodes` (replicated inputs
    included)."""

    input_states: dict[ir.Node, tuple[ShardState, ...]]
    """The state each node reads each of its inputs in: :data:`REPLICATED` for a value of the
    region that a collective made whole before this node reads it."""

    weight_slices: list[WeightSlice]
    """The constants each device holds a slice of, one entry per node reading one."""

    shape_rewrites: list[ShapeRewrite]
    """Shape-like inputs with a per-device value."""

    attribute_rewrites: list[AttributeRewrite]
    """Attributes with a per-device value."""

    bias_once: list[BiasOnce]
    """Constants added to a partial sum by device 0 only."""

    collectives: list[Collective]
    """The collectives ending the region, in topological order."""

    vocab_masks: list[VocabMask] = dataclasses.field(default_factory=list)
    """Vocabulary-parallel lookups: each device masks the ids to its rows."""

    def summary(self) -> str:
        """A few lines: nodes, weight slices, rewrites and collectives."""
        lines = [f"region of {len(self.nodes)} nodes at degree {self.degree}:"]
        for piece in self.weight_slices:
            blocks = f" in {piece.blocks} blocks" if piece.blocks > 1 else ""
            lines.append(f"  slice {piece.value.name} on axis {piece.axis}{blocks}")
        for rewrite in self.shape_rewrites:
            lines.append(
                f"  rewrite {rewrite.node.name} input {rewrite.input_index}[{rewrite.position}]:"
                f" {rewrite.old} -> {rewrite.new}"
            )
        for change in self.attribute_rewrites:
            lines.append(
                f"  rewrite {change.node.name}.{change.name}: {change.old} -> {change.new}"
            )
        for once in self.bias_once:
            lines.append(f"  {once.node.name} input {once.input_index} added by device 0 only")
        for mask in self.vocab_masks:
            lines.append(f"  {mask.node.name} looks up {mask.rows} of {mask.vocab} rows per device")
        for collective in self.collectives:
            after = collective.after.name if collective.after is not None else "<graph input>"
            size = f", {collective.nbytes} bytes" if collective.nbytes is not None else ""
            lines.append(f"  {collective.kind} {collective.value.name} after {after}{size}")
        return "\n".join(lines)


@dataclasses.dataclass
class _Attempt:
    nodes: list[ir.Node]
    states: dict[ir.Value, ShardState]
    inputs: dict[ir.Node, tuple[ShardState, ...]]
    results: list[RuleResult]
    collectives: list[Collective]
    gathers: int


def find_regions(
    model_or_graph: ir.Model | ir.Graph,
    degree: int,
    *,
    dims: Mapping[str, int] | None = None,
    shapes: ValueShapes | None = None,
    allow_gather: bool = False,
    gather_outputs: bool = False,
) -> list[Region]:
    """Find the tensor-parallel regions of a graph at ``degree`` devices.

    Args:
        model_or_graph: The model or its main graph (not modified).
        degree: How many devices share each region (``>= 2``).
        dims: The planning dims (input symbol values) the shapes are taken at.
        shapes: The graph's :class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes`, when
            already built (then ``dims`` is not used).
        allow_gather: Keep regions that end in an ``AllGather`` (a column-parallel projection
            whose output meets an op without a rule); by default only regions whose
            collectives are all ``AllReduce`` are kept.
        gather_outputs: Also keep a region whose only ``AllGather`` s make graph outputs
            whole (a column-parallel LM head: each device computes its slice of the
            vocabulary, gathered once at the end), without allowing gathers elsewhere.
            Such regions are kept only next to a region with an ``AllReduce`` (a lone
            classifier head is not worth a tensor-parallel split; an attention block whose
            present keys/values are graph outputs has its ``AllReduce``).

    Returns:
        The regions, in the order of their first node; no node is in two regions.

    Raises:
        ValueError: ``degree < 2``.
    """
    graph = model_or_graph.graph if isinstance(model_or_graph, ir.Model) else model_or_graph
    index = GraphIndex.build(graph)
    if shapes is None:
        shapes = ValueShapes(graph, dims, index=index)
    context = ShardingContext(graph, degree, shapes)
    order = list(index.graph_nodes)
    position = {node: i for i, node in enumerate(order)}
    outputs = set(graph.outputs)

    taken: set[ir.Node] = set()
    regions: list[Region] = []
    output_gathers = 0
    for readers in _seed_groups(order).values():
        seeds = [s for s in readers if s not in taken]
        if not seeds:
            continue
        attempt = _best_attempt(context, seeds, taken, position, order, outputs)
        if attempt is None:
            continue
        if attempt.gathers and not allow_gather:
            if not (gather_outputs and _gathers_outputs_only(attempt, outputs)):
                continue
            if all(c.kind == "AllGather" for c in attempt.collectives):
                output_gathers += 1  # gathers only (an LM head); else a block with its reduce
        taken.update(attempt.nodes)
        regions.append(_region(degree, attempt))
    regions = _drop_tied_lookups(regions, outputs)
    if output_gathers == len(regions):
        return []
    regions.sort(key=lambda r: position[r.nodes[0]])
    return regions


def _drop_tied_lookups(regions: list[Region], outputs: set[ir.Value]) -> list[Region]:
    """Drop the vocabulary-parallel lookups whose table another node reads whole.

    A tied embedding read whole by the LM head (a ``Transpose`` of it, a replicated head)
    would be held whole and sliced on every device: more memory, not less. A head slicing it
    the same way (a column-parallel ``Gemm`` with ``transB``) keeps the lookup.
    """
    readers: dict[tuple[ir.Value, int, int], set[ir.Node]] = {}
    for region in regions:
        for piece in region.weight_slices:
            if piece.node is not None:
                key = (piece.value, piece.axis, piece.blocks)
                readers.setdefault(key, set()).add(piece.node)
    kept = []
    for region in regions:
        if region.vocab_masks and any(
            piece.value in outputs
            or any(
                use.node not in readers[(piece.value, piece.axis, piece.blocks)]
                for use in piece.value.uses()
            )
            for piece in region.weight_slices
        ):
            continue
        kept.append(region)
    return kept


def _seed_groups(order: list[ir.Node]) -> dict[ir.Value, list[ir.Node]]:
    """The nodes a seed rule applies to, grouped by their first input (in graph order).

    The ``Gather`` groups (vocabulary-parallel embeddings, grouped by their table) come after
    all the others: an embedding region never takes a node a column-parallel region would.
    """
    groups: dict[ir.Value, list[ir.Node]] = {}
    lookups: dict[ir.Value, list[ir.Node]] = {}
    for node in order:
        if node.inputs and node.inputs[0] is not None and SEED_RULES.get(node.domain, node.op_type):
            found = lookups if node.op_type == "Gather" else groups
            found.setdefault(node.inputs[0], []).append(node)
    for value, nodes in lookups.items():
        groups.setdefault(value, []).extend(nodes)
    return groups


def _best_attempt(
    context: ShardingContext,
    seeds: list[ir.Node],
    taken: set[ir.Node],
    position: Mapping[ir.Node, int],
    order: list[ir.Node],
    outputs: set[ir.Value],
) -> _Attempt | None:
    """Grow a region from ``seeds`` (up to 4 tries).

    A try that fails is retried without per-device shape data; a region that ends in a
    gather is retried split into the blocks a rule hinted at.
    """
    blocks = 1
    attempt = None
    context.shape_data = True
    for _ in range(4):
        context.split_hints.clear()
        attempt = _attempt(context, seeds, blocks, taken, position, order, outputs)
        if attempt is None and context.shape_data:
            context.shape_data = False  # per-device shape data no rule consumed: as before
            continue
        hints = [h for h in context.split_hints if h > blocks]
        if attempt is not None and attempt.gathers and hints:
            blocks = hints[0]
            continue
        break
    return attempt


def _gathers_outputs_only(attempt: _Attempt, outputs: set[ir.Value]) -> bool:
    """Whether every ``AllGather`` of the attempt makes a graph output whole."""
    gathered = [c.value for c in attempt.collectives if c.kind == "AllGather"]
    return all(v in outputs for v in gathered)


def _attempt(
    context: ShardingContext,
    seeds: list[ir.Node],
    blocks: int,
    taken: set[ir.Node],
    position: Mapping[ir.Node, int],
    order: list[ir.Node],
    outputs: set[ir.Value],
) -> _Attempt | None:
    """Grow one region from ``seeds``: ``None`` when no seed applies or shape data is stuck."""
    growth = _Growth(context, taken, position, order, outputs)
    if not growth.seed(seeds, blocks):
        return None
    growth.grow()
    return growth.finish()


class _Growth:
    """The state of one region growing from its seeds, node by node in graph order."""

    def __init__(
        self,
        context: ShardingContext,
        taken: set[ir.Node],
        position: Mapping[ir.Node, int],
        order: list[ir.Node],
        outputs: set[ir.Value],
    ) -> None:
        self.context = context
        self.taken = taken
        self.position = position
        self.order = order
        self.outputs = outputs
        self.states: dict[ir.Value, ShardState] = {}
        self.reduced: set[ir.Value] = set()
        """Values made whole by a collective: later readers see them replicated."""
        self.nodes: list[ir.Node] = []
        self.results: list[RuleResult] = []
        self.read: dict[ir.Node, tuple[ShardState, ...]] = {}
        self.collectives: list[Collective] = []
        self.heap: list[int] = []
        self.queued: set[int] = set()
        self.stuck: list[ir.Value] = []
        """Per-device shape data read by a node without a rule."""
        self.gathered: set[ir.Value] = set()
        """Split graph outputs gathered for the output only."""

    def push_readers(self, value: ir.Value) -> None:
        """Queue the readers of a value that is not replicated (a subgraph reads it whole)."""
        for use in value.uses():
            where = self.position.get(use.node)
            if where is None:  # a node of a subgraph: it reads the whole value
                self.make_whole(value)
            elif where not in self.queued:
                self.queued.add(where)
                heapq.heappush(self.heap, where)
        if value in self.outputs:
            self.make_whole(value, output=True)

    def make_whole(self, value: ir.Value, *, output: bool = False) -> None:
        """Add the collective that makes ``value`` whole (once)."""
        if value in self.reduced:
            return
        state = self.states[value]
        if output and isinstance(state, Split):
            # The output is gathered; the region's own readers go on reading their piece
            # (present keys/values read again by the attention).
            if value not in self.gathered:
                self.gathered.add(value)
                self._collective("AllGather", value, state)
            return
        self.reduced.add(value)
        if isinstance(state, LocalShape):
            self.stuck.append(value)
            return
        if value in self.gathered:
            return  # already gathered at the output; later readers read the whole value
        self._collective("AllReduce" if isinstance(state, Partial) else "AllGather", value, state)

    def _collective(self, kind: str, value: ir.Value, state: ShardState) -> None:
        nbytes = _nbytes(self.context, value)
        self.collectives.append(Collective(kind, value, value.producer(), state, nbytes))

    def add(self, node: ir.Node, result: RuleResult) -> None:
        """Take ``node`` into the region with the states its rule proved."""
        self.nodes.append(node)
        self.results.append(result)
        for value, state in zip(node.outputs, result.outputs, strict=True):
            if value is not None:
                self.states[value] = state
                if not isinstance(state, Replicated):
                    self.push_readers(value)

    def seed(self, seeds: list[ir.Node], blocks: int) -> bool:
        """Start from the seeds a seed rule applies to; ``False`` when none does."""
        for seed in seeds:
            if seed in self.taken:
                continue
            found = SEED_RULES.get(seed.domain, seed.op_type)
            result = found(self.context, seed, blocks) if found is not None else None
            if result is not None:
                self.read[seed] = (REPLICATED,) * len(seed.inputs)
                self.add(seed, result)
                if result.vocab_masks:
                    # A lookup's partial sum is reduced at once: carried further it would only
                    # grow (a rotary table's rows times the queries) or meet another region.
                    for value in seed.outputs:
                        if value is not None:
                            self.make_whole(value)
        return bool(self.nodes)

    def grow(self) -> None:
        """Propagate through the queued readers in graph order."""
        while self.heap:
            node = self.order[heapq.heappop(self.heap)]
            if node in self.states or node in self.nodes:
                continue
            inputs = [
                REPLICATED if v is None or v in self.reduced else self.states.get(v, REPLICATED)
                for v in node.inputs
            ]
            if all(isinstance(s, Replicated) for s in inputs):
                continue
            result = None if node in self.taken else propagate(self.context, node, inputs)
            if result is None:  # no rule proves it: its inputs are made whole first
                for value, state in zip(node.inputs, inputs, strict=True):
                    if value is not None and not isinstance(state, Replicated):
                        self.make_whole(value)
                continue
            self.read[node] = tuple(inputs)
            self.add(node, result)

    def finish(self) -> _Attempt | None:
        """The attempt, its nodes and collectives in graph order (``None``: stuck)."""
        if self.stuck:
            return None
        position = self.position
        self.collectives.sort(
            key=lambda c: position.get(c.after, -1) if c.after is not None else -1
        )
        for node in self.nodes:
            for value in node.inputs:
                if value is not None and value not in self.states:
                    self.states[value] = REPLICATED
        gathers = sum(1 for c in self.collectives if c.kind == "AllGather")
        ordered = sorted(range(len(self.nodes)), key=lambda i: position[self.nodes[i]])
        return _Attempt(
            [self.nodes[i] for i in ordered],
            self.states,
            self.read,
            [self.results[i] for i in ordered],
            self.collectives,
            gathers,
        )


def _nbytes(context: ShardingContext, value: ir.Value) -> int | None:
    shape = context.shape(value)
    dtype = context.shapes.dtype(value)
    if shape is None or dtype is None:
        return None
    return int(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)


def _region(degree: int, attempt: _Attempt) -> Region:
    region = Region(
        degree, attempt.nodes, attempt.states, attempt.inputs, [], [], [], [], attempt.collectives
    )
    for node, result in zip(attempt.nodes, attempt.results, strict=True):
        region.weight_slices.extend(dataclasses.replace(p, node=node) for p in result.weight_slices)
        region.shape_rewrites.extend(result.shape_rewrites)
        region.attribute_rewrites.extend(result.attribute_rewrites)
        region.bias_once.extend(result.bias_once)
        region.vocab_masks.extend(result.vocab_masks)
    return region
