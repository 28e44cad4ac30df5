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
    "ExportUsageError",
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

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class ExternalDataProblem:
    """One tensor whose external data cannot be trusted (see :class:`ExternalDataError`)."""

    tensor: str
    """Name of the tensor (an initializer, or a tensor held by a node attribute)."""

    location: str
    """The ``location`` the tensor's proto gives (or the data file, for ``OMNY109``)."""

    reason: str
    """What is wrong, e.g. ``is outside the model's folder``."""

    code: str
    """The checker's code: ``OMNY108`` (the reference) or ``OMNY109`` (the file's content
    differs from what the model recorded when it was saved)."""

    where: str = ""
    """Proto field path of the tensor, e.g. ``graph.initializer[3]`` or
    ``graph.node[0].attribute[0].t``."""

    def __str__(self) -> str:
        return f"tensor {self.tensor!r} at {self.location!r}: {self.reason}"


class ExternalDataError(OmnyIOError):
    """A model's external data cannot be read safely.

    Raised by :func:`~onnx_ir_multidevice.load` (and by
    :func:`~onnx_ir_multidevice.save` when a tensor it must copy cannot be read) when a
    tensor's data location is outside the model's folder (an absolute path, ``..``, a link
    leading out, a hard link), is not a regular file or does not exist, when its ``offset`` or
    ``length`` is malformed or reaches past the end of the file, or when a data file is not the
    one the model was saved with (its size or checksum differs from the model's record).

    Attributes:
        file: The model file.
        problems: Every problem found, one per tensor (:class:`ExternalDataProblem`).
    """

    MAX_LISTED = 10
    """Problems listed in the message (tensors with the same location and reason are one
    problem, said once with their names); the rest are counted."""

    MAX_NAMED = 3
    """Tensors named for one problem; the rest are counted."""

    def __init__(self, file: str, problems: Sequence[ExternalDataProblem]) -> None:
        self.file = file
        self.problems = tuple(problems)
        grouped: dict[tuple[str, str], list[str]] = {}
        for problem in self.problems:  # one missing file: one line, not one per tensor
            grouped.setdefault((problem.location, problem.reason), []).append(problem.tensor)
        lines = [
            _tensors_at(tensors, location, reason, self.MAX_NAMED)
            for (location, reason), tensors in list(grouped.items())[: self.MAX_LISTED]
        ]
        more = len(grouped) - len(lines)
        if more > 0:
            lines.append(f"... and {more} more")
        advice = (
            "keep every data file inside the model's folder, as a regular file, and save the "
            "model again with onnx_ir_multidevice.save (or re-export it)"
        )
        if len(lines) == 1:
            message = f"{file}: external data of {lines[0]}; {advice}"
        else:
            listed = "; ".join(lines)
            message = f"{file}: external data: {len(self.problems)} problems: {listed}; {advice}"
        super().__init__(message)


def _tensors_at(tensors: Sequence[str], location: str, reason: str, named: int) -> str:
    """``tensor 'w' at 'm.data': <reason>``, or the same for several tensors at once."""
    if len(tensors) == 1:
        return f"tensor {tensors[0]!r} at {location!r}: {reason}"
    names = ", ".join(repr(t) for t in tensors[:named])
    rest = f" and {len(tensors) - named} more" if len(tensors) > named else ""
    return f"{len(tensors)} tensors ({names}{rest}) at {location!r}: {reason}"


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
            count = len(self.diagnostics)
            lines = [f"{count} problem{'' if count == 1 else 's'} found:"]
            lines.extend(f"  {d}" for d in self.diagnostics)
            message = "\n".join(lines)
        super().__init__(message)


class PlanError(OmnyError, ValueError):
    """No plan satisfies the request (a stage does not fit, too few cut points...)."""


class SplitError(OmnyError, ValueError):
    """A model cannot be split into stages as requested."""


class ViewError(OmnyError, ValueError):
    """A model has no plan to draw, or the configuration asked for does not exist."""


class ExportError(OmnyError, ValueError):
    """A model cannot be exported as asked: unknown format or option, or content it cannot hold."""


class ExportUsageError(ExportError):
    """An export was asked for wrongly (a shard count or an option value).

    A missing shard count, an option value that does not parse, one device too many:
    ``omny export`` reports it as a usage error (exit status 2).

    Attributes:
        cli_message: The message in command-line words (``--shards N`` for ``shards=N``),
            when they differ; ``omny export`` prints it.
    """

    def __init__(self, message: str, *, cli_message: str | None = None) -> None:
        self.cli_message = cli_message
        super().__init__(message)


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
