"""Error types of onnx-ir-multidevice.

Every error the package raises on bad input is a subclass of :class:`OmnyError`, so callers
can catch one type. Each subclass also derives from the closest built-in exception
(``ValueError``, ``OSError``...), so code written against the built-ins keeps working.
"""

from __future__ import annotations

__all__ = [
    "BindingError",
    "CheckError",
    "ExportError",
    "OmnyError",
    "OmnyFormatError",
    "OmnyIOError",
    "PipelineError",
    "PlanError",
    "PlanningDimsError",
    "SplitError",
    "VerifyError",
]

from collections.abc import Sequence
from typing import Any


class OmnyError(Exception):
    """Base class of every error raised by onnx-ir-multidevice on bad input."""


class OmnyFormatError(OmnyError, ValueError):
    """The ``.omny`` metadata JSON, or a multi-device field of a model proto, is malformed.

    Attributes:
        path: Where the offending element is: a JSON path such as
            ``sharding.configurations[1].cut_point_ids[2]``, a proto field path such as
            ``graph.node[3].device_configurations[0].configuration_id``, or a
            ``metadata_props[<key>]`` entry (``""`` for the whole document).
        reason: What is wrong, without the path.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class OmnyIOError(OmnyError, OSError):
    """A model file cannot be read or written (missing, unreadable, not ONNX, refused overwrite)."""


class BindingError(OmnyError, ValueError):
    """A ``.omny`` plan cannot be bound to a model in the way requested.

    Attributes:
        code: The checker's diagnostic code of the problem (``OMNY110``...) when it is an
            unresolved reference of the plan, else ``None``.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class CheckError(OmnyError, ValueError):
    """A model or plan failed the checker.

    Attributes:
        diagnostics: The diagnostics (errors first) that made the check fail.
    """

    def __init__(self, diagnostics: Sequence[Any], message: str | None = None) -> None:
        self.diagnostics = list(diagnostics)
        if message is None:
            lines = [f"{len(self.diagnostics)} problem(s) found:"]
            lines.extend(f"  {d}" for d in self.diagnostics)
            message = "\n".join(lines)
        super().__init__(message)


class PlanError(OmnyError, ValueError):
    """No plan satisfies the request (a stage does not fit, too few cut points...)."""


class SplitError(OmnyError, ValueError):
    """A model cannot be split into stages as requested."""


class ExportError(OmnyError, ValueError):
    """A model cannot be exported as asked: unknown format or option, or content it cannot hold."""


class PlanningDimsError(ExportError):
    """The planning dims do not give a size an export needs, or contradict the recorded ones.

    A symbolic dimension (``seq``, ``past_seq``...) of a tensor the export writes has no value
    at the planning dims (those the plan recorded, see
    :func:`onnx_ir_multidevice.omny.read_planning_dims`, completed by ``dims=`` or ``--dim``),
    or a given value differs from the recorded one. ``omny export`` reports it as a usage
    error (exit status 2).

    Attributes:
        dims: The dimension names at fault (empty when a size is unknown without a named dim,
            e.g. a value whose shape could not be inferred).
    """

    def __init__(self, message: str, *, dims: Sequence[str] = ()) -> None:
        self.dims = tuple(dims)
        super().__init__(message)


class VerifyError(OmnyError, RuntimeError):
    """Verification could not run (the model or a stage failed in onnxruntime)."""


class PipelineError(OmnyError, RuntimeError):
    """A pipeline stage failed while running a request.

    Attributes:
        stage: 0-based index of the stage that failed (``None`` when not stage-specific).
        request: 0-based sequence number of the request it failed on (``None`` if unknown).
    """

    def __init__(
        self, message: str, *, stage: int | None = None, request: int | None = None
    ) -> None:
        self.stage = stage
        self.request = request
        where = []
        if stage is not None:
            where.append(f"stage {stage}")
        if request is not None:
            where.append(f"request {request}")
        prefix = f"[{', '.join(where)}] " if where else ""
        super().__init__(prefix + message)


def __set_module() -> None:
    """Show the errors as ``onnx_ir_multidevice.<Name>``, where the package root exports them."""
    for name in __all__:
        globals()[name].__module__ = "onnx_ir_multidevice"


__set_module()
