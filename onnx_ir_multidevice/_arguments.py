"""Checks of user-supplied arguments shared by the public entry points."""

from __future__ import annotations

__all__ = ["require_model"]

import onnx_ir as ir


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
