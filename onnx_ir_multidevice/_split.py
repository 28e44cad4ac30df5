"""Split a model into one runnable single-device ONNX model per pipeline stage.

Rules (see ``docs/splitting.md``):

* The stages come from a ``.omny`` shard configuration (its cut tensors, through
  :func:`onnx_ir_multidevice.analysis.stages.assign_stages`) or from an IR v11 annotation
  (``Node.device_configurations`` with a pipeline stage per node).
* Stage ``k`` holds the main-graph nodes of stage ``k``. A value it reads is

  - a *graph input* (forwarded): it becomes a stage input of the same name;
  - an *initializer*: it becomes an initializer of the stage, sharing the tensor object of the
    input model (no copy in memory), so a tied weight is held by every stage that reads it;
  - *replicable* (:class:`~onnx_ir_multidevice.analysis.tensor_classes.TensorClass`): its
    producer and that producer's own replicable cone are duplicated into the stage;
  - an *activation* of an earlier stage: it becomes a stage input of the same name, and an
    output of the stage that produces it.

* A stage's outputs are the activations later stages read and the graph outputs it produces,
  under their original names, so a runtime chains stages by name:
  ``env = dict(graph inputs); for each stage: env.update(stage.run({n: env[n] ...}))``.
* An ``If``/``Loop``/``Scan`` node is never cut: it runs whole in its stage, and the
  outer-scope values its bodies read count as values its stage reads.
* Opset imports, functions, IR version, producer and metadata are kept; the ``.omny`` metadata
  and the pipeline configurations used for the split are stripped (a stage is single-device).
  Two metadata entries say which stage a model is: ``onnx_ir_multidevice.stage`` and
  ``onnx_ir_multidevice.num_stages``.
* The input model is never modified: stage graphs are built from clones of its nodes.
  :func:`save_split` does not clone: it serializes the input nodes straight into each
  stage's proto, byte for byte what ``onnx_ir.save`` writes for the stage model (models
  with quantization annotations, initializers or configurations inside bodies, or
  functions below IR v10 are written through the stage models).
"""

from __future__ import annotations

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "STAGE_INDEX_KEY",
    "NUM_STAGES_KEY",
    "build_manifest",
    "pipeline_configurations",
    "resolve_stages",
    "save_split",
    "split",
    "split_at",
    "split_by_stages",
]

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir import _cloner

from onnx_ir_multidevice._arguments import require_model
from onnx_ir_multidevice._errors import OmnyIOError, SplitError
from onnx_ir_multidevice._format import OmnyMetadata, ShardConfiguration
from onnx_ir_multidevice._gc import gc_paused
from onnx_ir_multidevice.analysis.stages import assign_stages, stages_from_annotations
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass
from onnx_ir_multidevice.analysis.uses import AnalysisError, GraphIndex, holds_subgraphs

MANIFEST_FORMAT = "onnx-ir-multidevice/split"
"""Value of the ``format`` key of ``manifest.json``."""

MANIFEST_VERSION = 1
"""Value of the ``version`` key of ``manifest.json``."""

STAGE_INDEX_KEY = "onnx_ir_multidevice.stage"
"""``metadata_props`` key of a stage model: its 0-based stage index."""

NUM_STAGES_KEY = "onnx_ir_multidevice.num_stages"
"""``metadata_props`` key of a stage model: the number of stages of its split."""

_OMNY_KEYS = ("omnynet_version", "omnynet_metadata")

Configuration = int | str | ir.ModelConfiguration | ShardConfiguration | None
"""What ``configuration=`` accepts: see :func:`resolve_stages`."""


# ---------------------------------------------------------------------------------------------
# Graph indexes


def _node_label(node: ir.Node) -> str:
    return repr(node.name) if node.name else f"<anonymous {node.op_type}>"


def _value_label(value: ir.Value) -> str:
    return repr(value.name) if value.name else "<unnamed value>"


@dataclasses.dataclass
class _GraphIndex:
    """Indexes of a main graph computed once per split (all linear in the graph size).

    A thin view of one shared :class:`~onnx_ir_multidevice.analysis.uses.GraphIndex`
    (:attr:`shared`): its topological order, uses and tensor classes are computed once and
    passed as ``index=`` to the analyses, which then reuse them instead of recomputing.
    """

    graph: ir.Graph
    shared: GraphIndex
    """The analysis index of :attr:`graph`, passed to the analyses as ``index=``."""
    order: Sequence[ir.Node]
    """Main-graph nodes in a topological order (captured values count as inputs)."""
    position: dict[ir.Node, int]
    reads: Mapping[ir.Node, Sequence[ir.Value]]
    """Main-graph values each node reads: its inputs, then values captured by its bodies."""
    graph_inputs: dict[ir.Value, int]
    """Graph inputs and their positions."""
    initializers: set[ir.Value]

    @classmethod
    def build(cls, graph: ir.Graph) -> _GraphIndex:
        try:
            shared = GraphIndex.build(graph)
        except AnalysisError as error:
            raise SplitError(f"The main graph cannot be split: {error}") from error
        return cls(
            graph=graph,
            shared=shared,
            order=shared.nodes,
            position=shared.position,
            reads=dict(zip(shared.nodes, shared.uses)),
            graph_inputs={v: i for i, v in enumerate(graph.inputs)},
            initializers=set(graph.initializers.values()),
        )

    @property
    def classes(self) -> dict[ir.Value, TensorClass]:
        """``classify_values(graph)``, computed once (cached on :attr:`shared`)."""
        return self.shared.classes

    def values_named(self, names: Sequence[str]) -> dict[str, ir.Value]:
        """The first main-graph value of each name in ``names``.

        Inputs first, then initializers, then node outputs; only ``names`` are looked up.
        """
        return {name: found[0] for name, found in self.shared.values_named(names).items()}


# ---------------------------------------------------------------------------------------------
# Stage assignment: from .omny cut points or from IR v11 annotations


def pipeline_configurations(graph: ir.Graph) -> list[ir.ModelConfiguration]:
    """Return the configurations that give a pipeline stage to a main-graph node.

    These are the configurations a split can use, and the ones stripped from stage models.

    Args:
        graph: The main graph.

    Returns:
        The configurations, in order of first use.
    """
    found: dict[int, ir.ModelConfiguration] = {}
    for node in graph:
        for entry in node.device_configurations:
            if entry.pipeline_stage is not None and entry.configuration is not None:
                found.setdefault(id(entry.configuration), entry.configuration)
    return list(found.values())


def _stages_from_annotations(
    index: _GraphIndex, configuration: ir.ModelConfiguration
) -> dict[ir.Node, int]:
    stages: dict[ir.Node, int] = {}
    for node, stage in stages_from_annotations(
        index.graph, configuration, index=index.shared
    ).items():
        if stage is None:
            raise SplitError(
                f"Node {_node_label(node)} has no pipeline stage in configuration "
                f"{configuration.name!r}; annotate every main-graph node (annotate()) "
                "before splitting."
            )
        if stage >= configuration.num_devices:
            raise SplitError(
                f"Node {_node_label(node)} is in pipeline stage {stage} but configuration "
                f"{configuration.name!r} has only {configuration.num_devices} devices."
            )
        stages[node] = stage
    return stages


def _read_metadata(model: ir.Model) -> OmnyMetadata | None:
    if not any(key in model.metadata_props for key in _OMNY_KEYS):
        return None
    from onnx_ir_multidevice import omny

    return omny.read(model)


def _cuts_from_metadata(
    index: _GraphIndex,
    metadata: OmnyMetadata,
    shards: int,
    configuration: int | ShardConfiguration | None,
) -> list[ir.Value]:
    """Resolve the cut tensors of the chosen ``.omny`` shard configuration."""
    configurations = tuple(metadata.sharding.configurations)
    if configuration is None:
        matches = [i for i, c in enumerate(configurations) if c.num_shards == shards]
        if not matches:
            available = sorted({c.num_shards for c in configurations})
            raise SplitError(
                f"The .omny metadata has no shard configuration with num_shards={shards} "
                f"(available: {available or 'none'}); plan one with `omny plan --shards "
                f"{shards}` or pass another shard count."
            )
        position = matches[0]
    elif isinstance(configuration, int):
        if not 0 <= configuration < len(configurations):
            raise SplitError(
                f"sharding.configurations[{configuration}] does not exist: the .omny metadata "
                f"has {len(configurations)} configuration(s)."
            )
        position = configuration
    else:
        position = next((i for i, c in enumerate(configurations) if c is configuration), -1)
        if position < 0:
            position = next((i for i, c in enumerate(configurations) if c == configuration), -1)
        if position < 0:
            raise SplitError("The shard configuration given is not one of the .omny metadata.")
    chosen = configurations[position]
    path = f"sharding.configurations[{position}]"
    if chosen.num_shards != shards:
        raise SplitError(f"{path} has num_shards={chosen.num_shards}, not {shards}.")
    if len(chosen.cut_point_ids) != shards - 1:
        raise SplitError(
            f"{path} lists {len(chosen.cut_point_ids)} cut point(s); {shards} shards need "
            f"{shards - 1}."
        )
    cut_points = {c.id: c for c in metadata.cut_points}
    by_name = index.values_named(
        [cut_points[i].tensor_name for i in chosen.cut_point_ids if i in cut_points]
    )
    cuts: list[ir.Value] = []
    for j, cut_id in enumerate(chosen.cut_point_ids):
        cut_point = cut_points.get(cut_id)
        if cut_point is None:
            raise SplitError(
                f"{path}.cut_point_ids[{j}]: cut point {cut_id!r} is not defined in cut_points."
            )
        value = by_name.get(cut_point.tensor_name)
        if value is None:
            raise SplitError(
                f"{path}.cut_point_ids[{j}]: cut point {cut_id!r} names tensor "
                f"{cut_point.tensor_name!r}, which is not a value of the main graph."
            )
        cuts.append(value)
    return cuts


def _sort_cuts(index: _GraphIndex, cuts: Sequence[ir.Value]) -> list[ir.Value]:
    def key(value: ir.Value) -> int:
        producer = value.producer()
        return index.position.get(producer, -1) if producer is not None else -1

    return sorted(cuts, key=key)


def _stages_from_cuts(index: _GraphIndex, cuts: Sequence[ir.Value]) -> dict[ir.Node, int]:
    for cut in cuts:
        if cut.graph is not index.graph:
            raise SplitError(f"Cut tensor {_value_label(cut)} is not a value of the main graph.")
    try:
        return assign_stages(index.graph, _sort_cuts(index, cuts), index=index.shared)
    except SplitError:
        raise
    except ValueError as error:
        names = ", ".join(_value_label(c) for c in cuts)
        raise SplitError(f"Cannot assign stages for cuts [{names}]: {error}") from error


def resolve_stages(
    model: ir.Model,
    shards: int,
    *,
    configuration: Configuration = None,
    metadata: OmnyMetadata | None = None,
) -> dict[ir.Node, int]:
    """Return the pipeline stage of every main-graph node for a split into ``shards`` stages.

    Args:
        model: The model (not modified).
        shards: Number of stages.
        configuration: Which configuration to use. ``None``: the first ``.omny`` shard
            configuration with ``num_shards == shards``, else the first IR v11 configuration
            with ``num_devices == shards`` that gives nodes pipeline stages. An ``int``: the
            index of a ``.omny`` configuration (``sharding.configurations[i]``). A ``str``: the
            name of an IR v11 :class:`~onnx_ir.ModelConfiguration`. A
            :class:`~onnx_ir.ModelConfiguration` or ``ShardConfiguration`` object.
        metadata: ``.omny`` metadata (:class:`~onnx_ir_multidevice._format.OmnyMetadata`) to
            use instead of the one stored in the model.

    Returns:
        The stage (0-based) of every main-graph node.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: No such configuration, or its cut points do not resolve.
    """
    require_model(model, "resolve_stages")
    with gc_paused():
        return _resolve(_GraphIndex.build(model.graph), model, shards, configuration, metadata)


def _resolve(
    index: _GraphIndex,
    model: ir.Model,
    shards: int,
    configuration: Configuration,
    metadata: OmnyMetadata | None,
) -> dict[ir.Node, int]:
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise SplitError(f"shards must be a positive integer, got {shards!r}.")
    if isinstance(configuration, ir.ModelConfiguration):
        if configuration.num_devices != shards:
            raise SplitError(
                f"Configuration {configuration.name!r} has {configuration.num_devices} devices, "
                f"not {shards}."
            )
        return _stages_from_annotations(index, configuration)
    if isinstance(configuration, str):
        named = [c for c in model.device_configurations if c.name == configuration]
        if not named:
            names = [c.name for c in model.device_configurations]
            raise SplitError(
                f"The model has no device configuration named {configuration!r} "
                f"(it has: {names or 'none'})."
            )
        return _resolve(index, model, shards, named[0], metadata)
    if metadata is None:
        metadata = _read_metadata(model)
    if configuration is not None:
        if metadata is None:
            raise SplitError("The model has no .omny metadata to take the configuration from.")
        return _stages_from_cuts(index, _cuts_from_metadata(index, metadata, shards, configuration))
    if metadata is not None and any(
        c.num_shards == shards for c in metadata.sharding.configurations
    ):
        return _stages_from_cuts(index, _cuts_from_metadata(index, metadata, shards, None))
    annotated = [c for c in pipeline_configurations(index.graph) if c.num_devices == shards]
    if annotated:
        return _stages_from_annotations(index, annotated[0])
    if shards == 1:
        return dict.fromkeys(index.order, 0)
    available = sorted({c.num_shards for c in metadata.sharding.configurations}) if metadata else []
    raise SplitError(
        f"No configuration for {shards} shards: the model's .omny metadata offers "
        f"{available or 'none'} and it has no pipeline annotation with {shards} devices. "
        f"Plan one first (`omny plan --shards {shards}`)."
    )


# ---------------------------------------------------------------------------------------------
# Building the stage models


@dataclasses.dataclass
class _StagePlan:
    nodes: list[ir.Node] = dataclasses.field(default_factory=list)
    inputs: dict[ir.Value, None] = dataclasses.field(default_factory=dict)
    initializers: dict[ir.Value, None] = dataclasses.field(default_factory=dict)
    outputs: dict[ir.Value, None] = dataclasses.field(default_factory=dict)


def _plan_stages(
    index: _GraphIndex, stage_of: Mapping[ir.Node, int], num_stages: int
) -> list[_StagePlan]:
    """Decide the nodes, inputs, initializers and outputs of every stage."""
    graph = index.graph
    for node in index.order:
        stage = stage_of.get(node)
        if stage is None:
            raise SplitError(f"Node {_node_label(node)} has no stage.")
        if not 0 <= stage < num_stages:
            raise SplitError(
                f"Node {_node_label(node)} is in stage {stage}, outside 0..{num_stages - 1}."
            )
    replicable = {v for v, c in index.classes.items() if c is TensorClass.REPLICABLE}
    plans = [_StagePlan() for _ in range(num_stages)]
    home_nodes: list[list[ir.Node]] = [[] for _ in range(num_stages)]
    for node in index.order:
        home_nodes[stage_of[node]].append(node)
    for stage, nodes in enumerate(home_nodes):
        if not nodes:
            raise SplitError(
                f"Stage {stage} of {num_stages} would have no node: two cut points coincide or "
                "a cut is placed before the first computation. Choose other cut points."
            )

    # Graph outputs are produced by the stage of their producer.
    for value in graph.outputs:
        producer = value.producer()
        if producer is not None and producer.graph is graph:
            plans[stage_of[producer]].outputs[value] = None
        elif value in index.initializers and value not in index.graph_inputs:
            last = plans[-1]
            last.initializers[value] = None
            last.outputs[value] = None

    for stage, plan in enumerate(plans):
        members: set[ir.Node] = set(home_nodes[stage])
        pending: list[tuple[ir.Node, ir.Value]] = [
            (node, v) for node in home_nodes[stage] for v in index.reads[node]
        ]
        while pending:
            reader, value = pending.pop()
            if value in index.graph_inputs:
                plan.inputs[value] = None
                if value in index.initializers:
                    plan.initializers[value] = None
                continue
            producer = value.producer()
            if producer is None:
                if value in index.initializers:
                    plan.initializers[value] = None
                    continue
                raise SplitError(
                    f"Node {_node_label(reader)} reads {_value_label(value)}, which is neither "
                    "a graph input, an initializer nor produced by a node."
                )
            if producer in members:
                continue
            home = stage_of[producer]
            if value in replicable and home != stage:
                members.add(producer)
                pending.extend((producer, v) for v in index.reads[producer])
            elif home < stage:
                plan.inputs[value] = None
                plans[home].outputs[value] = None
            else:
                raise SplitError(
                    f"Node {_node_label(reader)} (stage {stage}) reads {_value_label(value)} "
                    f"produced by node {_node_label(producer)} in the later stage {home}; "
                    "stages must only read earlier stages."
                )
        plan.nodes = sorted(members, key=index.position.__getitem__)

    # Deterministic orders: graph inputs as in the graph, then activations in production order.
    for plan in plans:
        plan.inputs = dict.fromkeys(sorted(plan.inputs, key=lambda v: _value_order(index, v)), None)
        plan.outputs = dict.fromkeys(
            sorted(plan.outputs, key=lambda v: _value_order(index, v)), None
        )
    for stage, plan in enumerate(plans):
        if not plan.outputs:
            raise SplitError(
                f"Stage {stage} produces nothing that a later stage or the graph outputs read; "
                "its nodes are dead code or the cut points are misplaced."
            )
        for value in (*plan.inputs, *plan.outputs):
            if not value.name:
                raise SplitError(
                    f"A value crossing into or out of stage {stage} has no name (produced by "
                    f"{_node_label(value.producer()) if value.producer() else 'nobody'}); "
                    "name every value (onnx_ir.passes.common.NameFixPass) before splitting."
                )
            if value.type is None:
                raise SplitError(
                    f"Value {_value_label(value)} crosses a stage boundary but has no type; run "
                    "shape inference (onnx_ir.passes.common.ShapeInferencePass) before "
                    "splitting."
                )
    return plans


def _value_order(index: _GraphIndex, value: ir.Value) -> tuple[int, int]:
    producer = value.producer()
    if producer is None or producer not in index.position:
        return (-1, index.graph_inputs.get(value, len(index.graph_inputs)))
    return (index.position[producer], value.index() or 0)


def _copy_value(value: ir.Value, *, const: bool) -> ir.Value:
    new = ir.Value(
        name=value.name,
        type=value.type,
        shape=value.shape.copy() if value.shape is not None else None,
        doc_string=value.doc_string,
        const_value=value.const_value if const else None,
    )
    if value.metadata_props:
        new.metadata_props.update(value.metadata_props)
    return new


def _strip_configurations(node: ir.Node, stripped: set[int]) -> None:
    if node.device_configurations:
        node.device_configurations = tuple(
            c
            for c in node.device_configurations
            if c.configuration is None or id(c.configuration) not in stripped
        )


def _clone_node(
    node: ir.Node, value_map: dict[ir.Value, ir.Value | None], cloner: _cloner.Cloner
) -> ir.Node:
    """Clone ``node`` as ``cloner.clone_node`` does, without its overheads for a plain node.

    A plain node (no subgraph, no ``meta``, no device configuration, every input already
    cloned) is rebuilt directly; its non-graph attributes are shared, as the cloner shares
    them. Any other node goes through ``cloner``.
    """
    if node.device_configurations or holds_subgraphs(node) or node.meta:
        return cloner.clone_node(node)
    try:
        inputs = [value_map[v] if v is not None else None for v in node.inputs]
    except KeyError:
        return cloner.clone_node(node)  # an outer-scope value: the cloner says so
    outputs = []
    for output in node.outputs:
        shape = output.shape
        new = ir.Value(
            name=output.name,
            type=output.type,
            shape=shape.copy() if shape is not None else None,
            doc_string=output.doc_string,
            const_value=output.const_value,
        )
        if output.metadata_props:
            new.metadata_props.update(output.metadata_props)
        if output.meta:
            cloner.clone_meta(output.meta, new.meta)
        value_map[output] = new
        outputs.append(new)
    return ir.Node(
        node.domain,
        node.op_type,
        inputs,
        node.attributes.values(),
        overload=node.overload,
        outputs=outputs,
        version=node.version,
        name=node.name,
        doc_string=node.doc_string,
        metadata_props=dict(node.metadata_props) if node.metadata_props else None,
    )


def _build_stage_model(
    model: ir.Model,
    plan: _StagePlan,
    stage: int,
    num_stages: int,
    stripped: set[int],
    *,
    with_nodes: bool = True,
) -> ir.Model:
    """Build the model of one stage.

    With ``with_nodes=False`` the stage graph has no node (a *skeleton*): its inputs,
    initializers, outputs (fresh values standing for the node outputs), functions and
    metadata are those of the stage; :func:`_write_stage_direct` serializes the nodes.
    """
    graph = model.graph
    value_map: dict[ir.Value, ir.Value | None] = {}
    inputs: list[ir.Value] = []
    for value in plan.inputs:
        new = _copy_value(value, const=value in plan.initializers)
        value_map[value] = new
        inputs.append(new)
    initializers: list[ir.Value] = []
    for value in plan.initializers:
        new = value_map.get(value)
        if new is None:
            new = _copy_value(value, const=True)
            value_map[value] = new
        initializers.append(new)
    cloner = _cloner.Cloner(
        attr_map={},
        value_map=value_map,
        metadata_props={},
        post_process=lambda n: _strip_configurations(n, stripped),
    )
    nodes = [_clone_node(node, value_map, cloner) for node in plan.nodes] if with_nodes else []
    outputs = []
    for value in plan.outputs:
        new = value_map.get(value)
        if new is None:
            assert not with_nodes
            new = _copy_value(value, const=False)
            value_map[value] = new
        outputs.append(new)
    stage_graph = ir.Graph(
        inputs,
        outputs,
        nodes=nodes,
        initializers=initializers,
        doc_string=graph.doc_string,
        opset_imports=dict(graph.opset_imports),
        name=graph.name,
    )
    if graph.metadata_props:
        stage_graph.metadata_props.update(graph.metadata_props)
    metadata_props = {k: v for k, v in model.metadata_props.items() if k not in _OMNY_KEYS}
    metadata_props[STAGE_INDEX_KEY] = str(stage)
    metadata_props[NUM_STAGES_KEY] = str(num_stages)
    functions = []
    for function in model.functions.values():
        clone = function.clone()
        for node in ir.traversal.RecursiveGraphIterator(clone):
            _strip_configurations(node, stripped)
        functions.append(clone)
    return ir.Model(
        stage_graph,
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
        doc_string=model.doc_string,
        functions=functions,
        metadata_props=metadata_props,
        device_configurations=tuple(
            c for c in model.device_configurations if id(c) not in stripped
        ),
    )


def split_by_stages(
    model: ir.Model, stages: Mapping[ir.Node, int], num_stages: int | None = None
) -> list[ir.Model]:
    """Split ``model`` given the stage of every main-graph node.

    Args:
        model: The model (not modified).
        stages: The 0-based stage of every node of ``model.graph``; a stage may only read
            values of earlier stages (replicable values excepted: they are recomputed).
        num_stages: Number of stages; defaults to ``max(stages) + 1``.

    Returns:
        One model per stage.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: A node has no stage or reads a later stage, a stage is empty or produces
            nothing, or a value crossing a boundary has no name or type.
    """
    require_model(model, "split_by_stages")
    with gc_paused():
        return _split_with_index(_GraphIndex.build(model.graph), model, stages, num_stages)


def _split_with_index(
    index: _GraphIndex,
    model: ir.Model,
    stages: Mapping[ir.Node, int],
    num_stages: int | None,
) -> list[ir.Model]:
    if num_stages is None:
        num_stages = max(stages.values(), default=0) + 1
    plans = _plan_stages(index, stages, num_stages)
    stripped = {id(c) for c in pipeline_configurations(model.graph)}
    return [
        _build_stage_model(model, plan, i, num_stages, stripped) for i, plan in enumerate(plans)
    ]


def split(
    model: ir.Model,
    shards: int,
    *,
    configuration: Configuration = None,
    metadata: OmnyMetadata | None = None,
) -> list[ir.Model]:
    """Split ``model`` into ``shards`` runnable single-device models, one per pipeline stage.

    Stage ``i``'s inputs are names resolved against the original graph inputs and the outputs
    of earlier stages; stage outputs keep the original tensor names. A ``.omny`` cut point
    is located by its ``tensor_name`` (its ``after_node`` is checked by ``omny check``).
    Weights are shared with ``model`` in memory (not copied); a weight read by several
    stages is an initializer of each. Replicable values (masks, shape arithmetic, transposed
    weights) are recomputed in every stage that reads them.

    .. versionadded:: 0.1

    Args:
        model: The model to split, an :class:`onnx_ir.Model`; it is not modified. ``split``
            does not load files (as :func:`~onnx_ir_multidevice.verify`): pass
            ``onnx_ir_multidevice.load(path)``; a path or an ``onnx.ModelProto`` raises
            ``TypeError``. :func:`save_split` writes the stages to files.
        shards: Number of stages.
        configuration: Which configuration to split by; see :func:`resolve_stages`. By
            default the ``.omny`` shard configuration with ``num_shards == shards``, else an IR
            v11 pipeline annotation with ``num_devices == shards``.
        metadata: ``.omny`` metadata to use instead of the one stored in ``model``, for
            example the result of the planner.

    Returns:
        The stage models, in pipeline order.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: No configuration for ``shards``, unresolved cut points, or a graph that
            cannot be split at those cuts.
    """
    require_model(model, "split")
    with gc_paused():
        index = _GraphIndex.build(model.graph)
        stages = _resolve(index, model, shards, configuration, metadata)
        return _split_with_index(index, model, stages, shards)


def split_at(model: ir.Model, cuts: Sequence[ir.Value | str]) -> list[ir.Model]:
    """Split ``model`` at the given cut tensors (``len(cuts) + 1`` stages).

    Args:
        model: The model (not modified).
        cuts: Cut tensors (values of the main graph, or their names); sorted into graph order.

    Returns:
        The stage models.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: A name does not resolve or the cuts do not split the graph.
    """
    require_model(model, "split_at")
    with gc_paused():
        return _split_at(model, cuts)


def _split_at(model: ir.Model, cuts: Sequence[ir.Value | str]) -> list[ir.Model]:
    index = _GraphIndex.build(model.graph)
    by_name = index.values_named([cut for cut in cuts if isinstance(cut, str)])
    values: list[ir.Value] = []
    for cut in cuts:
        if isinstance(cut, str):
            value = by_name.get(cut)
            if value is None:
                raise SplitError(f"Cut tensor {cut!r} is not a value of the main graph.")
            values.append(value)
        else:
            values.append(cut)
    stages = _stages_from_cuts(index, values)
    return _split_with_index(index, model, stages, len(values) + 1)


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
    graph_inputs = [v.name for v in model.graph.inputs]
    graph_outputs = [v.name for v in model.graph.outputs]
    produced_by: dict[str, int | str] = dict.fromkeys(graph_inputs, "input")
    consumers: dict[tuple[int, str], list[int | str]] = {}
    entries = []
    for i, stage in enumerate(stages):
        inputs = []
        for value in stage.graph.inputs:
            source = produced_by.get(value.name)  # type: ignore[arg-type]
            if source is None:
                raise SplitError(
                    f"Stage {i} reads {value.name!r}, which is neither a graph input nor an "
                    "output of an earlier stage."
                )
            if isinstance(source, int):
                consumers[(source, value.name)].append(i)  # type: ignore[index]
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


def _has_weights(stage: ir.Model) -> bool:
    """Whether ``stage`` holds a weight of at least one byte.

    The main graph is checked first, so a stage with weights is answered without walking
    its nodes.
    """
    for value in stage.graph.initializers.values():
        if value.const_value is not None and value.const_value.nbytes > 0:
            return True
    for graph in stage.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None and value.const_value.nbytes > 0:
                return True
    return False


def _check_outdir(outdir: Path, force: bool) -> None:
    """Refuse an ``outdir`` that cannot take the split, saying what to pass instead."""
    if outdir.exists():
        if not outdir.is_dir():
            raise OmnyIOError(
                f"{outdir}: exists and is not a directory; the split is a directory of stage "
                "files: pass a directory that does not exist yet or is empty, e.g. "
                f"{outdir.with_name(outdir.stem + '_split')}"
            )
        if not force and any(outdir.iterdir()):
            raise OmnyIOError(
                f"{outdir}: directory is not empty; choose another one or pass --force "
                "(force=True) to replace it."
            )
    else:
        parent = outdir.parent
        if not parent.is_dir():
            raise OmnyIOError(
                f"{outdir}: the folder {parent} "
                f"{'is not a directory' if parent.exists() else 'does not exist'}; create it "
                "first (only the output directory itself is created)"
            )


def save_split(
    model: ir.Model,
    outdir: str | os.PathLike,
    shards: int,
    *,
    configuration: Configuration = None,
    metadata: OmnyMetadata | None = None,
    force: bool = False,
    external_data_threshold: int = 1024,
) -> dict[str, Any]:
    """Split ``model`` and write ``stage_<i>.onnx`` files and ``manifest.json`` to ``outdir``.

    Every stage is self-contained: its weights larger than ``external_data_threshold`` bytes
    go to ``stage_<i>.onnx.data`` next to it, so a weight read by two stages (a tied
    embedding) is written once per stage. Weights the model holds as external data are
    copied file to file by the kernel (``copy_file_range``: no user-space buffer, a reflink
    on copy-on-write file systems); weights in memory are written from their buffers.
    Referencing the model's own data file instead is not possible: onnxruntime and onnx-ir
    refuse external data outside the model's folder or reached through a link.

    The files are written into a temporary sibling directory which is then renamed to
    ``outdir``, so ``outdir`` never holds a half-written split.

    Args:
        model: The model to split (not modified).
        outdir: Directory to create. It must not exist or be empty unless ``force``; its
            parent folder must exist (it is not created, as in
            :func:`~onnx_ir_multidevice.save`).
        shards: Number of stages.
        configuration: See :func:`split`.
        metadata: See :func:`split`.
        force: Replace a non-empty ``outdir``.
        external_data_threshold: Size in bytes above which a weight goes to the stage's
            external data file; smaller ones are embedded in the stage file.

    Returns:
        The manifest that was written.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: The model cannot be split so.
        OmnyIOError: ``outdir`` is a file, is not empty (without ``force``), its parent
            folder does not exist, or it cannot be written.
    """
    require_model(model, "save_split")
    target = Path(outdir).absolute()
    _check_outdir(target, force)
    # The stage graphs and their protos are large acyclic object graphs: without the pause
    # the first save after the split pays a full collection of every cloned node.
    with gc_paused():
        return _save_split(model, target, shards, configuration, metadata, external_data_threshold)


class _NotDirect(Exception):
    """A stage uses a feature :func:`_write_stage_direct` does not write as ``ir.save`` does."""


_QUANTIZATION_KEY = "quant_parameter_tensor_names"
"""``Value.meta`` key onnx-ir serializes as a ``quantization_annotation`` of the graph."""

_FUNCTION_VALUE_INFO_IR_VERSION = 10
"""Below this IR version onnx-ir writes function value infos into the main graph."""


def _direct_writable(model: ir.Model) -> bool:
    """Whether the stages of ``model`` can be written without cloning their nodes.

    Models whose function value infos go into the main graph (IR version < 10) are written
    through the stage models; the per-node conditions are checked while writing.
    """
    return not model.functions or model.ir_version >= _FUNCTION_VALUE_INFO_IR_VERSION


def _plain_subgraphs(node: ir.Node) -> bool:
    """Whether the bodies of ``node`` hold no initializer and no device configuration.

    Such a node serializes as its clone does (``ir.save`` would move body initializers to
    external data, and a split strips pipeline configurations inside bodies).
    """
    for attribute in node.attributes.values():
        if attribute.type == ir.AttributeType.GRAPH:
            graphs = [attribute.as_graph()]
        elif attribute.type == ir.AttributeType.GRAPHS:
            graphs = list(attribute.as_graphs())
        else:
            continue
        for graph in graphs:
            if graph.initializers:
                return False
            for inner in ir.traversal.RecursiveGraphIterator(graph):
                if inner.device_configurations or not _plain_subgraphs(inner):
                    return False
    return True


def _write_stage_direct(
    model: ir.Model,
    skeleton: ir.Model,
    plan: _StagePlan,
    path: Path,
    data: str | None,
    external_data_threshold: int,
    stripped: set[int],
) -> None:
    """Write one stage as ``ir.save(stage_model, ...)`` would, serializing the input nodes.

    ``skeleton`` is the stage model without nodes (:func:`_build_stage_model` with
    ``with_nodes=False``): its weights go to ``data`` exactly as ``ir.save`` moves them, then
    the nodes of the plan are serialized from the input model straight into the graph proto
    (no clone), with the value infos of their outputs that are not stage outputs, as
    ``onnx_ir.serde`` writes the cloned nodes, and the split's pipeline configurations
    stripped.

    Raises:
        _NotDirect: A node carries a quantization annotation or a body this writer does not
            reproduce; the caller writes the stage model instead.
    """
    if data is not None:
        skeleton = ir.external_data.unload_from_model(
            skeleton, path.parent, data, size_threshold_bytes=external_data_threshold
        )
    proto = ir.serde.serialize_model(skeleton)
    graph_proto = proto.graph
    node_protos = graph_proto.node
    value_infos = graph_proto.value_info
    outputs = plan.outputs
    ir_version = model.ir_version
    serialize_node_into = ir.serde.serialize_node_into
    serialize_value_into = ir.serde.serialize_value_into
    keep_configurations = ir_version >= 11
    for node in plan.nodes:
        if holds_subgraphs(node) and not _plain_subgraphs(node):
            raise _NotDirect
        node_proto = node_protos.add()
        serialize_node_into(node_proto, from_=node, model_ir_version=ir_version)
        if node.device_configurations:
            del node_proto.device_configurations[:]
            if keep_configurations:
                for entry in node.device_configurations:
                    if entry.configuration is None or id(entry.configuration) not in stripped:
                        node_proto.device_configurations.add().CopyFrom(
                            ir.serde.serialize_node_device_configuration(entry)
                        )
        for output in node.outputs:
            if output.meta.get(_QUANTIZATION_KEY):
                raise _NotDirect
            if output in outputs or not output.name:
                continue
            if (
                output.type is None
                and output.shape is None
                and not output.metadata_props
                and not output.doc_string
            ):
                continue
            serialize_value_into(value_infos.add(), output)
    onnx.save(proto, path)


def _save_split(
    model: ir.Model,
    target: Path,
    shards: int,
    configuration: Configuration,
    metadata: OmnyMetadata | None,
    external_data_threshold: int,
) -> dict[str, Any]:
    index = _GraphIndex.build(model.graph)
    stage_of = _resolve(index, model, shards, configuration, metadata)
    plans = _plan_stages(index, stage_of, shards)
    stripped = {id(c) for c in pipeline_configurations(model.graph)}
    direct = _direct_writable(model)
    # Without nodes when writing directly: build_manifest reads only the stage inputs/outputs.
    stages = [
        _build_stage_model(model, plan, i, shards, stripped, with_nodes=not direct)
        for i, plan in enumerate(plans)
    ]
    files = [_stage_file(i) for i in range(len(stages))]
    manifest = build_manifest(model, stages, files=files)
    try:
        temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot create the output directory: {error}") from error
    try:
        for i, (entry, stage, file) in enumerate(zip(manifest["stages"], stages, files)):
            path = temporary / file
            data = f"{file}.data" if _has_weights(stage) else None
            if direct:
                try:
                    _write_stage_direct(
                        model, stage, plans[i], path, data, external_data_threshold, stripped
                    )
                except _NotDirect:
                    direct = False
            if not direct:
                if stage.graph.num_nodes() < len(plans[i].nodes):  # a skeleton
                    stage = _build_stage_model(model, plans[i], i, shards, stripped)
                    data = f"{file}.data" if _has_weights(stage) else None
                if data is not None:
                    ir.save(
                        stage,
                        path,
                        external_data=data,
                        size_threshold_bytes=external_data_threshold,
                    )
                else:
                    ir.save(stage, path)
            data_files: list[str] = []
            if data is not None and (temporary / data).exists():
                if (temporary / data).stat().st_size == 0:
                    (temporary / data).unlink()
                else:
                    data_files.append(data)
            entry["external_data"] = data_files
        with open(temporary / "manifest.json", "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2)
            f.write("\n")
        _replace_directory(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return manifest


def _replace_directory(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, replacing ``target`` (a directory) if it exists."""
    try:
        if not target.exists():
            os.rename(source, target)
            return
        if not any(target.iterdir()):
            target.rmdir()
            os.rename(source, target)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        old.rmdir()
        os.rename(target, old)
        try:
            os.rename(source, target)
        except OSError:
            os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot move the split into place: {error}") from error
