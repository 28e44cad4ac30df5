"""Deprecated location of :mod:`onnx_ir_multidevice.testing.zoo` (kept for one release).

Every name read from here warns with a :class:`DeprecationWarning` and is the same object as
``onnx_ir_multidevice.testing.zoo``'s: import ``from onnx_ir_multidevice.testing import zoo``.
"""

from __future__ import annotations

import warnings
from typing import Any

from onnx_ir_multidevice.testing import zoo as _zoo

__all__ = list(_zoo.__all__)


def __getattr__(name: str) -> Any:
    """Return ``name`` of :mod:`onnx_ir_multidevice.testing.zoo`, with a warning (:pep:`562`)."""
    if name not in _zoo.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"onnx_ir_multidevice.zoo is deprecated; use onnx_ir_multidevice.testing.zoo.{name} "
        "(from onnx_ir_multidevice.testing import zoo)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_zoo, name)
