"""The ``split`` format: one runnable ONNX model per stage and ``manifest.json``, in a directory.

What :func:`~onnx_ir_multidevice.save_split` and ``omny split`` write, as an exporter.
"""

from __future__ import annotations

__all__ = ["SplitDirectoryExporter"]

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import ExportError, ExportUsageError
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice.exporters.protocol import ExportResult
from onnx_ir_multidevice.omny._schema import parse_configuration

_DEFAULT_THRESHOLD = 1024
"""Default ``external_data_threshold`` of :func:`~onnx_ir_multidevice.save_split`, in bytes."""


def _threshold(value: Any) -> int:
    """The ``external_data_threshold`` option: a number of bytes >= 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip()
    if not text.isdigit():
        raise ExportError(
            f"option external_data_threshold: expected a number of bytes >= 0, got {value!r}"
        )
    return int(text)


class SplitDirectoryExporter:
    """Exports a model as its split directory (format ``split``), through ``save_split``.

    Options: ``configuration`` (the ``.omny`` configuration index or IR v11 configuration name
    to split by; default: the one with ``shards`` shards) and ``external_data_threshold``
    (weights above this many bytes go to ``stage_<i>.onnx.data``; default 1024).
    """

    name = "split"
    description = "a directory of stage_<i>.onnx models and manifest.json (as omny split)"
    option_help: Mapping[str, str] = {
        "configuration": "the .omny configuration index or IR v11 configuration name to split "
        "by (default: the one with --shards shards)",
        "external_data_threshold": "weights over this many bytes go to stage_<i>.onnx.data "
        f"(default {_DEFAULT_THRESHOLD})",
    }

    def export(
        self,
        model: ir.Model,
        destination: Path,
        *,
        shards: int | None,
        options: Mapping[str, Any],
        force: bool,
    ) -> ExportResult:
        """Write the split directory of ``model`` to ``destination`` (see the class)."""
        if shards is None:
            raise ExportUsageError(
                "the split format needs the number of stages: pass shards=N",
                cli_message="the split format needs the number of stages: pass --shards N",
            )
        manifest = save_split(
            model,
            destination,
            shards,
            configuration=parse_configuration(options.get("configuration")),
            force=force,
            external_data_threshold=_threshold(
                options.get("external_data_threshold", _DEFAULT_THRESHOLD)
            ),
        )
        files = []
        for stage in manifest.stages:
            files.append(destination / stage.file)
            files.extend(destination / data for data in stage.external_data)
        files.append(destination / "manifest.json")
        return ExportResult(
            format=self.name,
            destination=destination,
            files=tuple(files),
            manifest=manifest,
            details={"num_stages": manifest.num_stages},
        )
