"""Exporters: write a planned model in another format (``omny export --format NAME``).

An exporter is any object with a ``name``, a one-line ``description``, the options it accepts
(``option_help``) and an ``export`` method: the :class:`Exporter` protocol.
:func:`register_exporter` makes one available under a name; :func:`export` (and ``omny
export``) looks the name up, checks the options and runs it, which returns an
:class:`ExportResult`.

Registered formats:

* ``split`` -- the split directory, one runnable ONNX model per pipeline stage and
  ``manifest.json`` (:class:`SplitDirectoryExporter`, what
  :func:`~onnx_ir_multidevice.save_split` and ``omny split`` write);
* ``mlf`` -- a TVM Model Library Format (version 7) archive, one module per stage with its
  memory summary and parameters: a description, no TVM code (:class:`TvmMlfExporter`);
* ``ark`` -- ARK model files, one per rank, with the exact Send/Recv between ranks and the
  compute as a skeleton or translated one to one (:class:`ArkExporter`).

``mlf`` and ``ark`` take their stages from the split machinery and their memory figures from
the planner, at the planning dims the plan recorded (``docs/exporting.md``).

Writing an exporter: take the stages from the split machinery
(:func:`~onnx_ir_multidevice.split`; :func:`~onnx_ir_multidevice.save_split` and its
manifest), so that every format agrees with ``omny split``; write the file or directory
atomically; refuse to replace existing content unless ``force``; parse option values given as
strings (they come so from the command line). Then register it::

    from onnx_ir_multidevice import exporters

    class StageList:
        name = "stage-list"
        description = "the stage files a split would write, as JSON"
        option_help = {}

        def export(self, model, destination, *, shards, options, force):
            ...
            return exporters.ExportResult(self.name, destination, (destination,))

    exporters.register_exporter("stage-list", StageList())

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "ArkExporter",
    "ExportResult",
    "Exporter",
    "SplitDirectoryExporter",
    "TvmMlfExporter",
    "export",
    "exporters",
    "get_exporter",
    "register_exporter",
    "unregister_exporter",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.exporters.ark import ArkExporter
from onnx_ir_multidevice.exporters.protocol import Exporter, ExportResult
from onnx_ir_multidevice.exporters.registry import (
    export,
    exporters,
    get_exporter,
    register_exporter,
    unregister_exporter,
)
from onnx_ir_multidevice.exporters.split_directory import SplitDirectoryExporter
from onnx_ir_multidevice.exporters.tvm_mlf import TvmMlfExporter

set_public_module(globals(), root={"Exporter", "export", "register_exporter"})
