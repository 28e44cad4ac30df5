"""Models for tests, docs and benchmarks, built with onnx-ir (no download).

* :mod:`~onnx_ir_multidevice.testing.zoo` -- small runnable architectures.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["zoo"]

from onnx_ir_multidevice.testing import zoo
