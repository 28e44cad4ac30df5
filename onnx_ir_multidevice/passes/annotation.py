"""Passes that turn a model's ``.omny`` plan into IR v11 multi-device annotations.

Rules:

* **One configuration per ``.omny`` shard configuration.** Configuration ``i`` of the
  document becomes an :class:`onnx_ir.ModelConfiguration` with ``num_devices = num_shards``,
  named by :func:`~onnx_ir_multidevice.binding.naming.configuration_names`:
  ``omny/<n>-shards`` for the first configuration with ``n`` shards, ``omny/<n>-shards#1``
  for the second, ``#2`` for the third... Names depend only on the document, so annotating a
  subset of the configurations gives the same names.
* **Stages** (:class:`AnnotateStagesPass`): every node of the main graph gets the
  ``pipeline_stage`` that :func:`~onnx_ir_multidevice.analysis.stages.assign_stages` computes
  from the configuration's cut tensors (cut ``j`` separates stage ``j`` from ``j + 1``, stage
  ``k`` runs on device ``k``). Nodes inside subgraph bodies run with their parent and get no
  stage of their own.
* **Sharding specs** (:class:`AnnotateShardingPass`): each cut tensor gets placement-only
  :class:`onnx_ir.ShardingSpec` entries (a ``device``, no ``sharded_dims``): on its producer,
  the output is bound to the producer's stage ``k``; on each main-graph consumer, the input is
  bound to that consumer's stage (``k + 1`` for the next stage, a later one when the tensor
  skips stages). The specs of an ``omny/`` configuration are owned by this pass: stale ones
  from an earlier plan are replaced.
* **Tensor parallelism**: when the model has a tensor-parallel record
  (:func:`~onnx_ir_multidevice.omny.read_tensor_parallel`), a recorded configuration gets
  ``num_devices`` = the devices its stages use; each stage runs on its recorded devices (the
  cut specs of a stage of degree ``d > 1`` replicate the cut tensor over its group), and every
  node of each tensor-parallel region of such a stage gets, in the same
  :class:`onnx_ir.NodeDeviceConfiguration` as its ``pipeline_stage``, the sharding specs of
  :func:`~onnx_ir_multidevice.analysis.tensor_parallel_specs.region_specs` (split values with
  ``sharded_dims``, replicated ones with a device group, the ``AllReduce`` points).
* The model's ``ir_version`` is raised to 11 when lower (older versions cannot store the
  fields). Both passes report ``modified`` exactly: a second run changes nothing.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "OMNY_CONFIGURATION_PREFIX",
    "AnnotatePass",
    "AnnotateShardingPass",
    "AnnotateStagesPass",
    "configuration_names",
]

import dataclasses
import numbers
import operator
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import compress, repeat

import onnx_ir as ir

from onnx_ir_multidevice._errors import BindingError, OmnyFormatError
from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.stages import assign_stages, precompute_stages
from onnx_ir_multidevice.analysis.tensor_parallel_specs import (
    region_specs,
    replicated_spec,
    stage_regions,
)
from onnx_ir_multidevice.binding.bind import bind
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX, configuration_names
from onnx_ir_multidevice.graph.index import AnalysisError, GraphIndex
from onnx_ir_multidevice.omny._props import read as read_omny
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TensorParallelConfiguration,
    TensorParallelRecord,
    read_tensor_parallel,
)
from onnx_ir_multidevice.passes.strip import strip_configurations

#: The IR version that introduced the multi-device fields.
_ENTRIES = operator.attrgetter("device_configurations")
_MULTI_DEVICE_IR_VERSION = 11

DeviceNames = Sequence[str] | Mapping[int, Sequence[str]]


@dataclasses.dataclass(frozen=True)
class _Selected:
    """A selected ``.omny`` configuration, bound to the graph."""

    index: int
    name: str
    num_shards: int
    cuts: tuple[ir.Value, ...]


def _select(
    model: ir.Model, configurations: Collection[int] | None, index: GraphIndex | None = None
) -> tuple[list[_Selected], list[str]]:
    """Bind the model's plan; return the selected configurations and every plan name."""
    metadata = read_omny(model)
    if metadata is None:
        raise BindingError(
            "the model has no .omny metadata (omnynet_metadata); plan it first "
            "(`omny plan`) or load a .omny file"
        )
    plan = bind(model, metadata, index=index)
    names = configuration_names(metadata.sharding.configurations)
    available = sorted({c.num_shards for c in plan.configurations})
    if configurations is not None:
        unknown = sorted(set(configurations) - set(available))
        if unknown:
            raise BindingError(
                f"no .omny configuration with {unknown} shards; the plan has {available}"
            )
    selected = []
    for bound in plan.configurations:
        if configurations is not None and bound.num_shards not in configurations:
            continue
        path = bound.json_path
        cuts = bound.cut_values()
        if len(cuts) != bound.num_shards - 1:
            raise BindingError(
                f"{path}: {plural(bound.num_shards, 'shard')} need "
                f"{plural(bound.num_shards - 1, 'cut point')}, {len(cuts)} listed"
            )
        selected.append(_Selected(bound.index, names[bound.index], bound.num_shards, tuple(cuts)))
    return selected, names


def _stages(model: ir.Model, selected: _Selected, index: GraphIndex) -> dict[ir.Node, int]:
    try:
        return assign_stages(model.graph, selected.cuts, index=index)
    except AnalysisError as error:
        raise BindingError(
            f"sharding.configurations[{selected.index}]: the cut points do not form a "
            f"pipeline: {error}"
        ) from error


def validate_options(
    configurations: Collection[int] | None, device_names: DeviceNames | None
) -> frozenset[int] | None:
    """Refuse option values that would be misread; return ``configurations`` as a set.

    A string is a sequence of strings, so ``device_names="gpu"`` would name the devices
    ``'g'``, ``'p'``, ``'u'``; a name that is not a string fails only when the model is saved.

    Raises:
        TypeError: ``configurations`` is not a collection of shard counts, or
            ``device_names`` is not a sequence (or shard-count mapping) of strings.
    """
    if configurations is not None:
        if isinstance(configurations, (str, bytes)) or not isinstance(configurations, Iterable):
            raise TypeError(
                f"configurations={configurations!r}: expected a collection of shard counts "
                f"such as {{2}} or [2, 4], or None for every configuration"
            )
        configurations = list(configurations)
        for count in configurations:
            if isinstance(count, bool) or not isinstance(count, numbers.Integral):
                raise TypeError(
                    f"configurations={configurations!r}: {count!r} is not an integer; give "
                    "shard counts such as {2} or [2, 4]"
                )
    if device_names is not None:
        if isinstance(device_names, Mapping):
            groups = [(f"device_names[{k!r}]", v) for k, v in device_names.items()]
        else:
            groups = [("device_names", device_names)]
        for path, names in groups:
            if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
                raise TypeError(
                    f"{path}={names!r}: expected a sequence of device names, one per device, "
                    f"such as [{names!r}]"
                )
            for i, name in enumerate(names):
                if not isinstance(name, str):
                    raise TypeError(
                        f"{path}[{i}]={name!r} is not a string; device names are strings "
                        "such as 'cuda:0'"
                    )
    return None if configurations is None else frozenset(int(c) for c in configurations)


def _names_for(device_names: DeviceNames | None, num_devices: int) -> tuple[str, ...] | None:
    if device_names is None:
        return None
    if isinstance(device_names, Mapping):
        names = device_names.get(num_devices)
        if names is None:
            return None
    else:
        names = device_names
    names = tuple(names)
    if len(names) < num_devices:
        raise BindingError(
            f"{plural(len(names), 'device name')} {list(names)} for a configuration of "
            f"{plural(num_devices, 'device')}; give at least one name per device"
        )
    return names[:num_devices]


def _all_nodes(model: ir.Model) -> Iterable[ir.Node]:
    yield from model.graph.all_nodes()
    for function in model.functions.values():
        yield from function.all_nodes()


def _rebind(model: ir.Model, old: ir.ModelConfiguration, new: ir.ModelConfiguration) -> None:
    """Replace configuration ``old`` by ``new`` on the model and on every node entry."""
    model.device_configurations = tuple(new if c is old else c for c in model.device_configurations)
    for node in _all_nodes(model):
        entries = node.device_configurations
        if any(e.configuration is old for e in entries):
            node.device_configurations = tuple(
                dataclasses.replace(e, configuration=new) if e.configuration is old else e
                for e in entries
            )


def ensure_configuration(
    model: ir.Model, name: str, num_devices: int, device_names: tuple[str, ...] | None
) -> tuple[ir.ModelConfiguration, bool]:
    """Return the model's configuration ``name`` with these devices, creating or updating it.

    ``device_names=None`` keeps the names of an existing configuration (when they still fit).

    Returns:
        The configuration and whether the model changed.
    """
    existing = next((c for c in model.device_configurations if c.name == name), None)
    if device_names is None:
        keep = existing is not None and len(existing.device_names) == num_devices
        device_names = existing.device_names if keep else ()  # type: ignore[union-attr]  # keep: existing is set
    if (
        existing is not None
        and existing.num_devices == num_devices
        and existing.device_names == device_names
    ):
        return existing, False
    configuration = ir.ModelConfiguration(
        name=name, num_devices=num_devices, device_names=device_names
    )
    if existing is None:
        model.device_configurations = (*model.device_configurations, configuration)
    else:
        _rebind(model, existing, configuration)
    return configuration, True


def _upsert(
    node: ir.Node,
    configuration: ir.ModelConfiguration,
    *,
    stage: int | None = None,
    specs: tuple[ir.ShardingSpec, ...] | None = None,
) -> bool:
    """Set the stage and/or specs of ``node`` for ``configuration``; return whether it changed."""
    entries = node.device_configurations
    for i, entry in enumerate(entries):
        if entry.configuration is not configuration:
            continue
        updated = entry
        if stage is not None and entry.pipeline_stage != stage:
            updated = dataclasses.replace(updated, pipeline_stage=stage)
        if specs is not None and entry.sharding_specs != specs:
            updated = dataclasses.replace(updated, sharding_specs=specs)
        if updated is entry:
            return False
        node.device_configurations = (*entries[:i], updated, *entries[i + 1 :])
        return True
    if stage is None and not specs:
        return False
    node.device_configurations = (
        *entries,
        ir.NodeDeviceConfiguration(
            configuration=configuration, sharding_specs=specs or (), pipeline_stage=stage
        ),
    )
    return True


def _raise_ir_version(model: ir.Model) -> bool:
    if model.ir_version < _MULTI_DEVICE_IR_VERSION:
        model.ir_version = _MULTI_DEVICE_IR_VERSION
        return True
    return False


class _PlanPass(ir.passes.InPlacePass):
    """Common options of the annotation passes."""

    def __init__(
        self,
        configurations: Collection[int] | None = None,
        device_names: DeviceNames | None = None,
        *,
        index: GraphIndex | None = None,
    ) -> None:
        """Create the pass.

        Args:
            configurations: Annotate only the ``.omny`` configurations whose ``num_shards``
                is in this collection (default: all of them).
            device_names: Device names for the configurations: a sequence (an ``n``-shard
                configuration takes the first ``n`` names) or a mapping from shard count to
                names. ``None`` keeps existing names (none on a new configuration).
            index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of the main graph
                of the model the pass will run on (``GraphIndex.for_model(model)``), to share
                with other analyses; ignored for another graph (one is built then).
        """
        super().__init__()
        self.configurations = validate_options(configurations, device_names)
        self.device_names = device_names
        self.index = index

    def _index(self, model: ir.Model) -> GraphIndex:
        if self.index is not None and self.index.graph is model.graph:
            return self.index
        return GraphIndex.for_model(model)


def _annotate(
    model: ir.Model,
    selected: Sequence[_Selected],
    device_names: DeviceNames | None,
    *,
    stages: bool,
    sharding: bool,
    index: GraphIndex,
) -> bool:
    """Annotate ``model`` for the selected configurations; return whether it changed."""
    modified = _raise_ir_version(model)
    graph = model.graph
    if len(selected) > 1:
        # Every configuration's stages in one graph walk (cached on the index).
        precompute_stages(graph, [entry.cuts for entry in selected], index=index)
    record = _record(model)
    plans: list[tuple[ir.ModelConfiguration, dict[ir.Node, int], dict]] = []
    for entry in selected:
        parallel = record.configuration(entry.name) if record is not None else None
        if parallel is not None and parallel.num_shards != entry.num_shards:
            raise BindingError(
                f"tensor-parallel record: configuration {entry.name!r} has num_shards="
                f"{parallel.num_shards} but the .omny plan has {entry.num_shards}; re-plan"
            )
        num_devices = parallel.num_devices if parallel is not None else entry.num_shards
        names = _names_for(device_names, num_devices)
        configuration, changed = ensure_configuration(model, entry.name, num_devices, names)
        modified |= changed
        node_stages = _stages(model, entry, index)
        wanted = _cut_specs(graph, entry.cuts, node_stages, parallel) if sharding else {}
        if sharding and parallel is not None and parallel.parallel:
            _add_region_specs(model, node_stages, parallel, wanted)
        plans.append((configuration, node_stages, wanted))
    if not plans:
        return modified
    # Specs are only touched (stale ones cleared) when annotating the sharding.
    no_specs = () if sharding else None
    # The nodes with cut specs first (a few), configuration by configuration...
    special: dict[ir.Node, None] = {}
    for _, _, wanted in plans:
        special.update(dict.fromkeys(wanted))
    for node in special:
        for configuration, node_stages, wanted in plans:
            specs = wanted.get(node)
            modified |= _upsert(
                node,
                configuration,
                stage=node_stages[node] if stages else None,
                specs=tuple(specs) if specs is not None else no_specs,
            )
    # ... then every other node in one walk for all configurations.
    modified |= _upsert_all_configurations(plans, special, no_specs, stages=stages)
    return modified


def _upsert_all_configurations(
    plans: Sequence[tuple[ir.ModelConfiguration, Mapping[ir.Node, int], object]],
    skip: Mapping[ir.Node, object],
    specs: tuple[()] | None,
    *,
    stages: bool,
) -> bool:
    """:func:`_upsert` every node not in ``skip`` for each configuration of ``plans``.

    ``plans`` holds ``(configuration, node stages, _)``, the node stages of every
    configuration keyed by the same nodes in the same order. In one
    walk for all configurations: nodes with the same entry tuple and stages get the very same
    new tuple (the upserts run once per distinct case). Returns whether any node changed.
    """
    configurations = [plan[0] for plan in plans]
    nodes = list(plans[0][1].keys())
    if stages:
        rows: list[tuple] = list(zip(*(plan[1].values() for plan in plans), strict=True))
    else:
        rows = [(None,) * len(plans)] * len(nodes)
    if skip:
        keep = list(map(operator.not_, map(skip.__contains__, nodes)))
        nodes, rows = list(compress(nodes, keep)), list(compress(rows, keep))
    if not nodes:
        return False
    entries_list = list(map(_ENTRIES, nodes))  # alive throughout: their ids are keys
    keys = list(zip(map(id, entries_list), rows, strict=True))
    # The first node of each distinct (entries, stages) case is upserted; the others get
    # the very same new tuple.
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
    new_by_key: dict[tuple, tuple] = {}
    first_changed: dict[int, bool] = {}
    for key, k in first.items():
        node = nodes[k]
        changed = False
        for configuration, stage in zip(configurations, rows[k], strict=True):
            changed |= _upsert(node, configuration, stage=stage, specs=specs)
        new_by_key[key] = node.device_configurations
        first_changed[k] = changed
    new_list = list(map(new_by_key.__getitem__, keys))
    changed_list = list(map(operator.is_not, new_list, entries_list))
    for k, changed in first_changed.items():
        changed_list[k] = changed
    deque(map(setattr, nodes, repeat("device_configurations"), new_list), maxlen=0)
    return any(changed_list)


def _record(model: ir.Model) -> TensorParallelRecord | None:
    try:
        return read_tensor_parallel(model)
    except OmnyFormatError as error:
        raise BindingError(
            f"the tensor-parallel record is malformed: {error}; re-plan the model"
        ) from error


def _placement(
    value: ir.Value, stage: int, parallel: TensorParallelConfiguration | None
) -> ir.ShardingSpec:
    """``value`` placed on the devices of ``stage`` (a group when several share it)."""
    if parallel is None:
        return ir.ShardingSpec(value=value, device=(stage,))
    devices = parallel.devices_of(stage)
    if len(devices) == 1:
        return ir.ShardingSpec(value=value, device=devices)
    return replicated_spec(value, devices)


def _cut_specs(
    graph: ir.Graph,
    cuts: Sequence[ir.Value],
    stages: Mapping[ir.Node, int],
    parallel: TensorParallelConfiguration | None = None,
) -> dict[ir.Node, list[ir.ShardingSpec]]:
    """Placement-only specs of the cut tensors: producer -> its stage, consumer -> its stage.

    Stage ``k`` is device ``k``, or the devices ``parallel`` records for it.
    """
    wanted: dict[ir.Node, list[ir.ShardingSpec]] = {}
    for value in cuts:
        producer = value.producer()
        assert producer is not None  # assign_stages checked it
        wanted.setdefault(producer, []).append(_placement(value, stages[producer], parallel))
        for consumer in dict.fromkeys(value.consumers()):
            if consumer.graph is graph:
                wanted.setdefault(consumer, []).append(
                    _placement(value, stages[consumer], parallel)
                )
    return wanted


def _add_region_specs(
    model: ir.Model,
    stages: Mapping[ir.Node, int],
    parallel: TensorParallelConfiguration,
    wanted: dict[ir.Node, list[ir.ShardingSpec]],
) -> None:
    """Add the specs of every tensor-parallel region's nodes to ``wanted``.

    They replace a cut spec of the same value on the same node.
    """
    degrees = {entry.stage: entry.degree for entry in parallel.stages}
    shapes = ValueShapes(model.graph, parallel.dims_dict)
    regions = stage_regions(model, stages, degrees, shapes=shapes)
    for stage, found in regions.items():
        devices = parallel.devices_of(stage)
        for region in found:
            for node, specs in region_specs(region, devices, shapes).items():
                values = {spec.value for spec in specs}
                kept = [spec for spec in wanted.get(node, []) if spec.value not in values]
                wanted[node] = kept + specs


class AnnotateStagesPass(_PlanPass):
    """Give every main-graph node a ``pipeline_stage`` per ``.omny`` configuration.

    Creates (or updates) one :class:`onnx_ir.ModelConfiguration` per selected
    configuration, named by
    :func:`~onnx_ir_multidevice.binding.naming.configuration_names`, and sets the stage that
    :func:`~onnx_ir_multidevice.analysis.stages.assign_stages` gives each node.

    Raises:
        BindingError: The model has no ``.omny`` metadata, a selected configuration's cut
            points do not resolve or do not form a pipeline, or ``configurations`` names a
            shard count the plan does not have.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Annotate ``model`` in place; ``modified`` says whether anything changed."""
        index = self._index(model)
        selected, _ = _select(model, self.configurations, index)
        modified = _annotate(
            model, selected, self.device_names, stages=True, sharding=False, index=index
        )
        return ir.passes.PassResult(model, modified=modified)


class AnnotateShardingPass(_PlanPass):
    """Bind each cut tensor to its devices with placement-only sharding specs.

    On the producer the cut tensor (an output) is bound to the producer's stage; on each
    main-graph consumer (an input) to that consumer's stage. Creates the configurations
    like :class:`AnnotateStagesPass` when they are missing. Consumers inside subgraph bodies
    get no spec (they run with their parent, which does not list the tensor as an input).

    Raises:
        BindingError: As :class:`AnnotateStagesPass`.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Annotate ``model`` in place; ``modified`` says whether anything changed."""
        index = self._index(model)
        selected, _ = _select(model, self.configurations, index)
        modified = _annotate(
            model, selected, self.device_names, stages=False, sharding=True, index=index
        )
        return ir.passes.PassResult(model, modified=modified)


class AnnotatePass(_PlanPass):
    """Do what :class:`AnnotateStagesPass` and :class:`AnnotateShardingPass` do, in one walk.

    Also removes ``omny/`` configurations whose name no longer matches any configuration of
    the plan (left over from an earlier plan), every ``omny/`` configuration but the first
    of a name the model holds twice, and node entries naming an ``omny/`` configuration the
    model does not declare, with their node annotations.

    Raises:
        BindingError: As :class:`AnnotateStagesPass`.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Annotate ``model`` in place; ``modified`` says whether anything changed."""
        index = self._index(model)
        selected, names = _select(model, self.configurations, index)
        keep = set(names)
        # A second configuration of the same omny/ name (added by hand or by another tool)
        # would stay beside the one annotated, and names must be unique (OMNY212).
        # Node entries naming an omny/ configuration the model does not declare (onnx-ir's
        # placeholders for a dangling reference) go too: annotating writes fresh ones.
        seen: set[str] = set()
        duplicates: set[int] = set()
        registered: set[int] = set()
        for configuration in model.device_configurations:
            if configuration.name in seen:
                duplicates.add(id(configuration))
            seen.add(configuration.name)
            registered.add(id(configuration))
        modified = strip_configurations(
            model,
            lambda c: (
                c.name.startswith(OMNY_CONFIGURATION_PREFIX)
                and (c.name not in keep or id(c) in duplicates or id(c) not in registered)
            ),
            nodes=index.graph_nodes,
        )
        modified |= _annotate(
            model, selected, self.device_names, stages=True, sharding=True, index=index
        )
        return ir.passes.PassResult(model, modified=modified)
