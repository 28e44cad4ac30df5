"""Run a model split into stages as a pipeline, one onnxruntime session per stage.

* :class:`Pipeline` runs a :class:`StageChain` (built by :func:`load_stages`) on the engine
  its ``backend`` names (:mod:`~onnx_ir_multidevice.runtime.engines`);
* :func:`verify` compares the chained stages with the whole model;
* :func:`make_inputs` and :meth:`Pipeline.example_inputs` generate random inputs with one
  generator (:mod:`~onnx_ir_multidevice.runtime.inputs`);
* every onnxruntime session is made by :class:`~onnx_ir_multidevice.runtime.sessions.ModelSession`;
* :func:`tensor_parallel_chain` and :func:`verify_tensor_parallel` run and check a model split
  over the ranks of tensor-parallel groups (:class:`TensorParallelStage`, run by
  :class:`TensorParallelRunner`); :func:`verify_folder` checks a split folder, tensor-parallel
  stages included;
* :func:`measure_memory` and :func:`measure_stages` measure the resident memory of a stage's
  session and run, to check the planner's prediction (``docs/memory_accuracy.md``).

``StagePlan`` and ``load_plan`` are deprecated aliases of :class:`StageChain` and
:func:`load_stages`, kept for one release (they warn).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    # Pipeline
    "Pipeline",
    "PipelineTimeoutError",
    # Stages
    "Device",
    "StageChain",
    "StageModel",
    "TensorSpec",
    "load_stages",
    "parse_device",
    # Sessions, inputs and stage runners
    "ModelSession",
    "StageFailure",
    "StageRunner",
    "failure_message",
    "generate_inputs",
    "input_specs",
    # Verification
    "OutputComparison",
    "VerifyReport",
    "compare_outputs",
    "make_inputs",
    "verify",
    "verify_stages",
    # Tensor parallelism
    "TensorParallelRunner",
    "TensorParallelStage",
    "tensor_parallel_chain",
    "verify_folder",
    "verify_tensor_parallel",
    # Memory measurement
    "MemoryMeasurement",
    "measure_memory",
    "measure_stages",
    # Timing
    "BusyPeriod",
    "PipelineStats",
    "StageStats",
    "StatsRecorder",
]

from typing import Any

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.runtime import stages as _stages
from onnx_ir_multidevice.runtime.devices import Device, parse_device
from onnx_ir_multidevice.runtime.inputs import TensorSpec, generate_inputs, input_specs
from onnx_ir_multidevice.runtime.measure import MemoryMeasurement, measure_memory, measure_stages
from onnx_ir_multidevice.runtime.pipeline import Pipeline, PipelineTimeoutError
from onnx_ir_multidevice.runtime.runner import StageFailure, StageRunner, failure_message
from onnx_ir_multidevice.runtime.sessions import ModelSession
from onnx_ir_multidevice.runtime.stages import StageChain, StageModel, load_stages
from onnx_ir_multidevice.runtime.stats import BusyPeriod, PipelineStats, StageStats, StatsRecorder
from onnx_ir_multidevice.runtime.tensor_parallel import (
    TensorParallelRunner,
    TensorParallelStage,
    tensor_parallel_chain,
    verify_folder,
    verify_tensor_parallel,
)
from onnx_ir_multidevice.runtime.verification import (
    OutputComparison,
    VerifyReport,
    compare_outputs,
    make_inputs,
    verify,
    verify_stages,
)

set_public_module(globals(), root={"Pipeline", "VerifyReport", "verify"})


def __getattr__(name: str) -> Any:
    """The deprecated names ``StagePlan`` and ``load_plan`` (:pep:`562`), with a warning."""
    if name in _stages._DEPRECATED:
        return _stages._deprecated_alias(name, 2)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
