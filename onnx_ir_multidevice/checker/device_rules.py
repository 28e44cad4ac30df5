"""``OMNY2xx``: the IR v11 multi-device fields of a model.

What onnx-ir's private ``_check_device_configurations`` checks (reachability, nameability,
axes, ``num_shards``, device ranges), plus duplicate or empty configuration names,
``device_names`` length, ``num_devices < 1``, two node entries for one configuration,
device-group keys that shadow device indices or are unused, shard count versus devices,
stages outside ``[0, 2**31)``, and multi-device fields on a model whose ``ir_version`` is
below 11 (they would be lost on save). Linear in the size of the model.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["MAX_STAGE", "MULTI_DEVICE_IR_VERSION", "check_device_configurations"]

import operator
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

import onnx_ir as ir

from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.checker.diagnostics import (
    Diagnostic,
    configuration_location,
    make,
    node_location,
)
from onnx_ir_multidevice.checker.sharding_rules import check_sharding
from onnx_ir_multidevice.graph.index import GraphIndex, holds_subgraphs, node_subgraphs

#: Largest pipeline stage protobuf can hold (``int32``).
MAX_STAGE = 2**31 - 1
#: The ONNX IR version that introduced the multi-device fields.
MULTI_DEVICE_IR_VERSION = 11
_ENTRIES = operator.attrgetter("device_configurations")


def _all_nodes(
    model: ir.Model, index: GraphIndex | None = None
) -> Iterable[tuple[ir.Node, int | None]]:
    """Yield every node of the model (graphs, subgraphs, functions) with its main-graph index.

    The index is ``None`` for nodes inside subgraphs and functions. Only the bodies of the
    nodes that hold subgraphs are walked.
    """
    if index is not None:
        main = index.graph_nodes
        bodies = dict(index.bodies)
    else:
        main = tuple(model.graph)
        bodies = {node: tuple(node_subgraphs(node)) for node in main if holds_subgraphs(node)}
    if not bodies:
        yield from zip(main, range(len(main)), strict=True)
    else:
        for i, node in enumerate(main):
            yield node, i
            for body in bodies.get(node, ()):
                for inner in body.all_nodes():
                    yield inner, None
    for function in model.functions.values():
        for inner in function.all_nodes():
            yield inner, None


def check_device_configurations(
    model: ir.Model, *, index: GraphIndex | None = None
) -> list[Diagnostic]:
    """Check the IR v11 device fields of a model (rules ``OMNY200`` to ``OMNY220``).

    Covers every rule of onnx-ir's private ``_check_device_configurations`` (reachability,
    nameability, axes, ``num_shards``, device ranges) and adds duplicate configuration names,
    ``device_names`` length, ``num_devices < 1``, two entries of one node for one
    configuration, device-group keys that shadow device indices or are unused, shard count
    versus devices, stages outside ``[0, 2**31)`` and ``ir_version < 11``.

    Args:
        model: The model (not modified).
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``
            (its node list and subgraph holders are used), when already built.

    Returns:
        The diagnostics, in model order.
    """
    if index is not None and index.graph is not model.graph:
        index = None
    return run_device_rules(model, index)[0]


def run_device_rules(
    model: ir.Model, index: GraphIndex | None
) -> tuple[list[Diagnostic], list[Sequence[ir.NodeDeviceConfiguration]]]:
    """:func:`check_device_configurations`, and the main-graph nodes' entries in graph order.

    The entries are shared with the pipeline rules (read once per check).

    ``index`` is one of ``model.graph`` or ``None``.
    """
    diagnostics: list[Diagnostic] = []
    registered: dict[str, ir.ModelConfiguration] = {}
    for configuration in model.device_configurations:
        _check_model_configuration(configuration, registered, diagnostics)
    registered_ids = {id(c) for c in registered.values()}

    main = index.graph_nodes if index is not None else tuple(model.graph)
    entries_list: list[Sequence[ir.NodeDeviceConfiguration]] = list(map(_ENTRIES, main))
    has_bodies = bool(index.bodies) if index is not None else any(map(holds_subgraphs, main))
    annotated_nodes = 0
    # Entry tuples known to be plain (no finding): annotate() shares them between nodes.
    plain: set[int] = set()
    if not has_bodies:
        # Main-graph nodes by distinct entry tuple (annotate() shares them), then functions.
        annotated_nodes = len(main) - entries_list.count(())
        if annotated_nodes and entries_list.count([]) + entries_list.count(None):  # type: ignore[arg-type]  # entries set by hand
            annotated_nodes = sum(map(bool, entries_list))
        if annotated_nodes:
            distinct = dict(zip(map(id, entries_list), entries_list, strict=True))
            odd = set()
            for key, entries in distinct.items():
                if not entries or _plain_entries(entries, registered_ids):
                    plain.add(key)
                else:
                    odd.add(key)
            if odd:
                for main_position in compress(
                    range(len(main)), map(odd.__contains__, map(id, entries_list))
                ):
                    node = main[main_position]
                    location = node_location(node, main_position)
                    _check_node_configurations(node, location, registered, diagnostics)
        others: Iterable[tuple[ir.Node, int | None]] = (
            (inner, None) for function in model.functions.values() for inner in function.all_nodes()
        )
    else:
        others = _all_nodes(model, index)
    for node, position in others:
        entries = node.device_configurations
        if not entries:
            continue
        annotated_nodes += 1
        if id(entries) in plain:
            continue
        if _plain_entries(entries, registered_ids):
            plain.add(id(entries))
            continue
        location = node_location(node, position)
        _check_node_configurations(node, location, registered, diagnostics)

    if annotated_nodes or has_bodies:
        diagnostics.extend(check_sharding(model))
    if model.ir_version < MULTI_DEVICE_IR_VERSION and (
        model.device_configurations or annotated_nodes
    ):
        diagnostics.insert(
            0,
            make(
                "OMNY200",
                f"ir_version is {model.ir_version} but the model has "
                f"{plural(len(model.device_configurations), 'device configuration')} and "
                f"{plural(annotated_nodes, 'annotated node')}; multi-device fields need "
                f"ir_version >= "
                f"{MULTI_DEVICE_IR_VERSION} and are dropped (or left dangling in subgraphs) on "
                f"save. Set model.ir_version = {MULTI_DEVICE_IR_VERSION}.",
                "model",
            ),
        )
    return diagnostics, entries_list


def _plain_entries(entries: Sequence[ir.NodeDeviceConfiguration], registered_ids: set[int]) -> bool:
    """Whether :func:`_check_node_configurations` would find nothing, by a quick test.

    True for entries bound to registered configurations (each at most once), with a stage
    in range or none, and no sharding specs.
    """
    for entry in entries:
        if entry.sharding_specs:
            return False
        if id(entry.configuration) not in registered_ids:
            return False
        stage = entry.pipeline_stage
        if stage is not None and not 0 <= stage <= MAX_STAGE:
            return False
    return len(entries) == 1 or len({id(e.configuration) for e in entries}) == len(entries)


def _check_model_configuration(
    configuration: ir.ModelConfiguration,
    registered: dict[str, ir.ModelConfiguration],
    diagnostics: list[Diagnostic],
) -> None:
    name = configuration.name
    location = configuration_location(name)
    if not name:
        diagnostics.append(
            make("OMNY202", "a model configuration has an empty name; name it", location)
        )
    elif name in registered:
        diagnostics.append(
            make(
                "OMNY212",
                f"two model configurations are named {name!r}; node references resolve by "
                "name after a save, so rename or remove one",
                location,
            )
        )
    else:
        registered[name] = configuration
    if configuration.num_devices < 1:
        diagnostics.append(
            make(
                "OMNY214",
                f"num_devices is {configuration.num_devices}; a configuration needs at least "
                "one device",
                location,
            )
        )
    if configuration.device_names and len(configuration.device_names) != (
        configuration.num_devices
    ):
        diagnostics.append(
            make(
                "OMNY213",
                f"{len(configuration.device_names)} device_names for num_devices="
                f"{configuration.num_devices}; give one name per device or none",
                location,
            )
        )


def _check_node_configurations(
    node: ir.Node,
    location: str,
    registered: Mapping[str, ir.ModelConfiguration],
    diagnostics: list[Diagnostic],
) -> None:
    node_io = set(node.inputs) | set(node.outputs)
    seen: dict[int, None] = {}
    for entry in node.device_configurations:
        configuration = entry.configuration
        num_devices: int | None = None
        if configuration is None:
            diagnostics.append(
                make(
                    "OMNY201",
                    "a node device configuration has no ModelConfiguration; bind it to one "
                    "of model.device_configurations",
                    location,
                )
            )
        else:
            name = configuration.name
            reference = registered.get(name) if name else None
            key = id(reference) if reference is not None else id(configuration)
            if key in seen:
                diagnostics.append(
                    make(
                        "OMNY215",
                        f"the node has two device configurations for {name!r}; merge them "
                        "into one NodeDeviceConfiguration",
                        location,
                    )
                )
            seen[key] = None
            num_devices = configuration.num_devices
            if not name:
                diagnostics.append(
                    make(
                        "OMNY202",
                        "the node references a configuration with an empty name (cannot be saved)",
                        location,
                    )
                )
            elif reference is None:
                diagnostics.append(
                    make(
                        "OMNY203",
                        f"the node references configuration {name!r}, which is not declared "
                        "in model.device_configurations; declare it or remove the reference",
                        location,
                    )
                )
            elif configuration is not reference:
                diagnostics.append(
                    make(
                        "OMNY204",
                        f"the node references a copy of configuration {name!r}, not the "
                        "object registered on the model; bind it to the registered object",
                        location,
                    )
                )
                num_devices = reference.num_devices
        stage = entry.pipeline_stage
        if stage is not None and not 0 <= stage <= MAX_STAGE:
            diagnostics.append(
                make(
                    "OMNY219",
                    f"pipeline_stage {stage} is outside [0, {MAX_STAGE}] (protobuf int32)",
                    location,
                )
            )
        sharded_values: set[ir.Value] = set()
        for spec in entry.sharding_specs:
            _check_sharding_spec(spec, location, node_io, num_devices, sharded_values, diagnostics)


def _check_sharding_spec(
    spec: ir.ShardingSpec,
    location: str,
    node_io: set[ir.Value | None],
    num_devices: int | None,
    sharded_values: set[ir.Value],
    diagnostics: list[Diagnostic],
) -> None:
    value = spec.value
    if value is None:
        diagnostics.append(
            make("OMNY205", "a ShardingSpec has no value; bind it to a node input/output", location)
        )
        return
    label = value.name or "<unnamed>"
    if value in sharded_values:
        diagnostics.append(
            make(
                "OMNY220",
                f"value {label!r} has two ShardingSpecs under one configuration; merge them",
                location,
            )
        )
    sharded_values.add(value)
    if not value.name:
        diagnostics.append(
            make(
                "OMNY206", "a sharded value has an empty name (cannot be saved); name it", location
            )
        )
    if value not in node_io:
        diagnostics.append(
            make(
                "OMNY207",
                f"value {label!r} is sharded by this node but is not one of its inputs or "
                "outputs; move the spec to a node that reads or writes it",
                location,
            )
        )
    _check_sharded_dims(spec, label, location, diagnostics)
    _check_devices(spec, label, location, num_devices, diagnostics)


def _check_sharded_dims(
    spec: ir.ShardingSpec, label: str, location: str, diagnostics: list[Diagnostic]
) -> None:
    shape = spec.value.shape if spec.value is not None else None
    rank = len(shape) if shape is not None else None
    seen_axes: set[int] = set()
    for sharded_dim in spec.sharded_dims:
        axis = sharded_dim.axis
        if rank is not None and not -rank <= axis < rank:
            diagnostics.append(
                make(
                    "OMNY208",
                    f"axis {axis} of value {label!r} is out of range for rank {rank}",
                    location,
                )
            )
        else:
            normalized = axis + rank if rank is not None and axis < 0 else axis
            if normalized in seen_axes:
                diagnostics.append(
                    make(
                        "OMNY209",
                        f"value {label!r} is sharded along axis {axis} more than once",
                        location,
                    )
                )
            seen_axes.add(normalized)
        for simple in sharded_dim.simple_shardings:
            if simple.num_shards < 1:
                diagnostics.append(
                    make(
                        "OMNY210",
                        f"num_shards={simple.num_shards} for axis {axis} of value {label!r}; "
                        "it must be >= 1",
                        location,
                    )
                )


def _check_devices(
    spec: ir.ShardingSpec,
    label: str,
    location: str,
    num_devices: int | None,
    diagnostics: list[Diagnostic],
) -> None:
    groups = {entry.key: entry.value for entry in spec.index_to_device_group_map}
    used = set(spec.device)
    for key in groups:
        if num_devices is not None and 0 <= key < num_devices:
            diagnostics.append(
                make(
                    "OMNY216",
                    f"device-group key {key} of value {label!r} is also a device index "
                    f"(num_devices={num_devices}); use a negative key",
                    location,
                )
            )
        if key not in used:
            diagnostics.append(
                make(
                    "OMNY217",
                    f"device-group key {key} of value {label!r} is not used in its devices "
                    f"{spec.device}; remove it or use it",
                    location,
                )
            )
    if num_devices is not None:
        for device in spec.device:
            members = groups.get(device, (device,))
            for member in members:
                if not 0 <= member < num_devices:
                    where = f" in group {device}" if device in groups else ""
                    diagnostics.append(
                        make(
                            "OMNY211",
                            f"device {member}{where} of value {label!r} is outside "
                            f"[0, {num_devices}) (num_devices={num_devices})",
                            location,
                        )
                    )
    if spec.device and spec.sharded_dims:
        shards = 1
        for sharded_dim in spec.sharded_dims:
            for simple in sharded_dim.simple_shardings:
                shards *= max(simple.num_shards, 1)
        if shards != len(spec.device):
            diagnostics.append(
                make(
                    "OMNY218",
                    f"value {label!r} is split into {plural(shards, 'shard')} but placed on "
                    f"{plural(len(spec.device), 'device entry', 'device entries')} "
                    f"{spec.device}; give one device (or "
                    "group key) per shard",
                    location,
                )
            )
