"""What ``omny inspect`` prints: a model file described as a JSON-ready document, and as text.

The document's schema is documented in ``docs/cli.md``.
"""

from __future__ import annotations

__all__ = ["SCHEMA", "SCHEMA_VERSION", "collect", "format_text", "table"]

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice._util import format_bytes
from onnx_ir_multidevice.binding import bind
from onnx_ir_multidevice.graph.dtypes import dtype_name, stored_nbytes, tensor_nbytes
from onnx_ir_multidevice.omny import OMNY_VERSION_KEY
from onnx_ir_multidevice.omny.container import CONTAINER_META_KEY, Container

SCHEMA = "onnx-ir-multidevice/inspect"
"""Value of the ``"schema"`` key of ``omny inspect --json``."""
SCHEMA_VERSION = 1
"""Version of that document; bumped when a key changes meaning or disappears."""


# ---------------------------------------------------------------------------------------------
# Collecting


def shape_list(shape: ir.Shape | None) -> list[int | str | None] | None:
    """Dims as JSON: ints, names of symbolic dims, ``None`` for unknown dims."""
    if shape is None:
        return None
    return [d if isinstance(d, int) else d.value for d in shape]


def _tensor(value: ir.Value) -> dict[str, Any]:
    """``{"name", "dtype", "shape"}`` of a graph value; ``dtype`` ``None`` when not known."""
    dtype = None if value.dtype is None else dtype_name(value.dtype)
    return {"name": value.name, "dtype": dtype, "shape": shape_list(value.shape)}


def _initializer_size(value: ir.Value) -> tuple[int, int]:
    """(elements, bytes) of an initializer, without loading external data."""
    tensor = value.const_value
    if tensor is not None:
        return tensor.size, stored_nbytes(tensor) or 0  # UNDEFINED elements: no size
    if value.shape is not None and value.shape.is_static():
        shape = value.shape.numpy()
        nbytes = tensor_nbytes(shape, value.dtype)
        if nbytes is not None:
            return int(np.prod(shape, dtype=np.int64)), nbytes
    return 0, 0


def _text(value: object) -> str | None:
    """A string field of the model as text.

    Invalid UTF-8, which protobuf keeps as ``bytes``, is shown with backslash escapes rather
    than failing the report.
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return None if value is None else str(value)


def _model_info(model: ir.Model) -> dict[str, Any]:
    graph = model.graph
    params = weight_bytes = 0
    for value in graph.initializers.values():
        size, nbytes = _initializer_size(value)
        params += size
        weight_bytes += nbytes
    total_nodes = sum(1 for _ in ir.traversal.RecursiveGraphIterator(graph))
    return {
        "ir_version": model.ir_version,
        "opset_imports": dict(sorted(model.opset_imports.items())),
        "producer_name": _text(model.producer_name),
        "producer_version": _text(model.producer_version),
        "graph_name": _text(graph.name),
        "num_nodes": len(graph),
        "num_nodes_with_subgraphs": total_nodes,
        "num_initializers": len(graph.initializers),
        "num_parameters": params,
        "weights_bytes": weight_bytes,
    }


def _metadata_info(model: ir.Model, metadata: Any) -> dict[str, Any]:
    plan = bind(model, metadata)
    resolved_cuts = {c.id: bool(c.resolved) for c in plan.cut_points}
    resolved_configs = [
        all(c is not None and c.resolved for c in config.cut_points)
        for config in plan.configurations
    ]
    unresolved = [str(u) for u in plan.unresolved]

    m = metadata.model
    s = metadata.sharding
    cut_points = []
    for cut in metadata.cut_points:
        cut_points.append(
            {
                "id": cut.id,
                "after_node": cut.after_node,
                "tensor_name": cut.tensor_name,
                "shape": list(cut.shape),
                "dtype": cut.dtype,
                "cumulative_memory_mb": cut.cumulative_memory_mb,
                "shard_memory_mb": cut.shard_memory_mb,
                "resolved": None if resolved_cuts is None else resolved_cuts.get(cut.id, False),
            }
        )
    configurations = []
    for index, config in enumerate(s.configurations):
        configurations.append(
            {
                "index": index,
                "num_shards": config.num_shards,
                "memory_per_shard_mb": list(config.memory_per_shard_mb),
                "cut_point_ids": list(config.cut_point_ids),
                "resolved": None if resolved_configs is None else resolved_configs[index],
            }
        )
    e = metadata.export_info
    return {
        "omnynet_version": model.metadata_props.get(OMNY_VERSION_KEY),
        "version": metadata.version,
        "model": {
            "name": m.name,
            "architecture": m.architecture,
            "total_params": m.total_params,
            "total_size_mb": m.total_size_mb,
            "inference_memory_mb": m.inference_memory_mb,
        },
        "inputs": [_spec_tensor(t) for t in metadata.inputs],
        "outputs": [_spec_tensor(t) for t in metadata.outputs],
        "cut_points": cut_points,
        "sharding": {
            "min_vram_mb": s.min_vram_mb,
            "max_shard_size_mb": s.max_shard_size_mb,
            "min_shards": s.min_shards,
            "max_shards": s.max_shards,
            "allowed_shards": list(s.allowed_shards),
        },
        "configurations": configurations,
        "export_info": {
            "exported_at": e.exported_at,
            "exporter_version": e.exporter_version,
            "source_framework": e.source_framework,
            "source_version": e.source_version,
            "onnx_opset": e.onnx_opset,
            "validated": e.validated,
        },
        "unresolved": unresolved,
    }


def _container_info(model: ir.Model) -> dict[str, Any] | None:
    """The v2 container the model was read from (``None`` for a v1 file)."""
    container = model.meta.get(CONTAINER_META_KEY)
    if not isinstance(container, Container):
        return None
    return {
        "version": container.version,
        "flags": container.flags,
        "model_offset": container.model_offset,
        "model_size": container.model_size,
        "reserved_offset": container.reserved_offset,
        "reserved_size": container.reserved_size,
        "manifest_offset": container.manifest_offset,
        "manifest_size": container.manifest_size,
        "unreferenced_bytes": sum(len(data) for _, data in container.unreferenced),
        "manifest": container.manifest,
    }


def _spec_tensor(info: Any) -> dict[str, Any]:
    return {"name": info.name, "shape": list(info.shape), "dtype": info.dtype}


def collect(path: str | Path, *, verify_data: bool = False) -> dict[str, Any]:
    """Read a model file and describe it as a JSON-ready dict (the ``--json`` document).

    Args:
        path: An ``.omny`` or ``.onnx`` file.
        verify_data: Compare every data file's CRC-32 with the model's record (``load``'s
            ``verify_data``).

    Returns:
        The document described in ``docs/cli.md``.

    Raises:
        OmnyIOError: The file cannot be read as ONNX.
        OmnyFormatError: Its ``.omny`` metadata is malformed.
    """
    model = load(path, verify_data=verify_data)
    metadata = omny.read(model)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "file": str(path),
        "model": _model_info(model),
        "inputs": [_tensor(v) for v in model.graph.inputs],
        "outputs": [_tensor(v) for v in model.graph.outputs],
        "metadata": None if metadata is None else _metadata_info(model, metadata),
        "container": _container_info(model),
        "planning_dims": omny.read_planning_dims(model),
    }


# ---------------------------------------------------------------------------------------------
# Text


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> str:
    """Left-aligned plain-text table (columns sized to their widest cell)."""
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(value)


def format_text(doc: dict[str, Any]) -> str:
    """Render the :func:`collect` document for a terminal."""
    m = doc["model"]
    meta = doc["metadata"]
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in m["opset_imports"].items())
    kind = f".omny {meta['version']}" if meta else "plain ONNX (no .omny metadata)"
    if doc.get("container"):
        kind += f", in a v{doc['container']['version']} container"
    producer = " ".join(p for p in (m["producer_name"], m["producer_version"]) if p) or "?"
    lines = [
        f"{doc['file']}  ({kind})",
        f"graph     {m['graph_name'] or '?'}: {m['num_nodes']} nodes"
        + (
            f" ({m['num_nodes_with_subgraphs']} with subgraphs)"
            if m["num_nodes_with_subgraphs"] != m["num_nodes"]
            else ""
        )
        + f", {m['num_initializers']} initializers, {m['num_parameters']:,} parameters"
        f" ({format_bytes(m['weights_bytes'])})",
        f"format    IR version {m['ir_version']}, opsets {opsets}",
        f"producer  {producer}",
        *_dims_line(doc.get("planning_dims")),
        "",
        "inputs",
        table(
            ["name", "dtype", "shape"], [[t["name"], t["dtype"], t["shape"]] for t in doc["inputs"]]
        ),
        "outputs",
        table(
            ["name", "dtype", "shape"],
            [[t["name"], t["dtype"], t["shape"]] for t in doc["outputs"]],
        ),
    ]
    if doc.get("container"):
        lines += ["", *_format_container(doc["container"])]
    if meta:
        lines += ["", *_format_metadata(meta)]
    return "\n".join(lines)


def _format_container(c: dict[str, Any]) -> list[str]:
    reserved = (
        f"{c['reserved_size']} bytes at {c['reserved_offset']}" if c["reserved_size"] else "none"
    )
    manifest = c["manifest"]
    processor = manifest.get("processor")
    lines = [
        f"container .omny v{c['version']}: flags 0x{c['flags']:x}, model {c['model_size']} bytes "
        f"at {c['model_offset']}, reserved {reserved}, manifest {c['manifest_size']} bytes at "
        f"{c['manifest_offset']}"
        + (
            f", {c['unreferenced_bytes']} bytes outside any section"
            if c["unreferenced_bytes"]
            else ""
        ),
        f"manifest  version {manifest.get('version', '?')}, keys {', '.join(map(str, manifest))}",
    ]
    if isinstance(processor, dict):
        lines.append(
            "processor " + ", ".join(f"{k} {v}" for k, v in processor.items() if v is not None)
        )
    return lines


def _dims_line(dims: dict[str, int] | None) -> list[str]:
    """The planning dims the file records (``omny plan`` writes them), as one line."""
    if not dims:
        return []
    return [f"dims      planned at {', '.join(f'{k}={v}' for k, v in dims.items())}"]


def _format_metadata(meta: dict[str, Any]) -> list[str]:
    mm = meta["model"]
    s = meta["sharding"]
    lines = [
        (
            f"omny model  {mm['name']} (architecture: {mm['architecture']}), "
            f"{mm['total_params']:,} parameters, {mm['total_size_mb']} MiB on disk, "
            f"{mm['inference_memory_mb']} MiB to run"
        ),
        (
            f"sharding    {s['min_shards']}..{s['max_shards']} shards, "
            f"allowed {s['allowed_shards']}, max shard {s['max_shard_size_mb']} MiB, "
            f"min VRAM {s['min_vram_mb']} MiB"
        ),
        "",
        f"cut points ({len(meta['cut_points'])})",
    ]
    if meta["cut_points"]:
        rows = [
            [
                c["id"],
                c["after_node"],
                c["tensor_name"],
                c["shape"],
                c["dtype"],
                c["cumulative_memory_mb"],
                c["shard_memory_mb"],
                c["resolved"],
            ]
            for c in meta["cut_points"]
        ]
        headers = ["id", "after node", "tensor", "shape", "dtype", "cumul. MiB", "shard MiB"]
        lines.append(table([*headers, "resolves"], rows))
    lines += ["", f"configurations ({len(meta['configurations'])})"]
    if meta["configurations"]:
        rows = [
            [
                c["index"],
                c["num_shards"],
                c["memory_per_shard_mb"],
                c["cut_point_ids"],
                c["resolved"],
            ]
            for c in meta["configurations"]
        ]
        lines.append(table(["#", "shards", "MiB per shard", "cut points", "resolves"], rows))
    if meta["unresolved"]:
        lines += ["", f"unresolved references ({len(meta['unresolved'])})"]
        lines += [f"  {u}" for u in meta["unresolved"]]
    return lines
