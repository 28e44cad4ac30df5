"""onnx-ir-multidevice: run an ONNX model across several devices, on top of onnx-ir.

The public API, grouped by layer (see the docs for a guide to each):

* **Format** -- the ``.omny`` metadata as frozen dataclasses (:class:`OmnyMetadata`...),
  :mod:`~onnx_ir_multidevice.omny` to read and write it on a model's ``metadata_props``;
* **Files** -- :func:`load` / :func:`save` (atomic, external data), :func:`roundtrip` /
  :func:`diff` for lossless proto round trips;
* **Binding** -- :func:`bind` a ``.omny`` plan to the IR objects it names;
* **Annotation and checking** -- :func:`annotate` (IR v11 pipeline stages and sharding specs),
  :func:`check` (located :class:`Diagnostic` s), and the onnx-ir passes in
  :mod:`~onnx_ir_multidevice.passes`;
* **Planning, splitting, running** -- :func:`plan`, :func:`split`, :func:`verify`,
  :class:`Pipeline`.

Nothing here imports onnxruntime until a function that runs a model is called.
"""

from onnx_ir_multidevice import omny, passes
from onnx_ir_multidevice._annotate import annotate
from onnx_ir_multidevice._binding import (
    BoundConfiguration,
    BoundCutPoint,
    BoundPlan,
    UnresolvedReference,
    bind,
)
from onnx_ir_multidevice._check import check
from onnx_ir_multidevice._diagnostics import Diagnostic, Severity
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
from onnx_ir_multidevice._format import (
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice._io import load, save
from onnx_ir_multidevice._roundtrip import diff, roundtrip
from onnx_ir_multidevice._split import save_split, split
from onnx_ir_multidevice._verify import VerifyReport, verify
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.runtime import Pipeline

__version__ = "0.1.0"

__all__ = [
    # Format
    "CutPoint",
    "ExportInfo",
    "ModelInfo",
    "OmnyMetadata",
    "ShardConfiguration",
    "Sharding",
    "TensorInfo",
    "omny",
    # Files and round trip
    "diff",
    "load",
    "roundtrip",
    "save",
    # Binding
    "BoundConfiguration",
    "BoundCutPoint",
    "BoundPlan",
    "UnresolvedReference",
    "bind",
    # Annotation and checking
    "Diagnostic",
    "Severity",
    "annotate",
    "check",
    "passes",
    # Planning, splitting, running
    "Pipeline",
    "VerifyReport",
    "plan",
    "save_split",
    "split",
    "verify",
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
