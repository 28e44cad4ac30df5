"""What an exporter is (:class:`Exporter`) and what it reports (:class:`ExportResult`)."""

from __future__ import annotations

__all__ = ["ExportResult", "Exporter"]

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import onnx_ir as ir

if TYPE_CHECKING:  # the split machinery is imported by the exporters that use it
    from onnx_ir_multidevice._split.manifest import SplitManifest


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What an exporter wrote, as :func:`~onnx_ir_multidevice.export` returns it.

    ``omny export --json`` prints :meth:`to_dict`.
    """

    format: str
    """Name of the format the model was exported to (the name it is registered under)."""

    destination: Path
    """The file or directory written, as an absolute path."""

    files: tuple[Path, ...] = ()
    """Every file written, as absolute paths: the destination itself when it is a file, the
    files inside it when it is a directory."""

    manifest: SplitManifest | Mapping[str, Any] | None = None
    """The split manifest (``manifest.json`` of ``omny split``) of the stages the export was
    made from, or ``None`` when the format holds the model whole. The exporters of this
    package give a :class:`~onnx_ir_multidevice.SplitManifest`; its JSON document as a mapping
    is accepted too (what exporters written before it give)."""

    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Facts particular to the format (versions, sizes, checksums...), JSON-ready."""

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form: ``{"format", "destination", "files", "manifest", "details"}``."""
        return {
            "format": self.format,
            "destination": str(self.destination),
            "files": [str(path) for path in self.files],
            "manifest": (
                None
                if self.manifest is None
                else dict(self.manifest)
                if isinstance(self.manifest, Mapping)
                else self.manifest.to_dict()
            ),
            "details": dict(self.details),
        }


@runtime_checkable
class Exporter(Protocol):
    """Writes a model in another format: the split directory, a container, a toolchain's input.

    Any object with these attributes and this method is an exporter (no base class to
    inherit); :func:`~onnx_ir_multidevice.register_exporter` makes it available to
    :func:`~onnx_ir_multidevice.export` and ``omny export --format``.

    An exporter that cuts the model into stages takes them from the split machinery
    (:func:`~onnx_ir_multidevice.split` and the manifest that ``save_split`` writes), so
    that it agrees with ``omny split`` by construction. It writes its file or directory
    atomically (into a temporary sibling, then renamed), so that ``destination`` never holds
    a half-written export, and it refuses to replace existing content unless ``force``.
    """

    name: str
    """The format's name on the command line (``omny export --format NAME``), e.g. ``split``."""

    description: str
    """One line saying what is written, for ``omny export --list-formats`` and ``--help``."""

    option_help: Mapping[str, str]
    """The options the exporter accepts, ``name -> one line of help``; :func:`export` refuses
    any other (``omny export --option NAME=VALUE``)."""

    def export(
        self,
        model: ir.Model,
        destination: Path,
        *,
        shards: int | None,
        options: Mapping[str, Any],
        force: bool,
    ) -> ExportResult:
        """Write ``model`` to ``destination`` in this format.

        Args:
            model: The model, with its ``.omny`` plan or IR v11 annotation; not modified.
            destination: The file or directory to write, an absolute path.
            shards: Number of pipeline stages for a format that splits the model (the plan's
                configuration with that many shards), or ``None`` when not given.
            options: Options by name, among :attr:`option_help`. Their values are strings
                when they come from the command line (``--option NAME=VALUE``): parse them.
            force: Replace an existing ``destination``.

        Returns:
            What was written.

        Raises:
            ExportError: The model cannot be exported so (a missing shard count, an option
                value it cannot parse, content the format cannot hold).
            SplitError: The model cannot be split into ``shards`` stages.
            OmnyIOError: ``destination`` exists (without ``force``) or cannot be written.
        """
        ...
