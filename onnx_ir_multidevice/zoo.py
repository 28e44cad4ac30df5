"""Deprecated location of :mod:`onnx_ir_multidevice.testing.zoo` (kept for one release)."""

from __future__ import annotations

from onnx_ir_multidevice.testing.zoo import *  # noqa: F403
from onnx_ir_multidevice.testing.zoo import __all__  # noqa: F401
