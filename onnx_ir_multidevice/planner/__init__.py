"""Planner: cut points, stage memory and optimal shard configurations for ``.omny`` files.

* :mod:`~onnx_ir_multidevice.planner.memory` -- the memory model of a pipeline stage;
* :mod:`~onnx_ir_multidevice.planner.flops` -- FLOPs estimates for balancing compute;
* :mod:`~onnx_ir_multidevice.planner.partition` -- exactly optimal cuts for N devices;
* :mod:`~onnx_ir_multidevice.planner.planning` -- :func:`plan`: the ``.omny`` metadata;
* :mod:`~onnx_ir_multidevice.planner.devices` -- parsing ``24GiB`` and ``seq=512``.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_HEADROOM",
    "MemoryModel",
    "Partition",
    "PlanResult",
    "StageMemory",
    "parse_devices",
    "parse_dims",
    "parse_size",
    "partition",
    "plan",
    "plan_model",
]

from onnx_ir_multidevice.planner.devices import parse_devices, parse_dims, parse_size
from onnx_ir_multidevice.planner.memory import DEFAULT_HEADROOM, MemoryModel, StageMemory
from onnx_ir_multidevice.planner.partition import Partition, partition
from onnx_ir_multidevice.planner.planning import PlanResult, plan, plan_model
