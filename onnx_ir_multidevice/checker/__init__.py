"""The checker: located diagnostics for a model's multi-device metadata and ``.omny`` plan.

* :func:`check` -- every rule on a model, a proto or a file;
* :mod:`~onnx_ir_multidevice.checker.diagnostics` -- :class:`Diagnostic`, :class:`Severity`
  and the registry of codes.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "CODES",
    "DEFAULT_MAX_PER_CODE",
    "UNREADABLE_CODES",
    "CheckReport",
    "CodeInfo",
    "Diagnostic",
    "Severity",
    "check",
    "check_device_configurations",
    "configuration_location",
    "node_location",
    "run_check",
    "value_location",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.checker.core import (
    CheckReport,
    check,
    check_device_configurations,
    run_check,
)
from onnx_ir_multidevice.checker.diagnostics import (
    CODES,
    DEFAULT_MAX_PER_CODE,
    UNREADABLE_CODES,
    CodeInfo,
    Diagnostic,
    Severity,
    configuration_location,
    node_location,
    value_location,
)

set_public_module(globals(), root={"Diagnostic", "Severity", "check"})
