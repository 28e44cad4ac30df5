"""Models for tests, docs and benchmarks, built with onnx-ir (no download).

* :mod:`~onnx_ir_multidevice.testing.zoo` -- small runnable architectures;
* :mod:`~onnx_ir_multidevice.testing.llama` -- a Llama decoder at any size (TinyLlama-1.1B
  shape included) with weights streamed to external data;
* :mod:`~onnx_ir_multidevice.testing.real_models` -- the whole job (plan to pipeline) on one
  model file, as the real-model matrix runs it (``from onnx_ir_multidevice.testing.real_models
  import run_job``: not imported with this package, which stays light).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["llama", "zoo"]

# real_models is imported by name (it loads the whole package: planner, runtime...).
from onnx_ir_multidevice.testing import llama, zoo
