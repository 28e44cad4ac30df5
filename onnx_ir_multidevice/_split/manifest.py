"""``manifest.json`` of a split directory: how the stage files chain (built and parsed here).

:func:`build_manifest` writes the document (``omny split``, :func:`save_split`);
:func:`read_manifest` reads and validates it into a :class:`Manifest` (the pipeline runtime,
the exporters). The format lives in this module only; its keys are described in
``docs/splitting.md``.
"""

from __future__ import annotations

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "Manifest",
    "ManifestError",
    "ManifestStage",
    "build_manifest",
    "read_manifest",
]

import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError, SplitError
from onnx_ir_multidevice._regular_files import read_regular

MANIFEST_FORMAT = "onnx-ir-multidevice/split"
"""Value of the ``format`` key of ``manifest.json``."""

MANIFEST_VERSION = 1
"""Value of the ``version`` key of ``manifest.json``."""

MANIFEST_NAME = "manifest.json"
"""File name of the manifest, next to the stage models."""


# ---------------------------------------------------------------------------------------------
# Manifest and writing to a directory


def _stage_file(index: int) -> str:
    return f"stage_{index}.onnx"


def build_manifest(
    model: ir.Model, stages: Sequence[ir.Model], *, files: Sequence[str] | None = None
) -> dict[str, Any]:
    """Describe how ``stages`` (from :func:`split`) chain together, as ``manifest.json``.

    Args:
        model: The model that was split (for its graph inputs and outputs).
        stages: The stage models.
        files: File name of each stage, relative to the manifest; defaults to
            ``stage_<i>.onnx``.

    Returns:
        The manifest as a JSON-ready dict (schema in ``docs/splitting.md``).

    Raises:
        SplitError: A stage reads a name that is neither a graph input nor an output of an
            earlier stage.
    """
    # The inputs a caller feeds: an initializer that is also a graph input (an overridable
    # default, as IR v3 models declare every weight) is read by its stage, not fed.
    initializers = model.graph.initializers
    graph_inputs = [v.name for v in model.graph.inputs if v.name not in initializers]
    graph_outputs = [v.name for v in model.graph.outputs]
    produced_by: dict[str | None, int | str] = dict.fromkeys(
        (v.name for v in model.graph.inputs), "input"
    )
    consumers: dict[tuple[int, str], list[int | str]] = {}
    entries: list[dict[str, Any]] = []
    for i, stage in enumerate(stages):
        inputs = []
        for value in stage.graph.inputs:
            source = produced_by.get(value.name)
            if source is None:
                raise SplitError(
                    f"Stage {i} reads {value.name!r}, which is neither a graph input nor an "
                    "output of an earlier stage."
                )
            if isinstance(source, int):
                consumers[(source, value.name)].append(i)  # type: ignore[index]  # stage values are named
            inputs.append({"name": value.name, "from": source})
        outputs = []
        for value in stage.graph.outputs:
            name = value.name
            assert name is not None
            if name not in produced_by:
                produced_by[name] = i
            targets: list[int | str] = []
            consumers[(i, name)] = targets
            outputs.append({"name": name, "to": targets})
        entries.append(
            {
                "index": i,
                "file": files[i] if files is not None else _stage_file(i),
                "inputs": inputs,
                "outputs": outputs,
            }
        )
    output_names = set(graph_outputs)
    for entry in entries:
        for output in entry["outputs"]:
            if output["name"] in output_names and produced_by.get(output["name"]) == entry["index"]:
                output["to"].append("output")
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "num_stages": len(stages),
        "graph_inputs": graph_inputs,
        "graph_outputs": graph_outputs,
        "stages": entries,
    }


# ---------------------------------------------------------------------------------------------
# Reading


class ManifestError(OmnyFormatError):
    """A ``manifest.json`` is malformed; :attr:`path` says where in the document.

    Attributes:
        file: The manifest file.
        path: JSON path of the offending element, e.g. ``stages[1].file`` (``""``: the whole
            document).
        reason: What is wrong.
    """

    def __init__(self, file: str | os.PathLike, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.file = os.fspath(file)
        self.args = (f"{self.file}: {path}: {reason}" if path else f"{self.file}: {reason}",)


@dataclasses.dataclass(frozen=True)
class ManifestStage:
    """One entry of ``stages`` in ``manifest.json``."""

    index: int
    """0-based stage index (the entries are listed in this order)."""

    file: str
    """File name of the stage model, relative to the manifest."""

    path: pathlib.Path
    """The stage model file: the manifest's folder joined with :attr:`file` (it exists)."""

    inputs: tuple[str, ...]
    """Names the stage reads (``()`` when the entry does not list them)."""

    outputs: tuple[str, ...]
    """Names the stage produces (``()`` when the entry does not list them)."""

    external_data: tuple[str, ...]
    """Weight files the stage reads, relative to the manifest."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A parsed and validated ``manifest.json`` (see :func:`read_manifest`)."""

    folder: pathlib.Path
    """The split directory."""

    stages: tuple[ManifestStage, ...]
    """The stages in pipeline order (at least one)."""

    graph_inputs: tuple[str, ...] | None
    """Names of the original model's inputs (``None`` when the manifest does not say)."""

    graph_outputs: tuple[str, ...] | None
    """Names of the original model's outputs (``None`` when the manifest does not say)."""

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)


def _load_document(folder: pathlib.Path, file: pathlib.Path) -> Any:
    if not os.path.lexists(file):
        raise OmnyIOError(
            f"{folder}: is a directory without {MANIFEST_NAME}; pass a directory written by "
            "`omny split`, or a model file"
        )
    try:
        text = read_regular(file, "manifest").decode("utf-8")
    except OSError as exc:
        raise OmnyIOError(
            f"cannot read {file}: {exc}; expected a directory written by `omny split`"
        ) from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ManifestError(file, "", f"not valid JSON: {exc}") from exc


def _names(file: pathlib.Path, container: dict[str, Any], key: str, where: str) -> list[str] | None:
    """The tensor names listed under ``key`` (strings or ``{"name": ...}`` objects)."""
    value = container.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ManifestError(file, f"{where}{key}", "expected a list")
    result = []
    for i, item in enumerate(value):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str):
            raise ManifestError(file, f"{where}{key}[{i}]", "expected a tensor name")
        result.append(name)
    return result


def inside_folder(file: pathlib.Path, where: str, name: str) -> pathlib.Path:
    """The path of ``name``, a file the manifest ``file`` names, refused outside its folder.

    The one check of every file name a manifest gives (stage models, their data files): a
    relative path that stays inside the split folder once normalised and once symbolic links
    are followed.

    Raises:
        ManifestError: ``name`` is empty, absolute, holds a NUL byte, or leads out of the
            folder (``..``, a link); ``where`` names the entry.
    """
    folder = file.parent
    if not name or "\0" in name:
        raise ManifestError(
            file, where, f"expected a file name inside the split folder, got {name!r}"
        )
    if os.path.isabs(name) or name.startswith(("/", "\\")) or pathlib.PureWindowsPath(name).drive:
        raise ManifestError(
            file,
            where,
            f"{name!r} is an absolute path, outside the split folder; a manifest names its "
            "files relative to its own folder (rewrite it, or split the model again)",
        )
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(folder / name)
    if real != real_folder and not real.startswith(real_folder.rstrip(os.sep) + os.sep):
        raise ManifestError(
            file,
            where,
            f"{name!r} leads to {real}, outside the split folder ({real_folder}); a manifest "
            "names files inside its own folder (rewrite it, or split the model again)",
        )
    return folder / name


def _stage(file: pathlib.Path, i: int, entry: Any) -> ManifestStage:
    where = f"stages[{i}]"
    if not isinstance(entry, dict):
        raise ManifestError(file, where, "expected an object")
    if entry.get("index", i) != i:
        raise ManifestError(file, f"{where}.index", f"expected {i} (stages are listed in order)")
    name = entry.get("file")
    if not isinstance(name, str) or not name:
        raise ManifestError(file, f"{where}.file", "expected the stage model's file name")
    path = inside_folder(file, f"{where}.file", name)
    if not path.is_file():
        raise OmnyIOError(f"{file}: {where}.file: {path} does not exist")
    external = entry.get("external_data", [])
    if not isinstance(external, list) or not all(isinstance(x, str) for x in external):
        raise ManifestError(file, f"{where}.external_data", "expected a list of file names")
    for k, data in enumerate(external):
        inside_folder(file, f"{where}.external_data[{k}]", data)
    return ManifestStage(
        index=i,
        file=name,
        path=path,
        inputs=tuple(_names(file, entry, "inputs", f"{where}.") or ()),
        outputs=tuple(_names(file, entry, "outputs", f"{where}.") or ()),
        external_data=tuple(external),
    )


def read_manifest(folder: str | os.PathLike) -> Manifest:
    """Read and validate the ``manifest.json`` of a directory written by ``omny split``.

    Args:
        folder: The split directory.

    Returns:
        The manifest, with the path of every stage file.

    Raises:
        OmnyIOError: The directory has no manifest, it cannot be read, or a stage file it
            names does not exist.
        ManifestError: The manifest is not valid JSON, is of another format or version, an
            entry is malformed, or a file it names is outside the split folder (an absolute
            path, ``..``, a symbolic link leading out) (an
            :class:`~onnx_ir_multidevice.OmnyFormatError` whose ``path`` names the entry,
            e.g. ``stages[1].file``).
    """
    folder = pathlib.Path(folder)
    file = folder / MANIFEST_NAME
    document = _load_document(folder, file)
    if not isinstance(document, dict):
        raise ManifestError(file, "", "expected a JSON object")
    if document.get("format") != MANIFEST_FORMAT:
        raise ManifestError(
            file, "format", f"expected {MANIFEST_FORMAT!r}, got {document.get('format')!r}"
        )
    if document.get("version") != MANIFEST_VERSION:
        raise ManifestError(
            file,
            "version",
            f"this reader knows version {MANIFEST_VERSION}, got {document.get('version')!r}",
        )
    entries = document.get("stages")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(file, "stages", "expected a non-empty list")
    stages = tuple(_stage(file, i, entry) for i, entry in enumerate(entries))
    declared = document.get("num_stages", len(stages))
    if declared != len(stages):
        raise ManifestError(
            file, "num_stages", f"says {declared} but {len(stages)} stages are listed"
        )
    graph_inputs = _names(file, document, "graph_inputs", "")
    graph_outputs = _names(file, document, "graph_outputs", "")
    return Manifest(
        folder=folder,
        stages=stages,
        graph_inputs=None if graph_inputs is None else tuple(graph_inputs),
        graph_outputs=None if graph_outputs is None else tuple(graph_outputs),
    )
