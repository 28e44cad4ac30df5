"""Model files and protos: atomic load/save with external data, and the lossless round trip.

* :mod:`~onnx_ir_multidevice._proto.files` -- :func:`load` / :func:`save`;
* :mod:`~onnx_ir_multidevice._proto.external` -- where external data may be read from, the
  record tying a data file to its model, and embedding external ``Constant`` values;
* :mod:`~onnx_ir_multidevice._proto.atomic` -- staging folders named after their writer, the
  removal of stale ones, modes and flushes: what every writer of the package uses;
* :mod:`~onnx_ir_multidevice._proto.convert` -- :func:`from_proto` / :func:`to_proto`
  (onnx-ir's conversion with its multi-device gaps fixed), :func:`roundtrip`, :func:`diff`;
* :mod:`~onnx_ir_multidevice._proto.container_files` -- :func:`convert_container` and
  :func:`save_container`: ``.omny`` v2 containers as files (``load`` reads them).
"""

from __future__ import annotations

__all__ = [
    "ContainerConversion",
    "ContainerWarning",
    "convert_container",
    "diff",
    "from_proto",
    "load",
    "roundtrip",
    "save",
    "save_container",
    "to_proto",
]

from onnx_ir_multidevice._proto.container_files import (
    ContainerConversion,
    ContainerWarning,
    convert_container,
    save_container,
)
from onnx_ir_multidevice._proto.convert import diff, from_proto, roundtrip, to_proto
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice._util import set_public_module

set_public_module(globals(), root=set(__all__))
