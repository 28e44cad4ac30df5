"""OAAX: a toolchain that converts a model into one ``.omny`` artifact, and a runtime over it.

OAAX (Open AI Accelerator eXchange) defines a toolchain -- a program taking exactly
``INPUT OUTDIR`` that converts an ONNX model for a target and writes a JSON conversion log --
and a runtime -- nine C functions that load the converted model and run it through a
send/receive queue. Here the target is a multi-device pipeline:

* :func:`convert` (console script ``omny-oaax-toolchain INPUT OUTDIR``, also ``omny
  oaax-convert``): load, validate, plan, check, split and verify, then write the artifact and
  the log (:mod:`~onnx_ir_multidevice.oaax.toolchain`; error codes in :data:`ERROR_CODES`;
  inputs and ``config.json`` in :mod:`~onnx_ir_multidevice.oaax.inputs`);
* :class:`OaaxRuntime` and the module functions of :mod:`~onnx_ir_multidevice.oaax.runtime`:
  the runtime API over :class:`~onnx_ir_multidevice.Pipeline`, with the specification's
  :class:`TensorsStruct` and :class:`TensorDataType` (the C ABI itself is out of scope).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "CATEGORIES",
    "ERROR_CODES",
    "ConversionResult",
    "ErrorCode",
    "OaaxRuntime",
    "TensorDataType",
    "TensorsStruct",
    "ToolchainConfig",
    "convert",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.oaax.codes import CATEGORIES, ERROR_CODES, ErrorCode
from onnx_ir_multidevice.oaax.inputs import ToolchainConfig
from onnx_ir_multidevice.oaax.runtime import OaaxRuntime
from onnx_ir_multidevice.oaax.tensors import TensorDataType, TensorsStruct
from onnx_ir_multidevice.oaax.toolchain import ConversionResult, convert

set_public_module(globals())
