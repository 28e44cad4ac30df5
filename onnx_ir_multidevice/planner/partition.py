"""Choose the cuts: exactly optimal pipeline partitions under the memory model.

Given the segments of a :class:`~onnx_ir_multidevice.planner.memory.MemoryModel` and a
number of stages ``N``, :func:`partition` picks ``N - 1`` chain cuts. Every objective keeps
the devices' memory as a hard constraint: stage ``k`` fits device ``k`` (its memory plus
headroom is at most ``capacities[k]``) and its memory is at most ``max_stage_bytes``. A
weight read by two stages counts in both (a tied embedding held by the first and the last
stage), so where memory binds the planner avoids cuts that duplicate large shared weights.

``balance="speed"`` (the default) chooses the plan that runs fastest among those that fit:

1. the **estimated time of the slowest pipeline step is as small as possible**. A pipeline
   streams requests through its stages and through the links between them (a transfer
   overlaps the next request's compute), so its throughput is that of its slowest step:
   a stage's time is its FLOPs estimate (:mod:`~onnx_ir_multidevice.planner.flops`), a
   link's the bytes it sends per request (the cut tensor and its side activations) times
   ``flops_per_byte``, the device's speed over the link's, in FLOPs per byte
   (:data:`DEFAULT_FLOPS_PER_BYTE`);
2. among those, the largest stage memory is as small as possible;
3. among those, the bytes sent between stages are as few as possible.

``balance="compute"`` is the same with free transfers (``flops_per_byte=0``).
``balance="memory"`` puts the largest stage memory first (exactly, in bytes), then the
largest stage FLOPs, then the bytes sent: every device's share of memory as small as it can
be, whatever the speed.

Each :class:`Partition` says what bound it (:class:`Bound`): the slowest step (a stage's
compute, or a link's transfer), whether that stage is a single segment no cut can divide,
and, under the speed objectives, whether the devices' memory made the plan slower than an
unconstrained one, and which device.

Why it is exact although stage memory is not additive (peaks and shared weights): every part
of a stage's memory only grows when the stage grows (:meth:`MemoryModel.total_bytes` of
``[i, j)`` is at most that of any ``[i', j') ⊇ [i, j)``), and so do FLOPs. For a bound ``B``
the prefixes that ``k`` feasible stages can cover are then computed exactly in one vectorized
step per stage: ``j`` is reachable iff the stage from the *latest* reachable ``i < j`` fits
(any earlier ``i`` gives a larger stage). ``B*`` is the smallest feasible bound; ``F*``
likewise with ``B*`` fixed. A decision run only compares stage totals with the bound, so it
answers the same for every bound between the largest total that passed and the smallest that
failed: the search over bounds starts at the lower bound ``max(total / N, largest segment)``
(tight for a balanced model), gallops up, then bisects, and after every run its ends jump to
those stage totals. Exact, and a handful of runs instead of ~40 byte bisection steps.

The slowest-step time ``T*`` of the speed objective: a link costs more than ``T`` exactly when
its cut is barred at bound ``T``, so with ``F(t)`` the least largest-stage FLOPs using only
the cuts whose link costs at most ``t`` (non-increasing in ``t``),
``T* = min over t of max(t, F(t))``, ``t`` ranging over the distinct link costs. ``F`` is
first computed with every cut (a lower bound ``F0`` of ``T*``); when the cuts whose links
cost at most ``F0`` reach ``F0`` too (transfers do not bind: the common case) ``T* = F0``,
else a bisection over the link costs from ``F0`` on finds where ``t`` overtakes ``F(t)``.
The fewest bytes sent, the last objective, is a shortest path over the same layers: with
both bounds fixed the feasible starts of a stage ending at ``j`` are a run ``[lo(j), j)``
(monotonicity again), found by vectorized bisection once per distinct stage bound, and a
range-minimum table gives the best predecessor.

Cost: O(log(total bytes) * N * S * (1 + shared weights)) vectorized steps for S segments in
the worst case, times O(log S) when transfers bind, plus O(N * S log S) for the bytes sent.
Finding which device's memory binds solves again once per device, only when memory binds.

When nothing fits, :class:`~onnx_ir_multidevice._errors.PlanError` names the stage that does
not fit, its device and by how much, for the partition that overflows least.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["BALANCES", "DEFAULT_FLOPS_PER_BYTE", "Bound", "Partition", "partition", "partition_at"]

import dataclasses
import itertools
import math
import numbers
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.analysis.cut_points import CutCandidate, narrowest_crossing
from onnx_ir_multidevice.planner.memory import (
    MemoryModel,
    StageMemory,
    _floor_log2,
    format_bytes,
    usable_bytes,
)

_INF = np.iinfo(np.int64).max // 4

BALANCES = ("speed", "memory", "compute")
"""The objectives :func:`partition` can put first: the estimated time of the slowest
pipeline step (``"speed"``, the default: compute and transfers), the largest stage memory
(``"memory"``) or the largest stage FLOPs (``"compute"``: speed with free transfers).

.. versionadded:: 0.1
"""

DEFAULT_FLOPS_PER_BYTE = 64.0
"""The default price of a byte sent between stages, in FLOPs of stage compute: a device's
speed in FLOP/s over its link's in bytes/s. 64 is, for instance, a 1 TFLOP/s accelerator on a
16 GB/s PCIe link, or a 100 GFLOP/s CPU node on a 12.5 Gbit/s network. At this price a
transformer's hidden state (``4 * seq * hidden`` bytes) costs less than one layer's compute
(about ``24 * seq * hidden**2`` FLOPs) from ``hidden = 11`` on, so transfers bind only where a
stage computes little (an embedding alone, a small convolution on a large image).

.. versionadded:: 0.1
"""


@dataclasses.dataclass(frozen=True)
class Bound:
    """What bound a partition: its slowest pipeline step, and whether memory made it slower.

    .. versionadded:: 0.1
    """

    kind: str
    """``"compute"`` (the slowest step is a stage's compute), ``"transfer"`` (a link between
    two stages) or ``"memory"`` (the devices' memory: without its limits a faster plan exists;
    :attr:`stage` or :attr:`cut` still names the slowest step). Only the speed objectives
    (``"speed"``, ``"compute"``) are judged against memory; a ``"memory"`` plan names its
    slowest step."""

    stage: int | None
    """The slowest stage (0-based), when a stage is the slowest step."""

    cut: int | None
    """The slowest link (0-based cut index: between stages ``cut`` and ``cut + 1``), when a
    transfer is the slowest step."""

    time_flops: int
    """Estimated time of the slowest step, in FLOPs (a link's bytes times its price)."""

    ideal_flops: int
    """The model's FLOPs divided by the number of stages: the slowest step of a perfect
    split. ``time_flops / ideal_flops`` is how far the plan is from it."""

    indivisible: bool = False
    """Whether the slowest stage is one segment: no cut inside it, a finer split is impossible."""

    devices: tuple[int, ...] = ()
    """Under ``kind == "memory"``: the devices whose memory alone, lifted, would allow a faster
    plan (empty: only several together, or the shard limit)."""

    @property
    def vs_ideal(self) -> float:
        """:attr:`time_flops` over :attr:`ideal_flops` (1.0 for a perfect split)."""
        return self.time_flops / self.ideal_flops if self.ideal_flops else 1.0

    def describe(self) -> str:
        """One line for people: ``"compute-bound: stage 0 (1.64x the ideal)"``..."""
        if self.cut is not None:
            slowest = f"the link of cut {self.cut}"
        else:
            slowest = f"stage {self.stage}"
            if self.indivisible:
                slowest += " (one segment: no cut inside it)"
        ratio = f"{self.vs_ideal:.2f}x the ideal 1/N of the compute"
        if self.kind == "memory":
            if self.devices:
                who = ", ".join(map(str, self.devices))
                who = f"device{'s' if len(self.devices) > 1 else ''} {who}"
            else:
                who = "the devices' memory together (or the shard limit)"
            return (
                f"memory-bound by {who}: a faster plan needs more memory; slowest: {slowest}, "
                f"{ratio}"
            )
        kind = "transfer" if self.cut is not None else "compute"
        return f"{kind}-bound: {slowest}, {ratio}"

    def to_dict(self) -> dict[str, object]:
        """The fields as JSON-ready data, with ``vs_ideal``."""
        return {
            "kind": self.kind,
            "stage": self.stage,
            "cut": self.cut,
            "devices": list(self.devices),
            "indivisible": self.indivisible,
            "time_flops": self.time_flops,
            "ideal_flops": self.ideal_flops,
            "vs_ideal": round(self.vs_ideal, 4),
        }


@dataclasses.dataclass(frozen=True)
class Partition:
    """A pipeline partition: the cuts and what each stage needs.

    .. versionadded:: 0.1
    """

    cuts: tuple[CutCandidate, ...]
    """The ``N - 1`` cuts in pipeline order."""

    segments: tuple[tuple[int, int], ...]
    """Stage ``k`` is the run of memory-model segments ``[segments[k][0], segments[k][1])``."""

    memory: tuple[StageMemory, ...]
    """Memory of each stage."""

    flops: tuple[int, ...]
    """Estimated FLOPs of each stage."""

    bound: Bound | None = None
    """What bound the partition (its slowest step; memory where it made the plan slower)."""

    duplicated_weight_bytes: int = 0
    """Weight bytes held by more than one stage, counted once per extra stage (a tied
    embedding read by the first and the last stage counts once here)."""

    @property
    def num_stages(self) -> int:
        """Number of stages (devices)."""
        return len(self.segments)

    @property
    def bottleneck_bytes(self) -> int:
        """The largest stage memory (the minimised objective)."""
        return max(m.total_bytes for m in self.memory)

    @property
    def flops_share(self) -> tuple[float, ...]:
        """Each stage's share of the model's FLOPs estimate, from 0 to 1 (0 when it has none).

        .. versionadded:: 0.1
        """
        total = sum(self.flops)
        return tuple(f / total if total else 0.0 for f in self.flops)

    @property
    def sent_bytes(self) -> tuple[int | None, ...]:
        """Bytes sent across each cut per request, at the planning dims.

        The cut tensor and its side activations; ``None`` where a size depends on an unbound
        dim.

        .. versionadded:: 0.1
        """
        return tuple(c.bytes for c in self.cuts)

    @property
    def transfer_bytes(self) -> int:
        """Bytes sent between stages per run: every cut tensor and its side activations."""
        return sum(c.bytes or 0 for c in self.cuts)


_CHAIN_ARRAYS: weakref.WeakKeyDictionary[MemoryModel, tuple] = weakref.WeakKeyDictionary()
"""Per memory model: its chain, which boundaries may end a stage, the bytes sent at each."""


class _Search:
    """Decision and optimisation over the segments of one memory model."""

    def __init__(self, model: MemoryModel, chain: Sequence[CutCandidate]) -> None:
        self.model = model
        self.size = model.num_segments  # boundaries 0..size
        self.index = np.arange(self.size + 1, dtype=np.int64)
        # Every chain cut can end a stage, whatever is known of its size: cut discovery and
        # the choice of cuts never depend on a dim being bound. An unknown transfer counts 0.
        # A cut after a node with several outputs cannot be written in .omny (its after_node
        # must have exactly one output tensor): it is not offered.
        cached = _CHAIN_ARRAYS.get(model)
        if cached is None or cached[0] is not chain:
            sent = [cut.bytes for cut in chain]
            allowed = np.ones(self.size + 1, dtype=bool)
            allowed[0] = False
            allowed[1 : len(chain) + 1] = [len(cut.node.outputs) == 1 for cut in chain]
            transfer = np.zeros(self.size + 1, dtype=np.int64)
            transfer[1 : len(sent) + 1] = [n or 0 for n in sent]
            cached = _CHAIN_ARRAYS[model] = (chain, allowed, transfer)
        # Read only: shared by every partition of ``model`` (one per shard count).
        self.allowed, self.transfer = cached[1], cached[2]
        self.usable = self.allowed  # every cut .omny can write; ``allowed`` may be narrower

    def link_costs(self, flops_per_byte: float) -> np.ndarray:
        """Estimated time of the link at each boundary, in FLOPs (bytes sent times the price)."""
        if flops_per_byte <= 0:
            return np.zeros_like(self.transfer)
        return np.ceil(self.transfer * float(flops_per_byte)).astype(np.int64)

    def restrict(self, mask: np.ndarray | None) -> None:
        """Offer only the usable cuts where ``mask`` holds (all of them for ``None``)."""
        self.allowed = self.usable if mask is None else self.usable & mask

    def fits(self, i: np.ndarray, j: np.ndarray, memory_bound: int, flops_bound: int) -> np.ndarray:
        ok = self.model.total_bytes(i, j) <= memory_bound
        if flops_bound < _INF:
            ok &= self.model.flops(i, j) <= flops_bound
        return ok

    def feasible(self, bounds: Sequence[int], flops_bound: int = _INF) -> bool:
        """Whether ``len(bounds)`` stages, stage ``k`` within ``bounds[k]``, cover the model."""
        return self.probe(bounds, flops_bound)[0]

    def probe(
        self,
        bounds: Sequence[int],
        flops_bound: int = _INF,
        parameter: int | None = None,
        flops_parameter: bool = False,
    ) -> tuple[bool, int, int]:
        """Decide feasibility, and how far the answer stays the same.

        Stage ``k`` must be within ``bounds[k]`` bytes and ``flops_bound`` FLOPs; with
        ``parameter`` it must also be within ``parameter`` bytes (or FLOPs when
        ``flops_parameter``). The run only compares stage totals with the bounds, so it gives
        the same answer for every parameter ``p`` with ``passed <= p < failed``, where
        ``passed`` is the largest total of a stage that passed and ``failed`` the smallest
        total of a stage that failed on the parameter alone.

        Returns:
            ``(feasible, passed, failed)``; ``failed`` is ``_INF`` when no stage failed on the
            parameter alone.
        """
        model = self.model
        reach = np.zeros(self.size + 1, dtype=bool)
        reach[0] = True
        passed, failed = 0, _INF
        for bound in bounds:
            latest = np.maximum.accumulate(np.where(reach, self.index, -1))
            before = np.concatenate([[-1], latest[:-1]])  # latest reachable i < j
            valid = (before >= 0) & self.allowed
            reach = np.zeros(self.size + 1, dtype=bool)
            if not valid.any():
                continue
            j = self.index[valid]
            i = before[valid]
            memory = model.total_bytes(i, j)
            ok = memory <= bound
            if flops_bound < _INF or flops_parameter:
                flops = model.flops(i, j)
                if flops_bound < _INF:
                    ok &= flops <= flops_bound
            if parameter is not None:
                measure = flops if flops_parameter else memory
                within = measure <= parameter
                over = measure[ok & ~within]
                if len(over):
                    failed = min(failed, int(over.min()))
                ok &= within
                inside = measure[ok]
                if len(inside):
                    passed = max(passed, int(inside.max()))
            reach[j] = ok
        return bool(reach[self.size]), passed, failed

    def minimize(
        self, lo: int, hi: int, bounds: Sequence[int], flops_bound: int, flops: bool
    ) -> int:
        """Smallest parameter in ``[lo, hi]`` that is feasible (see :meth:`probe`).

        ``hi`` must be feasible. The lower bound ``lo`` is usually close (a balanced model),
        so the search tries it first and gallops up from it, steps doubling, until a probe is
        feasible, then bisects; never further than halfway, and after every probe the ends
        jump to the nearest stage totals at which the answer can change. Exact.
        """
        step = 0
        while lo < hi:
            mid = (lo + hi) // 2 if step < 0 else min(lo + step, (lo + hi) // 2)
            ok, passed, failed = self.probe(bounds, flops_bound, mid, flops)
            if ok:
                hi = max(lo, passed)
                step = -1  # bisect from now on
            else:
                lo = max(mid + 1, min(failed, hi))
                if step >= 0:
                    step = max(2 * step, 1, lo >> 12)
        return lo

    def smallest(self, lo: int, hi: int, ok: Callable[[int], bool]) -> int:
        """Smallest integer in ``[lo, hi]`` for which monotone ``ok`` holds (``ok(hi)``)."""
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def first_start(self, bound: int, flops_bound: int) -> np.ndarray:
        """For each end ``j``, the smallest start ``i`` whose stage ``[i, j)`` fits (else ``j``)."""
        j = self.index
        lo = np.zeros_like(j)
        hi = j.copy()
        active = np.flatnonzero(lo < hi)
        while len(active):
            a, b = lo[active], hi[active]
            mid = (a + b) // 2
            ok = self.fits(mid, active, bound, flops_bound)
            hi[active] = np.where(ok, mid, b)
            lo[active] = np.where(ok, a, mid + 1)
            active = active[lo[active] < hi[active]]
        return lo

    def cheapest(self, bounds: Sequence[int], flops_bound: int) -> list[int]:
        """Boundaries of the feasible partition that sends the fewest bytes."""
        size = self.size
        cost = np.full(size + 1, _INF, dtype=np.int64)
        cost[0] = 0
        choices = []
        starts: dict[int, np.ndarray] = {}  # stages with equal bounds share their starts
        for bound in bounds:
            start = starts.get(bound)
            if start is None:
                start = starts[bound] = self.first_start(bound, flops_bound)
            table = _ArgMin(cost)
            best = table.query(start, self.index)  # argmin over [start, j), -1 if empty
            new = np.full(size + 1, _INF, dtype=np.int64)
            ok = (best >= 0) & self.allowed
            ok[ok] &= cost[best[ok]] < _INF
            new[ok] = cost[best[ok]] + self.transfer[ok]
            cost = new
            choices.append(best)
        if cost[size] >= _INF:
            raise AssertionError("no partition within bounds that were found feasible")
        ends = [size]
        for best in reversed(choices[1:]):
            ends.append(int(best[ends[-1]]))
        return [0, *reversed(ends)]


class _ArgMin:
    """Vectorized range-argmin queries over a fixed array (leftmost on ties)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        size = len(values)
        levels = max(1, size.bit_length())
        table = np.zeros((levels, max(size, 1)), dtype=np.int64)
        table[0, :size] = np.arange(size)
        span = 1
        for k in range(1, levels):
            n = size - 2 * span + 1
            a, b = table[k - 1, :n], table[k - 1, span : span + n]
            table[k, :n] = np.where(values[b] < values[a], b, a)
            span *= 2
        self.table = table

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Index of the minimum over ``[lo, hi)``; ``-1`` where the range is empty."""
        result = np.full(len(lo), -1, dtype=np.int64)
        nonempty = hi > lo
        lo, hi = lo[nonempty], hi[nonempty]
        k = _floor_log2(hi - lo)
        a, b = self.table[k, lo], self.table[k, hi - (1 << k)]
        result[nonempty] = np.where(self.values[b] < self.values[a], b, a)
        return result


def _device_bounds(
    model: MemoryModel,
    num_stages: int,
    capacities: Sequence[int] | None,
    max_stage_bytes: int | None,
) -> list[int]:
    bounds = [_INF] * num_stages
    if capacities is not None:
        if len(capacities) != num_stages:
            raise PlanError(
                f"{len(capacities)} device capacities given for {num_stages} stages; "
                "give one capacity per stage, in pipeline order"
            )
        bounds = [usable_bytes(c, model.headroom) for c in capacities]
    if max_stage_bytes is not None:
        bounds = [min(b, max_stage_bytes) for b in bounds]
    return bounds


def partition(
    model: MemoryModel,
    num_stages: int,
    *,
    capacities: Sequence[int] | None = None,
    max_stage_bytes: int | None = None,
    balance: str = "speed",
    flops_per_byte: float = DEFAULT_FLOPS_PER_BYTE,
) -> Partition:
    """Choose ``num_stages - 1`` chain cuts, optimally (see the module docstring).

    Args:
        model: The memory model of the graph (its chain gives the candidate cuts).
        num_stages: Number of stages, one per device (>= 1).
        capacities: Memory of each device in bytes, in pipeline order: stage ``k`` runs on
            device ``k`` and must fit it with the model's headroom.
        max_stage_bytes: Upper bound on every stage's memory (headroom not included).
        balance: ``"speed"`` (default): the smallest estimated time of the slowest step
            (stage compute or link transfer) within the devices' memory, then the least
            memory, then the fewest bytes sent; ``"compute"``: the same with free
            transfers; ``"memory"``: the largest stage memory first, then compute, then
            bytes.
        flops_per_byte: The price of a byte sent between stages, in FLOPs (``"speed"``
            only): the device's FLOP/s over the link's bytes/s.

    Returns:
        The partition, with what bound it (:attr:`Partition.bound`).

    Raises:
        PlanError: If the chain has fewer than ``num_stages - 1`` usable cuts, or no
            partition fits (the message names the stage, its device and the overflow), or
            ``balance`` is not one of :data:`BALANCES`, or ``flops_per_byte`` is negative.

    .. versionadded:: 0.1
    """
    if num_stages < 1:
        raise PlanError(f"the number of stages must be at least 1, got {num_stages}")
    chain = model.analysis.chain
    search = _Search(model, chain)
    usable = int(search.allowed[1 : search.size].sum())
    if num_stages - 1 > usable:
        error = PlanError(_too_few_cuts(model, usable, num_stages))
        error.max_stages = usable + 1  # type: ignore[attr-defined]  # read by plan_model
        raise error
    if balance not in BALANCES:
        raise PlanError(f"balance must be one of {', '.join(map(repr, BALANCES))}, got {balance!r}")
    if not _is_price(flops_per_byte):
        raise PlanError(f"flops_per_byte must be a number of at least 0, got {flops_per_byte!r}")
    bounds = _device_bounds(model, num_stages, capacities, max_stage_bytes)
    feasible, _, _ = search.probe(bounds, _INF, _INF)
    if not feasible:
        raise _overflow_error(search, bounds, capacities, max_stage_bytes)
    solver = _Solver(search, num_stages)
    link = search.link_costs(0 if balance == "compute" else flops_per_byte)
    memory_bound: tuple[int, ...] = ()
    if balance == "memory":
        memory_bounds = solver.least_memory(bounds, _INF)
        flops_bound = solver.least_flops(memory_bounds)
    else:  # the fastest within the devices' bounds; then the least memory for it
        flops_bound = solver.least_time(bounds, link)
        if any(b < _INF for b in bounds) and solver.least_time([_INF] * num_stages, link) < (
            flops_bound
        ):
            memory_bound = tuple(
                d
                for d in range(num_stages)
                if solver.least_time([*bounds[:d], _INF, *bounds[d + 1 :]], link) < flops_bound
            ) or (-1,)
        search.restrict(link <= flops_bound)
        memory_bounds = solver.least_memory(bounds, flops_bound)
    ends = search.cheapest(memory_bounds, flops_bound)
    search.restrict(None)
    found = _make(model, chain, ends)
    bound = _bound(search, found, link, memory_bound)
    return dataclasses.replace(found, bound=bound)


def partition_at(
    model: MemoryModel, ends: Sequence[int], *, flops_per_byte: float = DEFAULT_FLOPS_PER_BYTE
) -> Partition:
    """The partition whose stages end at the given segment boundaries, with what bounds it.

    For a planner that chose the cuts itself (the tensor-parallel one, whose stages' times
    depend on their degrees): the figures are those :func:`partition` gives its own choice.

    Args:
        model: The memory model.
        ends: ``0``, the boundary of each cut, ``model.num_segments``: increasing, each cut
            one :func:`partition` may choose.
        flops_per_byte: The price of a byte sent between stages (for the bound).

    Raises:
        PlanError: ``ends`` is not such a list.

    .. versionadded:: 0.1
    """
    chain = model.analysis.chain
    search = _Search(model, chain)
    ends = [int(b) for b in ends]
    if (
        len(ends) < 2
        or ends[0] != 0
        or ends[-1] != search.size
        or any(a >= b for a, b in itertools.pairwise(ends))
        or not all(search.usable[b] for b in ends[1:-1])
    ):
        raise PlanError(
            f"stage boundaries {ends} are not 0, usable cuts in increasing order, {search.size}"
        )
    found = _make(model, chain, ends)
    return dataclasses.replace(
        found, bound=_bound(search, found, search.link_costs(flops_per_byte), ())
    )


def _is_price(x: object) -> bool:
    """Whether ``x`` is a finite real number (not a bool) of at least 0."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        return False
    return math.isfinite(float(x)) and float(x) >= 0


class _Solver:
    """The optimisations of :func:`partition` over one :class:`_Search`."""

    def __init__(self, search: _Search, num_stages: int) -> None:
        self.search = search
        model = search.model
        # Lower bounds: a stage holds at least one segment, and the stages together hold at
        # least the whole model (weights and buffers at least once, the peak somewhere). Every
        # bound from the largest stage that passed on is feasible too (``_Search.probe``).
        # FLOPs are additive: the same two lower bounds; the largest stage FLOPs of any run
        # within the bounds is an upper bound.
        whole = int(model.total_bytes([0], [search.size])[0])
        singles = model.total_bytes(search.index[:-1], search.index[1:])
        self.lower = max(int(singles.max()), -(-whole // num_stages))
        flops = model.flops(search.index[:-1], search.index[1:])
        self.flops_lower = max(int(flops.max()), -(-int(flops.sum()) // num_stages))

    def least_memory(self, bounds: Sequence[int], flops_bound: int) -> list[int]:
        """Per-stage memory bounds: ``bounds`` capped at the least feasible largest stage."""
        search = self.search
        _, upper, _ = search.probe(bounds, flops_bound, _INF)
        best = search.minimize(min(self.lower, upper), upper, bounds, flops_bound, flops=False)
        return [min(best, u) for u in bounds]

    def least_flops(self, memory_bounds: Sequence[int]) -> int:
        """The least largest-stage FLOPs within ``memory_bounds`` (``_INF`` if infeasible)."""
        search = self.search
        feasible, upper, _ = search.probe(memory_bounds, _INF, _INF, flops_parameter=True)
        if not feasible:
            return _INF
        return search.minimize(min(self.flops_lower, upper), upper, memory_bounds, _INF, flops=True)

    def least_time(self, bounds: Sequence[int], link: np.ndarray) -> int:
        """The least time of the slowest step (stage FLOPs, link cost) within ``bounds``.

        ``_INF`` if nothing fits. Leaves every usable cut offered.
        """
        search = self.search
        cache: dict[int, int] = {}

        def flops_within(t: int) -> int:  # F(t): only the cuts whose link costs <= t
            if t not in cache:
                search.restrict(link <= t)
                cache[t] = self.least_flops(bounds)
            return cache[t]

        try:
            search.restrict(None)
            lowest = self.least_flops(bounds)
            if lowest >= _INF:
                return _INF
            # T* >= F0; every threshold below F0 gives at least F(F0) >= F0.
            levels = np.unique(link[search.usable & (link > lowest)])
            if not len(levels):  # no link is slower than the stages: transfers do not bind
                return lowest
            thresholds = [lowest, *map(int, levels)]
            if flops_within(lowest) <= lowest:
                return lowest
            lo, hi = 1, len(thresholds) - 1  # F(t) <= t at the last: every cut is offered
            while lo < hi:
                mid = (lo + hi) // 2
                if flops_within(thresholds[mid]) <= thresholds[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            return min(thresholds[lo], flops_within(thresholds[lo - 1]))
        finally:
            search.restrict(None)


def _bound(
    search: _Search, found: Partition, link: np.ndarray, memory_devices: tuple[int, ...]
) -> Bound:
    """What bound ``found``: its slowest step, and the devices whose memory made it slower."""
    ends = [i for i, _ in found.segments] + [found.segments[-1][1]]
    stage = max(range(found.num_stages), key=lambda k: (found.flops[k], -k))
    cut_costs = [int(link[b]) for b in ends[1:-1]]
    cut = None
    time = found.flops[stage]
    if cut_costs and max(cut_costs) > time:
        time = max(cut_costs)
        cut = cut_costs.index(time)
    i, j = found.segments[stage]
    indivisible = cut is None and not bool(search.usable[i + 1 : j].any())
    total = sum(found.flops)
    return Bound(
        kind="memory" if memory_devices else ("transfer" if cut is not None else "compute"),
        stage=None if cut is not None else stage,
        cut=cut,
        time_flops=int(time),
        ideal_flops=-(-total // found.num_stages),
        indivisible=indivisible,
        devices=tuple(d for d in memory_devices if d >= 0),
    )


def _too_few_cuts(model: MemoryModel, usable: int, num_stages: int) -> str:
    """Why ``num_stages`` stages are impossible.

    The cuts found, and, when there is none, where the graph is narrowest (which
    activations cross there).
    """
    analysis = model.analysis
    relaxed = any(not c.strict for c in analysis.candidates)
    kind = "cut point" if relaxed else "strict cut point"
    text = (
        f"the model has {plural(usable, kind)} along its main chain, so at most "
        f"{plural(usable + 1, 'stage')}; {num_stages} were asked for"
    )
    multi = [cut for cut in analysis.chain if len(cut.node.outputs) != 1]
    if multi:
        names = ", ".join(f"{c.node.name!r} ({c.node.op_type})" for c in multi[:3])
        text += (
            f" ({plural(len(multi), 'more cut')} {'comes' if len(multi) == 1 else 'come'} after "
            "a node with several outputs, which "
            f".omny cannot name as a cut: {names})"
        )
    if usable:
        return text + ("" if relaxed else " (relaxed cuts may give more)")
    narrowest = narrowest_crossing(analysis)
    if narrowest is None:
        nodes = [node.op_type for node in analysis.order]
        if not nodes:
            return (
                f"{text}: every node is cheap arithmetic on the inputs and constants, which "
                "each stage recomputes itself, so there is nothing to cut"
            )
        what = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        return (
            f"{text}: the main graph computes in {plural(len(nodes), 'node')} ({what}) with "
            "nothing between them to cut (a node with a subgraph, such as If or Loop, runs whole)"
        )
    node, crossing = narrowest
    if len(crossing) < 2:
        return text
    names = ", ".join(repr(v.name) for v in crossing[:4]) + (", ..." if len(crossing) > 4 else "")
    text += (
        f". Everywhere along the chain at least {len(crossing)} activations cross together: "
        f"the fewest after node {node.name!r} ({node.op_type}): {names}"
    )
    if not relaxed:
        text += (
            "; relaxed cuts, which carry such side activations up to a size limit, may give more"
        )
    return text


def _make(model: MemoryModel, chain: Sequence[CutCandidate], ends: Sequence[int]) -> Partition:
    stages = tuple(itertools.pairwise(ends))
    memory = tuple(model.stage(i, j) for i, j in stages)
    return Partition(
        cuts=tuple(chain[b - 1] for b in ends[1:-1]),
        segments=stages,
        memory=memory,
        flops=tuple(int(model.flops([i], [j])[0]) for i, j in stages),
        duplicated_weight_bytes=sum(m.weights_bytes for m in memory) - model.whole().weights_bytes,
    )


def _overflow_error(
    search: _Search,
    bounds: Sequence[int],
    capacities: Sequence[int] | None,
    max_stage_bytes: int | None,
) -> PlanError:
    """The error for an infeasible request, from the partition that overflows least."""
    model = search.model
    whole = int(model.total_bytes([0], [search.size])[0])
    extra = search.smallest(0, whole, lambda d: search.feasible([b + d for b in bounds]))
    ends = search.cheapest([b + extra for b in bounds], _INF)
    found = _make(model, model.analysis.chain, ends)
    problems = []
    for k, memory in enumerate(found.memory):
        over = memory.total_bytes - bounds[k]
        if over <= 0:
            continue
        if capacities is not None and memory.required_bytes > capacities[k]:
            problems.append(
                f"stage {k} needs {format_bytes(memory.required_bytes)} "
                f"({format_bytes(memory.total_bytes)} + {model.headroom:.0%} headroom) but "
                f"device {k} has {format_bytes(capacities[k])}: "
                f"{format_bytes(memory.required_bytes - capacities[k])} over"
            )
        else:
            assert max_stage_bytes is not None
            problems.append(
                f"stage {k} needs {format_bytes(memory.total_bytes)}, over the "
                f"{format_bytes(max_stage_bytes)} shard limit by "
                f"{format_bytes(memory.total_bytes - max_stage_bytes)}"
            )
    where = ", ".join(f"[{i}, {j})" for i, j in found.segments)
    return PlanError(
        f"no {len(bounds)}-stage plan fits: " + "; ".join(problems) + f" (the closest plan, "
        f"segments {where}, overflows least). Use larger or more devices, a larger shard "
        "limit, smaller planning dims, or relaxed cuts"
    )
