"""Parsing exporter options: values come typed from Python, or as strings from the command line.

One parser per kind of option, shared by every format (``omny export --option NAME=VALUE``
and the format flags hand every value over as a string). The ``configuration`` option is read
by ``onnx_ir_multidevice.omny._schema.parse_configuration``, shared with ``omny split``.
"""

from __future__ import annotations

__all__ = ["parse_choice", "parse_dims", "parse_flag"]

from collections.abc import Mapping, Sequence
from typing import Any

from onnx_ir_multidevice._errors import ExportUsageError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_flag(value: Any, option: str) -> bool:
    """A boolean option: ``True``/``False``, or ``true``/``false``/``1``/``0``/``yes``/``no``.

    Raises:
        ExportUsageError: Any other value.
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ExportUsageError(f"option {option}: expected true or false, got {value!r}")


def parse_choice(value: Any, option: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (case-insensitive).

    Raises:
        ExportUsageError: Any other value.
    """
    text = str(value).strip().lower()
    if text not in choices:
        raise ExportUsageError(
            f"option {option}: expected one of {', '.join(choices)}, got {value!r}"
        )
    return text


def parse_dims(value: Any, option: str = "dims") -> dict[str, int]:
    """Planning dims: a mapping, or ``"seq=128,batch=1"`` as it comes from the command line.

    Raises:
        ExportUsageError: A name is empty or a value is not a positive integer.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        items = []
        for part in str(value).split(","):
            if not part.strip():
                continue
            name, sep, size = part.partition("=")
            if not sep:
                raise ExportUsageError(
                    f"option {option}: expected NAME=N[,NAME=N...] (e.g. seq=128), got {value!r}"
                )
            items.append((name.strip(), size.strip()))
    dims: dict[str, int] = {}
    for name, size in items:
        if not isinstance(name, str) or not name or isinstance(size, bool):
            raise ExportUsageError(f"option {option}: bad dimension {name!r}={size!r}")
        if isinstance(size, int) and size >= 1:
            dims[name] = size
        elif isinstance(size, str) and size.isdigit() and int(size) >= 1:
            dims[name] = int(size)
        else:
            raise ExportUsageError(
                f"option {option}: {name}={size!r}: expected a positive integer (e.g. {name}=128)"
            )
    return dims
