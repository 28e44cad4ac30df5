"""Choosing pipeline stages and a tensor-parallel degree per stage for a set of devices.

The cost model of a stage at degree ``d`` (its regions,
:func:`~onnx_ir_multidevice.analysis.tensor_parallel.find_regions`, those whose nodes all lie
in the stage):

* **memory per device** is that of one rank, :func:`rank_memory`: the stage's memory with the
  weights its regions slice at ``1 / d``, the pre-packing copy taken among the rank's weights
  and one onnxruntime session per segment between collectives (:func:`rank_segments`, found
  from the graph and the regions, no split needed): the model of :func:`rank_resident_bytes`,
  within -10 %/+20 % of the measured resident memory. Activations and buffers stay whole (an
  upper bound). A stage fits a device when both its shard memory with headroom (the test a
  pipeline stage passes) and its predicted resident memory are within the device
  (:meth:`StageParallelism.fits`; with several device sizes, the smallest);
* **time** = the stage's FLOPs - its regions' FLOPs + their FLOPs / ``d`` + the bytes of
  each ``AllReduce`` a device moves (a ring: ``2 (d - 1) / d`` of the value) times
  :data:`DEFAULT_COLLECTIVE_FLOPS_PER_BYTE` (the price of a collective byte in FLOPs, the
  devices' FLOP/s over the links' bytes/s, like the pipeline's ``flops_per_byte``); a
  pipeline step is the slowest stage or link.

For ``N`` devices two searches propose plans, and the combination with the smallest step
time wins, then the fewest devices, then the fewest stages:

1. **per stage count**: every ``s`` from 1 to ``N`` partitioned by
   :func:`~onnx_ir_multidevice.planner.partition.partition` as a pipeline-only plan would be,
   then each stage given the degree that makes the slowest step fastest with at most ``N``
   devices (:func:`choose_degrees`, which sorts the ``s x N`` candidate times once);
2. **joint** (``balance`` ``"speed"`` or ``"compute"``): the cuts and the degrees chosen
   together, so that a stage with a higher degree takes more layers (:func:`joint_stages`).
   Each region counts in the segment of the memory model that holds its first node, no cut
   is offered inside a region, and a stage at degree ``d`` ending at boundary ``j`` may start
   anywhere in a window of boundaries that slides with ``j``; for a bound on the step the
   plan with the fewest devices is then a shortest path with one monotone queue per degree,
   O(``N * segments``), and the least bound is found by bisection (some 40 runs). It is exact
   over the plans whose cuts split no region (a brute-force oracle checks it); the plans
   that cut through a region are those of the first search. Its fit test is the shard
   memory with headroom; the plan found is checked with the full rank memory.

The joint plan's step time is thus never worse than the per-stage-count one.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_COLLECTIVE_FLOPS_PER_BYTE",
    "EXTRA_SESSION_BYTES",
    "SEGMENT_OP_TYPE_BYTES",
    "StageParallelism",
    "TensorParallelPlan",
    "choose_degrees",
    "flops_by_node",
    "joint_stages",
    "plan_tensor_parallel",
    "rank_memory",
    "rank_resident_bytes",
    "rank_segments",
    "stage_parallelism",
]

import collections
import dataclasses
import itertools
import math
import weakref
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._util import format_bytes
from onnx_ir_multidevice.analysis.sharding import Replicated, VocabMask
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.analysis.tensor_parallel import Region, find_regions
from onnx_ir_multidevice.planner.flops import nodes_flops
from onnx_ir_multidevice.planner.memory import (
    PREPACKED_WEIGHT_INPUTS,
    RUNTIME_NODE_BYTES,
    MemoryModel,
    StageMemory,
    usable_bytes,
)
from onnx_ir_multidevice.planner.partition import (
    DEFAULT_FLOPS_PER_BYTE,
    Partition,
    partition,
    partition_at,
)

DEFAULT_COLLECTIVE_FLOPS_PER_BYTE = 64.0
"""The price of one byte of a collective, in FLOPs (as
:data:`~onnx_ir_multidevice.planner.partition.DEFAULT_FLOPS_PER_BYTE` for pipeline links)."""


@dataclasses.dataclass(frozen=True)
class StageParallelism:
    """One stage of a plan at one tensor-parallel degree: its per-device costs."""

    stage: int
    """The pipeline stage."""

    degree: int
    """How many devices share it."""

    regions: int
    """How many tensor-parallel regions it has at :attr:`degree` (0: it runs replicated)."""

    sliced_weights_bytes: int
    """The bytes of the weights its regions slice (the whole weights; a device holds
    ``1 / degree`` of them)."""

    weights_bytes: int
    """Weights per device: the sliced ones divided by the degree, plus every other weight."""

    memory_bytes: int
    """Shard memory per device (weights, activations and buffers as the memory model counts
    them, the sliced weights divided): the ``total_bytes`` of :func:`rank_memory`."""

    required_bytes: int
    """Device memory a device needs for :attr:`memory_bytes` with the memory model's
    headroom (:attr:`~onnx_ir_multidevice.planner.memory.StageMemory.required_bytes`)."""

    resident_bytes: int
    """Predicted resident memory of one device on onnxruntime's CPU (:func:`rank_memory`, the
    figure :func:`rank_resident_bytes` gives, with the segments of :func:`rank_segments`)."""

    flops: int
    """FLOPs per device per request."""

    allreduce_bytes: int
    """Bytes one device moves per request in the ring ``AllReduce`` s, ``2 (d - 1) / d`` of
    each reduced value."""

    time: float
    """The stage's time in FLOPs: :attr:`flops` + :attr:`allreduce_bytes` times the price of
    a collective byte."""

    def fits(self, capacity: int | None, max_stage_bytes: int | None = None) -> bool:
        """Whether each device of the stage fits a device of ``capacity`` bytes.

        Both its shard memory with headroom (:attr:`required_bytes`, the test a pipeline
        stage passes) and its predicted resident memory (:attr:`resident_bytes`) must be
        within ``capacity``, and its shard memory within ``max_stage_bytes`` (``None``: no
        limit).
        """
        if max_stage_bytes is not None and self.memory_bytes > max_stage_bytes:
            return False
        return capacity is None or max(self.required_bytes, self.resident_bytes) <= capacity


@dataclasses.dataclass(frozen=True)
class TensorParallelPlan:
    """The chosen combination of stages and degrees, with the candidates considered."""

    num_devices: int
    """The devices planned for."""

    stages: tuple[StageParallelism, ...]
    """Each stage at its chosen degree."""

    step_time: float
    """The slowest stage or link, in FLOPs."""

    considered: tuple[tuple[int, tuple[int, ...], float], ...]
    """``(stages, degrees, step time)`` of the best combination of each stage count tried
    (cuts as for a pipeline-only plan), then of the joint search's plan when it found one
    that fits (:func:`joint_stages`)."""

    reason: str | None = None
    """Why no stage is tensor-parallel (one line), ``None`` when some stage is."""

    @property
    def degrees(self) -> tuple[int, ...]:
        """The degree of each stage."""
        return tuple(s.degree for s in self.stages)

    @property
    def parallel(self) -> bool:
        """Whether some stage has a degree above 1."""
        return any(d > 1 for d in self.degrees)


def choose_degrees(
    times: Sequence[Sequence[float | None]], budget: int
) -> tuple[tuple[int, ...], float] | None:
    """Give each stage a degree: the slowest stage fastest, then the fewest devices.

    Args:
        times: ``times[i][d - 1]`` is stage ``i``'s time at degree ``d`` (``None``: it does not
            fit in memory at that degree).
        budget: The devices available (the degrees sum to at most this).

    Returns:
        The degrees and the slowest stage's time, or ``None`` when no combination fits. Among
        the combinations with the smallest slowest time, the one using the fewest devices
        (unique: each stage takes its smallest degree within that time).
    """
    thresholds = sorted({t for row in times for t in row if t is not None})
    if not times:
        return (), 0.0

    def degrees_within(limit: float) -> tuple[int, ...] | None:
        chosen = []
        for row in times:
            degree = next((d for d, t in enumerate(row, 1) if t is not None and t <= limit), None)
            if degree is None:
                return None
            chosen.append(degree)
        return tuple(chosen) if sum(chosen) <= budget else None

    # Feasibility is monotone in the threshold: binary search the smallest one.
    low, high = 0, len(thresholds) - 1
    best: tuple[int, ...] | None = None
    while low <= high:
        middle = (low + high) // 2
        found = degrees_within(thresholds[middle])
        if found is not None:
            best, high = found, middle - 1
        else:
            low = middle + 1
    if best is None:
        return None
    return best, max(float(times[i][d - 1] or 0.0) for i, d in enumerate(best))


def _weight_bytes(value: ir.Value, sizes: ValueSizes) -> int:
    tensor = value.const_value
    if tensor is not None:
        return int(tensor.nbytes)
    return int(sizes.nbytes(value) or 0)


def _sliced_bytes(regions: Sequence[Region], sizes: ValueSizes) -> dict[ir.Value, int]:
    """The whole bytes of each weight the regions slice."""
    sliced: dict[ir.Value, int] = {}
    for region in regions:
        for piece in region.weight_slices:
            sliced.setdefault(piece.value, _weight_bytes(piece.value, sizes))
    return sliced


def _moved_bytes(regions: Sequence[Region], degree: int) -> int:
    """Bytes one device moves per request in the regions' collectives (a ring)."""
    moved = 0
    for region in regions:
        for collective in region.collectives:
            share = 2 * (degree - 1) if collective.kind == "AllReduce" else degree - 1
            moved += math.ceil((collective.nbytes or 0) * share / degree)
    return moved


def stage_parallelism(
    stage: int,
    degree: int,
    regions: Sequence[Region],
    *,
    memory: StageMemory,
    flops: int,
    node_flops: Mapping[ir.Node, int],
    sizes: ValueSizes,
    nodes: Sequence[ir.Node] = (),
    collective_flops_per_byte: float = DEFAULT_COLLECTIVE_FLOPS_PER_BYTE,
) -> StageParallelism:
    """The per-device costs of one stage at ``degree`` with these regions (see the module).

    Args:
        stage: The stage.
        degree: The degree.
        regions: The stage's regions at ``degree``.
        memory: The stage's memory on one device (the memory model's figure).
        flops: The stage's FLOPs.
        node_flops: The FLOPs of each node of the regions.
        sizes: The sizes at the planning dims.
        nodes: The stage's nodes in a topological order (for :func:`rank_memory`: the
            pre-packed weights and the segments of :func:`rank_segments`; none: the stage's
            figures and one session).
        collective_flops_per_byte: The price of a collective byte.
    """
    if degree == 1 or not regions:
        return StageParallelism(
            stage, degree, 0, 0, memory.weights_bytes, memory.total_bytes,
            memory.required_bytes, memory.resident_bytes, flops, 0, float(flops),
        )  # fmt: skip
    rank = rank_memory(
        memory, degree, regions, sizes, nodes=nodes, segments=rank_segments(nodes, regions)
    )
    whole = sum(_sliced_bytes(regions, sizes).values())
    region_flops = sum(node_flops.get(node, 0) for region in regions for node in region.nodes)
    moved = _moved_bytes(regions, degree)
    device_flops = flops - region_flops + math.ceil(region_flops / degree)
    return StageParallelism(
        stage,
        degree,
        len(regions),
        whole,
        rank.weights_bytes,
        rank.total_bytes,
        rank.required_bytes,
        rank.resident_bytes,
        device_flops,
        moved,
        device_flops + moved * collective_flops_per_byte,
    )


def flops_by_node(nodes: Sequence[ir.Node], sizes: ValueSizes) -> dict[ir.Node, int]:
    """The FLOPs of each node (0 when unknown), at the planning dims."""
    counts = nodes_flops(nodes, sizes, estimate=True)
    return {node: count or 0 for node, count in zip(nodes, counts, strict=True)}


@dataclasses.dataclass(frozen=True)
class _Joint:
    step: float
    devices: int
    degrees: tuple[int, ...]
    ends: tuple[int, ...]


def _solve_joint(
    prefix: Sequence[np.ndarray],
    starts: Sequence[np.ndarray],
    links: np.ndarray,
    allowed: np.ndarray,
    budget: int,
    limit: float,
) -> _Joint | None:
    """The plan with every step within ``limit`` using the fewest devices, then stages."""
    size = len(prefix[0]) - 1
    weight = budget + 1  # a plan's key: devices * weight + stages (stages <= devices)
    lows = [
        np.maximum(start, np.searchsorted(p, p - limit, side="left")).tolist()
        for p, start in zip(prefix, starts, strict=True)
    ]
    opens = [i == 0 or bool(allowed[i] and links[i] <= limit) for i in range(size)]
    unreached = weight * weight
    cost = [unreached] * (size + 1)
    cost[0] = 0
    choice: list[tuple[int, int]] = [(0, 0)] * (size + 1)
    queues: list[collections.deque[int]] = [collections.deque() for _ in prefix]
    for j in range(1, size + 1):
        i = j - 1  # a stage may start at i from now on: slide it into every window
        if cost[i] < unreached and opens[i]:
            for queue in queues:
                while queue and cost[queue[-1]] > cost[i]:
                    queue.pop()
                queue.append(i)
        best = unreached
        for d, queue in enumerate(queues, 1):
            low = lows[d - 1][j]
            while queue and queue[0] < low:
                queue.popleft()
            if not queue:
                continue
            key = cost[queue[0]] + d * weight + 1
            if key // weight <= budget and key < best:
                best, choice[j] = key, (queue[0], d)
        cost[j] = best
    if cost[size] >= unreached:
        return None
    ends, degrees = [size], []
    while ends[-1]:
        i, d = choice[ends[-1]]
        degrees.append(d)
        ends.append(i)
    ends.reverse()
    degrees.reverse()
    step = max(
        float(prefix[d - 1][j] - prefix[d - 1][i])
        for (i, j), d in zip(itertools.pairwise(ends), degrees, strict=True)
    )
    step = max([step, *(float(links[b]) for b in ends[1:-1])])
    return _Joint(step, sum(degrees), tuple(degrees), tuple(ends))


def joint_stages(
    times: Sequence[Sequence[float]],
    first_starts: Sequence[Sequence[int]],
    links: Sequence[float],
    allowed: Sequence[bool],
    budget: int,
) -> tuple[float, tuple[int, ...], tuple[int, ...]] | None:
    """Cut a chain of segments into stages and give each a degree, jointly.

    The slowest step (a stage's time at its degree, or a cut's link) as small as possible,
    then the fewest devices, then the fewest stages. For a bound ``T`` on the step, the plan
    with the fewest devices (then stages) is a shortest path over the boundaries: a stage at
    degree ``d`` ending at ``j`` may start anywhere in a window ``[low_d(j), j)`` (its time
    and memory only grow as it grows), and the windows slide forward with ``j``, so a
    monotone queue per degree gives each boundary's best predecessor in O(``degrees``). The
    smallest feasible ``T`` is found by bisection, jumping down to the found plan's own step
    after every feasible bound, until it is within a relative ``1e-12`` (exact when the
    times are integers below ``1e12``). Cost: O(``degrees * segments``) per bound, some 40
    bounds.

    Args:
        times: ``times[d - 1][s]``: segment ``s``'s time at degree ``d`` (at least 0); a
            stage's time is the sum over its segments.
        first_starts: ``first_starts[d - 1][j]``: the smallest ``i`` for which the stage
            ``[i, j)`` fits a device at degree ``d`` (``j``: none does); a stage inside one
            that fits must fit.
        links: ``links[b]``: the time of a cut at boundary ``b`` (``0 < b < segments``).
        allowed: ``allowed[b]``: whether boundary ``b`` may be cut.
        budget: The devices (the degrees sum to at most this).

    Returns:
        ``(step, degrees, ends)``, ``ends`` the boundaries ``0, ..., segments``; ``None`` when
        no plan fits.
    """
    if not times or not len(times[0]):
        return None
    prefix = [
        np.concatenate([[0.0], np.cumsum(np.asarray(row, dtype=np.float64))]) for row in times
    ]
    starts = [np.asarray(row, dtype=np.int64) for row in first_starts]
    link = np.asarray(links, dtype=np.float64)
    usable = np.asarray(allowed, dtype=bool)
    best = _solve_joint(prefix, starts, link, usable, budget, math.inf)
    if best is None:
        return None
    low, high = -1.0, best.step  # no plan within low; best within high
    while high - low > high * 1e-12:
        middle = (low + high) / 2
        if not low < middle < high:
            break
        found = _solve_joint(prefix, starts, link, usable, budget, middle)
        if found is None:
            low = middle
        else:
            best, high = found, found.step
    final = _solve_joint(prefix, starts, link, usable, budget, high) or best
    return final.step, final.degrees, final.ends


def _first_starts(fits: Callable[[np.ndarray, np.ndarray], np.ndarray], size: int) -> np.ndarray:
    """For each end ``j``, the smallest start ``i`` whose stage ``[i, j)`` fits (else ``j``)."""
    j = np.arange(size + 1, dtype=np.int64)
    lo = np.zeros_like(j)
    hi = j.copy()
    active = np.flatnonzero(lo < hi)
    while len(active):
        a, b = lo[active], hi[active]
        middle = (a + b) // 2
        ok = fits(middle, active)
        hi[active] = np.where(ok, middle, b)
        lo[active] = np.where(ok, a, middle + 1)
        active = active[lo[active] < hi[active]]
    return lo


def _joint_inputs(
    memory: MemoryModel,
    sizes: ValueSizes,
    found: Mapping[int, Sequence[Region]],
    node_flops: Mapping[ir.Node, int],
    *,
    max_degree: int,
    capacity: int | None,
    max_stage_bytes: int | None,
    flops_per_byte: float,
    collective_flops_per_byte: float,
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray]:
    """The per-segment times, fitting starts, links and cuts of :func:`joint_stages`.

    No cut is offered inside a region (of any degree), so each region lies in one stage and
    counts in its first segment; the plans that cut through a region are those of the
    per-stage-count search. The fit test is the shard memory with headroom, the sliced
    weights divided (the resident memory is checked on the plan found).
    """
    size = memory.num_segments
    index = np.arange(size)
    segment_flops = memory.flops(index, index + 1).astype(np.float64)
    bound = _BIG
    if capacity is not None:
        bound = usable_bytes(capacity, memory.headroom)
    if max_stage_bytes is not None:
        bound = min(bound, max_stage_bytes)
    inside = np.zeros(size + 1, dtype=bool)  # boundaries inside a region: never cut
    spans: dict[int, list[tuple[Region, int]]] = {}
    for degree, regions in found.items():
        for region in regions:
            segments = [s for s in map(memory.segment_of, region.nodes) if s is not None]
            if segments:
                inside[min(segments) + 1 : max(segments) + 1] = True
                spans.setdefault(degree, []).append((region, min(segments)))
    times, starts = [], []
    for degree in range(1, max_degree + 1):
        divided = np.zeros(size, dtype=np.float64)
        moved = np.zeros(size, dtype=np.float64)
        sliced = np.zeros(size, dtype=np.int64)
        for region, segment in spans.get(degree, ()):
            divided[segment] += sum(node_flops.get(n, 0) for n in region.nodes)
            moved[segment] += _moved_bytes([region], degree)
            sliced[segment] += sum(_sliced_bytes([region], sizes).values())
        times.append(segment_flops - divided + divided / degree + moved * collective_flops_per_byte)
        prefix = np.concatenate([[0], np.cumsum(sliced)])

        def fits(
            i: np.ndarray, j: np.ndarray, prefix: np.ndarray = prefix, d: int = degree
        ) -> np.ndarray:
            cut = prefix[j] - prefix[i]
            return memory.total_bytes(i, j) - cut + -(-cut // d) <= bound

        starts.append(_first_starts(fits, size))
    chain = memory.analysis.chain
    links = np.zeros(size + 1, dtype=np.float64)
    allowed = np.zeros(size + 1, dtype=bool)
    for b, cut in enumerate(chain[: size - 1], 1):
        links[b] = math.ceil((cut.bytes or 0) * flops_per_byte)
        allowed[b] = len(cut.node.outputs) == 1 and not inside[b]
    return times, starts, links, allowed


_BIG = 1 << 62


def plan_tensor_parallel(
    model: ir.Model,
    memory: MemoryModel,
    sizes: ValueSizes,
    num_devices: int,
    *,
    max_degree: int,
    capacity: int | None = None,
    max_stage_bytes: int | None = None,
    balance: str = "speed",
    flops_per_byte: float = DEFAULT_FLOPS_PER_BYTE,
    collective_flops_per_byte: float = DEFAULT_COLLECTIVE_FLOPS_PER_BYTE,
) -> tuple[Partition, TensorParallelPlan]:
    """Choose the stages and the degree of each for ``num_devices`` devices (see the module).

    Args:
        model: The model (not modified).
        memory: Its memory model.
        sizes: Its sizes at the planning dims.
        num_devices: The devices.
        max_degree: The largest degree a stage may have.
        capacity: The bytes one device holds (``None``: no limit): each device of a stage
            must fit it (:meth:`StageParallelism.fits`).
        max_stage_bytes: The largest shard memory of one device (``None``: no limit).
        balance: How each stage count is partitioned (as for a pipeline-only plan);
            ``"speed"`` and ``"compute"`` also search the cuts and degrees jointly.
        flops_per_byte: The price of a byte sent between stages.
        collective_flops_per_byte: The price of a byte of a collective.

    Returns:
        The partition of the chosen stage count and the plan.

    Raises:
        PlanError: No combination fits the devices' memory.
    """
    graph = model.graph
    found = {
        d: find_regions(model, d, shapes=sizes.shapes, gather_outputs=True)
        for d in range(2, max_degree + 1)
    }
    any_region = any(found.values())
    all_nodes = list(graph)
    node_flops = flops_by_node(all_nodes, sizes) if any_region else {}
    order = memory.analysis.order

    def table(cut: Partition) -> list[list[StageParallelism]]:
        stages = assign_stages(graph, [c.value for c in cut.cuts]) if cut.cuts else {}
        rows = []
        for stage, (i, j) in enumerate(cut.segments):
            nodes = order[memory.starts[i] : memory.ends[j - 1]]
            row = []
            for degree in range(1, max_degree + 1):
                regions = [
                    r
                    for r in found.get(degree, ())
                    if all(stages.get(n, 0) == stage for n in r.nodes)
                ]
                row.append(
                    stage_parallelism(
                        stage,
                        degree,
                        regions,
                        memory=cut.memory[stage],
                        flops=cut.flops[stage],
                        node_flops=node_flops,
                        sizes=sizes,
                        nodes=nodes,
                        collective_flops_per_byte=collective_flops_per_byte,
                    )
                )
            rows.append(row)
        return rows

    link_price = 0.0 if balance == "compute" else flops_per_byte
    best: tuple[tuple[float, int, int], Partition, tuple[StageParallelism, ...]] | None = None
    considered = []
    errors = []

    def consider(cut: Partition, chosen: tuple[StageParallelism, ...], slowest: float) -> None:
        nonlocal best
        links = max((b or 0) * link_price for b in cut.sent_bytes) if cut.sent_bytes else 0
        step = max(slowest, links)
        degrees = tuple(s.degree for s in chosen)
        considered.append((cut.num_stages, degrees, step))
        key = (step, sum(degrees), cut.num_stages)
        if best is None or key < best[0]:
            best = (key, cut, chosen)

    for num_stages in range(1, num_devices + 1):
        try:
            cut = partition(memory, num_stages, balance=balance, flops_per_byte=flops_per_byte)
        except PlanError as error:
            errors.append(f"{num_stages} stages: {error}")
            continue
        rows = table(cut)
        times = [
            [s.time if s.fits(capacity, max_stage_bytes) else None for s in row] for row in rows
        ]
        chosen = choose_degrees(times, num_devices)
        if chosen is None:
            errors.append(f"{num_stages} stages: {_misfit(rows, capacity, max_stage_bytes)}")
            continue
        degrees, slowest = chosen
        consider(cut, tuple(rows[i][d - 1] for i, d in enumerate(degrees)), slowest)
    if any_region and balance != "memory":
        inputs = _joint_inputs(
            memory, sizes, found, node_flops, max_degree=max_degree, capacity=capacity,
            max_stage_bytes=max_stage_bytes, flops_per_byte=link_price,
            collective_flops_per_byte=collective_flops_per_byte,
        )  # fmt: skip
        segment_times, starts, links, allowed = inputs
        joint = joint_stages(
            [t.tolist() for t in segment_times],
            [f.tolist() for f in starts],
            links.tolist(),
            allowed.tolist(),
            num_devices,
        )
        if joint is not None:
            _, degrees, ends = joint
            cut = partition_at(memory, ends, flops_per_byte=link_price)
            rows = table(cut)
            chosen_stages = tuple(rows[i][d - 1] for i, d in enumerate(degrees))
            if all(s.fits(capacity, max_stage_bytes) for s in chosen_stages):
                consider(cut, chosen_stages, max(s.time for s in chosen_stages))
    if best is None:
        raise PlanError(
            f"no combination of stages and tensor-parallel degrees fits {num_devices} devices: "
            + "; ".join(errors[:2])
        )
    (step, _, _), cut, chosen_stages = best
    plan = TensorParallelPlan(num_devices, chosen_stages, step, tuple(considered))
    if not plan.parallel:
        if max_degree < 2:
            reason = (
                f"tensor parallelism needs at least 2 devices and the plan has {num_devices} "
                "(give more shards or devices)"
                if num_devices < 2
                else f"the largest degree allowed is {max_degree}: tensor parallelism needs "
                "a degree of at least 2"
            ) + "; the plan is pipeline-only"
        elif not any_region:
            reason = (
                f"no tensor-parallel region at degree "
                f"{'2' if max_degree == 2 else f'2 to {max_degree}'}: no MatMul/Gemm by a "
                "constant weight whose column-parallel split ends in a row-parallel one "
                "(the Megatron pattern); the plan is pipeline-only"
            )
        else:
            reason = (
                "tensor parallelism would not be faster here (its collectives cost more "
                "than the FLOPs it divides, or the pipeline stages are faster); the plan is "
                "pipeline-only"
            )
        plan = dataclasses.replace(plan, reason=reason)
    return cut, plan


def _misfit(
    rows: Sequence[Sequence[StageParallelism]], capacity: int | None, max_stage_bytes: int | None
) -> str:
    """Why no degree vector fits: the first stage that fits at no degree, with its figures."""
    for row in rows:
        if any(s.fits(capacity, max_stage_bytes) for s in row):
            continue
        least = min(row, key=lambda s: (max(s.required_bytes, s.resident_bytes), s.degree))
        need = max(least.required_bytes, least.resident_bytes)
        limits = [f"a device has {format_bytes(capacity)}"] if capacity is not None else []
        if max_stage_bytes is not None:
            limits.append(f"the shard limit is {format_bytes(max_stage_bytes)}")
        return (
            f"stage {least.stage} does not fit a device at any degree: it needs "
            f"{format_bytes(need)} per device at best (degree "
            f"{least.degree}; shard memory {format_bytes(least.memory_bytes)}) but "
            + " and ".join(limits)
        )
    return "the stages fit, but not all on the devices at once"


EXTRA_SESSION_BYTES = 192 * 1024
"""Resident memory each further onnxruntime CPU session adds to a process that already holds
one: a tensor-parallel rank holds one session per segment, and the code pages and most of
:data:`~onnx_ir_multidevice.planner.memory.RUNTIME_OVERHEAD_BYTES` are shared between them.
Measured with onnxruntime 1.32 on Linux x86-64 (``measure_sessions`` of 1 to 17 one-``Add``
sessions in one child, median of 3): 165 KiB per session with the CPU arena on, 120 KiB with
it off; rounded up."""

SEGMENT_OP_TYPE_BYTES = 32 * 1024
"""Resident memory each op type of a further segment's session adds (its kernels'
registration and per-session data; their code is shared): half of
:data:`~onnx_ir_multidevice.planner.memory.RUNTIME_OP_TYPE_BYTES`, fitted on the ranks of
``benchmarks/memory_accuracy.py --tensor-parallel`` (the full per-op-type cost over-predicted
the 2-layer Llama by 21 %, none under-predicted GPT-2 by 10 %)."""


def rank_segments(nodes: Sequence[ir.Node], regions: Sequence[Region]) -> list[list[str]]:
    """The op type of each node of each segment of one rank, from the graph and the regions.

    What :func:`~onnx_ir_multidevice._split.tensor_parallel.split_tensor_parallel` cuts a
    rank into, without building it: a node's segment is the number of collectives on its
    longest path within ``nodes`` (a node reading a collective's whole value comes one segment
    after the value's producer; a region node reading the piece, in the same one). The nodes
    the split adds or recomputes in several segments (constant-derived arithmetic) are left
    out: a few per segment.

    Args:
        nodes: The stage's nodes in a topological order.
        regions: The stage's regions.

    Returns:
        The op types of each segment's nodes, segment by segment (one segment when
        ``regions`` has no collective).
    """
    owner: dict[ir.Value, Region] = {}
    for region in regions:
        for collective in region.collectives:
            owner[collective.value] = region
    member = {node: region for region in regions for node in region.nodes}
    level: dict[ir.Node, int] = {}
    for node in nodes:
        deepest = 0
        for index, value in enumerate(node.inputs):
            producer = None if value is None else value.producer()
            found = None if producer is None else level.get(producer)
            if found is None:
                continue
            whole_of = None if value is None else owner.get(value)
            if whole_of is not None and not (
                member.get(node) is whole_of
                and not isinstance(whole_of.input_states[node][index], Replicated)
            ):
                found += 1  # reads the whole value: after the collective
            deepest = max(deepest, found)
        level[node] = deepest
    masked = {mask.node for region in regions for mask in region.vocab_masks}
    added = _mask_op_types(nodes) if masked else ()
    segments: list[list[str]] = [[] for _ in range(max(level.values(), default=0) + 1)]
    for node, found in level.items():
        segments[found].append(node.op_type)
        if node in masked:  # the split masks a vocabulary-parallel lookup's ids and rows
            segments[found].extend(node.op_type if t is None else t for t in added)
    return segments


def _mask_op_types(nodes: Sequence[ir.Node]) -> tuple[str | None, ...]:
    """The op types of a lookup's mask nodes as :func:`rank_segments` counts them.

    :attr:`VocabMask.OP_TYPES`, with ``None`` for a type the stage's session has among the
    nodes ``nodes`` leaves out (the replicable arithmetic of the planning order, a causal
    mask's ``Where``): the segment already has that type, so it costs a node, not a type.
    """
    graph = nodes[0].graph if nodes else None
    if graph is None:
        return VocabMask.OP_TYPES
    counts = _GRAPH_OP_TYPES.get(graph)
    if counts is None or counts[0] != len(graph):  # once per graph (the planner asks often)
        counts = _GRAPH_OP_TYPES[graph] = (len(graph), frozenset(n.op_type for n in graph))
    omitted = counts[1] - {n.op_type for n in nodes}
    return tuple(None if t in omitted else t for t in VocabMask.OP_TYPES)


_GRAPH_OP_TYPES: weakref.WeakKeyDictionary[ir.Graph, tuple[int, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def rank_memory(
    stage: StageMemory,
    degree: int,
    regions: Sequence[Region],
    sizes: ValueSizes,
    *,
    nodes: Sequence[ir.Node] = (),
    segments: Sequence[Sequence[str]] = (),
    node_bytes: int = RUNTIME_NODE_BYTES,
    op_type_bytes: int = SEGMENT_OP_TYPE_BYTES,
    session_bytes: int = EXTRA_SESSION_BYTES,
) -> StageMemory:
    """The memory of one rank of a tensor-parallel stage, broken down as a stage's.

    Starting from the whole stage's memory (one session):

    * **sliced weights**: the weights the regions slice count ``1 / degree`` of their bytes
      (in :attr:`~StageMemory.weights_bytes`, so in the shard memory
      :attr:`~StageMemory.total_bytes` too);
    * **pre-packing**: the largest weight a kernel pre-packs (held twice while the session is
      created) is taken among the rank's weights, the sliced ones at ``1 / degree`` (a sliced
      vocabulary head is no longer the largest copy);
    * **one session per segment**: each segment beyond the first adds
      :data:`EXTRA_SESSION_BYTES`, and :data:`SEGMENT_OP_TYPE_BYTES` per op type beyond the
      stage's own (an op type found in three segments counts three times) and its cost per
      node (the nodes of every segment: the split adds a few, the rewritten shapes).

    The last two are in :attr:`~StageMemory.runtime_bytes`, so
    :attr:`~StageMemory.resident_bytes` is the rank's predicted resident memory on
    onnxruntime's CPU (:func:`rank_resident_bytes`). Activations and buffers stay whole (an
    upper bound: a split value is ``1 / degree`` on each rank).

    Args:
        stage: The whole stage's memory.
        degree: The degree.
        regions: The stage's regions at ``degree``.
        sizes: The sizes at the planning dims.
        nodes: The stage's nodes (for the pre-packed weights; none: the stage's figure).
        segments: The op type of each node of each segment of one rank (:func:`rank_segments`,
            or :attr:`~onnx_ir_multidevice._split.tensor_parallel.TensorParallelSplit.segments`
            of a split; none, or no ``nodes``: one session).
        node_bytes: onnxruntime's cost per node.
        op_type_bytes: The cost of an op type in one more segment.
        session_bytes: The cost of each further session.
    """
    if degree == 1 or not regions:
        return stage
    sliced = _sliced_bytes(regions, sizes)
    whole = sum(sliced.values())
    weights = stage.weights_bytes - whole + math.ceil(whole / degree)
    runtime = stage.runtime_bytes
    prepack = stage.prepack_bytes
    if nodes:
        prepack = 0
        for node in nodes:
            for index in PREPACKED_WEIGHT_INPUTS.get(node.op_type, ()):
                value = node.inputs[index] if index < len(node.inputs) else None
                if value is None or (value.const_value is None and not value.is_initializer()):
                    continue  # an activation or a graph input
                n = _weight_bytes(value, sizes)
                prepack = max(prepack, math.ceil(n / degree) if value in sliced else n)
        held = stage.activations_bytes + stage.io_bytes
        before = max(stage.workspace_bytes, stage.prepack_bytes - held)
        runtime += max(stage.workspace_bytes, prepack - held) - before
    if segments and nodes:
        stage_nodes = len(nodes)
        stage_types = len({n.op_type for n in nodes})
        runtime += (len(segments) - 1) * session_bytes
        runtime += (sum(len(set(s)) for s in segments) - stage_types) * op_type_bytes
        runtime += (sum(len(s) for s in segments) - stage_nodes) * node_bytes
    return dataclasses.replace(
        stage, weights_bytes=weights, prepack_bytes=prepack, runtime_bytes=runtime
    )


def rank_resident_bytes(
    stage: StageMemory,
    degree: int,
    regions: Sequence[Region],
    sizes: ValueSizes,
    *,
    nodes: Sequence[ir.Node] = (),
    segments: Sequence[Sequence[str]] = (),
    node_bytes: int = RUNTIME_NODE_BYTES,
    op_type_bytes: int = SEGMENT_OP_TYPE_BYTES,
    session_bytes: int = EXTRA_SESSION_BYTES,
) -> int:
    """Predicted resident memory of one rank of a tensor-parallel stage, on onnxruntime's CPU.

    :attr:`~StageMemory.resident_bytes` of :func:`rank_memory` (see there; the same
    arguments).
    """
    return rank_memory(
        stage, degree, regions, sizes, nodes=nodes, segments=segments, node_bytes=node_bytes,
        op_type_bytes=op_type_bytes, session_bytes=session_bytes,
    ).resident_bytes  # fmt: skip
