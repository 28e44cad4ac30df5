"""onnx-ir-multidevice: run an ONNX model across several devices, on top of onnx-ir."""

from onnx_ir_multidevice._errors import (
    BindingError,
    CheckError,
    OmnyError,
    OmnyFormatError,
    OmnyIOError,
    PipelineError,
    PlanError,
    SplitError,
    VerifyError,
)

__version__ = "0.1.0"

__all__ = [
    # Errors
    "BindingError",
    "CheckError",
    "OmnyError",
    "OmnyFormatError",
    "OmnyIOError",
    "PipelineError",
    "PlanError",
    "SplitError",
    "VerifyError",
]
