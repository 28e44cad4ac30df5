"""What ``omny view`` shows: model files for Model Explorer and their node data.

A planned or annotated model is written, annotated and with its nodes named as the adapter
names them, to a folder of the caller's, without its weights (Model Explorer's ONNX adapter
never reads external data: the large initializers become references to a file that is not
written, so the copy costs the graph only). A split folder is shown stage file by stage file,
each file's nodes in its stage (its manifest does not record the whole model).

The source is read for its graph (``_proto.files.load_structure``): its external data is
neither checked nor opened (the shapes read only small integer constants, which stay in the
model file), so a model whose data files are elsewhere (or gone) can still be shown.
"""

from __future__ import annotations

__all__ = ["Overlay", "prepare"]

import dataclasses
import os
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice._errors import ViewError
from onnx_ir_multidevice._proto.files import load_structure
from onnx_ir_multidevice._split import read_manifest
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.view.node_data import (
    STAGE_COLOURS,
    NodeDataFile,
    graph_id,
    make_folder,
    node_data,
    node_ids,
    write_node_data,
)

_INLINE_ELEMENTS = 1024
"""Initializers up to this many elements stay in the viewer's copy (the adapter shows them)."""


@dataclasses.dataclass(frozen=True)
class Overlay:
    """One model file for the viewer and the node-data files to apply to it.

    Attributes:
        model_path: The model file written for the viewer; ``None`` when :func:`prepare` wrote
            none (``write_model=False``, ``omny view --write``); the node ids are the ones
            the adapter gives the source model's graph.
        node_data: The node-data files written, each with its ``path``.
    """

    model_path: Path | None
    node_data: tuple[NodeDataFile, ...]


def _without_weights(model: ir.Model, path: Path) -> None:
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or tensor.size <= _INLINE_ELEMENTS:
            continue
        value.const_value = ir.ExternalTensor(
            "weights.not-written",
            offset=0,
            length=tensor.nbytes,
            dtype=tensor.dtype,
            shape=ir.Shape(list(tensor.shape)),  # type: ignore[arg-type]
            name=tensor.name or value.name or "",
            base_dir=str(path.parent),
        )
    model.ir_version = max(model.ir_version, 11)
    ir.save(model, path)


def _stage_model(path: Path, stage: int, num_stages: int, out: Path, write_model: bool) -> Overlay:
    model = load_structure(path)
    ids = node_ids(model)
    colour = STAGE_COLOURS[stage % len(STAGE_COLOURS)]
    results = {
        ids[node]: {"value": f"stage {stage} | device {stage}", "bgColor": colour}
        for node in model.graph
    }
    item = NodeDataFile(
        f"stage_{stage}",
        num_stages,
        {
            graph_id(model): {
                "name": f"omny plan: stage {stage} of {num_stages}",
                "results": results,
            }
        },
    )
    (written,) = write_node_data([item], out)
    if not write_model:
        return Overlay(None, (written,))
    model_path = out / f"stage_{stage}.onnx"
    _without_weights(model, model_path)
    return Overlay(model_path, (written,))


def prepare(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    configuration: int | str | None = None,
    write_model: bool = True,
) -> list[Overlay]:
    """Write the node data of ``source`` (and, with ``write_model``, the viewer's model) to ``out``.

    Args:
        source: A ``.omny`` plan, an annotated IR v11 ``.onnx`` model or a split folder.
        out: The folder to write (created if absent).
        configuration: For a model, which configuration (see :func:`node_data`); default: all.
        write_model: Also write the model file the viewer opens (``omny view`` without
            ``--write``); without it only the node-data files are written.

    Returns:
        One :class:`Overlay` per model file (one for a model, one per stage of a split
        folder); its ``model_path`` is ``None`` without ``write_model``.

    Raises:
        ViewError: Nothing to show (no plan), or no such configuration.
        OmnyIOError: ``out`` is a file, or cannot be created or written.
    """
    path = Path(source)
    folder = make_folder(out)
    if path.is_dir():
        manifest = read_manifest(path)
        overlays = []
        for stage in manifest.stages:
            stage_path = path / stage.file
            if not stage_path.is_file():
                raise ViewError(f"{stage_path}: the manifest's stage {stage.index} file is absent.")
            overlays.append(
                _stage_model(stage_path, stage.index, manifest.num_stages, folder, write_model)
            )
        return overlays
    model = load_structure(path)
    with gc_paused():  # as node_data: the JSON documents are many small objects
        files = write_node_data(node_data(model, configuration=configuration), folder)
    if not write_model:
        return [Overlay(None, tuple(files))]
    model_path = folder / (path.stem + ".onnx")
    _without_weights(model, model_path)
    return [Overlay(model_path, tuple(files))]
