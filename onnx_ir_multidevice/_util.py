"""Small helpers shared by every layer: pausing the garbage collector, argument checks."""

from __future__ import annotations

__all__ = ["gc_paused", "require_model"]

import contextlib
import gc
from collections.abc import Iterator

import onnx_ir as ir


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the duration of the block.

    Building or analysing a large graph, document or proto allocates many small objects and
    no reference cycles; the collector's repeated full scans of the large, long-lived model
    then find nothing and make the work grow faster than linearly. Reference counting still
    frees everything. A collector the caller had already disabled stays disabled.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def require_model(model: object, function: str) -> None:
    """Raise a ``TypeError`` saying how to get a model when ``model`` is not an ``ir.Model``.

    Args:
        model: What the caller passed.
        function: The public function's name as users call it, e.g. ``"plan"`` or
            ``"omny.read"``.

    Raises:
        TypeError: If ``model`` is not an :class:`onnx_ir.Model`.
    """
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"{function}() takes an onnx_ir.Model, not {type(model).__name__}; load a file "
            "with onnx_ir_multidevice.load(path) (an onnx.ModelProto with "
            "onnx_ir.from_proto(proto))"
        )
