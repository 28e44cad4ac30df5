"""The conversion log: a JSON array of ``{"Message", "Data"}`` entries, one per step.

Written as ``logs.json`` (what real OAAX toolchains write) and ``conversion-log.json`` (what
the specification's error-handling section names), byte-identical, each atomically. A
successful conversion's last entry is ``"Successful Conversion"`` with the artifact's name,
MIME type and MD5; a failed one's is ``"Conversion failed"`` with the error code, category,
step and exit status.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["LOG_FILE_NAMES", "ConversionLog"]

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx_ir_multidevice._proto.atomic import write_bytes_atomic

LOG_FILE_NAMES = ("logs.json", "conversion-log.json")
"""The log's file names in the output directory (same bytes)."""


class ConversionLog:
    """The entries of one conversion, in order."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def add(self, message: str, data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Append an entry (``Data`` left out when empty, as the reference toolchain does)."""
        entry: dict[str, Any] = {"Message": message}
        if data:
            entry["Data"] = dict(data)
        self.entries.append(entry)
        return entry

    def dumps(self) -> str:
        """The log as JSON text (UTF-8, two-space indent, a final newline)."""
        return json.dumps(self.entries, indent=2, ensure_ascii=False, default=str) + "\n"

    def write(self, outdir: Path) -> list[Path]:
        """Write every file of :data:`LOG_FILE_NAMES` into ``outdir``, each atomically.

        Returns:
            The files written.

        Raises:
            OmnyIOError: A file cannot be written.
        """
        data = self.dumps().encode("utf-8")
        written = []
        for name in LOG_FILE_NAMES:
            write_bytes_atomic(outdir / name, data)
            written.append(outdir / name)
        return written
