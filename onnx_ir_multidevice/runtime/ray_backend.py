"""Deprecated location of :mod:`onnx_ir_multidevice.runtime.engines.ray` (kept for one release)."""

from __future__ import annotations

from onnx_ir_multidevice.runtime.engines.ray import *  # noqa: F403
from onnx_ir_multidevice.runtime.engines.ray import __all__  # noqa: F401
