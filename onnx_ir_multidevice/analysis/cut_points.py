"""Cut points: the tensors at which the main graph can be split into two pipeline stages.

Definition (the oracle the implementation is tested against): for an activation ``v`` of
the main graph, assign stages with ``cuts=[v]`` as
:func:`~onnx_ir_multidevice.analysis.stages.assign_stages` does (as soon as possible:
stage 1 is everything computed from ``v``, stage 0 the rest; replicable nodes follow their
consumers) and list the activations crossing the boundary
(:func:`~onnx_ir_multidevice.analysis.boundaries.boundary_crossings`). ``v`` is

* a **strict** cut when exactly one activation, ``v`` itself, crosses, and stage 1 is not
  empty (``v`` has a consumer). Graph inputs are forwarded and replicable values recomputed,
  so they never count;
* a **relaxed** cut when ``v`` crosses together with *side* activations whose sizes are all
  known at the probe dims (the planning dims, unbound symbols at the example values of
  :func:`~onnx_ir_multidevice.analysis.shapes.example_dims`, so that which cuts exist never
  depends on a dim being bound) and sum to at most ``side_limit_bytes``.

A cut must also be writable: the split gives each crossing value a type, so a cut whose
cut tensor or side activation has no dtype, stated or inferable
(:func:`~onnx_ir_multidevice.analysis.boundaries.boundary_problem`, the split's own test), is
not a cut.

Only values of the main graph are candidates: a cut never falls inside an ``If``/``Loop``/
``Scan`` body (cutting right after such a node is fine).

Algorithm, for a graph of N nodes and E edges:

1. **Strict cuts, exactly: dominators.** Build the DAG of a virtual source, the non-replicable
   nodes and their activation outputs (a node points at its outputs, a value at the nodes
   reading it, a node reading no activation hangs off the source). ``v`` is a strict cut iff
   it dominates everything reachable from it, iff its dominator subtree has no edge leaving
   it. Immediate dominators come in one topological pass (the immediate dominator of a
   vertex is the lowest common ancestor of its predecessors), with O(1)-space skew-binary
   jump pointers for O(log N) ancestor queries; one reverse pass propagates, per subtree,
   the shallowest immediate dominator that any of its edges reaches. O((N + E) log N).
2. **The planning chain.** Strict cuts nest along the dominator tree; the heavy path (at each
   step the cut whose subtree holds the most nodes) is the chain the planner cuts along.
   Nodes are ordered by (number of chain cuts above them, depth from the sources, graph
   order): in that order what each chain cut feeds is a *suffix*.
3. **Relaxed cuts on the chain: one sweep.** In that order the activations crossing position
   ``b`` are maintained with counts (each value lives from its producer to its last reader).
   A value first read at ``b`` is a cut at ``b`` when everything from ``b`` on is computed from
   it, checked in O(its fan-out) with a range-minimum table over "latest activation read" per
   node; its crossing set is then exactly the live set. O((N + E) log N).
4. **Relaxed cuts off the chain** (a side branch to a second output, say): a bounded search
   per remaining value walks what it feeds in order and stops at the first crossing that
   breaks the limit. Exact; in the worst case O(N) per value, in practice a few nodes, as a
   large crossing activation appears within a block.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_SIDE_LIMIT_BYTES",
    "CutAnalysis",
    "CutCandidate",
    "analyse_cut_points",
    "find_cut_points",
    "narrowest_crossing",
]

import dataclasses
import heapq
import operator
from collections.abc import Mapping
from itertools import chain, compress, repeat

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.boundaries import boundary_problem
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.sparse_table import SparseTable
from onnx_ir_multidevice.analysis.tensor_classes import (
    TensorClass,
    classify_values,
    default_classes,
    has_default_flags,
    kept_default_classes,
    slot_classes,
)
from onnx_ir_multidevice.graph.index import GraphIndex

_PRODUCER = operator.methodcaller("producer")

DEFAULT_SIDE_LIMIT_BYTES = 1 << 20
"""Default budget of side activations for a relaxed cut: 1 MiB at the planning dims.

Enough for the shape vectors and a causal mask up to ``[1024, 1024]`` booleans that
TorchScript transformer exports carry across every layer; far below any hidden state.
"""


@dataclasses.dataclass(frozen=True)
class CutCandidate:
    """A tensor at which the main graph splits into two sequential stages.

    .. versionadded:: 0.1
    """

    value: ir.Value
    """The cut tensor: the one activation sent from the stage before to the stage after."""

    node: ir.Node
    """The node producing :attr:`value` (the ``.omny`` ``after_node``)."""

    position: int
    """Index of :attr:`node` in the topological order of the main graph
    (:func:`~onnx_ir_multidevice.graph.index.topological_order`)."""

    side: tuple[ir.Value, ...] = ()
    """Other activations crossing with :attr:`value` (empty for a strict cut)."""

    bytes: int | None = None
    """Bytes crossing at the planning dims, :attr:`value` and :attr:`side` together; ``None``
    when the size of :attr:`value` is unknown."""

    @property
    def strict(self) -> bool:
        """Whether exactly one activation crosses (what the ``.omny`` spec calls valid)."""
        return not self.side


@dataclasses.dataclass(frozen=True)
class CutAnalysis:
    """Everything :func:`analyse_cut_points` computed, for the planner.

    .. versionadded:: 0.1
    """

    graph: ir.Graph
    """The analysed main graph."""

    classes: Mapping[ir.Value, TensorClass]
    """:func:`~onnx_ir_multidevice.analysis.tensor_classes.classify_values` of the graph."""

    sizes: ValueSizes
    """Shapes and bytes at the planning dims."""

    uses: Mapping[ir.Node, tuple[ir.Value, ...]]
    """:func:`~onnx_ir_multidevice.graph.index.graph_uses` of the graph."""

    candidates: tuple[CutCandidate, ...]
    """Every cut, sorted by :attr:`CutCandidate.position`."""

    order: tuple[ir.Node, ...]
    """The non-replicable nodes in planning order: each chain cut feeds exactly a suffix."""

    chain: tuple[CutCandidate, ...]
    """The cuts the planner chooses from, in pipeline order (one per boundary)."""

    boundaries: tuple[int, ...]
    """For each chain cut, the index in :attr:`order` of the first node after the cut."""

    replicable_nodes: tuple[ir.Node, ...]
    """Nodes whose outputs are all replicable (recomputed by each stage that needs them)."""

    index: GraphIndex | None = None
    """The :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of :attr:`graph` the
    analysis used (shared with the memory model)."""

    order_positions: tuple[int, ...] = ()
    """The position in :attr:`index` of each node of :attr:`order` (empty without an index)."""


# ---------------------------------------------------------------------------------------
# Dominator tree with skew-binary jump pointers.


class _DominatorTree:
    """Immediate dominators of a DAG built vertex by vertex in topological order."""

    def __init__(self) -> None:
        self.parent = [0]
        self.jump = [0]
        self.depth = [0]

    def add(self, idom: int) -> int:
        """Add a vertex whose immediate dominator is ``idom``; return its id."""
        parent, jump, depth = self.parent, self.jump, self.depth
        j = jump[idom]
        if depth[idom] - depth[j] == depth[j] - depth[jump[j]]:
            target = jump[j]
        else:
            target = idom
        parent.append(idom)
        jump.append(target)
        depth.append(depth[idom] + 1)
        return len(parent) - 1

    def lca(self, a: int, b: int) -> int:
        """Lowest common ancestor of ``a`` and ``b`` in O(log depth)."""
        parent, jump, depth = self.parent, self.jump, self.depth
        if depth[a] < depth[b]:
            a, b = b, a
        target = depth[b]
        while depth[a] > target:
            a = jump[a] if depth[jump[a]] >= target else parent[a]
        while a != b:
            if jump[a] != jump[b]:
                a, b = jump[a], jump[b]
            else:
                a, b = parent[a], parent[b]
        return a


# ---------------------------------------------------------------------------------------


def find_cut_points(
    graph: ir.Graph,
    *,
    relaxed: bool = False,
    side_limit_bytes: int = DEFAULT_SIDE_LIMIT_BYTES,
    dims: Mapping[str, int] | None = None,
) -> list[CutCandidate]:
    """Return every tensor at which ``graph`` can be split into two sequential stages.

    See the module docstring for the exact definition and the algorithm. The graph is not
    modified.

    Args:
        graph: The main graph of a model.
        relaxed: Also return relaxed cuts (the cut tensor plus small side activations).
        side_limit_bytes: Budget of the side activations of a relaxed cut, at the planning
            dims.
        dims: Planning dims for symbolic dimensions, e.g. ``{"seq": 512}`` (a graph input's
            symbolic first dimension defaults to 1).

    Returns:
        The cuts sorted by the topological position of their producer.

    Raises:
        AnalysisError: If the graph has a cycle.

    Example:
        >>> from onnx_ir_multidevice.testing import zoo
        >>> cuts = find_cut_points(zoo.resnet(depth_blocks=2).graph)
        >>> [c.value.name for c in cuts][-2:]
        ['pool', 'flatten']

    .. versionadded:: 0.1
    """
    analysis = analyse_cut_points(
        graph, relaxed=relaxed, side_limit_bytes=side_limit_bytes, dims=dims
    )
    return list(analysis.candidates)


def analyse_cut_points(
    graph: ir.Graph,
    *,
    relaxed: bool = False,
    side_limit_bytes: int = DEFAULT_SIDE_LIMIT_BYTES,
    dims: Mapping[str, int] | None = None,
    sizes: ValueSizes | None = None,
    classes: Mapping[ir.Value, TensorClass] | None = None,
    index: GraphIndex | None = None,
) -> CutAnalysis:
    """Find the cut points of ``graph`` and the planning chain (see :func:`find_cut_points`).

    Args:
        graph: The main graph of a model.
        relaxed: Also find relaxed cuts.
        side_limit_bytes: Budget of the side activations of a relaxed cut.
        dims: Planning dims (ignored when ``sizes`` is given).
        sizes: Precomputed sizes at the planning dims.
        classes: Precomputed tensor classes of ``graph``.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``, when
            already built. Without ``classes``, the classes are computed without the model's
            local functions (``classify_values(graph)``), as before, whatever the index's
            ``functions``.

    Returns:
        The analysis: all candidates, the chain, and the planning order.

    .. versionadded:: 0.1
    """
    if side_limit_bytes < 0:
        raise ValueError(f"side_limit_bytes must be >= 0, got {side_limit_bytes}")
    if index is None:
        index = GraphIndex.build(graph)
    else:
        index.check_graph(graph)
    if classes is None:
        classes = (
            default_classes(index) if not index.functions else classify_values(graph, index=index)
        )
    if sizes is None:
        sizes = ValueSizes(graph, dims)
    return _Finder(graph, classes, sizes, relaxed, side_limit_bytes, index).run()


class _Finder:
    """One cut-point analysis (state shared by the steps of the module docstring)."""

    def __init__(
        self,
        graph: ir.Graph,
        classes: Mapping[ir.Value, TensorClass],
        sizes: ValueSizes,
        relaxed: bool,
        side_limit: int,
        index: GraphIndex,
    ) -> None:
        self.graph = graph
        self.classes = classes
        self.sizes = sizes
        self.relaxed = relaxed
        self.side_limit = side_limit
        self.index = index
        self.uses = index.uses_by_node
        nodes = index.nodes
        n = len(nodes)
        self.topo = nodes
        self.topo_index = index.position
        replicable = TensorClass.REPLICABLE
        if classes is kept_default_classes(index) and has_default_flags(index):
            # The default classes: one class per node, by position (every output shares it).
            is_replicable = list(map(operator.is_, slot_classes(index), repeat(replicable)))
            is_replicable = list(map(operator.and_, is_replicable, map(bool, index.outputs_at)))
        else:
            classes_get = classes.get
            is_replicable = []
            for node in nodes:
                outputs = node.outputs
                if len(outputs) == 1:
                    is_replicable.append(classes_get(outputs[0]) is replicable)
                else:
                    is_replicable.append(
                        bool(outputs) and all(classes_get(v) is replicable for v in outputs)
                    )
        is_placed = list(map(operator.not_, is_replicable))
        self.placed: list[ir.Node] = list(compress(nodes, is_placed))
        self.replicable_nodes: list[ir.Node] = list(compress(nodes, is_replicable))
        placed_at = list(compress(range(n), is_placed))
        placed_mask = is_placed + [False] * len(index.external)
        # Activation reads of each placed node (values produced by placed nodes), and its
        # depth from the sources (positions are topological: producers come first).
        self.consumers: dict[ir.Value, list[ir.Node]] = {}
        consumers = self.consumers
        consumers_get = consumers.get
        all_uses, all_slots = index.uses, index.reads
        reads_by_node = []
        level_at = [0] * n
        for i in placed_at:
            node = nodes[i]
            slots = all_slots[i]
            deepest = -1
            if len(slots) == 1:
                p = slots[0]
                if placed_mask[p]:
                    reads = list(all_uses[i])
                    deepest = level_at[p]
                else:
                    reads = []
            else:
                reads = []
                for v, p in zip(all_uses[i], slots, strict=True):
                    if placed_mask[p]:
                        reads.append(v)
                        deepest = max(deepest, level_at[p])
            level_at[i] = deepest + 1
            reads_by_node.append(reads)
            for value in reads:
                found = consumers_get(value)
                if found is None:
                    consumers[value] = [node]
                else:
                    found.append(node)
        self.levels = list(map(level_at.__getitem__, placed_at))  # in ``placed`` order
        self.placed_at = placed_at  # index positions, in ``placed`` order
        self.placed_outputs = list(map(index.outputs_at.__getitem__, placed_at))
        self.reads = dict(zip(self.placed, reads_by_node, strict=True))
        self.reads_list = reads_by_node
        self._bytes: dict[ir.Value, int | None] = {}
        self._estimates: dict[ir.Value, int | None] = {}
        self.decided: set[ir.Value] = set()

    def nbytes(self, value: ir.Value) -> int | None:
        try:
            return self._bytes[value]
        except KeyError:
            result = self._bytes[value] = self.sizes.nbytes(value)
            return result

    def estimate(self, value: ir.Value) -> int | None:
        """Bytes at the probe dims (unbound dims at example values).

        What the side limit of a relaxed cut is judged by, so that finding cuts never depends
        on a dim being bound.
        """
        try:
            return self._estimates[value]
        except KeyError:
            result = self._estimates[value] = self.sizes.estimate_nbytes(value)
            return result

    # -- step 1 ---------------------------------------------------------------------------

    def dominators(self) -> tuple[set[ir.Value], list[ir.Value]]:
        """Return the strict cuts and the heavy-path chain of them (pipeline order)."""
        tree = _DominatorTree()
        parent, jump, depth = tree.parent, tree.jump, tree.depth
        lca = tree.lca
        vertex: dict[ir.Value, int] = {}  # value -> its vertex
        node_vertex: list[int] = []  # vertex of each placed node, in ``placed`` order
        value_list: list[ir.Value] = []  # the values, in vertex order
        is_node = [False]
        for outputs, reads in zip(self.placed_outputs, self.reads_list, strict=True):
            idom = 0
            if reads:
                idom = vertex[reads[0]]
                for value in reads[1:]:
                    idom = lca(idom, vertex[value])
            # tree.add(idom), inlined (once for the node, once per output below it)
            j = jump[idom]
            parent.append(idom)
            jump.append(jump[j] if depth[idom] - depth[j] == depth[j] - depth[jump[j]] else idom)
            node_depth = depth[idom] + 1
            depth.append(node_depth)
            v = len(parent) - 1
            node_vertex.append(v)
            is_node.append(True)
            j = jump[v]
            target = jump[j] if node_depth - depth[j] == depth[j] - depth[jump[j]] else v
            for value in outputs:
                parent.append(v)
                jump.append(target)
                depth.append(node_depth + 1)
                vertex[value] = len(parent) - 1
                value_list.append(value)
                is_node.append(False)
        size = len(parent)
        infinity = size + 1
        low = [infinity] * size
        nodes_below = [1 if flag else 0 for flag in is_node]
        # Depth of each node's immediate dominator: how high a read by the node reaches.
        reach_of = dict(zip(self.placed, [depth[parent[v]] for v in node_vertex], strict=True))
        values_by_vertex = dict(zip(vertex.values(), vertex.keys(), strict=True))
        for value, readers in self.consumers.items():
            low[vertex[value]] = min(map(reach_of.__getitem__, readers))
        for v in range(size - 1, 0, -1):
            p = parent[v]
            low[p] = min(low[p], low[v])
            nodes_below[p] += nodes_below[v]
        consumers = self.consumers
        strict = {
            value
            for v, value in values_by_vertex.items()
            if low[v] >= depth[v] and value in consumers
        }
        # Heavy path through the tree of strict cuts.
        strict_vertices = sorted(vertex[value] for value in strict)
        is_strict = [False] * size
        for v in strict_vertices:
            is_strict[v] = True
        nearest = [0] * size  # nearest strict-cut proper ancestor (0: none)
        for v in range(1, size):
            p = parent[v]
            nearest[v] = p if is_strict[p] else nearest[p]
        children: dict[int, list[int]] = {}
        for v in strict_vertices:
            children.setdefault(nearest[v], []).append(v)
        chain: list[ir.Value] = []
        current = 0
        while current in children:
            current = max(children[current], key=lambda c: (nodes_below[c], -c))
            chain.append(values_by_vertex[current])
        # Chain cuts above each node: number of chain cuts strictly dominating it.
        on_chain = [0] * size
        for value in chain:
            on_chain[vertex[value]] = 1
        above = [0] * size
        for v in range(1, size):
            p = parent[v]
            above[v] = above[p] + on_chain[p]
        self.chain_rank = dict(zip(self.placed, map(above.__getitem__, node_vertex), strict=True))
        return strict, chain

    # -- step 2 ---------------------------------------------------------------------------

    def planning_order(self) -> None:
        placed = self.placed
        count = len(placed)
        ranks = np.fromiter(map(self.chain_rank.__getitem__, placed), np.int64, count)
        levels = np.fromiter(self.levels, np.int64, count)  # depth from the sources
        topo = np.arange(count, dtype=np.int64)  # placed is in topological order
        keys = np.lexsort((topo, levels, ranks))
        keys_list = keys.tolist()
        self.order = list(map(placed.__getitem__, keys_list))
        self.order_positions = list(map(self.placed_at.__getitem__, keys_list))
        self.pos = dict(zip(self.order, range(len(self.order)), strict=True))

    # -- step 3 ---------------------------------------------------------------------------

    def sweep(self) -> list[tuple[int, CutCandidate]]:
        """Cuts whose stage 1 is a suffix of the planning order, with that suffix's start."""
        pos, order = self.pos, self.order
        size = len(order)
        # Every activation read (reader, value) as flat arrays, readers in planning order.
        reads_in_order = list(map(self.reads.__getitem__, order))
        counts = np.fromiter(map(len, reads_in_order), np.int64, size)
        flat = list(chain.from_iterable(reads_in_order))
        values = list(self.consumers)
        value_id = dict(zip(values, range(len(values)), strict=True))
        ids = np.fromiter(map(value_id.__getitem__, flat), np.int64, len(flat))
        producers = np.fromiter(map(pos.__getitem__, map(_PRODUCER, flat)), np.int64, len(flat))
        readers = np.repeat(np.arange(size, dtype=np.int64), counts)
        # Latest activation read per node (-1: none), first and last reader per value.
        latest_array = np.full(size, -1, dtype=np.int64)
        np.maximum.at(latest_array, readers, producers)
        made_array = np.zeros(len(values), dtype=np.int64)
        made_array[ids] = producers
        first_array = np.full(len(values), size, dtype=np.int64)
        np.minimum.at(first_array, ids, readers)
        last_array = np.full(len(values), -1, dtype=np.int64)
        np.maximum.at(last_array, ids, readers)
        latest = latest_array.tolist()
        made, first, last = made_array.tolist(), first_array.tolist(), last_array.tolist()
        table = SparseTable(latest, "min") if size else None

        def feeds_suffix(value: ir.Value) -> bool:
            positions = sorted({pos[r] for r in self.consumers[value]})
            start = positions[0]
            assert table is not None
            bounds = [*positions, size]
            for k in range(len(positions)):
                if table.at(bounds[k] + 1, bounds[k + 1], start) < start:
                    return False
            return True

        if not self.relaxed:
            # Strict: only the number of live values matters; count them with prefix sums.
            delta = np.zeros(size + 2, dtype=np.int64)
            np.add.at(delta, np.asarray(made, dtype=np.int64) + 1, 1)
            np.add.at(delta, np.asarray(last, dtype=np.int64) + 1, -1)
            live_count = np.cumsum(delta)
            found = []
            for k in np.flatnonzero(live_count[first_array] == 1).tolist():
                value = values[k]
                if feeds_suffix(value):
                    found.append((first[k], self.candidate(value, (), self.nbytes(value))))
            return sorted(found, key=lambda item: item[0])

        first_read: dict[int, list[ir.Value]] = {}
        add_at: dict[int, list[ir.Value]] = {}
        drop_at: dict[int, list[ir.Value]] = {}
        for value, m, f, la in zip(values, made, first, last, strict=True):
            first_read.setdefault(f, []).append(value)
            add_at.setdefault(m + 1, []).append(value)
            drop_at.setdefault(la + 1, []).append(value)
        live: dict[ir.Value, None] = {}
        known_bytes = 0
        unknown = 0
        found = []
        for b in range(1, size):
            for value in add_at.get(b, ()):
                live[value] = None
                n = self.estimate(value)
                if n is None:
                    unknown += 1
                else:
                    known_bytes += n
            for value in drop_at.get(b, ()):
                del live[value]
                n = self.estimate(value)
                if n is None:
                    unknown -= 1
                else:
                    known_bytes -= n
            for value in first_read.get(b, ()):
                if not feeds_suffix(value):
                    continue
                self.decided.add(value)  # its crossing set is exactly ``live``
                own = self.estimate(value)
                side_unknown = unknown - (own is None)
                side_bytes = known_bytes - (own or 0)
                if len(live) > 1 and (side_unknown or side_bytes > self.side_limit):
                    continue
                side = tuple(v for v in live if v is not value)
                found.append((b, self.candidate(value, side, self.sent_bytes(value, side))))
        return found

    def candidate(
        self, value: ir.Value, side: tuple[ir.Value, ...], total: int | None
    ) -> CutCandidate:
        node = value.producer()
        assert node is not None
        return CutCandidate(value, node, self.topo_index[node], side, total)

    # -- step 4 ---------------------------------------------------------------------------

    def bounded_search(self, value: ir.Value) -> CutCandidate | None:
        """Exact relaxed test of one value by walking what it feeds, in planning order."""
        pos, order = self.pos, self.order
        inside: set[ir.Node] = set()
        heap = sorted({pos[r] for r in self.consumers[value]})
        queued = set(heap)
        side: dict[ir.Value, None] = {}
        side_bytes = 0
        while heap:
            node = order[heapq.heappop(heap)]
            inside.add(node)
            for read in self.reads[node]:
                if read is value or read.producer() in inside or read in side:
                    continue
                n = self.estimate(read)
                if n is None:
                    return None
                side_bytes += n
                if side_bytes > self.side_limit:
                    return None
                side[read] = None
            for out in node.outputs:
                for reader in self.consumers.get(out, ()):
                    p = pos[reader]
                    if p not in queued:
                        queued.add(p)
                        heapq.heappush(heap, p)
        return self.candidate(value, tuple(side), self.sent_bytes(value, tuple(side)))

    # -------------------------------------------------------------------------------------

    def sent_bytes(self, value: ir.Value, side: tuple[ir.Value, ...]) -> int | None:
        """Bytes crossing at the planning dims, ``None`` when a size is unknown there."""
        total = 0
        for crossing in (value, *side):
            n = self.nbytes(crossing)
            if n is None:
                return None
            total += n
        return total

    def writable(self, cut: CutCandidate) -> bool:
        """Whether a stage boundary can be written at ``cut`` (:func:`boundary_problem`)."""
        shapes = self.sizes.shapes
        return all(boundary_problem(v, shapes) is None for v in (cut.value, *cut.side))

    def main_key(self, cut: CutCandidate) -> tuple[int, int]:
        """Order of preference for the cut tensor among cuts at one boundary."""
        own = self.estimate(cut.value)
        return (-1 if own is None else own, cut.position)

    def run(self) -> CutAnalysis:
        strict, _ = self.dominators()
        self.planning_order()
        on_chain = self.sweep()
        by_value: dict[ir.Value, CutCandidate] = {c.value: c for _, c in on_chain}
        for value in strict:
            if value not in by_value:
                by_value[value] = self.candidate(value, (), self.nbytes(value))
        if self.relaxed:
            for node in self.placed:
                for value in node.outputs:
                    if value in self.decided or value in by_value or value not in self.consumers:
                        continue
                    found = self.bounded_search(value)
                    if found is not None:
                        by_value[value] = found
        # Only cuts whose crossing values a stage can take as inputs (the split's own test).
        writable = self.writable
        by_value = {v: c for v, c in by_value.items() if writable(c)}
        # One chain cut per boundary: the largest tensor is the cut, the others ride along.
        per_boundary: dict[int, CutCandidate] = {}
        for b, cut in on_chain:
            if by_value.get(cut.value) is not cut:
                continue
            best = per_boundary.get(b)
            if best is None or self.main_key(cut) > self.main_key(best):
                per_boundary[b] = cut
        boundaries = tuple(sorted(per_boundary))
        return CutAnalysis(
            graph=self.graph,
            classes=self.classes,
            sizes=self.sizes,
            uses=self.uses,
            candidates=tuple(sorted(by_value.values(), key=_position_key)),
            order=tuple(self.order),
            chain=tuple(per_boundary[b] for b in boundaries),
            boundaries=boundaries,
            replicable_nodes=tuple(self.replicable_nodes),
            index=self.index,
            order_positions=tuple(self.order_positions),
        )


def narrowest_crossing(
    analysis: CutAnalysis,
) -> tuple[ir.Node, tuple[ir.Value, ...]] | None:
    """Where the fewest activations cross, for a model with too few cuts.

    Looks for relaxed cuts with no limit on their side activations (by the definition of the
    module docstring) and returns the one with the fewest: the node it comes after and the
    activations that cross there (the cut tensor first). ``None`` when even that finds
    nothing (the graph has fewer than two nodes that compute, say).

    .. versionadded:: 0.1
    """
    wide = analyse_cut_points(
        analysis.graph,
        relaxed=True,
        side_limit_bytes=1 << 62,
        sizes=analysis.sizes,
        classes=analysis.classes,
        index=analysis.index,
    )
    if not wide.candidates:
        return None
    best = min(wide.candidates, key=lambda cut: (len(cut.side), cut.position))
    return best.node, (best.value, *best.side)


def _position_key(cut: CutCandidate) -> tuple[int, int]:
    return (cut.position, cut.node.outputs.index(cut.value))
