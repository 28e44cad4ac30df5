"""Run a model split into stages as a pipeline, one onnxruntime session per stage.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    # Pipeline
    "Pipeline",
    "PipelineTimeoutError",
    # Stages
    "Device",
    "StageModel",
    "StagePlan",
    "TensorSpec",
    "load_plan",
    "parse_device",
    # Verification
    "OutputComparison",
    "VerifyReport",
    "make_inputs",
    "verify",
    "verify_stages",
    # Timing
    "BusyPeriod",
    "PipelineStats",
    "StageStats",
]

from onnx_ir_multidevice.runtime.pipeline import Pipeline, PipelineTimeoutError
from onnx_ir_multidevice.runtime.stages import (
    Device,
    StageModel,
    StagePlan,
    TensorSpec,
    load_plan,
    parse_device,
)
from onnx_ir_multidevice.runtime.stats import BusyPeriod, PipelineStats, StageStats
from onnx_ir_multidevice.runtime.verification import (
    OutputComparison,
    VerifyReport,
    make_inputs,
    verify,
    verify_stages,
)
