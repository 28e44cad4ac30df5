"""Choosing pipeline stages and a tensor-parallel degree per stage for a set of devices.

For ``N`` devices the planner tries every stage count ``s`` from 1 to ``N`` (each partitioned
by :func:`~onnx_ir_multidevice.planner.partition.partition` as a pipeline-only plan would
be), finds the tensor-parallel regions of each stage at every degree ``d`` up to the allowed
maximum (:func:`~onnx_ir_multidevice.analysis.tensor_parallel_specs.stage_regions`), and gives
each stage the degree that makes the slowest step fastest with at most ``N`` devices in all
(:func:`choose_degrees`). The cost model of a stage at degree ``d``:

* **memory per device** = the stage's memory - the bytes of the weights its regions slice +
  those bytes / ``d`` (replicated weights and activations stay whole: an upper bound);
* **time** = the stage's FLOPs - its regions' FLOPs + their FLOPs / ``d`` + the bytes of
  each ``AllReduce`` a device moves (a ring: ``2 (d - 1) / d`` of the value) times
  :data:`DEFAULT_COLLECTIVE_FLOPS_PER_BYTE` (the price of a collective byte in FLOPs, the
  devices' FLOP/s over the links' bytes/s, like the pipeline's ``flops_per_byte``); a
  pipeline step is the slowest stage or link.

The combination with the smallest step time wins, then the fewest devices, then the fewest
stages. The search is small: ``N`` stage counts, ``N`` degrees per stage, and
:func:`choose_degrees` sorts the ``s x N`` candidate times once.

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
    "plan_tensor_parallel",
    "rank_resident_bytes",
    "stage_parallelism",
]

import dataclasses
import math
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.analysis.tensor_parallel import Region, find_regions
from onnx_ir_multidevice.planner.flops import nodes_flops
from onnx_ir_multidevice.planner.memory import (
    PREPACKED_WEIGHT_INPUTS,
    RUNTIME_NODE_BYTES,
    MemoryModel,
    StageMemory,
)
from onnx_ir_multidevice.planner.partition import DEFAULT_FLOPS_PER_BYTE, Partition, partition

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
    """Memory per device (weights, activations, buffers and headroom as the memory model
    counts them, the sliced weights divided)."""

    flops: int
    """FLOPs per device per request."""

    allreduce_bytes: int
    """Bytes one device moves per request in the ring ``AllReduce`` s, ``2 (d - 1) / d`` of
    each reduced value."""

    time: float
    """The stage's time in FLOPs: :attr:`flops` + :attr:`allreduce_bytes` times the price of
    a collective byte."""


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
    """``(stages, degrees, step time)`` of the best combination of each stage count tried."""

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


def stage_parallelism(
    stage: int,
    degree: int,
    regions: Sequence[Region],
    *,
    memory_bytes: int,
    weights_bytes: int,
    flops: int,
    node_flops: Mapping[ir.Node, int],
    sizes: ValueSizes,
    collective_flops_per_byte: float = DEFAULT_COLLECTIVE_FLOPS_PER_BYTE,
) -> StageParallelism:
    """The per-device costs of one stage at ``degree`` with these regions (see the module).

    Args:
        stage: The stage.
        degree: The degree.
        regions: The stage's regions at ``degree``.
        memory_bytes: The stage's memory on one device (the memory model's total).
        weights_bytes: The stage's weights on one device.
        flops: The stage's FLOPs.
        node_flops: The FLOPs of each node of the regions.
        sizes: The sizes at the planning dims.
        collective_flops_per_byte: The price of a collective byte.
    """
    if degree == 1 or not regions:
        return StageParallelism(
            stage, degree, 0, 0, weights_bytes, memory_bytes, flops, 0, float(flops)
        )
    sliced: dict[ir.Value, int] = {}
    region_flops = 0
    moved = 0
    for region in regions:
        for piece in region.weight_slices:
            sliced.setdefault(piece.value, _weight_bytes(piece.value, sizes))
        region_flops += sum(node_flops.get(node, 0) for node in region.nodes)
        for collective in region.collectives:
            share = 2 * (degree - 1) if collective.kind == "AllReduce" else degree - 1
            moved += math.ceil((collective.nbytes or 0) * share / degree)
    whole = sum(sliced.values())
    per_device = math.ceil(whole / degree)
    device_flops = flops - region_flops + math.ceil(region_flops / degree)
    return StageParallelism(
        stage,
        degree,
        len(regions),
        whole,
        weights_bytes - whole + per_device,
        memory_bytes - whole + per_device,
        device_flops,
        moved,
        device_flops + moved * collective_flops_per_byte,
    )


def flops_by_node(nodes: Sequence[ir.Node], sizes: ValueSizes) -> dict[ir.Node, int]:
    """The FLOPs of each node (0 when unknown), at the planning dims."""
    counts = nodes_flops(nodes, sizes, estimate=True)
    return {node: count or 0 for node, count in zip(nodes, counts, strict=True)}


def plan_tensor_parallel(
    model: ir.Model,
    memory: MemoryModel,
    sizes: ValueSizes,
    num_devices: int,
    *,
    max_degree: int,
    capacity: int | None = None,
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
        capacity: The bytes one device holds (``None``: no limit).
        balance: How each stage count is partitioned (as for a pipeline-only plan).
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
    best: tuple[tuple[float, int, int], Partition, tuple[StageParallelism, ...]] | None = None
    considered = []
    errors = []
    for num_stages in range(1, num_devices + 1):
        try:
            cut = partition(memory, num_stages, balance=balance, flops_per_byte=flops_per_byte)
        except PlanError as error:
            errors.append(f"{num_stages} stages: {error}")
            continue
        stages = assign_stages(graph, [c.value for c in cut.cuts]) if cut.cuts else {}
        table: list[list[StageParallelism]] = []
        for stage in range(num_stages):
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
                        memory_bytes=cut.memory[stage].total_bytes,
                        weights_bytes=cut.memory[stage].weights_bytes,
                        flops=cut.flops[stage],
                        node_flops=node_flops,
                        sizes=sizes,
                        collective_flops_per_byte=collective_flops_per_byte,
                    )
                )
            table.append(row)
        times = [
            [s.time if (capacity is None or s.memory_bytes <= capacity) else None for s in row]
            for row in table
        ]
        chosen = choose_degrees(times, num_devices)
        if chosen is None:
            errors.append(f"{num_stages} stages: a stage does not fit a device at any degree")
            continue
        degrees, slowest = chosen
        links = max((b or 0) * flops_per_byte for b in cut.sent_bytes) if cut.sent_bytes else 0
        step = max(slowest, links)
        considered.append((num_stages, degrees, step))
        key = (step, sum(degrees), num_stages)
        if best is None or key < best[0]:
            best = (key, cut, tuple(table[i][d - 1] for i, d in enumerate(degrees)))
    if best is None:
        raise PlanError(
            f"no combination of stages and tensor-parallel degrees fits {num_devices} devices: "
            + "; ".join(errors[:2])
        )
    (step, _, _), cut, chosen_stages = best
    plan = TensorParallelPlan(num_devices, chosen_stages, step, tuple(considered))
    if not plan.parallel:
        if not any_region:
            reason = (
                f"no tensor-parallel region at degree 2 to {max_degree}: no MatMul/Gemm by a "
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

    Starting from the whole stage's :attr:`~StageMemory.resident_bytes` (one session):

    * **sliced weights**: the weights the regions slice count ``1 / degree`` of their bytes;
    * **pre-packing**: the largest weight a kernel pre-packs (held twice while the session is
      created) is taken among the rank's weights, the sliced ones at ``1 / degree`` (a sliced
      vocabulary head is no longer the largest copy);
    * **one session per segment**: each segment beyond the first adds
      :data:`EXTRA_SESSION_BYTES`, and :data:`SEGMENT_OP_TYPE_BYTES` per op type beyond the
      stage's own (an op type found in three segments counts three times) and its cost per
      node (the nodes of every segment: the split adds
      a few, the rewritten shapes).

    Activations and buffers stay whole (an upper bound: a split value is ``1 / degree`` on
    each rank).

    Args:
        stage: The whole stage's memory.
        degree: The degree.
        regions: The stage's regions at ``degree``.
        sizes: The sizes at the planning dims.
        nodes: The stage's nodes (for the pre-packed weights; none: the stage's figure).
        segments: The op type of each node of each segment of one rank
            (:attr:`~onnx_ir_multidevice._split.tensor_parallel.TensorParallelSplit.segments`;
            none, or no ``nodes``: one session).
        node_bytes: onnxruntime's cost per node.
        op_type_bytes: The cost of an op type in one more segment.
        session_bytes: The cost of each further session.
    """
    if degree == 1 or not regions:
        return stage.resident_bytes
    sliced: dict[ir.Value, int] = {}
    for region in regions:
        for piece in region.weight_slices:
            sliced.setdefault(piece.value, _weight_bytes(piece.value, sizes))
    whole = sum(sliced.values())
    resident = stage.resident_bytes - whole + math.ceil(whole / degree)
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
        resident += max(stage.workspace_bytes, prepack - held) - before
    if segments and nodes:
        stage_nodes = len(nodes)
        stage_types = len({n.op_type for n in nodes})
        resident += (len(segments) - 1) * session_bytes
        resident += (sum(len(set(s)) for s in segments) - stage_types) * op_type_bytes
        resident += (sum(len(s) for s in segments) - stage_nodes) * node_bytes
    return resident
