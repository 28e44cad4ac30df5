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
  id; new ones are ``cut_<n>`` with the next free ``n``.
* Memory numbers are the bytes of the weights and constants each stage uses (initializers
  and ``Constant`` tensors read by the stage's nodes, those inside their bodies included; a
  weight used by two stages counts in both), in MiB rounded up, at least 1. They leave out
  activations and runtime buffers: the planner brings the full memory model.
  ``memory_per_shard_mb[s]`` is stage ``s``; a cut point's ``shard_memory_mb`` is the stage
  before it and ``cumulative_memory_mb`` the running sum, both from the first configuration
  that uses the cut.
* Existing metadata keeps every other field; the shard counts are added to
  ``allowed_shards`` and ``min_shards`` / ``max_shards`` widened to include them. Without
  metadata a document is built from the graph (model name, parameters, inputs, outputs).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["StagesToOmnyPass", "stage_weight_bytes"]

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import BindingError
from onnx_ir_multidevice.analysis.boundaries import boundary_crossings, edge_violations
from onnx_ir_multidevice.analysis.stages import stages_from_annotations
from onnx_ir_multidevice.analysis.tensor_classes import classify_values
from onnx_ir_multidevice.checker.core import dtype_name
from onnx_ir_multidevice.graph.index import graph_uses, node_subgraphs, topological_order
from onnx_ir_multidevice.omny._schema import (
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)

_MIB = 1 << 20


def _mib(num_bytes: int) -> int:
    """Bytes to MiB, rounded up, at least 1 (the spec requires positive memory)."""
    return max(1, math.ceil(num_bytes / _MIB))


def _tensor_bytes(tensor: ir.TensorProtocol | None, value: ir.Value | None = None) -> int:
    if tensor is not None:
        return int(tensor.nbytes)
    if (
        value is not None
        and value.shape is not None
        and value.dtype is not None
        and all(isinstance(d, int) for d in value.shape)
    ):
        return int(math.ceil(math.prod(value.shape) * value.dtype.itemsize))
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
    """One staged configuration, turned into cut tensors and memory per stage."""

    configuration: ir.ModelConfiguration
    cuts: list[ir.Value]
    memory_mb: list[int]


class StagesToOmnyPass(ir.passes.InPlacePass):
    """Write ``.omny`` cut points and configurations from the model's pipeline stages.

    Raises:
        BindingError: A staged configuration is incomplete (a node without stage, an empty
            stage, a backward edge), a boundary carries no activation, or several without
            ``relaxed``, or a cut tensor's shape or dtype is unknown.
    """

    def __init__(
        self, configurations: Collection[str] | None = None, *, relaxed: bool = False
    ) -> None:
        """Create the pass.

        Args:
            configurations: Names of the model configurations to convert (default: every
                configuration with pipeline stages).
            relaxed: Accept boundaries that several activations cross (relaxed cuts).
        """
        super().__init__()
        self.configurations = None if configurations is None else frozenset(configurations)
        self.relaxed = relaxed

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Write the ``.omny`` metadata of ``model``; ``modified`` when it changed."""
        before = (
            model.metadata_props.get(OMNY_VERSION_KEY),
            model.metadata_props.get(OMNY_METADATA_KEY),
        )
        existing = omny.read(model)
        classes = classify_values(model.graph, functions=model.functions)
        derived = []
        for configuration in model.device_configurations:
            if self.configurations is not None and configuration.name not in self.configurations:
                continue
            item = self._derive(model.graph, configuration, classes)
            if item is not None:
                derived.append(item)
        if self.configurations is not None:
            missing = self.configurations - {d.configuration.name for d in derived}
            if missing:
                raise BindingError(
                    f"configuration(s) {sorted(missing)} are not on the model or have no "
                    "pipeline stages"
                )
        if not derived:
            raise BindingError(
                "no model configuration has pipeline stages; set them with "
                "Node.set_pipeline_stage first"
            )
        position = {node: i for i, node in enumerate(topological_order(model.graph))}
        metadata = _build_metadata(model, existing, derived, position)
        omny.write(model, metadata)
        after = (
            model.metadata_props.get(OMNY_VERSION_KEY),
            model.metadata_props.get(OMNY_METADATA_KEY),
        )
        return ir.passes.PassResult(model, modified=before != after)

    def _derive(
        self,
        graph: ir.Graph,
        configuration: ir.ModelConfiguration,
        classes: Mapping[ir.Value, object],
    ) -> _Derived | None:

        name = configuration.name
        stages = stages_from_annotations(graph, configuration)
        if all(s is None for s in stages.values()):
            return None
        missing = [n.name or n.op_type for n, s in stages.items() if s is None]
        if missing:
            raise BindingError(
                f"configuration {name!r}: {len(missing)} node(s) have no stage "
                f"(first: {missing[:5]}); give every main-graph node a stage"
            )
        staged: dict[ir.Node, int] = {n: s for n, s in stages.items() if s is not None}
        num_stages = configuration.num_devices
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
            num_stages=num_stages,  # type: ignore[arg-type]
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
            cut = max(activations, key=lambda v: _tensor_bytes(None, v))
            _check_describable(name, cut)
            cuts.append(cut)
        memory = [_mib(b) for b in stage_weight_bytes(graph, staged, num_stages)]
        return _Derived(configuration, cuts, memory)


def _check_describable(name: str, value: ir.Value) -> None:
    if value.shape is None or value.dtype is None:
        raise BindingError(
            f"configuration {name!r}: cut tensor {value.name!r} has no recorded shape or dtype; "
            "run shape inference (onnx_ir.passes.common.ShapeInferencePass) first"
        )
    if not value.name:
        raise BindingError(f"configuration {name!r}: the cut tensor has no name; name it")


def _tensor_info(value: ir.Value):
    shape = tuple(d if isinstance(d, int) else -1 for d in (value.shape or ()))
    dtype = dtype_name(value.dtype) if value.dtype is not None else "unknown"
    return TensorInfo(value.name or "", shape, dtype)


def _build_metadata(
    model: ir.Model,
    existing,
    derived: Sequence[_Derived],
    position: Mapping[ir.Node, int],
):
    # Cut values, shared, in topological order; memory from the first configuration using it.
    first_use: dict[ir.Value, tuple[int, int]] = {}  # value -> (shard mb, cumulative mb)
    for item in derived:
        running = 0
        for j, value in enumerate(item.cuts):
            running += item.memory_mb[j]
            first_use.setdefault(value, (item.memory_mb[j], running))
    ordered = sorted(first_use, key=lambda v: position[v.producer()])  # type: ignore[index]

    old_ids = {}
    used_ids: set[str] = set()
    if existing is not None:
        old_ids = {(c.tensor_name, c.after_node): c.id for c in existing.cut_points}
    ids: dict[ir.Value, str] = {}
    for value in ordered:
        producer = value.producer()
        cut_id = old_ids.get((value.name, producer.name if producer else ""))
        if cut_id is not None and cut_id not in used_ids:
            ids[value] = cut_id
            used_ids.add(cut_id)
    counter = 1
    for value in ordered:
        if value in ids:
            continue
        while f"cut_{counter}" in used_ids:
            counter += 1
        ids[value] = f"cut_{counter}"
        used_ids.add(ids[value])

    cut_points = []
    for value in ordered:
        info = _tensor_info(value)
        shard_mb, cumulative_mb = first_use[value]
        producer = value.producer()
        cut_points.append(
            CutPoint(
                id=ids[value],
                after_node=producer.name or "" if producer else "",
                tensor_name=value.name or "",
                shape=info.shape,
                dtype=info.dtype,
                cumulative_memory_mb=cumulative_mb,
                shard_memory_mb=shard_mb,
            )
        )
    configurations = tuple(
        ShardConfiguration(
            num_shards=item.configuration.num_devices,
            memory_per_shard_mb=tuple(item.memory_mb),
            cut_point_ids=tuple(ids[v] for v in item.cuts),
        )
        for item in derived
    )
    counts = {c.num_shards for c in configurations}
    if existing is not None:
        sharding = existing.sharding
        allowed = tuple(sorted(set(sharding.allowed_shards) | counts))
        sharding = dataclasses.replace(
            sharding,
            min_shards=min(sharding.min_shards, *counts),
            max_shards=max(sharding.max_shards, *counts),
            allowed_shards=allowed,
            configurations=configurations,
        )
        return dataclasses.replace(existing, cut_points=tuple(cut_points), sharding=sharding)
    defaults = Sharding()
    sharding = Sharding(
        min_vram_mb=defaults.min_vram_mb,
        max_shard_size_mb=defaults.max_shard_size_mb,
        min_shards=min(defaults.min_shards, *counts),
        max_shards=max(defaults.max_shards, *counts),
        allowed_shards=tuple(sorted(counts)),
        configurations=configurations,
    )
    weights = [v.const_value for v in model.graph.initializers.values()]
    params = sum(t.size for t in weights if t is not None)
    size = sum(int(t.nbytes) for t in weights if t is not None)
    return OmnyMetadata(
        model=ModelInfo(
            name=model.graph.name or "model",
            total_params=int(params),
            total_size_mb=_mib(size),
        ),
        inputs=tuple(_tensor_info(v) for v in model.graph.inputs),
        outputs=tuple(_tensor_info(v) for v in model.graph.outputs),
        cut_points=tuple(cut_points),
        sharding=sharding,
        export_info=ExportInfo(source_framework="onnx", onnx_opset=model.opset_imports.get("", 17)),
    )
