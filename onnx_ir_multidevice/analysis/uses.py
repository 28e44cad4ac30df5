"""Deprecated location of :mod:`onnx_ir_multidevice.graph.index` (kept for one release)."""

from __future__ import annotations

from onnx_ir_multidevice.graph.index import *  # noqa: F403
from onnx_ir_multidevice.graph.index import __all__  # noqa: F401
