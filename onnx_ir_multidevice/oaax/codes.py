"""The toolchain's error codes: one row per way a conversion can fail.

The OAAX specification asks for "standardized error codes and categories" and defines none;
these are ours. Every failed conversion writes its code, category and exit status in the last
entry of the conversion log (``"Data": {"Error code": ..., "Category": ...}``).

Categories: ``input`` (the input cannot be read or is not acceptable), ``operator`` (the model
uses an operator or a type the target cannot run), ``memory`` (no plan fits the devices, or the
artifact cannot be one file), ``verification`` (the plan does not check, split or compute what
the model computes) and ``internal`` (a bug of the toolchain).

Exit statuses: 2 when the input cannot be read or the usage is wrong (nothing was converted),
1 when the input was read and its content cannot be converted.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["CATEGORIES", "ERROR_CODES", "ConversionError", "ErrorCode"]

import dataclasses
from collections.abc import Mapping

CATEGORIES = ("input", "operator", "memory", "verification", "internal")
"""The error categories, in the order of the codes' hundreds (1xx input ... 5xx internal)."""


@dataclasses.dataclass(frozen=True)
class ErrorCode:
    """One way a conversion can fail."""

    code: str
    """Stable code, ``OAAX`` and three digits; the hundreds give the category."""

    category: str
    """One of :data:`CATEGORIES`."""

    exit_status: int
    """The toolchain's exit status: 2 (unreadable input, bad usage) or 1 (content)."""

    summary: str
    """What went wrong, in one line."""


def _codes(*rows: tuple[str, str, int, str]) -> Mapping[str, ErrorCode]:
    table = {}
    for code, category, exit_status, summary in rows:
        if category != CATEGORIES[int(code[4]) - 1]:
            raise ValueError(f"{code}: its hundreds say {CATEGORIES[int(code[4]) - 1]!r}")
        table[code] = ErrorCode(code, category, exit_status, summary)
    return table


ERROR_CODES: Mapping[str, ErrorCode] = _codes(
    ("OAAX101", "input", 2, "The input or the output directory cannot be read or written."),
    ("OAAX102", "input", 2, "The input is not an ONNX model, an .omny file or an archive."),
    ("OAAX103", "input", 2, "An archive member escapes the archive or is not a regular file."),
    ("OAAX104", "input", 2, "An archive holds no model, or more than one."),
    ("OAAX105", "input", 2, "The JSON configuration is malformed or has an unknown key."),
    ("OAAX106", "input", 2, "An .omny input has several configurations and none is chosen."),
    ("OAAX107", "input", 1, "The ONNX checker rejects the model."),
    ("OAAX201", "operator", 1, "onnxruntime cannot run the whole model (operator or type)."),
    ("OAAX202", "operator", 1, "An input or output has a type OAAX tensors cannot carry."),
    ("OAAX301", "memory", 1, "No plan with the requested shards fits the devices."),
    ("OAAX302", "memory", 1, "The artifact would be 2 GiB or more (it must be one file)."),
    ("OAAX401", "verification", 1, "The checker reports errors in the plan."),
    ("OAAX402", "verification", 1, "The model cannot be split at the plan's cut points."),
    ("OAAX403", "verification", 1, "The stages' outputs differ from the whole model's."),
    ("OAAX404", "verification", 1, "Verification could not run the model or a stage."),
    ("OAAX405", "verification", 1, "The artifact's inputs or outputs differ from the input's."),
    ("OAAX501", "internal", 1, "An unexpected error inside the toolchain (a bug: report it)."),
)
"""Every error code of the toolchain (the table in ``docs/interop.md`` is generated from it)."""


class ConversionError(Exception):
    """A conversion step failed with one of :data:`ERROR_CODES`.

    Attributes:
        code: The :class:`ErrorCode`.
        step: The step that failed (``"read"``, ``"validate"``, ``"plan"``...).
        message: What went wrong and what to do.
        data: Figures for the log entry.
    """

    def __init__(
        self, code: str, step: str, message: str, data: Mapping[str, object] | None = None
    ) -> None:
        self.code = ERROR_CODES[code]
        self.step = step
        self.message = message
        self.data = dict(data or {})
        super().__init__(f"{code} ({self.code.category}) in {step}: {message}")
