"""Parse memory sizes (``24GiB``, ``8GB``, ``512MiB``) and planning dims (``seq=512``).

Units, case-insensitive: ``B``; decimal ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000);
binary ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024). The number may have a fraction
(``1.5GiB``); the result is rounded down to whole bytes. A bare number is refused: ``8`` could
be bytes, MB or GB.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["parse_devices", "parse_dims", "parse_memory_sizes", "parse_size"]

import re
import warnings
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse a memory size such as ``"24GiB"``, or a byte count (``"1073741824"``), into bytes.

    Raises:
        ValueError: If the text is neither a positive number followed by a known unit nor a
            whole number of bytes (a fraction without a unit, ``"1.5"``, is refused).
    """
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"cannot read memory size {text!r}: expected e.g. 24GiB, 8GB, 512MiB")
    number, unit = match.groups()
    if not unit and number.isdigit():  # digits only: a byte count
        unit = "B"
    if not unit:
        raise ValueError(f"memory size {text!r} has no unit; write e.g. {number}GiB or {number}MB")
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"unknown unit {unit!r} in memory size {text!r}; use one of "
            "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        )
    try:
        nbytes = int(Decimal(number) * factor)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"cannot read memory size {text!r}") from exc
    if nbytes <= 0:
        raise ValueError(f"memory size {text!r} must be positive")
    return nbytes


def parse_memory_sizes(text: str | Iterable[str]) -> tuple[int, ...]:
    """Parse a comma-separated list of memory sizes (``"24GiB,8GiB,8GiB"``) into bytes.

    Args:
        text: The list, or its items (``["24GiB", "8GiB"]``); empty items are skipped.

    Returns:
        One byte count per item, in order.

    Raises:
        ValueError: If no item is given or an item is not a memory size.

    .. versionadded:: 0.1
       Replaces ``parse_devices``, whose name said "devices" for memory sizes (and differed
       by one letter from :func:`onnx_ir_multidevice.runtime.parse_device`, which reads an
       onnxruntime device).
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    items = [item for item in (i.strip() for i in items) if item]
    if not items:
        raise ValueError("no device sizes given; write e.g. 24GiB,8GiB")
    return tuple(parse_size(item) for item in items)


def parse_devices(text: str | Iterable[str]) -> tuple[int, ...]:
    """Deprecated alias of :func:`parse_memory_sizes`, kept for one release.

    .. deprecated:: 0.1
       Use :func:`parse_memory_sizes`; ``parse_devices`` will be removed in the next release.
    """
    warnings.warn(
        "parse_devices is deprecated and will be removed in the next release; "
        "use parse_memory_sizes (same arguments)",
        DeprecationWarning,
        stacklevel=2,
    )
    return parse_memory_sizes(text)


def parse_dims(items: Iterable[str]) -> dict[str, int]:
    """Parse planning dims given as ``name=value`` strings (``["seq=512", "batch=2"]``)."""
    dims: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(
                f"cannot read planning dim {item!r}: expected NAME=POSITIVE_INT, e.g. seq=512"
            )
        dims[name] = int(value)
    return dims
