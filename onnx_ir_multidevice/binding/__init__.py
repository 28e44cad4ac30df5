"""The ``.omny`` plan bound to the IR objects it names, and the one cut resolver.

:func:`bind` resolves every name of a plan once; the checker, :func:`~onnx_ir_multidevice.split`
and :func:`~onnx_ir_multidevice.annotate` all take their cut points from it, so they give one
verdict on every file. :mod:`~onnx_ir_multidevice.binding.naming` holds the naming convention
of the IR configurations made from a plan (``omny/<n>-shards``).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "OMNY_CONFIGURATION_PREFIX",
    "BoundConfiguration",
    "BoundCutPoint",
    "BoundPlan",
    "BoundTensorInfo",
    "UnresolvedReference",
    "bind",
    "configuration_names",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.binding.bind import (
    BoundConfiguration,
    BoundCutPoint,
    BoundPlan,
    BoundTensorInfo,
    UnresolvedReference,
    bind,
)
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX, configuration_names

set_public_module(
    globals(),
    root={"BoundConfiguration", "BoundCutPoint", "BoundPlan", "UnresolvedReference", "bind"},
)
