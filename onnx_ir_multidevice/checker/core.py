"""The checker: every rule of the ``.omny`` spec, the IR v11 device fields, and the pipeline.

:func:`check` returns a list of :class:`~onnx_ir_multidevice.checker.diagnostics.Diagnostic`
(errors first) and never raises because of what a model contains. Rules, by family:

* ``OMNY1xx`` -- the ``.omny`` format: valid ONNX, ``omnynet_version`` and
  ``omnynet_metadata`` present and parseable, cut points that resolve to a main-graph node
  and to its single output, with a shape fully defined except the batch, not inside control
  flow; positive memory numbers; at least one configuration, each with ``num_shards - 1``
  defined cut points, ``num_shards`` memory entries within ``max_shard_size_mb``, and a shard
  count consistent with ``allowed_shards`` / ``min_shards`` / ``max_shards``.
* ``OMNY2xx`` -- the IR v11 fields: what onnx-ir's private
  ``_check_device_configurations`` checks, plus duplicate or empty names, ``device_names``
  length, ``num_devices < 1``, two node entries for one configuration, device-group keys,
  shard count versus devices, stages outside ``[0, 2**31)``, and multi-device fields on a
  model whose ``ir_version`` is below 11 (they would be lost on save).
* ``OMNY3xx`` -- the pipeline: no edge from a later stage to an earlier one (outer-scope reads
  of subgraph bodies included), stages contiguous from 0 and within the devices, annotated
  stages that agree with the ``.omny`` plan, and the tensors crossing each boundary (an error
  when a strict cut carries more than one activation).

Every rule runs in time linear in the size of the model (dictionary indexes, one walk per
configuration).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["CheckReport", "check", "check_device_configurations"]

import contextlib
import dataclasses
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.analysis.boundaries import boundary_crossings, edge_violations
from onnx_ir_multidevice.analysis.stages import (
    annotated_stage_list,
    assign_stages,
    precompute_stages,
)
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass
from onnx_ir_multidevice.checker.diagnostics import (
    Diagnostic,
    Severity,
    configuration_location,
    make,
    node_location,
    value_location,
)
from onnx_ir_multidevice.graph.dtypes import dtype_from_name, dtype_name
from onnx_ir_multidevice.graph.index import (
    AnalysisError,
    GraphIndex,
    holds_subgraphs,
    node_subgraphs,
)

#: Largest pipeline stage protobuf can hold (``int32``).
MAX_STAGE = 2**31 - 1
#: The ONNX IR version that introduced the multi-device fields.
MULTI_DEVICE_IR_VERSION = 11
#: At most this many diagnostics of one code for one configuration; then a summary line.
_MAX_PER_RULE = 20
#: At most this many names listed in one message.
_MAX_NAMES = 8
_ENTRIES = operator.attrgetter("device_configurations")

ModelLike = ir.Model | onnx.ModelProto | str | os.PathLike


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What :func:`run_check` found: the diagnostics, and the model when it could be read."""

    diagnostics: tuple[Diagnostic, ...]
    """Errors first, then warnings, then infos; in rule order within a severity."""

    model: ir.Model | None
    """The checked model, or ``None`` when the input could not be read as ONNX."""

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of severity error."""
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)


def check(
    model: ModelLike,
    *,
    relaxed_cuts: bool = False,
    onnx_checker: bool | None = None,
    index: GraphIndex | None = None,
) -> list[Diagnostic]:
    """Check a model: its ``.omny`` plan, its IR v11 device fields and its pipeline stages.

    Never raises because of what the model contains; every problem is a diagnostic.

    Args:
        model: An :class:`onnx_ir.Model` (not modified), an :class:`onnx.ModelProto` (not
            modified), or the path of a ``.onnx`` / ``.omny`` file.
        relaxed_cuts: Accept cut points that carry side activations besides the cut tensor
            (relaxed cuts): ``OMNY320`` becomes a warning instead of an error.
        onnx_checker: Run :func:`onnx.checker.check_model` (``OMNY101``). By default it
            runs for a path or a proto, and not for an :class:`onnx_ir.Model` (that would
            need a full serialisation).
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of the model's main
            graph (``GraphIndex.for_model(model)``), shared with other analyses of the same
            model (:func:`~onnx_ir_multidevice.passes.api.annotate` takes one too). Ignored
            when it was built for another graph (a path or proto gives a new model).

    Returns:
        The diagnostics, errors first, then warnings, then infos. No error means valid.

    Raises:
        OmnyIOError: ``model`` is a path that does not exist or cannot be read.
        TypeError: ``model`` is of another type.

    .. versionadded:: 0.1
    """
    report = run_check(model, relaxed_cuts=relaxed_cuts, onnx_checker=onnx_checker, index=index)
    return list(report.diagnostics)


def run_check(
    model: ModelLike,
    *,
    relaxed_cuts: bool = False,
    onnx_checker: bool | None = None,
    index: GraphIndex | None = None,
) -> CheckReport:
    """Like :func:`check`, but also return the model that was checked (see :class:`CheckReport`).

    Raises:
        OmnyIOError: ``model`` is a path that does not exist or cannot be read.
        TypeError: ``model`` is of another type.
    """
    diagnostics: list[Diagnostic] = []
    ir_model = _as_model(model, onnx_checker, diagnostics)
    if ir_model is not None:
        with gc_paused():
            if index is not None and index.graph is not ir_model.graph:
                index = None
            if index is None:
                try:
                    index = GraphIndex.for_model(ir_model)
                except AnalysisError:  # a cycle: reported by the checker (OMNY101)
                    index = None
            found, entries_list = _check_device_configurations(ir_model, index)
            diagnostics.extend(found)
            _Checker(ir_model, relaxed_cuts, diagnostics, index, entries_list).run()
    diagnostics.sort(key=Diagnostic.sort_key)
    return CheckReport(tuple(diagnostics), ir_model)


# ---------------------------------------------------------------------------------------------
# Input: model, proto or path.
# ---------------------------------------------------------------------------------------------


def _onnx_checker_diagnostic(error: Exception, location: str = "model") -> Diagnostic:
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return make(
        "OMNY101",
        f"onnx.checker rejects the model: {first_line}. Fix the graph (or re-export it) "
        "before sharding it.",
        location,
    )


def _as_model(
    model: ModelLike, onnx_checker: bool | None, diagnostics: list[Diagnostic]
) -> ir.Model | None:
    if isinstance(model, ir.Model):
        if onnx_checker:
            try:
                onnx.checker.check_model(ir.to_proto(model))
            except Exception as error:  # the checker raises several types
                diagnostics.append(_onnx_checker_diagnostic(error))
        return model
    if isinstance(model, onnx.ModelProto):
        if onnx_checker is not False:
            try:
                onnx.checker.check_model(model)
            except Exception as error:
                diagnostics.append(_onnx_checker_diagnostic(error))
        try:
            return ir.from_proto(model)
        except Exception as error:
            diagnostics.append(make("OMNY101", f"onnx-ir cannot read the model: {error}", "model"))
            return None
    if isinstance(model, (str, os.PathLike)):
        return _load_path(os.fspath(model), onnx_checker, diagnostics)
    raise TypeError(
        f"check() takes an onnx_ir.Model, an onnx.ModelProto or a path, not {type(model).__name__}"
    )


def _load_path(
    path: str, onnx_checker: bool | None, diagnostics: list[Diagnostic]
) -> ir.Model | None:
    from onnx_ir_multidevice._proto import files as _io

    if os.path.isdir(path):
        raise OmnyIOError(
            f"{path}: is a directory, not a model file; give the path of a .onnx or .omny "
            "model file"
        )
    if not os.path.isfile(path):
        raise OmnyIOError(f"{path}: no such file; give the path of a .onnx or .omny model")
    try:
        model = _io.load(path)
    except OmnyIOError as error:
        if not os.access(path, os.R_OK):
            raise
        diagnostics.append(
            make("OMNY101", f"the file cannot be read as an ONNX model: {error}", "model")
        )
        return None
    if onnx_checker is not False:
        try:
            onnx.checker.check_model(path)
        except Exception as error:
            diagnostics.append(_onnx_checker_diagnostic(error))
    return model


# ---------------------------------------------------------------------------------------------
# OMNY2xx: IR v11 device configurations.
# ---------------------------------------------------------------------------------------------


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
        yield from zip(main, range(len(main)))
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
    return _check_device_configurations(model, index)[0]


def _check_device_configurations(
    model: ir.Model, index: GraphIndex | None
) -> tuple[list[Diagnostic], list[Sequence[ir.NodeDeviceConfiguration]]]:
    """:func:`check_device_configurations`, and the main-graph nodes' entries in graph order.

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
        if annotated_nodes and entries_list.count([]) + entries_list.count(None):  # type: ignore[arg-type]
            annotated_nodes = sum(map(bool, entries_list))
        if annotated_nodes:
            distinct = dict(zip(map(id, entries_list), entries_list))
            odd = set()
            for key, entries in distinct.items():
                if not entries or _plain_entries(entries, registered_ids):
                    plain.add(key)
                else:
                    odd.add(key)
            if odd:
                for position in compress(
                    range(len(main)), map(odd.__contains__, map(id, entries_list))
                ):
                    node = main[position]
                    location = node_location(node, position)
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

    if model.ir_version < MULTI_DEVICE_IR_VERSION and (
        model.device_configurations or annotated_nodes
    ):
        diagnostics.insert(
            0,
            make(
                "OMNY200",
                f"ir_version is {model.ir_version} but the model has "
                f"{len(model.device_configurations)} device configuration(s) and "
                f"{annotated_nodes} annotated node(s); multi-device fields need ir_version >= "
                f"{MULTI_DEVICE_IR_VERSION} and are dropped (or left dangling in subgraphs) on "
                f"save. Set model.ir_version = {MULTI_DEVICE_IR_VERSION}.",
                "model",
            ),
        )
    return diagnostics, entries_list


def _plain_entries(
    entries: tuple[ir.NodeDeviceConfiguration, ...], registered_ids: set[int]
) -> bool:
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
                    f"value {label!r} is split into {shards} shard(s) but placed on "
                    f"{len(spec.device)} device entr(ies) {spec.device}; give one device (or "
                    "group key) per shard",
                    location,
                )
            )


# ---------------------------------------------------------------------------------------------
# OMNY1xx and OMNY3xx: the .omny plan, the graph and the pipeline.
# ---------------------------------------------------------------------------------------------


def _names(items: Iterable[str], limit: int = _MAX_NAMES) -> str:
    items = list(items)
    shown = ", ".join(repr(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _node_label(node: ir.Node) -> str:
    return node.name or f"<unnamed {node.op_type}>"


def _same_dtype(name: str, dtype: ir.DataType) -> bool:
    """Whether a document's dtype name (older spellings included) stands for ``dtype``."""
    try:
        return dtype_name(dtype_from_name(name)) == dtype_name(dtype)
    except ValueError:  # not a dtype name at all
        return False


class _FirstOf(Mapping):
    """A read-only view ``name -> first object`` of a ``name -> list of objects`` index."""

    def __init__(self, lists: Mapping[str, list]) -> None:
        self._lists = lists

    def __getitem__(self, key: str):
        return self._lists[key][0]

    def get(self, key, default=None):
        found = self._lists.get(key)
        return found[0] if found else default

    def __iter__(self):
        return iter(self._lists)

    def __len__(self) -> int:
        return len(self._lists)


@dataclasses.dataclass
class _PlanConfiguration:
    """One ``.omny`` configuration, resolved against the graph."""

    index: int
    num_shards: int
    name: str
    cuts: list[ir.Value] | None = None
    stages: dict[ir.Node, int] | None = None


class _Checker:
    """Runs the OMNY1xx and OMNY3xx rules on one model, sharing indexes between rules."""

    def __init__(
        self,
        model: ir.Model,
        relaxed_cuts: bool,
        diagnostics: list[Diagnostic],
        index: GraphIndex | None = None,
        entries_list: Sequence[Sequence[ir.NodeDeviceConfiguration]] | None = None,
    ):
        self.model = model
        self.graph = model.graph
        self.relaxed_cuts = relaxed_cuts
        # Each main-graph node's device_configurations in graph order, read once per check.
        self._entries_list = entries_list
        self.out = diagnostics
        self._index = index
        self._sub_names: tuple[set[str], set[str]] | None = None
        self._bodies: list[tuple[ir.Node, list[ir.Graph]]] | None = None

    # -- shared lazily built indexes --

    @property
    def index(self) -> GraphIndex:
        """The analysis index of the main graph (raises AnalysisError on a cycle)."""
        if self._index is None:
            self._index = GraphIndex.for_model(self.model)
        return self._index

    @property
    def bodies(self) -> list[tuple[ir.Node, list[ir.Graph]]]:
        """The main-graph nodes that hold subgraphs, with their bodies."""
        if self._bodies is None:
            if self._index is not None:
                self._bodies = [(node, list(found)) for node, found in self._index.bodies]
            else:
                self._bodies = []
                for node in self.graph:
                    if holds_subgraphs(node):
                        self._bodies.append((node, list(node_subgraphs(node))))
        return self._bodies

    def subgraph_names(self) -> tuple[set[str], set[str]]:
        """Node names and value names found inside subgraph bodies."""
        if self._sub_names is None:
            nodes: set[str] = set()
            values: set[str] = set()
            for _, bodies in self.bodies:
                for body in bodies:
                    values.update(v.name for v in body.inputs if v.name)
                    for inner in body.all_nodes():
                        nodes.add(inner.name)
                        values.update(v.name for v in inner.outputs if v.name)
            self._sub_names = (nodes, values)
        return self._sub_names

    def run(self) -> None:
        try:
            plan = self._check_metadata()
            self._check_pipeline(plan)
        except AnalysisError as error:  # a cycle: the graph is not valid ONNX
            self.out.append(make("OMNY101", f"the graph cannot be analysed: {error}", "model"))

    # -- OMNY1xx --

    def _check_metadata(self) -> list[_PlanConfiguration]:
        from onnx_ir_multidevice.omny._schema import (
            OMNY_FORMAT_VERSION,
            OMNY_METADATA_KEY,
            OMNY_VERSION_KEY,
            OmnyMetadata,
        )

        props = self.model.metadata_props
        version = props.get(OMNY_VERSION_KEY)
        text = props.get(OMNY_METADATA_KEY)
        if version is None and text is None:
            self.out.append(
                make(
                    "OMNY100",
                    "no omnynet_version / omnynet_metadata in metadata_props: a plain ONNX "
                    "model; only the IR v11 and pipeline checks ran",
                    "model",
                )
            )
            return []
        if version is None:
            self.out.append(
                make(
                    "OMNY102",
                    f"{OMNY_METADATA_KEY!r} is set but {OMNY_VERSION_KEY!r} is missing; add "
                    f"it with the format version ({OMNY_FORMAT_VERSION!r})",
                    f"metadata_props[{OMNY_VERSION_KEY}]",
                )
            )
        if text is None:
            self.out.append(
                make(
                    "OMNY103",
                    f"{OMNY_VERSION_KEY!r} is set but {OMNY_METADATA_KEY!r} is missing; the "
                    "model has no plan: run the planner or remove the version",
                    f"metadata_props[{OMNY_METADATA_KEY}]",
                )
            )
            return []
        try:
            metadata = OmnyMetadata.from_json(text)
        except OmnyFormatError as error:
            self.out.append(
                make(
                    "OMNY104",
                    f"omnynet_metadata is invalid: {error.reason}",
                    error.path or f"metadata_props[{OMNY_METADATA_KEY}]",
                )
            )
            return []
        if metadata.version != OMNY_FORMAT_VERSION or (
            version is not None and version != metadata.version
        ):
            self.out.append(
                make(
                    "OMNY105",
                    f"format version: omnynet_version={version!r}, JSON version="
                    f"{metadata.version!r}; this checker knows {OMNY_FORMAT_VERSION!r}. "
                    "Make them agree",
                    "version",
                )
            )
        cuts = self._check_cut_points(metadata)
        self._check_io(metadata)
        return self._check_sharding(metadata, cuts)

    def _check_io(self, metadata) -> None:
        for field, graph_values in (
            ("inputs", self.graph.inputs),
            ("outputs", self.graph.outputs),
        ):
            names = {v.name for v in graph_values}
            for k, info in enumerate(getattr(metadata, field)):
                if info.name not in names:
                    self.out.append(
                        make(
                            "OMNY138",
                            f"{field[:-1]} {info.name!r} is not a graph {field[:-1]} (graph "
                            f"{field}: {_names(sorted(n for n in names if n))}); update the "
                            "metadata",
                            f"{field}[{k}].name",
                        )
                    )

    def _check_cut_points(self, metadata) -> dict[str, ir.Value]:
        """Check every cut point; return id -> cut value for the usable ones."""
        nodes_by_name: Mapping[str, ir.Node]
        values_by_name: Mapping[str, ir.Value]
        if self._index is not None:
            cut_points = metadata.cut_points
            nodes_by_name = _FirstOf(self._index.nodes_named(c.after_node for c in cut_points))
            values_by_name = _FirstOf(self._index.values_named(c.tensor_name for c in cut_points))
        else:
            nodes_by_name = {}
            for node in self.graph:
                if node.name:
                    nodes_by_name.setdefault(node.name, node)  # type: ignore[attr-defined]
            values_by_name = {}
            for value in (*self.graph.inputs, *self.graph.initializers.values()):
                if value.name:
                    values_by_name.setdefault(value.name, value)  # type: ignore[attr-defined]
            for node in self.graph:
                for value in node.outputs:
                    if value.name:
                        values_by_name.setdefault(value.name, value)  # type: ignore[attr-defined]

        usable: dict[str, ir.Value] = {}
        seen_ids: set[str] = set()
        previous_cumulative: int | None = None
        for k, cut in enumerate(metadata.cut_points):
            path = f"cut_points[{k}]"
            if cut.id in seen_ids:
                self.out.append(
                    make(
                        "OMNY118",
                        f"cut point id {cut.id!r} is defined twice; give each cut a unique id",
                        f"{path}.id",
                    )
                )
                continue
            seen_ids.add(cut.id)
            value = self._resolve_cut(cut, path, nodes_by_name, values_by_name)
            self._check_cut_shape(cut, path, value)
            self._check_cut_memory(cut, path, previous_cumulative)
            previous_cumulative = cut.cumulative_memory_mb
            if value is not None:
                usable[cut.id] = value
        return usable

    def _resolve_cut(
        self,
        cut,
        path: str,
        nodes_by_name: Mapping[str, ir.Node],
        values_by_name: Mapping[str, ir.Value],
    ) -> ir.Value | None:
        node = nodes_by_name.get(cut.after_node)
        value = values_by_name.get(cut.tensor_name)
        ok = True
        if node is None:
            ok = False
            if cut.after_node in self.subgraph_names()[0]:
                self.out.append(
                    make(
                        "OMNY117",
                        f"cut point {cut.id!r} is after node {cut.after_node!r}, which is "
                        "inside a control-flow body; cut after the If/Loop/Scan node instead",
                        f"{path}.after_node",
                    )
                )
            else:
                self.out.append(
                    make(
                        "OMNY110",
                        f"cut point {cut.id!r}: node {cut.after_node!r} is not in the main "
                        "graph (renamed or removed?); point after_node at an existing node",
                        f"{path}.after_node",
                    )
                )
        if value is None:
            ok = False
            inside = cut.tensor_name in self.subgraph_names()[1]
            if not inside or node is not None:
                self.out.append(
                    make(
                        "OMNY117" if inside else "OMNY111",
                        f"cut point {cut.id!r}: tensor {cut.tensor_name!r} "
                        + (
                            "is inside a control-flow body; cut an output of the If/Loop/Scan"
                            if inside
                            else "is not a value of the main graph; point tensor_name at an "
                            "output of after_node"
                        ),
                        f"{path}.tensor_name",
                    )
                )
        elif node is not None and value.producer() is not node:
            ok = False
            outputs = [v.name for v in node.outputs]
            self.out.append(
                make(
                    "OMNY112",
                    f"cut point {cut.id!r}: tensor {cut.tensor_name!r} is not an output of "
                    f"node {cut.after_node!r} (its outputs: {_names(outputs)})",
                    f"{path}.tensor_name",
                )
            )
        if node is not None and len(node.outputs) > 1:
            ok = False
            self.out.append(
                make(
                    "OMNY113",
                    f"cut point {cut.id!r}: node {cut.after_node!r} has {len(node.outputs)} "
                    "outputs; a cut needs a node with exactly one output tensor",
                    f"{path}.after_node",
                )
            )
        return value if ok else None

    def _check_cut_shape(self, cut, path: str, value: ir.Value | None) -> None:
        for i, dim in enumerate(cut.shape):
            if i > 0 and dim < 0:
                self.out.append(
                    make(
                        "OMNY114",
                        f"cut point {cut.id!r}: dimension {i} is dynamic ({dim}); only the "
                        "batch (dimension 0) may be dynamic at a cut",
                        f"{path}.shape[{i}]",
                    )
                )
        if value is None:
            return
        shape = value.shape
        if shape is None or value.dtype is None:
            missing = "shape" if shape is None else "dtype"
            self.out.append(
                make(
                    "OMNY115",
                    f"cut point {cut.id!r}: the graph does not record the {missing} of "
                    f"{value.name!r}; run shape inference so it can be verified",
                    value_location(value),
                )
            )
        if shape is not None:
            dynamic = [i for i, d in enumerate(shape) if i > 0 and not isinstance(d, int)]
            if dynamic:
                self.out.append(
                    make(
                        "OMNY114",
                        f"cut point {cut.id!r}: tensor {value.name!r} has dynamic dimension(s) "
                        f"{dynamic} in the graph ({shape}); only the batch may be dynamic",
                        value_location(value),
                    )
                )
            graph_dims = [d if isinstance(d, int) else -1 for d in shape]
            mismatch = len(graph_dims) != len(cut.shape) or any(
                g >= 0 and c >= 0 and g != c for g, c in zip(graph_dims, cut.shape)
            )
            if mismatch:
                self.out.append(
                    make(
                        "OMNY116",
                        f"cut point {cut.id!r}: shape {list(cut.shape)} in the metadata but "
                        f"{graph_dims} in the graph; update the metadata",
                        f"{path}.shape",
                    )
                )
        if value.dtype is not None and not _same_dtype(cut.dtype, value.dtype):
            self.out.append(
                make(
                    "OMNY116",
                    f"cut point {cut.id!r}: dtype {cut.dtype!r} in the metadata but "
                    f"{dtype_name(value.dtype)!r} in the graph; update the metadata",
                    f"{path}.dtype",
                )
            )

    def _check_cut_memory(self, cut, path: str, previous_cumulative: int | None) -> None:
        for field in ("cumulative_memory_mb", "shard_memory_mb"):
            amount = getattr(cut, field)
            if amount <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"cut point {cut.id!r}: {field} is {amount}; memory estimates must be "
                        "positive (MiB, rounded up)",
                        f"{path}.{field}",
                    )
                )
        if cut.shard_memory_mb > cut.cumulative_memory_mb > 0:
            self.out.append(
                make(
                    "OMNY121",
                    f"cut point {cut.id!r}: shard_memory_mb ({cut.shard_memory_mb}) exceeds "
                    f"cumulative_memory_mb ({cut.cumulative_memory_mb})",
                    f"{path}.shard_memory_mb",
                )
            )
        if previous_cumulative is not None and cut.cumulative_memory_mb < previous_cumulative:
            self.out.append(
                make(
                    "OMNY121",
                    f"cut point {cut.id!r}: cumulative_memory_mb ({cut.cumulative_memory_mb}) "
                    f"is below the previous cut's ({previous_cumulative}); list cut points in "
                    "pipeline order with a running total",
                    f"{path}.cumulative_memory_mb",
                )
            )

    def _check_sharding(self, metadata, usable: Mapping[str, ir.Value]) -> list[_PlanConfiguration]:
        from onnx_ir_multidevice.passes.annotation import configuration_names

        sharding = metadata.sharding
        self._check_limits(sharding)
        if not sharding.configurations:
            self.out.append(
                make(
                    "OMNY130",
                    "no shard configuration is defined; add at least one to "
                    "sharding.configurations (the planner writes them)",
                    "sharding.configurations",
                )
            )
        defined = {cut.id for cut in metadata.cut_points}
        names = configuration_names(sharding.configurations)
        plan: list[_PlanConfiguration] = []
        for i, configuration in enumerate(sharding.configurations):
            entry = _PlanConfiguration(i, configuration.num_shards, names[i])
            cuts = self._check_configuration(i, configuration, sharding, defined, usable)
            entry.cuts = cuts
            plan.append(entry)
        return plan

    def _check_limits(self, sharding) -> None:
        for field in ("min_vram_mb", "max_shard_size_mb"):
            if getattr(sharding, field) <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"{field} is {getattr(sharding, field)}; it must be positive",
                        f"sharding.{field}",
                    )
                )
        if sharding.max_shard_size_mb > sharding.min_vram_mb > 0:
            self.out.append(
                make(
                    "OMNY137",
                    f"max_shard_size_mb ({sharding.max_shard_size_mb}) exceeds min_vram_mb "
                    f"({sharding.min_vram_mb}): a shard may not fit a device with the minimum "
                    "VRAM; the spec keeps about 20% headroom",
                    "sharding.max_shard_size_mb",
                )
            )
        if sharding.min_shards > sharding.max_shards:
            self.out.append(
                make(
                    "OMNY135",
                    f"min_shards ({sharding.min_shards}) exceeds max_shards "
                    f"({sharding.max_shards})",
                    "sharding.min_shards",
                )
            )
        for a, count in enumerate(sharding.allowed_shards):
            if not sharding.min_shards <= count <= sharding.max_shards:
                self.out.append(
                    make(
                        "OMNY135",
                        f"allowed shard count {count} is outside [min_shards, max_shards] = "
                        f"[{sharding.min_shards}, {sharding.max_shards}]",
                        f"sharding.allowed_shards[{a}]",
                    )
                )

    def _check_configuration(
        self,
        i: int,
        configuration,
        sharding,
        defined: set[str],
        usable: Mapping[str, ir.Value],
    ) -> list[ir.Value] | None:
        path = f"sharding.configurations[{i}]"
        n = configuration.num_shards
        if n < 1:
            self.out.append(
                make("OMNY135", f"num_shards is {n}; it must be >= 1", f"{path}.num_shards")
            )
        elif not sharding.min_shards <= n <= sharding.max_shards:
            self.out.append(
                make(
                    "OMNY135",
                    f"num_shards {n} is outside [min_shards, max_shards] = "
                    f"[{sharding.min_shards}, {sharding.max_shards}]",
                    f"{path}.num_shards",
                )
            )
        if n not in sharding.allowed_shards:
            self.out.append(
                make(
                    "OMNY134",
                    f"num_shards {n} is not in allowed_shards {list(sharding.allowed_shards)}; "
                    "add it there or remove the configuration",
                    f"{path}.num_shards",
                )
            )
        ids = configuration.cut_point_ids
        if len(ids) != n - 1:
            self.out.append(
                make(
                    "OMNY131",
                    f"{n} shards need {n - 1} cut point(s) but {len(ids)} are listed",
                    f"{path}.cut_point_ids",
                )
            )
        resolved: list[ir.Value] | None = [] if len(ids) == n - 1 else None
        seen: set[str] = set()
        for j, cut_id in enumerate(ids):
            if cut_id not in defined:
                self.out.append(
                    make(
                        "OMNY132",
                        f"configuration {i} ({n} shards) uses cut point {cut_id!r}, which is "
                        f"not defined in cut_points (defined: {_names(sorted(defined))}); "
                        "define it or remove it",
                        f"{path}.cut_point_ids[{j}]",
                    )
                )
            elif cut_id in seen:
                self.out.append(
                    make(
                        "OMNY139",
                        f"configuration {i} lists cut point {cut_id!r} twice",
                        f"{path}.cut_point_ids[{j}]",
                    )
                )
            seen.add(cut_id)
            value = usable.get(cut_id)
            if value is None or cut_id in ids[:j]:
                resolved = None
            elif resolved is not None:
                resolved.append(value)
        memory = configuration.memory_per_shard_mb
        if len(memory) != n:
            self.out.append(
                make(
                    "OMNY133",
                    f"memory_per_shard_mb has {len(memory)} entries for {n} shards; give one "
                    "per shard",
                    f"{path}.memory_per_shard_mb",
                )
            )
        for s, amount in enumerate(memory):
            location = f"{path}.memory_per_shard_mb[{s}]"
            if amount <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"shard {s} memory is {amount} MiB; it must be positive",
                        location,
                    )  # fmt: skip
                )
            elif amount > sharding.max_shard_size_mb:
                self.out.append(
                    make(
                        "OMNY136",
                        f"shard {s} needs {amount} MiB, more than max_shard_size_mb "
                        f"({sharding.max_shard_size_mb}); use more shards or move the cuts",
                        location,
                    )
                )
        return resolved

    # -- OMNY3xx --

    def _check_pipeline(self, plan: list[_PlanConfiguration]) -> None:
        cut_lists = [entry.cuts for entry in plan if entry.cuts is not None]
        if len(cut_lists) > 1:
            # Every configuration's stages in one graph walk (cached on the index).
            with contextlib.suppress(AnalysisError):  # reported by _plan_stages
                precompute_stages(self.graph, cut_lists, index=self.index)
        for entry in plan:
            if entry.cuts is not None:
                self._plan_stages(entry)
        by_name = {entry.name: entry for entry in plan}
        from onnx_ir_multidevice.passes.annotation import OMNY_CONFIGURATION_PREFIX

        annotated: set[str] = set()
        seen_names: set[str] = set()
        for configuration in self.model.device_configurations:
            if not configuration.name or configuration.name in seen_names:
                continue  # reported as OMNY202 / OMNY212
            seen_names.add(configuration.name)
            entry = by_name.get(configuration.name)
            if entry is None and configuration.name.startswith(OMNY_CONFIGURATION_PREFIX):
                self.out.append(
                    make(
                        "OMNY313",
                        f"configuration {configuration.name!r} has the omny/ prefix but the "
                        ".omny plan has no such configuration (stale annotation); run "
                        "`omny annotate` again or strip it",
                        configuration_location(configuration.name),
                    )
                )
            if self._check_annotation(configuration, entry):
                annotated.add(configuration.name)
        for entry in plan:
            if entry.name not in annotated:
                self.out.append(
                    make(
                        "OMNY312",
                        f"configuration {entry.index} ({entry.num_shards} shards) is not "
                        f"annotated in the IR; `omny annotate` would add it as {entry.name!r}",
                        f"sharding.configurations[{entry.index}]",
                    )
                )

    def _plan_stages(self, entry: _PlanConfiguration) -> None:
        path = f"sharding.configurations[{entry.index}]"
        assert entry.cuts is not None
        try:
            stages = assign_stages(self.graph, entry.cuts, index=self.index)
        except AnalysisError as error:
            self.out.append(
                make(
                    "OMNY322",
                    f"the cut points of configuration {entry.index} do not form a pipeline: "
                    f"{error}",
                    f"{path}.cut_point_ids",
                )
            )
            return
        entry.stages = stages
        used = set(stages.values())
        empty = [s for s in range(entry.num_shards) if s not in used]
        if empty:
            self.out.append(
                make(
                    "OMNY323",
                    f"configuration {entry.index}: stage(s) {empty} would have no node (two "
                    "cuts with nothing between them?); move or remove a cut",
                    f"{path}.cut_point_ids",
                )
            )
        # The same plan gives the same boundaries: cached on the index (shared with the
        # checker gate of annotate()).
        key = ("plan_boundaries", entry.num_shards, *map(id, entry.cuts))
        cached = self.index._cache.get(key)
        if cached is None or cached[0] != entry.cuts:
            boundaries = boundary_crossings(
                self.graph, stages, num_stages=entry.num_shards, index=self.index
            )
            self.index._cache[key] = (list(entry.cuts), boundaries)
        else:
            boundaries = cached[1]
        for boundary in boundaries:
            location = f"{path}.cut_point_ids[{boundary.index}]"
            activations = boundary.activations
            if len(activations) > 1:
                self.out.append(
                    make(
                        "OMNY320",
                        f"{len(activations)} activations cross boundary {boundary.index} "
                        f"(stage {boundary.index} -> {boundary.index + 1}): "
                        f"{_names(v.name for v in activations)}; a strict cut carries exactly "
                        "one. Move the cut, or accept relaxed cuts (--relaxed)",
                        location,
                        Severity.WARNING if self.relaxed_cuts else None,
                    )
                )
            self.out.append(_crossing_info(entry.name, boundary, location))

    def _check_annotation(
        self, configuration: ir.ModelConfiguration, entry: _PlanConfiguration | None
    ) -> bool:
        """Check one configuration's stages; return whether it has any."""
        nodes = self._index.graph_nodes if self._index is not None else tuple(self.graph)
        if self._entries_list is None or len(self._entries_list) != len(nodes):
            self._entries_list = list(map(_ENTRIES, nodes))
        stage_list = annotated_stage_list(nodes, configuration, entries_list=self._entries_list)
        has_none = None in stage_list
        plan_stages = entry.stages if entry is not None else None
        index = self._index
        if (
            not has_none
            and plan_stages is not None
            and index is not None
            and index.in_graph_order
            and len(plan_stages) == len(stage_list)
            and list(plan_stages.values()) == stage_list
        ):
            # The plan's stages (keyed in topological = graph order), as annotate() writes
            # them: the same dict serves.
            stages: dict[ir.Node, int | None] = plan_stages  # type: ignore[assignment]
        else:
            stages = dict(zip(nodes, stage_list))
        if stages is plan_stages:
            staged: dict[ir.Node, int] = plan_stages  # stages in range
        elif (
            not has_none
            and stage_list
            and min(stage_list) >= 0  # type: ignore[type-var, operator]
            and max(stage_list) <= MAX_STAGE  # type: ignore[type-var, operator]
        ):
            staged = stages  # type: ignore[assignment]
        else:
            staged = {n: s for n, s in stages.items() if s is not None and 0 <= s <= MAX_STAGE}
        if self.bodies:
            self._check_subgraph_stages(configuration, stages)
        if not staged:
            return False
        name = configuration.name
        location = configuration_location(name)
        missing = [n for n, s in stages.items() if s is None] if has_none else []
        if missing:
            self.out.append(
                make(
                    "OMNY301",
                    f"{len(missing)} main-graph node(s) have no stage in {name!r} "
                    f"({_names(_node_label(n) for n in missing)}); every node needs one",
                    location,
                )
            )
        violations = 0
        # Same keys and equal stages (a dict comparison).
        same_as_plan = (
            not missing
            and plan_stages is not None
            and (staged is plan_stages or plan_stages == staged)
        )
        # The plan's stages never run backwards: only other stagings need the edge walk.
        edges = () if same_as_plan else self._edge_violations(staged)
        for producer, consumer, value in edges:
            violations += 1
            if violations <= _MAX_PER_RULE:
                self.out.append(
                    make(
                        "OMNY300",
                        f"in {name!r}, node {_node_label(consumer)!r} (stage "
                        f"{staged[consumer]}) reads {value.name!r} from node "
                        f"{_node_label(producer)!r} (stage {staged[producer]}); a value must "
                        "be produced at the same or an earlier stage",
                        node_location(consumer),
                    )
                )
        if violations > _MAX_PER_RULE:
            self.out.append(
                make(
                    "OMNY300",
                    f"... and {violations - _MAX_PER_RULE} more backward edges in {name!r}",
                    location,
                )  # fmt: skip
            )
        self._check_stage_numbers(configuration, staged)
        if entry is not None:
            self._compare_with_plan(configuration, entry, staged, same_as_plan=same_as_plan)
        elif not missing and not violations:
            num_stages = max(staged.values()) + 1
            for boundary in boundary_crossings(
                self.graph, staged, num_stages=num_stages, index=self.index
            ):
                self.out.append(_crossing_info(name, boundary, location))
        return True

    def _edge_violations(
        self, staged: Mapping[ir.Node, int]
    ) -> Iterable[tuple[ir.Node, ir.Node, ir.Value]]:
        try:
            index = self.index
        except AnalysisError:  # a cycle: walk the graph's own uses instead
            return edge_violations(self.graph, staged)
        return edge_violations(self.graph, staged, index=index)

    def _check_stage_numbers(
        self, configuration: ir.ModelConfiguration, staged: Mapping[ir.Node, int]
    ) -> None:
        name = configuration.name
        location = configuration_location(name)
        used = set(staged.values())
        largest = max(used)
        gaps = [s for s in range(min(largest + 1, configuration.num_devices)) if s not in used]
        if gaps:
            self.out.append(
                make(
                    "OMNY302",
                    f"stage(s) {_names(map(str, gaps))} of {name!r} have no node but later "
                    "stages do; number stages contiguously from 0",
                    location,
                )
            )
        if largest >= configuration.num_devices:
            beyond = sum(1 for s in staged.values() if s >= configuration.num_devices)
            self.out.append(
                make(
                    "OMNY303",
                    f"{beyond} node(s) of {name!r} are at stage >= num_devices="
                    f"{configuration.num_devices} (largest stage {largest}); stage k runs on "
                    "device k, so add devices or merge stages",
                    location,
                )
            )
        elif largest + 1 < configuration.num_devices:
            self.out.append(
                make(
                    "OMNY304",
                    f"{name!r} uses {largest + 1} stage(s) on {configuration.num_devices} "
                    "devices; the last devices stay idle",
                    location,
                )
            )

    def _check_subgraph_stages(
        self, configuration: ir.ModelConfiguration, stages: Mapping[ir.Node, int | None]
    ) -> None:
        for parent, bodies in self.bodies:
            parent_stage = stages.get(parent)
            for body in bodies:
                for inner in body.all_nodes():
                    for item in inner.device_configurations:
                        if (
                            item.configuration is configuration
                            and item.pipeline_stage is not None
                            and item.pipeline_stage != parent_stage
                        ):
                            self.out.append(
                                make(
                                    "OMNY305",
                                    f"node {_node_label(inner)!r} inside "
                                    f"{_node_label(parent)!r} has stage {item.pipeline_stage} "
                                    f"in {configuration.name!r} but its parent has "
                                    f"{parent_stage}; subgraph nodes run with their parent, "
                                    "remove their stage",
                                    node_location(inner),
                                )
                            )

    def _compare_with_plan(
        self,
        configuration: ir.ModelConfiguration,
        entry: _PlanConfiguration,
        staged: Mapping[ir.Node, int],
        *,
        same_as_plan: bool = False,
    ) -> None:
        name = configuration.name
        location = configuration_location(name)
        if configuration.num_devices != entry.num_shards:
            self.out.append(
                make(
                    "OMNY313",
                    f"{name!r} has num_devices={configuration.num_devices} but .omny "
                    f"configuration {entry.index} has {entry.num_shards} shards; run "
                    "`omny annotate` again",
                    location,
                )
            )
        if entry.cuts is None or entry.stages is None:
            return
        contradicted = False
        for j, value in enumerate(entry.cuts):
            producer = value.producer()
            producer_stage = staged.get(producer) if producer is not None else None
            late_consumers = [c for c in value.consumers() if c in staged and staged[c] <= j]
            if (producer_stage is not None and producer_stage > j) or late_consumers:
                contradicted = True
                self.out.append(
                    make(
                        "OMNY310",
                        f"in {name!r}, cut {j} {value.name!r} must be produced at stage <= {j} "
                        f"and read at stages > {j}, but its producer is at stage "
                        f"{producer_stage} and {len(late_consumers)} consumer(s) at stage "
                        f"<= {j}; re-annotate from the plan",
                        value_location(value),
                    )
                )
        if contradicted or same_as_plan:
            return
        differing = [n for n, s in entry.stages.items() if staged.get(n, s) != s]
        if differing:
            self.out.append(
                make(
                    "OMNY311",
                    f"{len(differing)} node(s) of {name!r} are not at the stage the plan's cut "
                    f"points give ({_names(_node_label(n) for n in differing)}); re-annotate "
                    "if that is not intended",
                    location,
                )
            )


def _crossing_info(name: str, boundary, location: str) -> Diagnostic:
    by_class: dict[TensorClass, list[str]] = {}
    for value, value_class in boundary.tensors:
        by_class.setdefault(value_class, []).append(value.name or "<unnamed>")
    parts = [
        f"{len(names)} {value_class.value} ({_names(names)})"
        for value_class, names in sorted(by_class.items(), key=lambda kv: kv[0].value)
    ]
    return make(
        "OMNY321",
        f"{name!r} boundary {boundary.index} (stage {boundary.index} -> "
        f"{boundary.index + 1}): " + ("; ".join(parts) if parts else "nothing crosses"),
        location,
    )
