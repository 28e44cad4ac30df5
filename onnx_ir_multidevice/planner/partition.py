"""Choose the cuts: exactly optimal pipeline partitions under the memory model.

Given the segments of a :class:`~onnx_ir_multidevice.planner.memory.MemoryModel` and a
number of stages ``N``, :func:`partition` picks ``N - 1`` chain cuts so that, in order:

1. stage ``k`` fits device ``k``: its memory plus headroom is at most ``capacities[k]``, and
   its memory is at most ``max_stage_bytes``;
2. the **largest stage memory is as small as possible** (exactly, in bytes);
3. among those, the largest stage FLOPs estimate is as small as possible (balanced compute);
4. among those, the bytes sent between stages (cut tensors and their side activations) are
   as few as possible.

With ``balance="compute"`` steps 2 and 3 trade places: the largest stage FLOPs estimate
(:mod:`~onnx_ir_multidevice.planner.flops`) is minimised first, within the devices' memory
(step 1 still holds), then the largest stage memory for that compute bound, then the bytes
sent. A pipeline's throughput is that of its slowest stage, so this is the objective for
speed when memory is plentiful; the default keeps every device's share of memory smallest.

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
those stage totals. Exact, and a handful of runs instead of ~40 byte bisection steps. Step 4
is a shortest path over the same layers: with both bounds fixed the feasible starts of a stage
ending at ``j`` are a run ``[lo(j), j)`` (monotonicity again), found by vectorized bisection
once per distinct stage bound, and a range-minimum table gives the best predecessor.

Cost: O(log(total bytes) * N * S * (1 + shared weights)) vectorized steps for S segments in
the worst case, plus O(N * S log S) for step 4.

When nothing fits, :class:`~onnx_ir_multidevice._errors.PlanError` names the stage that does
not fit, its device and by how much, for the partition that overflows least.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["BALANCES", "Partition", "partition"]

import dataclasses
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

BALANCES = ("memory", "compute")
"""The objectives :func:`partition` can put first: the largest stage memory (``"memory"``,
the default) or the largest stage FLOPs (``"compute"``).

.. versionadded:: 0.1
"""


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
    balance: str = "memory",
) -> Partition:
    """Choose ``num_stages - 1`` chain cuts, optimally (see the module docstring).

    Args:
        model: The memory model of the graph (its chain gives the candidate cuts).
        num_stages: Number of stages, one per device (>= 1).
        capacities: Memory of each device in bytes, in pipeline order: stage ``k`` runs on
            device ``k`` and must fit it with the model's headroom.
        max_stage_bytes: Upper bound on every stage's memory (headroom not included).
        balance: ``"memory"`` (default): the objectives in the order of the module
            docstring; ``"compute"``: the largest stage FLOPs first (steps 2 and 3
            swapped), for pipelines whose throughput is set by their slowest stage.

    Returns:
        The partition.

    Raises:
        PlanError: If the chain has fewer than ``num_stages - 1`` usable cuts, or no
            partition fits (the message names the stage, its device and the overflow), or
            ``balance`` is not one of :data:`BALANCES`.

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
    bounds = _device_bounds(model, num_stages, capacities, max_stage_bytes)
    feasible, highest, _ = search.probe(bounds, _INF, _INF)
    if not feasible:
        raise _overflow_error(search, bounds, capacities, max_stage_bytes)
    # Lower bounds: a stage holds at least one segment, and the stages together hold at
    # least the whole model (weights and buffers at least once, the peak somewhere). Every
    # bound from the largest stage that passed on is feasible too (``_Search.probe``).
    # FLOPs are additive: the same two lower bounds; the largest stage FLOPs of any run
    # within the bounds is an upper bound.
    whole = int(model.total_bytes([0], [search.size])[0])
    singles = model.total_bytes(search.index[:-1], search.index[1:])
    lower = max(int(singles.max()), -(-whole // num_stages))
    flops = model.flops(search.index[:-1], search.index[1:])
    flops_lower = max(int(flops.max()), -(-int(flops.sum()) // num_stages))

    def least_memory(flops_bound: int) -> list[int]:
        _, upper, _ = search.probe(bounds, flops_bound, _INF)
        best = search.minimize(min(lower, upper), upper, bounds, flops_bound, flops=False)
        return [min(best, u) for u in bounds]

    def least_flops(memory_bounds: Sequence[int]) -> int:
        _, upper, _ = search.probe(memory_bounds, _INF, _INF, flops_parameter=True)
        return search.minimize(min(flops_lower, upper), upper, memory_bounds, _INF, flops=True)

    if balance == "memory":
        memory_bounds = least_memory(_INF)
        flops_bound = least_flops(memory_bounds)
    else:  # compute first, within the devices' bounds; then the least memory for it
        flops_bound = least_flops(bounds)
        memory_bounds = least_memory(flops_bound)
    ends = search.cheapest(memory_bounds, flops_bound)
    return _make(model, chain, ends)


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
    stages = tuple(zip(ends[:-1], ends[1:]))
    return Partition(
        cuts=tuple(chain[b - 1] for b in ends[1:-1]),
        segments=stages,
        memory=tuple(model.stage(i, j) for i, j in stages),
        flops=tuple(int(model.flops([i], [j])[0]) for i, j in stages),
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
