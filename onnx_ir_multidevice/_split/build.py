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
* Opset imports, functions, producer and metadata are kept, and the IR version unless the model
  is at IR 11 or above (annotated): a stage then gets the lowest version its content needs
  (:func:`~onnx_ir_multidevice.graph.ir_versions.lowest_ir_version`), 8 to 10 once the
  split's configurations are gone, which onnxruntime 1.20 to 1.22 read; the ``.omny`` metadata,
  the record of the model's data file and the pipeline configurations used for the split are
  stripped (a stage is single-device, with its own data file).
  Two metadata entries say which stage a model is: ``onnx_ir_multidevice.stage`` and
  ``onnx_ir_multidevice.num_stages``.
* The input model is never modified: stage graphs are built from clones of its nodes.
  :func:`save_split` does not clone: it serializes the input nodes straight into each
  stage's proto, byte for byte what ``onnx_ir.save`` writes for the stage model (models
  with quantization annotations, initializers or configurations inside bodies, or
  functions below IR v10 are written through the stage models).
"""

from __future__ import annotations

__all__ = ["NUM_STAGES_KEY", "STAGE_INDEX_KEY", "split", "split_at", "split_by_stages"]

import dataclasses
import os
from collections.abc import Mapping, Sequence

import onnx_ir as ir
from onnx_ir import _cloner

from onnx_ir_multidevice._errors import OmnyFormatError, SplitError
from onnx_ir_multidevice._proto.external import DATA_RECORD_KEY
from onnx_ir_multidevice._split.select import (
    Configuration,
    _build_index,
    _node_label,
    _resolve,
    _stages_from_cuts,
    _value_label,
    pipeline_configurations,
)
from onnx_ir_multidevice._split.shape_rewrite import recompute_from_inputs
from onnx_ir_multidevice._util import gc_paused, require_model
from onnx_ir_multidevice.analysis.boundaries import boundary_problem
from onnx_ir_multidevice.analysis.shape_reads import ShapeRead
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, default_classes, shape_reads
from onnx_ir_multidevice.graph.index import GraphIndex, holds_subgraphs
from onnx_ir_multidevice.graph.ir_versions import lowest_ir_version
from onnx_ir_multidevice.omny._schema import OMNY_METADATA_KEY, OMNY_VERSION_KEY, OmnyMetadata
from onnx_ir_multidevice.omny.planning_dims import read_planning_dims

STAGE_INDEX_KEY = "onnx_ir_multidevice.stage"
"""``metadata_props`` key of a stage model: its 0-based stage index."""

NUM_STAGES_KEY = "onnx_ir_multidevice.num_stages"
"""``metadata_props`` key of a stage model: the number of stages of its split."""

_OMNY_KEYS = (OMNY_VERSION_KEY, OMNY_METADATA_KEY, DATA_RECORD_KEY)
"""Model ``metadata_props`` a stage does not inherit: the ``.omny`` plan, and the record of
the model's data file (a stage has its own data file, or none)."""


# ---------------------------------------------------------------------------------------------
# Building the stage models


@dataclasses.dataclass
class _StagePlan:
    nodes: list[ir.Node] = dataclasses.field(default_factory=list)
    inputs: dict[ir.Value, None] = dataclasses.field(default_factory=dict)
    initializers: dict[ir.Value, None] = dataclasses.field(default_factory=dict)
    outputs: dict[ir.Value, None] = dataclasses.field(default_factory=dict)
    aliases: dict[ir.Value, ir.Value] = dataclasses.field(default_factory=dict)
    """For a shape read recomputed from the graph inputs: the value of the new nodes that
    stands for the original output (same name), by the new value."""


def _check_element_types(graph: ir.Graph) -> None:
    """Refuse initializers of element type ``UNDEFINED`` that a stage would hold.

    ONNX forbids them (``onnx.checker``: OMNY101); they have no byte size, so a stage holding
    one could be neither sized nor run. Unused ones are left out of every stage anyway.
    """
    bad = [
        f"{'graph' if each is graph else f'subgraph {each.name!r}'}.initializer {name!r}"
        for each in (graph, *graph.subgraphs())
        for name, value in each.initializers.items()
        if value.dtype == ir.DataType.UNDEFINED and (value.uses() or value.is_graph_output())
    ]
    if bad:
        raise SplitError(
            f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}: element type UNDEFINED, "
            "which ONNX forbids (onnx.checker refuses the model; `omny check` reports OMNY101); "
            "give the initializer its real element type, or re-export the model"
        )


def _plan_stages(
    index: GraphIndex,
    stage_of: Mapping[ir.Node, int],
    num_stages: int,
    *,
    replicable: set[ir.Value] | None = None,
) -> list[_StagePlan]:
    """Decide the nodes, inputs, initializers and outputs of every stage.

    ``replicable``: the values each stage recomputes instead of reading them from an earlier
    stage (default: the replicable class of
    :func:`~onnx_ir_multidevice.analysis.tensor_classes.default_classes`).
    """
    graph = index.graph
    _check_element_types(graph)
    for node in index.nodes:
        stage = stage_of.get(node)
        if stage is None:
            raise SplitError(f"Node {_node_label(node)} has no stage.")
        if not 0 <= stage < num_stages:
            raise SplitError(
                f"Node {_node_label(node)} is in stage {stage}, outside 0..{num_stages - 1}."
            )
    if replicable is None:
        replicable = {v for v, c in default_classes(index).items() if c is TensorClass.REPLICABLE}
    plans = [_StagePlan() for _ in range(num_stages)]
    home_nodes: list[list[ir.Node]] = [[] for _ in range(num_stages)]
    for node in index.nodes:
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
        elif value in index.initializer_set and value not in index.graph_input_positions:
            last = plans[-1]
            last.initializers[value] = None
            last.outputs[value] = None

    input_shape_reads = shape_reads(index)
    fresh_name = _FreshNames(graph)
    for stage, plan in enumerate(plans):
        rewrites: dict[ir.Node, ShapeRead] = {}
        members: set[ir.Node] = set(home_nodes[stage])
        pending: list[tuple[ir.Node, ir.Value]] = [
            (node, v) for node in home_nodes[stage] for v in index.uses_of(node)
        ]
        while pending:
            reader, value = pending.pop()
            if value in index.graph_input_positions:
                plan.inputs[value] = None
                if value in index.initializer_set:
                    plan.initializers[value] = None
                continue
            producer = value.producer()
            if producer is None:
                if value in index.initializer_set:
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
                pending.extend((producer, v) for v in index.uses_of(producer))
            elif reader in input_shape_reads and home != stage:
                # A replicable shape read of an activation another stage computes: recomputed
                # from the graph inputs its dims come from (no transfer).
                rewrites[reader] = input_shape_reads[reader]
                for source in input_shape_reads[reader].inputs:
                    plan.inputs[source] = None
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
        if rewrites:
            plan.nodes = _with_rewrites(plan, rewrites, graph, fresh_name)

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
                producer = value.producer()
                raise SplitError(
                    f"A value crossing into or out of stage {stage} has no name (produced by "
                    f"{_node_label(producer) if producer else 'nobody'}); "
                    "name every value (onnx_ir.passes.common.NameFixPass) before splitting."
                )
    return plans


class _FreshNames:
    """Names not used by the values or nodes of a graph (nor given out before)."""

    def __init__(self, graph: ir.Graph) -> None:
        self._graph = graph
        self._taken: set[str] | None = None

    def __call__(self, wished: str) -> str:
        taken = self._taken
        if taken is None:
            graph = self._graph
            taken = {v.name for v in graph.inputs if v.name}
            taken.update(graph.initializers)
            for node in ir.traversal.RecursiveGraphIterator(graph):
                if node.name:
                    taken.add(node.name)
                taken.update(v.name for v in node.outputs if v.name)
            self._taken = taken
        name, k = wished, 0
        while name in taken:
            k += 1
            name = f"{wished}_{k}"
        taken.add(name)
        return name


def _with_rewrites(
    plan: _StagePlan,
    rewrites: Mapping[ir.Node, ShapeRead],
    graph: ir.Graph,
    fresh_name: _FreshNames,
) -> list[ir.Node]:
    """The stage's nodes, each rewritten shape read replaced by its recomputation."""
    opset = graph.opset_imports.get("", 1)
    nodes: list[ir.Node] = []
    for node in plan.nodes:
        read = rewrites.get(node)
        if read is None:
            nodes.append(node)
            continue
        new_nodes, result = recompute_from_inputs(read, opset, fresh_name)
        nodes.extend(new_nodes)
        plan.aliases[result] = node.outputs[0]
    return nodes


_Typed = dict[ir.Value, tuple[ir.TypeProtocol, ir.Shape | None]]


def _boundary_types(model: ir.Model, index: GraphIndex, plans: Sequence[_StagePlan]) -> _Typed:
    """Types for the stage inputs and outputs the file leaves untyped (or without a shape).

    They come from the shape layer (:class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes`,
    at the planning dims the model records): symbolic dims by name where known, unnamed
    where dynamic; a value whose shape stays unknown gets its dtype alone (a stage model
    needs no more). The model is not modified: the types go on the stage copies.

    Raises:
        SplitError: A crossing value whose dtype nothing states or infers.
    """
    missing = [
        value
        for plan in plans
        for value in (*plan.inputs, *plan.outputs)
        if value.type is None or value.shape is None
    ]
    if not missing:
        return {}
    try:
        dims = read_planning_dims(model) or {}
    except OmnyFormatError:
        dims = {}
    shapes = ValueShapes(index.graph, dims, index=index)
    result: _Typed = {}
    for value in dict.fromkeys(missing):
        problem = boundary_problem(value, shapes)
        if problem is not None:
            raise SplitError(
                f"Value {_value_label(value)} crosses a stage boundary, but {problem}."
            )
        type_ = value.type
        if type_ is None:
            dtype = shapes.dtype(value)
            assert dtype is not None  # boundary_problem said so
            type_ = ir.TensorType(dtype)
        shape = value.shape if value.shape is not None else shapes.onnx_shape(value)
        result[value] = (type_, shape)
    return result


def _value_order(index: GraphIndex, value: ir.Value) -> tuple[int, int]:
    producer = value.producer()
    if producer is None or producer not in index.position:
        return (-1, index.graph_input_positions.get(value, len(index.graph_input_positions)))
    return (index.position[producer], value.index() or 0)


def _copy_value(value: ir.Value, *, const: bool, typed: _Typed | None = None) -> ir.Value:
    type_, shape = value.type, value.shape
    if typed and value in typed:
        type_, shape = typed[value]
    new = ir.Value(
        name=value.name,
        type=type_,
        shape=shape.copy() if shape is not None else None,
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
    typed: _Typed | None = None,
) -> ir.Model:
    """Build the model of one stage.

    With ``with_nodes=False`` the stage graph has no node (a *skeleton*): its inputs,
    initializers, outputs (fresh values standing for the node outputs), functions and
    metadata are those of the stage; :func:`_write_stage_direct` serializes the nodes.
    ``typed`` (:func:`_boundary_types`) types the stage inputs and outputs the file leaves
    untyped.
    """
    graph = model.graph
    value_map: dict[ir.Value, ir.Value | None] = {}
    inputs: list[ir.Value] = []
    new: ir.Value | None
    for value in plan.inputs:
        new = _copy_value(value, const=value in plan.initializers, typed=typed)
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
    if not with_nodes:
        nodes = []
    elif not plan.aliases:
        nodes = [_clone_node(node, value_map, cloner) for node in plan.nodes]
    else:
        aliases = plan.aliases
        nodes = []
        for node in plan.nodes:
            nodes.append(_clone_node(node, value_map, cloner))
            for output in node.outputs:
                original = aliases.get(output)
                if original is not None:  # a recomputed shape read (see _with_rewrites)
                    value_map[original] = value_map[output]
    outputs = []
    for value in plan.outputs:
        new = value_map.get(value)
        if new is None:
            assert not with_nodes
            new = _copy_value(value, const=False, typed=typed)
            value_map[value] = new
        elif typed and value in typed:  # a clone of the input node's output: type the clone
            type_, shape = typed[value]
            new.type = type_
            if new.shape is None and shape is not None:
                new.shape = shape.copy()
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
    stage_model = ir.Model(
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
    # Without the split's configurations, an annotated (IR 11) model's stage usually needs
    # less: onnxruntime 1.20 to 1.22 refuse IR 11. The skeleton's nodes are the input's.
    stage_model.ir_version = lowest_ir_version(
        stage_model,
        None if with_nodes else plan.nodes,
        kept=lambda entry: entry.configuration is None or id(entry.configuration) not in stripped,
    )
    return stage_model


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
            nothing, or a value crossing a boundary has no name, or a dtype that is neither
            stated nor inferable.
    """
    require_model(model, "split_by_stages")
    with gc_paused():
        return _split_with_index(_build_index(model.graph), model, stages, num_stages)


def _split_with_index(
    index: GraphIndex,
    model: ir.Model,
    stages: Mapping[ir.Node, int],
    num_stages: int | None,
) -> list[ir.Model]:
    if num_stages is None:
        num_stages = max(stages.values(), default=0) + 1
    plans = _plan_stages(index, stages, num_stages)
    typed = _boundary_types(model, index, plans)
    stripped = {id(c) for c in pipeline_configurations(model.graph)}
    return [
        _build_stage_model(model, plan, i, num_stages, stripped, typed=typed)
        for i, plan in enumerate(plans)
    ]


def split(
    model: ir.Model | str | os.PathLike,
    shards: int,
    *,
    configuration: Configuration = None,
    metadata: OmnyMetadata | None = None,
) -> list[ir.Model]:
    """Split ``model`` into ``shards`` runnable single-device models, one per pipeline stage.

    Stage ``i``'s inputs are names resolved against the original graph inputs and the outputs
    of earlier stages; stage outputs keep the original tensor names. The ``.omny`` cut points
    are resolved by :func:`~onnx_ir_multidevice.binding.bind.bind`, the resolver ``check``
    and ``annotate`` use: a cut point the checker rejects fails the split with its message.
    Weights are shared with ``model`` in memory (not copied); a weight read by several
    stages is an initializer of each. Replicable values (masks, shape arithmetic, transposed
    weights) are recomputed in every stage that reads them.

    .. versionadded:: 0.1

    Args:
        model: The model to split, an :class:`onnx_ir.Model` (not modified), or the path of
            a model file (``str`` or ``os.PathLike``, loaded with
            :func:`onnx_ir_multidevice.load`; not modified); an ``onnx.ModelProto`` raises
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
    if isinstance(model, (str, os.PathLike)):
        from onnx_ir_multidevice._proto.files import load  # lazy: only for a path

        model = load(model)
    require_model(model, "split")
    with gc_paused():
        index = _build_index(model.graph)
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
    index = _build_index(model.graph)
    by_name = index.values_named([cut for cut in cuts if isinstance(cut, str)])
    values: list[ir.Value] = []
    for cut in cuts:
        if isinstance(cut, str):
            found = by_name.get(cut)
            if not found:
                raise SplitError(f"Cut tensor {cut!r} is not a value of the main graph.")
            if len(found) > 1:
                raise SplitError(
                    f"Cut tensor {cut!r} is ambiguous: {len(found)} values of the main graph "
                    "have this name; pass the value itself or rename one."
                )
            values.append(found[0])
        else:
            values.append(cut)
    stages = _stages_from_cuts(index, values)
    return _split_with_index(index, model, stages, len(values) + 1)
