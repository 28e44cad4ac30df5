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
nodes and their uses per configuration, plus the FLOP estimate of the planner (one shape
propagation at the planning dims, which reads small integer constants only); a stage's
memory is the ``.omny`` figure, else the initializers' sizes from their stated shapes.
"""

from __future__ import annotations

__all__ = ["NodeDataFile", "graph_id", "make_folder", "node_data", "node_ids", "write_node_data"]

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from onnx_ir_multidevice._dtype_sizes import tensor_nbytes
from onnx_ir_multidevice._errors import OmnyIOError, ViewError
from onnx_ir_multidevice._proto.atomic import write_bytes_atomic
from onnx_ir_multidevice._util import gc_paused, require_model
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.graph.dtypes import stored_nbytes
from onnx_ir_multidevice.graph.index import GraphIndex
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

    When a main-graph node has no name or shares one, modifies ``model`` (node and value
    names) with onnx-ir's ``NameFixPass``, the first pass of ``model-explorer-onnx``. When
    every main-graph node has a name of its own, the pass would keep them (it names nodes per
    graph: a subgraph's names never clash with the main graph's), so it is not run and the
    model is unchanged.
    """
    ids = {node: node.name or "" for node in model.graph}
    names = set(ids.values())
    if len(names) == len(ids) and "" not in names:
        return ids
    common_passes.NameFixPass()(model)
    return {node: node.name or "" for node in model.graph}


def _stage_entries(
    nodes: list[ir.Node],
) -> dict[ir.ModelConfiguration, dict[ir.Node, ir.NodeDeviceConfiguration]]:
    """Per configuration giving pipeline stages (in order of first use), each node's entry.

    One pass over the nodes; a node's first entry for a configuration that names a stage.
    """
    found: dict[int, tuple[ir.ModelConfiguration, dict[ir.Node, Any]]] = {}
    for node in nodes:
        for entry in node.device_configurations:
            configuration = entry.configuration
            if entry.pipeline_stage is None or configuration is None:
                continue
            pair = found.get(id(configuration))
            if pair is None:
                pair = found[id(configuration)] = (configuration, {})
            pair[1].setdefault(node, entry)
    return dict(found.values())


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
    # one document entry per node: without the pause, the collector's full scans of the
    # model grow with it and make the whole superlinear
    with gc_paused():
        return _node_data(model, configuration, dims)


def _node_data(
    model: ir.Model, configuration: int | str | None, dims: dict[str, int] | None
) -> list[NodeDataFile]:
    # one index of the graph for annotate and the FLOP estimate (as the planner shares one);
    # a model with local functions is indexed with them by annotate, without by the shapes
    index = GraphIndex.for_model(model) if not model.functions else None
    if read_omny(model) is not None:
        annotate(model, check=False, index=index)
    nodes = list(model.graph)
    all_entries = _stage_entries(nodes)
    configurations = list(all_entries)
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
    memory = _omny_memory(model)
    record = read_tensor_parallel(model)
    sizes = ValueSizes(
        model.graph, dims if dims is not None else read_planning_dims(model), index=index
    )
    flops = [f or 0 for f in nodes_flops(nodes, sizes, estimate=True)]
    ids = node_ids(model)  # after the analyses: it may rename values
    weight_bytes: dict[ir.Value, int] = {}
    return [
        _one(model, nodes, ids, flops, c, all_entries[c], memory.get(c.name), record, weight_bytes)
        for c in configurations
    ]


def _initializer_bytes(value: ir.Value) -> int:
    """The bytes of an initializer, from its stated shape and type (its tensor's otherwise).

    onnx-ir's ``tensor.nbytes`` of a tensor read from a proto builds the tensor's shape anew on
    every call; the value's shape is built once, at load.
    """
    shape = value.shape
    if shape is not None and shape.is_static():
        found = tensor_nbytes(shape.numpy(), value.dtype)
        if found is not None:
            return found
    tensor = value.const_value
    return (stored_nbytes(tensor) or 0) if tensor is not None else 0


def _stage_flops(
    nodes: list[ir.Node], flops: list[int], entries: dict[ir.Node, Any], num_stages: int
) -> list[int]:
    """Per stage: the FLOPs of its nodes."""
    stage_flops = [0] * num_stages
    for node, node_flops in zip(nodes, flops, strict=True):
        found = entries.get(node)
        if found is not None:
            stage_flops[found.pipeline_stage or 0] += node_flops
    return stage_flops


def _stage_weights(
    entries: dict[ir.Node, Any], num_stages: int, weight_bytes: dict[ir.Value, int]
) -> list[int]:
    """Per stage: the bytes of the initializers its nodes read, each once per stage.

    ``weight_bytes`` caches each initializer's size across configurations.
    """
    weights = [0] * num_stages
    counted: set[tuple[int, ir.Value]] = set()
    for node, entry in entries.items():
        stage = entry.pipeline_stage or 0
        for value in node.inputs:
            if value is None or not value.is_initializer() or (stage, value) in counted:
                continue
            counted.add((stage, value))
            size = weight_bytes.get(value)
            if size is None:
                size = weight_bytes[value] = _initializer_bytes(value)
            weights[stage] += size
    return weights


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


def _results(
    entries: dict[ir.Node, Any], ids: dict[ir.Node, str], prefixes: list[str]
) -> dict[str, Any]:
    """Each node's label and colours: its stage's prefix, its weight split, a cut it feeds.

    A node whose outputs a later stage reads is marked ``cut -> stage k`` (the latest such
    stage) in red. One pass over the nodes and the uses of their outputs.
    """
    stage_of = {node: entry.pipeline_stage or 0 for node, entry in entries.items()}
    colours = [STAGE_COLOURS[s % len(STAGE_COLOURS)] for s in range(len(prefixes))]
    results: dict[str, Any] = {}
    for node, entry in entries.items():
        stage = stage_of[node]
        label = prefixes[stage]
        if entry.sharding_specs:
            split = _weight_split(entry)
            if split is not None:
                label += f" | {split}"
        later = stage
        for value in node.outputs:
            for user in value.consumers():
                later = max(later, stage_of.get(user, -1))
        if later > stage:
            results[ids[node]] = {
                "value": f"{label} | cut -> stage {later}",
                "bgColor": colours[stage],
                "textColor": CUT_TEXT_COLOUR,
            }
        else:
            results[ids[node]] = {"value": label, "bgColor": colours[stage]}
    return results


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
    entries: dict[ir.Node, Any],
    memory_mb: tuple[int, ...] | None,
    record: Any,
    weight_bytes: dict[ir.Value, int],
) -> NodeDataFile:
    num_stages = max((e.pipeline_stage or 0 for e in entries.values()), default=0) + 1
    if memory_mb is None or len(memory_mb) != num_stages:
        # no .omny memory figure for this configuration: the weights each stage reads
        memory_mb = tuple(_stage_weights(entries, num_stages, weight_bytes))
    memory_share = _shares(memory_mb)
    compute_share = _shares(_stage_flops(nodes, flops, entries, num_stages))
    devices = _stage_devices(configuration, record, num_stages)
    prefixes = [
        f"stage {s} | {devices[s]} | memory {memory_share[s]:.0f}% | compute "
        f"{compute_share[s]:.0f}%"
        for s in range(num_stages)
    ]
    graph_data = _graph_data(configuration, _results(entries, ids, prefixes))
    return NodeDataFile(configuration.name, num_stages, {graph_id(model): graph_data})


def make_folder(directory: str | os.PathLike) -> Path:
    """Create the output folder ``directory`` (and its parents) if absent; return it.

    Raises:
        OmnyIOError: ``directory`` (or a parent) is a file, or the folder cannot be created.
    """
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise OmnyIOError(
            f"{folder}: exists and is not a directory; the node-data files go into a folder: "
            "pass a folder that does not exist yet or an existing one"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OmnyIOError(
            f"{folder}: cannot create the output folder ({error.strerror}); "
            "pass a folder you can write to"
        ) from error
    return folder


def write_node_data(
    files: Sequence[NodeDataFile], directory: str | os.PathLike
) -> list[NodeDataFile]:
    """Write each file into ``directory`` (created if absent); return them with their paths.

    Each file is written atomically (a temporary file renamed into place): a reader never sees
    half a file, and an existing file is replaced whole.

    Raises:
        OmnyIOError: ``directory`` is a file, or cannot be created or written.
    """
    folder = make_folder(directory)
    written = []
    for item in files:
        path = folder / item.file_name
        write_bytes_atomic(
            path, json.dumps(item.data, separators=(",", ":"), check_circular=False).encode("utf-8")
        )
        written.append(dataclasses.replace(item, path=path))
    return written
