"""Execution engines of :class:`~onnx_ir_multidevice.runtime.Pipeline`: a protocol and a registry.

An engine runs the stages of a pipeline for the requests the pipeline hands it
(:class:`Engine`, whose docstring states the threading contract). Engines are registered by
name with :func:`register_engine`; ``Pipeline(backend=name)`` and ``omny run --backend name``
look them up with :func:`get_engine`. Two are built in:

* ``"thread"`` -- :class:`~onnx_ir_multidevice.runtime.engines.thread.ThreadEngine`, one worker
  thread per stage in this process (the default);
* ``"ray"`` -- :class:`~onnx_ir_multidevice.runtime.engines.ray.RayEngine`, one Ray actor per
  stage (needs the ``ray`` extra; Ray is imported only when such a pipeline starts).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "Engine",
    "EngineFactory",
    "InlineEngine",
    "RayEngine",
    "ThreadEngine",
    "engines",
    "get_engine",
    "register_engine",
]

# The built-in engines register themselves when imported (neither module imports Ray).
from onnx_ir_multidevice._util import set_public_module  # noqa: E402
from onnx_ir_multidevice.runtime.engines.protocol import Engine, EngineFactory, InlineEngine
from onnx_ir_multidevice.runtime.engines.ray import RayEngine
from onnx_ir_multidevice.runtime.engines.registry import engines, get_engine, register_engine
from onnx_ir_multidevice.runtime.engines.thread import ThreadEngine

set_public_module(globals(), root={"Engine", "register_engine"})
