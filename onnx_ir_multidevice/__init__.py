"""onnx-ir-multidevice: run an ONNX model across several devices, on top of onnx-ir.

The public API, grouped by layer (see the docs for a guide to each):

* **Format** -- the ``.omny`` metadata as frozen dataclasses (:class:`OmnyMetadata`...),
  :mod:`~onnx_ir_multidevice.omny` to read and write it on a model's ``metadata_props``;
* **Files** -- :func:`load` / :func:`save` (atomic, external data), :func:`from_proto` /
  :func:`to_proto`, :func:`roundtrip` and :func:`diff` for lossless proto round trips;
  :func:`convert_container` / :func:`save_container` for ``.omny`` v2 containers
  (:mod:`~onnx_ir_multidevice.omny.container`; ``load`` reads them);
* **Binding** -- :func:`bind` a ``.omny`` plan to the IR objects it names;
* **Annotation and checking** -- :func:`annotate` (IR v11 pipeline stages and sharding specs),
  :func:`check` (located :class:`Diagnostic` s), and the onnx-ir passes in
  :mod:`~onnx_ir_multidevice.passes`;
* **Planning, splitting, running** -- :func:`plan` (options: :class:`PlanOptions`),
  :func:`split` (:func:`split_at`, :func:`split_by_stages`, :func:`save_split`,
  :class:`SplitManifest`, :func:`build_manifest`, :func:`read_manifest`), :func:`verify`,
  :class:`Pipeline`, and :class:`Engine` / :func:`register_engine` to run pipelines on an
  engine of your own;
* **Exporting** -- :func:`export` to a registered format (:class:`Exporter`,
  :func:`register_exporter`, :mod:`~onnx_ir_multidevice.exporters`); the OAAX toolchain and
  runtime in :mod:`~onnx_ir_multidevice.oaax`;

The names are imported on first use (:pep:`562`), so ``import onnx_ir_multidevice`` and the
``omny`` command line start fast; nothing imports onnxruntime until a function that runs a
model is called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnx_ir_multidevice._version import __version__

if TYPE_CHECKING:  # what the lazy loader below returns, for type checkers and IDEs
    from onnx_ir_multidevice import exporters, oaax, omny, passes, testing
    from onnx_ir_multidevice._errors import (
        BindingError,
        CheckError,
        ExportError,
        ExternalDataError,
        ExternalDataProblem,
        OmnyError,
        OmnyFormatError,
        OmnyIOError,
        PipelineError,
        PlanError,
        PlanningDimsError,
        SplitError,
        VerifyError,
        ViewError,
    )
    from onnx_ir_multidevice._proto import (
        ContainerConversion,
        ContainerWarning,
        convert_container,
        diff,
        from_proto,
        load,
        roundtrip,
        save,
        save_container,
        to_proto,
    )
    from onnx_ir_multidevice._split import (
        ManifestError,
        ManifestInput,
        ManifestOutput,
        ManifestStage,
        SplitManifest,
        build_manifest,
        read_manifest,
        save_split,
        split,
        split_at,
        split_by_stages,
    )
    from onnx_ir_multidevice.binding import (
        BoundConfiguration,
        BoundCutPoint,
        BoundPlan,
        UnresolvedReference,
        bind,
    )
    from onnx_ir_multidevice.checker import Diagnostic, Severity, check
    from onnx_ir_multidevice.exporters import Exporter, export, register_exporter
    from onnx_ir_multidevice.omny import (
        CutPoint,
        ExportInfo,
        ModelInfo,
        OmnyMetadata,
        ShardConfiguration,
        Sharding,
        TensorInfo,
    )
    from onnx_ir_multidevice.passes import annotate
    from onnx_ir_multidevice.planner import PlanOptions, plan
    from onnx_ir_multidevice.runtime import Pipeline, VerifyReport, verify
    from onnx_ir_multidevice.runtime.engines import Engine, register_engine

__all__ = [
    "__version__",
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
    "ContainerConversion",
    "ContainerWarning",
    "convert_container",
    "diff",
    "from_proto",
    "load",
    "roundtrip",
    "save",
    "save_container",
    "to_proto",
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
    "Engine",
    "PlanOptions",
    "Pipeline",
    "VerifyReport",
    "ManifestError",
    "ManifestInput",
    "ManifestOutput",
    "ManifestStage",
    "SplitManifest",
    "build_manifest",
    "plan",
    "read_manifest",
    "register_engine",
    "save_split",
    "split",
    "split_at",
    "split_by_stages",
    "verify",
    # Exporting
    "Exporter",
    "export",
    "exporters",
    "register_exporter",
    "oaax",
    # Test models
    "testing",
    # Errors
    "BindingError",
    "CheckError",
    "ExportError",
    "ExternalDataError",
    "ExternalDataProblem",
    "OmnyError",
    "OmnyFormatError",
    "OmnyIOError",
    "PipelineError",
    "PlanError",
    "PlanningDimsError",
    "SplitError",
    "VerifyError",
    "ViewError",
]

_P = "onnx_ir_multidevice"
#: Where each public name lives: ``name -> module`` (a module of its own when the two agree).
_HOMES: dict[str, str] = {
    **dict.fromkeys(
        ("CutPoint", "ExportInfo", "ModelInfo", "OmnyMetadata", "ShardConfiguration"),
        f"{_P}.omny",
    ),
    **dict.fromkeys(("Sharding", "TensorInfo"), f"{_P}.omny"),
    **dict.fromkeys(
        ("diff", "from_proto", "load", "roundtrip", "save", "to_proto"), f"{_P}._proto"
    ),
    **dict.fromkeys(
        ("ContainerConversion", "ContainerWarning", "convert_container", "save_container"),
        f"{_P}._proto",
    ),
    **dict.fromkeys(
        ("BoundConfiguration", "BoundCutPoint", "BoundPlan", "UnresolvedReference", "bind"),
        f"{_P}.binding",
    ),
    **dict.fromkeys(("Diagnostic", "Severity", "check"), f"{_P}.checker"),
    "annotate": f"{_P}.passes",
    **dict.fromkeys(("PlanOptions", "plan"), f"{_P}.planner"),
    **dict.fromkeys(
        (
            "ManifestError",
            "ManifestInput",
            "ManifestOutput",
            "ManifestStage",
            "SplitManifest",
            "build_manifest",
            "read_manifest",
            "save_split",
            "split",
            "split_at",
            "split_by_stages",
        ),
        f"{_P}._split",
    ),
    # The former name of SplitManifest, still importable (not in __all__: one name per class).
    "Manifest": f"{_P}._split",
    **dict.fromkeys(("Pipeline", "VerifyReport", "verify"), f"{_P}.runtime"),
    **dict.fromkeys(("Exporter", "export", "register_exporter"), f"{_P}.exporters"),
    **dict.fromkeys(("Engine", "register_engine"), f"{_P}.runtime.engines"),
    **dict.fromkeys(
        (
            "BindingError",
            "CheckError",
            "ExportError",
            "ExternalDataError",
            "ExternalDataProblem",
            "OmnyError",
            "OmnyFormatError",
            "OmnyIOError",
            "PipelineError",
            "PlanError",
            "PlanningDimsError",
            "SplitError",
            "VerifyError",
            "ViewError",
        ),
        f"{_P}._errors",
    ),
}
_SUBMODULES = frozenset(
    {
        "analysis",
        "binding",
        "checker",
        "cli",
        "examples",
        "exporters",
        "graph",
        "oaax",
        "omny",
        "passes",
        "planner",
        "runtime",
        "testing",
        "zoo",
    }
)


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it (:pep:`562`)."""
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{_P}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
