"""Planner: cut points, stage memory and optimal shard configurations for ``.omny`` files.

* :mod:`~onnx_ir_multidevice.planner.memory` -- the memory model of a pipeline stage;
* :mod:`~onnx_ir_multidevice.planner.flops` -- FLOPs estimates for balancing compute
  (``balance="compute"``; :func:`plan_summary`: each stage's share and the bytes sent);
* :mod:`~onnx_ir_multidevice.planner.partition` -- exactly optimal cuts for N devices;
* :mod:`~onnx_ir_multidevice.planner.planning` -- :func:`plan`: the ``.omny`` metadata;
* :mod:`~onnx_ir_multidevice.planner.options` -- :class:`PlanOptions`: what to plan for;
* :func:`build_metadata` -- the one ``.omny`` document builder, shared with
  :class:`~onnx_ir_multidevice.passes.StagesToOmnyPass` (it lives in the analysis layer:
  :mod:`~onnx_ir_multidevice.analysis.omny_document`);
* :mod:`~onnx_ir_multidevice.planner.static_dims` -- :func:`pin_dims`: symbolic dims pinned
  to numbers (``omny plan --static``);
* :mod:`~onnx_ir_multidevice.planner.devices` -- parsing ``24GiB`` and ``seq=512``
  (:func:`parse_memory_sizes`; ``parse_devices`` is its deprecated former name).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_COLLECTIVE_FLOPS_PER_BYTE",
    "DEFAULT_HEADROOM",
    "MIB",
    "MemoryModel",
    "Partition",
    "PlanOptions",
    "PlanResult",
    "RUNTIME_NODE_BYTES",
    "RUNTIME_OP_TYPE_BYTES",
    "RUNTIME_OVERHEAD_BYTES",
    "StageParallelism",
    "StagedConfiguration",
    "TensorParallelPlan",
    "StageMemory",
    "build_metadata",
    "choose_degrees",
    "describe",
    "parse_devices",
    "parse_dims",
    "parse_memory_sizes",
    "parse_size",
    "partition",
    "pin_dims",
    "plan",
    "plan_model",
    "plan_summary",
    "joint_stages",
    "plan_tensor_parallel",
    "rank_memory",
    "rank_resident_bytes",
    "rank_segments",
    "stage_parallelism",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.analysis.omny_document import StagedConfiguration, build_metadata
from onnx_ir_multidevice.planner.devices import (
    parse_devices,
    parse_dims,
    parse_memory_sizes,
    parse_size,
)
from onnx_ir_multidevice.planner.memory import (
    DEFAULT_HEADROOM,
    MIB,
    RUNTIME_NODE_BYTES,
    RUNTIME_OP_TYPE_BYTES,
    RUNTIME_OVERHEAD_BYTES,
    MemoryModel,
    StageMemory,
)
from onnx_ir_multidevice.planner.options import PlanOptions
from onnx_ir_multidevice.planner.partition import Partition, partition
from onnx_ir_multidevice.planner.planning import (
    PlanResult,
    describe,
    plan,
    plan_model,
    plan_summary,
)
from onnx_ir_multidevice.planner.static_dims import pin_dims
from onnx_ir_multidevice.planner.tensor_parallel import (
    DEFAULT_COLLECTIVE_FLOPS_PER_BYTE,
    StageParallelism,
    TensorParallelPlan,
    choose_degrees,
    joint_stages,
    plan_tensor_parallel,
    rank_memory,
    rank_resident_bytes,
    rank_segments,
    stage_parallelism,
)

set_public_module(globals(), root={"PlanOptions", "plan"})
