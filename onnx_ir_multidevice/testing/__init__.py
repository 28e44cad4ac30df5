"""Models for tests, docs and benchmarks, built with onnx-ir (no download).

* :mod:`~onnx_ir_multidevice.testing.zoo` -- small runnable architectures;
* :mod:`~onnx_ir_multidevice.testing.llama` -- a Llama decoder at any size (TinyLlama-1.1B
  shape included) with weights streamed to external data;
* :mod:`~onnx_ir_multidevice.testing.real_models` -- the whole job (plan to pipeline) on one
  model file, as the real-model matrix runs it.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["llama", "real_models", "zoo"]

from onnx_ir_multidevice.testing import llama, real_models, zoo
