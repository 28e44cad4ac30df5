"""The memory units of ``.omny``: whole MiB rounded up, and the runtime's headroom.

Every ``*_mb`` figure of a ``.omny`` document is MiB rounded up, never under-reported
(:func:`to_mib`). A device keeps a share of its memory for the runtime (the *headroom*, 20 %
by default, the spec's lower bound): a stage of ``total`` bytes needs
``total / (1 - headroom)`` bytes of device memory (:func:`required_bytes`), and a device of
``capacity`` bytes holds a stage of at most ``capacity * (1 - headroom)`` (:func:`usable_bytes`).
The planner's memory model (:mod:`~onnx_ir_multidevice.planner.memory`) and the one ``.omny``
document builder (:mod:`~onnx_ir_multidevice.analysis.omny_document`) both count with these.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_HEADROOM",
    "MIB",
    "headroom_fraction",
    "required_bytes",
    "to_mib",
    "usable_bytes",
]

import math
from fractions import Fraction

MIB = 1 << 20
"""Bytes in a MiB (the unit of every ``*_mb`` field of ``.omny``)."""

DEFAULT_HEADROOM = 0.2
"""Share of a device's memory kept for the runtime (20 %, the spec's lower bound)."""


def to_mib(nbytes: int) -> int:
    """Round a byte count up to whole MiB (never under-report)."""
    return -(-nbytes // MIB)


def headroom_fraction(headroom: float) -> Fraction:
    """Return ``headroom`` as an exact fraction (``0.2`` is ``1/5``, not a binary float).

    Raises:
        ValueError: ``headroom`` is not in ``[0, 1)``.
    """
    value = Fraction(str(headroom))
    if not 0 <= value < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom}")
    return value


def required_bytes(total: int, headroom: float) -> int:
    """Device bytes for a stage of ``total`` bytes keeping ``headroom`` for the runtime."""
    h = headroom_fraction(headroom)
    return math.ceil(Fraction(total) / (1 - h))


def usable_bytes(capacity: int, headroom: float) -> int:
    """Largest stage total that fits a device of ``capacity`` bytes with ``headroom``."""
    h = headroom_fraction(headroom)
    return math.floor(capacity * (1 - h))
