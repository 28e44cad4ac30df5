"""Node data for Model Explorer from a pipeline (and tensor-parallel) plan.

Model Explorer's ONNX adapter (``model-explorer-onnx``) names the graph after the main graph
(``<main>`` when it has no name) and each node after ``node.name`` once onnx-ir's
``NameFixPass`` has named the unnamed nodes and renamed duplicates; :func:`node_ids` applies
the same pass, so every key written is a node id of the adapter's graph.

One file per configuration, in the node-data format of ``model_explorer.node_data_builder``
(``ModelNodeData``: ``{graph id: {"name", "results": {node id: {"value", "bgColor",
"textColor"}}, ...}}``). The value of a node is a label, one category per stage: ``stage 1 |
device 1 | memory 48% | compute 50%``; a node whose output crosses a cut adds ``| cut ->
stage 2`` and is written in red; a node of a tensor-parallel stage whose weight is split adds
``| weight split axis 0 / 2``. The background is the stage's colour. Cost: one pass over the
nodes and their uses per configuration, plus the FLOP estimate of the planner.
"""

from __future__ import annotations

__all__ = ["NodeDataFile", "graph_id", "node_data", "node_ids", "write_node_data"]

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnx_ir_multidevice._errors import ViewError
from onnx_ir_multidevice._proto.atomic import write_bytes_atomic
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.omny import read as read_omny
from onnx_ir_multidevice.omny import read_planning_dims, read_tensor_parallel
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.planner.flops import nodes_flops

STAGE_COLOURS = (
    "#8dd3c7",
    "#ffffb3",
    "#bebada",
    "#fb8072",
    "#80b1d3",
    "#fdb462",
    "#b3de69",
    "#fccde5",
    "#d9d9d9",
    "#bc80bd",
    "#ccebc5",
    "#ffed6f",
)
"""The stage colours, in stage order (ColorBrewer Set3, light enough for black labels)."""

CUT_TEXT_COLOUR = "#c00000"
"""The label colour of a node whose output crosses a cut."""


@dataclasses.dataclass(frozen=True)
class NodeDataFile:
    """The node data of one configuration.

    Attributes:
        configuration: The IR v11 configuration's name (``omny/2-shards``...).
        num_stages: Its pipeline stage count.
        data: The JSON document (Model Explorer's ``ModelNodeData``).
        path: Where :func:`write_node_data` wrote it (``None`` before).
    """

    configuration: str
    num_stages: int
    data: dict[str, Any]
    path: Path | None = None

    @property
    def file_name(self) -> str:
        """``<configuration>.node_data.json``, the name made safe for a file system."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.configuration).strip("_") + ".node_data.json"


def graph_id(model: ir.Model) -> str:
    """The id Model Explorer's ONNX adapter gives the main graph."""
    return model.graph.name if model.graph.name is not None else "<main>"


def node_ids(model: ir.Model) -> dict[ir.Node, str]:
    """Name the unnamed (and rename the duplicate) nodes as the adapter does; their ids.

    Modifies ``model`` (node and value names) with onnx-ir's ``NameFixPass``, the first pass
    of ``model-explorer-onnx``.
    """
    common_passes.NameFixPass()(model)
    return {node: node.name or "" for node in model.graph}


def _configurations(model: ir.Model) -> list[ir.ModelConfiguration]:
    found: dict[int, ir.ModelConfiguration] = {}
    for node in model.graph:
        for entry in node.device_configurations:
            if entry.pipeline_stage is not None and entry.configuration is not None:
                found.setdefault(id(entry.configuration), entry.configuration)
    return list(found.values())


def _omny_memory(model: ir.Model) -> dict[str, tuple[int, ...]]:
    """``memory_per_shard_mb`` by the IR v11 name ``annotate`` gives each configuration."""
    metadata = read_omny(model)
    if metadata is None:
        return {}
    seen: dict[int, int] = {}
    memory: dict[str, tuple[int, ...]] = {}
    for configuration in metadata.sharding.configurations:
        count = seen.get(configuration.num_shards, 0)
        seen[configuration.num_shards] = count + 1
        name = f"omny/{configuration.num_shards}-shards" + (f"#{count}" if count else "")
        memory[name] = tuple(configuration.memory_per_shard_mb)
    return memory


def _shares(values: Sequence[float]) -> list[float]:
    total = sum(values)
    return [100.0 * v / total if total else 0.0 for v in values]


def _weight_split(entry: ir.NodeDeviceConfiguration) -> str | None:
    for spec in entry.sharding_specs:
        value = spec.value
        if value is None or not value.is_initializer() or not spec.sharded_dims:
            continue
        dim = spec.sharded_dims[0]
        shards = "x".join(str(s.num_shards) for s in dim.simple_shardings)
        return f"weight split axis {dim.axis} / {shards}"
    return None


def node_data(
    model: ir.Model,
    *,
    configuration: int | str | None = None,
    dims: dict[str, int] | None = None,
) -> list[NodeDataFile]:
    """The node data of each configuration of ``model`` (or of the one asked for).

    Args:
        model: A planned (``.omny`` metadata) or annotated (IR v11 pipeline stages) model. It
            is modified: annotated when it holds a plan, and its nodes named as the adapter
            names them (:func:`node_ids`); pass a copy to keep the original.
        configuration: An index into the configurations (the IR v11 configurations giving
            pipeline stages, in order of first use: for a planned model, the ``.omny``
            configurations in order) or a configuration name. ``None``: all.
        dims: Planning dims for the compute estimate (default: the ones recorded in the model,
            else the planner's defaults).

    Returns:
        One :class:`NodeDataFile` per configuration.

    Raises:
        ViewError: The model has no plan and no pipeline annotation, or no such configuration.
    """
    require_model(model, "node_data")
    if read_omny(model) is not None:
        annotate(model, check=False)
    configurations = _configurations(model)
    if not configurations:
        raise ViewError(
            "The model has no plan: no .omny metadata and no IR v11 pipeline stage; plan it "
            "first (`omny plan`) or annotate it (`omny annotate`)."
        )
    if configuration is not None:
        names = [c.name for c in configurations]
        if isinstance(configuration, str) and not configuration.isdigit():
            if configuration not in names:
                raise ViewError(f"No configuration named {configuration!r} (available: {names}).")
            configurations = [configurations[names.index(configuration)]]
        else:
            position = int(configuration)
            if not 0 <= position < len(configurations):
                raise ViewError(
                    f"Configuration {position} does not exist: the model has "
                    f"{len(configurations)} ("
                    + ", ".join(f"{i}: {n}" for i, n in enumerate(names))
                    + ")."
                )
            configurations = [configurations[position]]
    ids = node_ids(model)
    nodes = list(model.graph)
    memory = _omny_memory(model)
    record = read_tensor_parallel(model)
    sizes = ValueSizes(model.graph, dims if dims is not None else read_planning_dims(model))
    flops = [f or 0 for f in nodes_flops(nodes, sizes, estimate=True)]
    return [_one(model, nodes, ids, flops, c, memory.get(c.name), record) for c in configurations]


def _stage_entries(
    nodes: list[ir.Node], configuration: ir.ModelConfiguration
) -> dict[ir.Node, Any]:
    """Each node's device entry for ``configuration`` that names a pipeline stage."""
    entries: dict[ir.Node, Any] = {}
    for node in nodes:
        for entry in node.device_configurations:
            if entry.configuration is configuration and entry.pipeline_stage is not None:
                entries[node] = entry
                break
    return entries


def _stage_totals(
    nodes: list[ir.Node], flops: list[int], entries: dict[ir.Node, Any], num_stages: int
) -> tuple[list[int], list[int]]:
    """Per stage: the FLOPs of its nodes and the bytes of the initializers they read (each once)."""
    stage_flops = [0] * num_stages
    weights = [0] * num_stages
    counted: set[tuple[int, ir.Value]] = set()
    for node, node_flops in zip(nodes, flops, strict=True):
        found = entries.get(node)
        if found is None:
            continue
        stage = found.pipeline_stage or 0
        stage_flops[stage] += node_flops
        for value in node.inputs:
            if value is None or not value.is_initializer() or (stage, value) in counted:
                continue
            counted.add((stage, value))
            tensor = value.const_value
            weights[stage] += tensor.nbytes if tensor is not None else 0
    return stage_flops, weights


def _device_label(names: Sequence[str], indices: tuple[int, ...]) -> str:
    """``device NAME`` for one device, ``devices A,B`` for several; an unnamed index as itself."""

    def name(i: int) -> str:
        return names[i] if i < len(names) else str(i)

    if len(indices) > 1:
        return "devices " + ",".join(name(i) for i in indices)
    return "device " + name(indices[0])


def _stage_devices(
    configuration: ir.ModelConfiguration, record: Any, num_stages: int
) -> dict[int, str]:
    """Each stage's device label: the tensor-parallel record's devices, else the stage's index."""
    tp = record.configuration(configuration.name) if record is not None else None
    names = configuration.device_names
    devices: dict[int, str] = {}
    for stage in range(num_stages):
        indices: tuple[int, ...] = (stage,)
        if tp is not None:
            indices = next((s.devices for s in tp.stages if s.stage == stage), (stage,))
        devices[stage] = _device_label(names, indices)
    return devices


def _latest_consumer_stage(node: ir.Node, entries: dict[ir.Node, Any], stage: int) -> int:
    """The latest stage after ``stage`` that reads one of ``node``'s outputs; -1 if none."""
    later = -1
    for value in node.outputs:
        for user, _ in value.uses():
            other = entries.get(user)
            if other is not None and (other.pipeline_stage or 0) > stage:
                later = max(later, other.pipeline_stage or 0)
    return later


def _node_result(
    node: ir.Node, entry: Any, prefixes: list[str], entries: dict[ir.Node, Any]
) -> dict[str, Any]:
    """One node's label and colours: its stage's prefix, its weight split, a cut it feeds."""
    stage = entry.pipeline_stage or 0
    label = prefixes[stage]
    split = _weight_split(entry)
    if split is not None:
        label += f" | {split}"
    result: dict[str, Any] = {"value": label, "bgColor": STAGE_COLOURS[stage % 12]}
    later = _latest_consumer_stage(node, entries, stage)
    if later >= 0:
        result["value"] = label + f" | cut -> stage {later}"
        result["textColor"] = CUT_TEXT_COLOUR
    return result


def _graph_data(configuration: ir.ModelConfiguration, results: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": f"omny plan: {configuration.name}",
        "results": results,
        "thresholds": [],
        "gradient": [],
        "hideInAggregatedStatsTable": False,
        "hideInChildrenStatsTable": False,
        "showExpandedSummaryOnGroupNode": True,
        "showLabelCountColumnsInChildrenStatsTable": True,
    }


def _one(
    model: ir.Model,
    nodes: list[ir.Node],
    ids: dict[ir.Node, str],
    flops: list[int],
    configuration: ir.ModelConfiguration,
    memory_mb: tuple[int, ...] | None,
    record: Any,
) -> NodeDataFile:
    entries = _stage_entries(nodes, configuration)
    num_stages = max((e.pipeline_stage or 0 for e in entries.values()), default=0) + 1
    stage_flops, weights = _stage_totals(nodes, flops, entries, num_stages)
    memory_share = _shares(
        memory_mb if memory_mb is not None and len(memory_mb) == num_stages else weights
    )
    compute_share = _shares(stage_flops)
    devices = _stage_devices(configuration, record, num_stages)
    prefixes = [
        f"stage {s} | {devices[s]} | memory {memory_share[s]:.0f}% | compute "
        f"{compute_share[s]:.0f}%"
        for s in range(num_stages)
    ]
    results = {
        ids[node]: _node_result(node, entry, prefixes, entries) for node, entry in entries.items()
    }
    graph_data = _graph_data(configuration, results)
    return NodeDataFile(configuration.name, num_stages, {graph_id(model): graph_data})


def write_node_data(
    files: Sequence[NodeDataFile], directory: str | os.PathLike
) -> list[NodeDataFile]:
    """Write each file into ``directory`` (created if absent); return them with their paths.

    Each file is written atomically (a temporary file renamed into place): a reader never sees
    half a file, and an existing file is replaced whole.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for item in files:
        path = folder / item.file_name
        write_bytes_atomic(path, json.dumps(item.data, separators=(",", ":")).encode("utf-8"))
        written.append(dataclasses.replace(item, path=path))
    return written
