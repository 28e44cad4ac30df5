"""Pass that turns pipeline stages set by hand into ``.omny`` cut points and configurations.

The reverse of :class:`~onnx_ir_multidevice.passes.annotation.AnnotatePass`. Rules:

* Every model configuration whose main-graph nodes carry pipeline stages becomes one
  ``.omny`` shard configuration with ``num_shards = num_devices``, in
  ``model.device_configurations`` order. Every main-graph node must have a stage, no edge
  may run backwards and every stage must have a node.
* The cut tensor of boundary ``k`` is the one *activation* that crosses it (forwarded and
  replicable values never count; see :mod:`~onnx_ir_multidevice.analysis.boundaries`). With
  several activations the pass fails, unless ``relaxed=True``: then the largest one is the
  cut tensor and the others ride along as side activations.
* Cut points are shared between configurations (same tensor, same cut point), sorted in
  topological order. A cut point already in the document with the same tensor keeps its
  id; new ones are ``cut_<n>`` with the smallest free ``n``.
* The document is written by :func:`~onnx_ir_multidevice.analysis.omny_document.build_metadata`,
  the builder :func:`~onnx_ir_multidevice.planner.planning.plan` uses: the same tensor
  descriptions (shapes with ``-1`` for symbolic dims, dtypes spelled by
  :func:`~onnx_ir_multidevice.graph.dtypes.dtype_name`, both inferred where the graph lacks
  them), the same model section, MiB rounded up.
* Memory numbers are what differs from the planner: they count the bytes of the **weights and
  constants** each stage uses (initializers and ``Constant`` tensors read by the stage's
  nodes, those inside their bodies included; a weight used by two stages counts in both),
  at least 1 MiB. They leave out activations and runtime buffers: the planner brings the
  full memory model. ``memory_per_shard_mb[s]`` is stage ``s``; a cut point's
  ``shard_memory_mb`` is the weights of the nodes between the previous listed cut and it (a
  node follows the latest listed cut it follows in any configuration), so with one
  configuration it is the stage before the cut; ``cumulative_memory_mb`` is the running sum.
  ``model.inference_memory_mb`` is the weights of the whole model; without metadata,
  ``max_shard_size_mb`` is the largest shard and ``min_vram_mb`` that plus the default
  runtime headroom.
* **Tensor parallelism**: a configuration whose nodes carry split sharding specs
  (``sharded_dims``) is tensor-parallel: its stage count is its largest stage plus one (not
  ``num_devices``), each stage with split specs gets the degree and devices of those specs,
  the others the single device their placement specs name (else the implied one), and the
  tensor-parallel record (:func:`~onnx_ir_multidevice.omny.write_tensor_parallel`) is written
  for it, at the recorded planning dims. Only configurations whose name is the one
  :func:`~onnx_ir_multidevice.annotate` gives (``omny/<n>-shards``...) are recorded.
* Existing metadata keeps every other field (its cut point ids too, for the same tensor and
  node); the shard counts are added to ``allowed_shards`` and ``min_shards`` /
  ``max_shards`` widened to include them. Without metadata a document is built from the
  graph (model, inputs, outputs, export information).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["StagesToOmnyPass", "stage_weight_bytes"]

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import BindingError
from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.analysis.boundaries import boundary_crossings, edge_violations
from onnx_ir_multidevice.analysis.omny_document import StagedConfiguration, build_metadata, weights
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.stages import stages_from_annotations
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, classify_values
from onnx_ir_multidevice.binding.naming import configuration_names
from onnx_ir_multidevice.graph.dtypes import tensor_nbytes
from onnx_ir_multidevice.graph.index import graph_uses, node_subgraphs, topological_order
from onnx_ir_multidevice.omny._schema import OMNY_METADATA_KEY, OMNY_VERSION_KEY
from onnx_ir_multidevice.omny.planning_dims import read_planning_dims
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    TensorParallelRecord,
    TensorParallelStage,
    read_tensor_parallel,
    write_tensor_parallel,
)


def _tensor_bytes(tensor: ir.TensorProtocol | None, value: ir.Value | None = None) -> int:
    """Bytes of a constant's tensor, else of its value's static shape; 0 when unknown."""
    if tensor is not None:
        return int(tensor.nbytes)
    if value is not None and value.shape is not None and value.shape.is_static():
        return tensor_nbytes(value.shape.numpy(), value.dtype) or 0
    return 0


def _constant_tensor(node: ir.Node) -> ir.TensorProtocol | None:
    if node.op_type != "Constant" or node.domain != "":
        return None
    attr = node.attributes.get("value")
    if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
        return attr.value
    return None


def _body_constant_bytes(node: ir.Node) -> int:
    """Bytes of the initializers and Constant tensors inside ``node``'s bodies."""
    total = 0
    for body in node_subgraphs(node):
        total += sum(_tensor_bytes(v.const_value, v) for v in body.initializers.values())
        for inner in body.all_nodes():
            total += _tensor_bytes(_constant_tensor(inner))
            for nested in node_subgraphs(inner):
                total += sum(_tensor_bytes(v.const_value, v) for v in nested.initializers.values())
    return total


def stage_weight_bytes(
    graph: ir.Graph, stages: Mapping[ir.Node, int], num_stages: int
) -> list[int]:
    """Return the bytes of weights and constants each stage uses.

    A stage uses an initializer or a ``Constant`` output when one of its nodes reads it
    (outer-scope reads of bodies included); constants inside a node's bodies count in the
    node's stage. A value used by several stages counts in each.

    Args:
        graph: The main graph.
        stages: The stage of every node of ``graph``.
        num_stages: Number of stages.

    Returns:
        ``num_stages`` byte counts.
    """
    initializers = set(graph.initializers.values())
    constants: dict[ir.Value, int] = {}
    for node in graph:
        tensor = _constant_tensor(node)
        if tensor is not None:
            for output in node.outputs:
                constants[output] = _tensor_bytes(tensor)
    seen: list[set[ir.Value]] = [set() for _ in range(num_stages)]
    totals = [0] * num_stages
    for node, values in graph_uses(graph).items():
        stage = stages[node]
        totals[stage] += _body_constant_bytes(node)
        for value in values:
            if value in seen[stage]:
                continue
            if value in initializers:
                totals[stage] += _tensor_bytes(value.const_value, value)
            elif value in constants:
                totals[stage] += constants[value]
            else:
                continue
            seen[stage].add(value)
    return totals


@dataclasses.dataclass
class _Derived:
    """One staged configuration: its stages, cut tensors and weight bytes per stage."""

    configuration: ir.ModelConfiguration
    stages: dict[ir.Node, int]
    cuts: list[ir.Value]
    stage_bytes: list[int]
    devices: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """Tensor parallelism: the devices of each stage (empty: pipeline only)."""


class StagesToOmnyPass(ir.passes.InPlacePass):
    """Write ``.omny`` cut points and configurations from the model's pipeline stages.

    Raises:
        BindingError: A staged configuration is incomplete (a node without stage, an empty
            stage, a backward edge), a boundary carries no activation, or several without
            ``relaxed``, or a cut tensor's shape or dtype is unknown even after shape
            inference.
    """

    def __init__(
        self, configurations: Collection[str] | None = None, *, relaxed: bool = False
    ) -> None:
        """Create the pass.

        Args:
            configurations: Names of the model configurations to convert (default: every
                configuration with pipeline stages).
            relaxed: Accept boundaries that several activations cross (relaxed cuts).

        Raises:
            TypeError: ``configurations`` is not a collection of names.
        """
        super().__init__()
        if configurations is not None and (
            isinstance(configurations, (str, bytes))
            or not isinstance(configurations, Iterable)
            or not all(isinstance(name, str) for name in configurations)
        ):
            # A string is a collection of strings: its letters would be the names.
            raise TypeError(
                f"configurations={configurations!r}: expected a collection of model "
                "configuration names such as ['hand'], or None for every staged configuration"
            )
        self.configurations = None if configurations is None else frozenset(configurations)
        self.relaxed = relaxed

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Write the ``.omny`` metadata of ``model``; ``modified`` when it changed."""
        before = (
            model.metadata_props.get(OMNY_VERSION_KEY),
            model.metadata_props.get(OMNY_METADATA_KEY),
            model.metadata_props.get(TENSOR_PARALLEL_KEY),
        )
        existing = omny.read(model)
        graph = model.graph
        classes = classify_values(graph, functions=model.functions)
        sizes = ValueSizes(graph)
        derived = []
        for configuration in model.device_configurations:
            if self.configurations is not None and configuration.name not in self.configurations:
                continue
            item = self._derive(graph, configuration, classes, sizes)
            if item is not None:
                derived.append(item)
        if self.configurations is not None:
            missing = self.configurations - {d.configuration.name for d in derived}
            if missing:
                raise BindingError(
                    f"{'configuration' if len(missing) == 1 else 'configurations'} "
                    f"{sorted(missing)} {'is' if len(missing) == 1 else 'are'} not on the model "
                    "or without pipeline stages"
                )
        if not derived:
            raise BindingError(
                "no model configuration has pipeline stages; set them with "
                "Node.set_pipeline_stage first"
            )
        metadata = build_metadata(
            model,
            [StagedConfiguration(tuple(d.cuts), tuple(d.stage_bytes)) for d in derived],
            _cut_bytes(graph, derived),
            sizes=sizes,
            inference_memory_bytes=weights(graph, sizes)[0],
            existing=existing,
        )
        omny.write(model, metadata)
        _write_record(model, derived, configuration_names(metadata.sharding.configurations))
        after = (
            model.metadata_props.get(OMNY_VERSION_KEY),
            model.metadata_props.get(OMNY_METADATA_KEY),
            model.metadata_props.get(TENSOR_PARALLEL_KEY),
        )
        return ir.passes.PassResult(model, modified=before != after)

    def _derive(
        self,
        graph: ir.Graph,
        configuration: ir.ModelConfiguration,
        classes: Mapping[ir.Value, TensorClass],
        sizes: ValueSizes,
    ) -> _Derived | None:

        name = configuration.name
        stages = stages_from_annotations(graph, configuration)
        if all(s is None for s in stages.values()):
            return None
        missing = [n.name or n.op_type for n, s in stages.items() if s is None]
        if missing:
            raise BindingError(
                f"configuration {name!r}: {plural(len(missing), 'node')} "
                f"{'has' if len(missing) == 1 else 'have'} no stage "
                f"(first: {missing[:5]}); give every main-graph node a stage"
            )
        staged: dict[ir.Node, int] = {n: s for n, s in stages.items() if s is not None}
        devices = _parallel_devices(graph, configuration, staged)
        num_stages = max(staged.values()) + 1 if devices else configuration.num_devices
        counts = [0] * max(num_stages, max(staged.values()) + 1)
        for s in staged.values():
            counts[s] += 1
        if len(counts) > num_stages or 0 in counts:
            raise BindingError(
                f"configuration {name!r}: stages must be 0..{num_stages - 1} (num_devices) "
                f"with a node in each; nodes per stage: {counts}"
            )
        for producer, consumer, value in edge_violations(graph, staged):
            raise BindingError(
                f"configuration {name!r}: node {consumer.name!r} (stage {staged[consumer]}) "
                f"reads {value.name!r} from {producer.name!r} (stage {staged[producer]}); "
                "fix the stages"
            )
        cuts = []
        for boundary in boundary_crossings(
            graph,
            staged,
            classes=classes,
            num_stages=num_stages,
        ):
            activations = boundary.activations
            if not activations:
                raise BindingError(
                    f"configuration {name!r}: no activation crosses boundary {boundary.index} "
                    f"(stage {boundary.index} -> {boundary.index + 1}), so it has no cut tensor"
                )
            if len(activations) > 1 and not self.relaxed:
                raise BindingError(
                    f"configuration {name!r}: {len(activations)} activations cross boundary "
                    f"{boundary.index}: {[v.name for v in activations][:8]}; a cut carries one. "
                    "Move the stages or pass relaxed=True"
                )
            cut = max(activations, key=lambda v: sizes.nbytes(v) or 0)
            _check_describable(name, cut, sizes)
            cuts.append(cut)
        stage_bytes = stage_weight_bytes(graph, staged, num_stages)
        return _Derived(configuration, staged, cuts, stage_bytes, devices)


def _parallel_devices(
    graph: ir.Graph, configuration: ir.ModelConfiguration, staged: Mapping[ir.Node, int]
) -> dict[int, tuple[int, ...]]:
    """The devices of each stage of a tensor-parallel configuration (``{}``: pipeline only).

    A stage with split specs takes the devices of its first one; another stage, the group of
    its first replicated spec over a device group (a cut tensor entering a tensor-parallel
    stage without regions), else the single device of its first placement spec (absent: the
    record implies one).
    """
    split: dict[int, tuple[int, ...]] = {}
    grouped: dict[int, tuple[int, ...]] = {}
    placed: dict[int, tuple[int, ...]] = {}
    for node in graph:
        stage = staged.get(node)
        if stage is None:
            continue
        for entry in node.device_configurations:
            if entry.configuration is not configuration:
                continue
            for spec in entry.sharding_specs:
                if spec.sharded_dims and stage not in split:
                    split[stage] = tuple(spec.device)
                elif not spec.sharded_dims and len(spec.device) == 1 and spec.device[0] >= 0:
                    placed.setdefault(stage, tuple(spec.device))
                elif not spec.sharded_dims and len(spec.device) == 1:
                    groups = {g.key: g.value for g in spec.index_to_device_group_map}
                    if len(groups.get(spec.device[0], ())) > 1:
                        grouped.setdefault(stage, tuple(groups[spec.device[0]]))
    if not split:
        return {}
    return {**placed, **grouped, **split}


def _write_record(model: ir.Model, derived: Sequence[_Derived], names: Sequence[str]) -> None:
    """Record the tensor-parallel configurations of ``derived`` (others keep their entry)."""
    try:
        existing = read_tensor_parallel(model)
    except ValueError:
        existing = None
    kept = {c.name: c for c in existing.configurations} if existing is not None else {}
    dims = read_planning_dims(model) or {}
    for item in derived:
        name = item.configuration.name
        if name not in names:
            continue
        if not item.devices:
            kept.pop(name, None)
            continue
        previous = kept.get(name)
        stages = tuple(
            TensorParallelStage(stage, len(devices), devices)
            for stage, devices in sorted(item.devices.items())
        )
        kept[name] = TensorParallelConfiguration(
            name,
            len(item.cuts) + 1,
            stages,
            previous.dims if previous is not None else tuple(sorted(dims.items())),
        )
    ordered = [kept[n] for n in names if n in kept] + [c for n, c in kept.items() if n not in names]
    write_tensor_parallel(model, TensorParallelRecord(tuple(ordered)) if ordered else None)


def _check_describable(name: str, value: ir.Value, sizes: ValueSizes) -> None:
    if sizes.static_shape(value) is None or sizes.dtype(value) is None:
        raise BindingError(
            f"configuration {name!r}: the shape or dtype of cut tensor {value.name!r} is "
            "unknown, even to ONNX shape inference; give the graph's values their types"
        )
    if not value.name:
        raise BindingError(f"configuration {name!r}: the cut tensor has no name; name it")


def _cut_bytes(graph: ir.Graph, derived: Sequence[_Derived]) -> dict[ir.Value, int]:
    """Every cut tensor, in topological order, with the weight bytes of its segment.

    The segment of cut ``k`` in that order holds the nodes that follow cut ``k - 1`` (in any
    configuration) and no later cut: a node's segment is one past the latest listed cut that
    precedes its stage, over every configuration. With one configuration, segments are stages.
    """
    position = {node: i for i, node in enumerate(topological_order(graph))}
    listed = sorted(
        {value for item in derived for value in item.cuts},
        key=lambda v: position[v.producer()],  # type: ignore[index]  # a cut value is a node output
    )
    index = {value: k for k, value in enumerate(listed)}
    segments: dict[ir.Node, int] = dict.fromkeys(position, 0)
    for item in derived:
        # The listed index of the cut ending each stage's predecessor, plus one.
        after = [0] + [index[value] + 1 for value in item.cuts]
        for node, stage in item.stages.items():
            segments[node] = max(segments[node], after[stage])
    per_segment = stage_weight_bytes(graph, segments, len(listed) + 1)
    return {value: per_segment[k] for k, value in enumerate(listed)}
