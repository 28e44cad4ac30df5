"""onnx-ir passes of onnx-ir-multidevice: annotate, reverse, strip and check.

Each is an :class:`onnx_ir.passes.InPlacePass` usable on its own or in an
:class:`onnx_ir.passes.PassManager`, and reports ``modified`` exactly. :func:`annotate` is the
function interface: it loads a file or converts a proto, checks, and runs :class:`AnnotatePass`.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "OMNY_CONFIGURATION_PREFIX",
    "AnnotatePass",
    "AnnotateShardingPass",
    "AnnotateStagesPass",
    "CheckPass",
    "StagesToOmnyPass",
    "StripAnnotationsPass",
    "annotate",
    "configuration_names",
    "stage_weight_bytes",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX, configuration_names
from onnx_ir_multidevice.passes.annotation import (
    AnnotatePass,
    AnnotateShardingPass,
    AnnotateStagesPass,
)
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.passes.check import CheckPass
from onnx_ir_multidevice.passes.reverse import StagesToOmnyPass, stage_weight_bytes
from onnx_ir_multidevice.passes.strip import StripAnnotationsPass

set_public_module(globals(), root={"annotate"})
