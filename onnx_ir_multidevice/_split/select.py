"""Which stage each node runs in.

The stages come from a ``.omny`` shard configuration's cut points or from an IR v11 pipeline
annotation.
"""

from __future__ import annotations

__all__ = ["pipeline_configurations", "resolve_stages"]

from collections.abc import Sequence

import onnx_ir as ir

from onnx_ir_multidevice._errors import BindingError, SplitError
from onnx_ir_multidevice._util import gc_paused, plural, require_model
from onnx_ir_multidevice.analysis.stages import assign_stages, stages_from_annotations
from onnx_ir_multidevice.binding.bind import bind
from onnx_ir_multidevice.graph.index import AnalysisError, GraphIndex
from onnx_ir_multidevice.omny._props import read as read_omny
from onnx_ir_multidevice.omny._schema import (
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    OmnyMetadata,
    ShardConfiguration,
)

Configuration = int | str | ir.ModelConfiguration | ShardConfiguration | None
"""What ``configuration=`` accepts: see :func:`resolve_stages`."""


# ---------------------------------------------------------------------------------------------
# Labels and the graph index


def _node_label(node: ir.Node) -> str:
    return repr(node.name) if node.name else f"<anonymous {node.op_type}>"


def _value_label(value: ir.Value) -> str:
    return repr(value.name) if value.name else "<unnamed value>"


def _build_index(graph: ir.Graph) -> GraphIndex:
    """The analysis index of the main graph, shared by every step of a split."""
    try:
        return GraphIndex.build(graph)
    except AnalysisError as error:
        raise SplitError(f"The main graph cannot be split: {error}") from error


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
    index: GraphIndex, configuration: ir.ModelConfiguration
) -> dict[ir.Node, int]:
    stages: dict[ir.Node, int] = {}
    for node, stage in stages_from_annotations(index.graph, configuration, index=index).items():
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
    if not any(key in model.metadata_props for key in (OMNY_VERSION_KEY, OMNY_METADATA_KEY)):
        return None
    return read_omny(model)


def _cuts_from_metadata(
    index: GraphIndex,
    model: ir.Model,
    metadata: OmnyMetadata,
    shards: int,
    configuration: int | ShardConfiguration | None,
) -> list[ir.Value]:
    """The cut tensors of the chosen ``.omny`` shard configuration, from :func:`bind`."""
    configurations = tuple(metadata.sharding.configurations)
    position = metadata.sharding.configuration_index(shards, configuration)
    if position is None and configuration is None:
        available = sorted({c.num_shards for c in configurations})
        raise SplitError(
            f"The .omny metadata has no shard configuration with num_shards={shards} "
            f"(available: {available or 'none'}); plan one with `omny plan --shards "
            f"{shards}` or pass another shard count."
        )
    if position is None and isinstance(configuration, int):
        raise SplitError(
            f"sharding.configurations[{configuration}] does not exist: the .omny metadata "
            f"has {plural(len(configurations), 'configuration')}."
        )
    if position is None:
        raise SplitError("The shard configuration given is not one of the .omny metadata.")
    chosen = configurations[position]
    path = f"sharding.configurations[{position}]"
    if chosen.num_shards != shards:
        raise SplitError(f"{path} has num_shards={chosen.num_shards}, not {shards}.")
    if len(chosen.cut_point_ids) != shards - 1:
        raise SplitError(
            f"{path} lists {plural(len(chosen.cut_point_ids), 'cut point')}; {shards} shards "
            f"need {shards - 1}."
        )
    # The one cut resolver: the same references, verdicts and messages as the checker's.
    bound = bind(model, metadata, index=index).configurations[position]
    try:
        return list(bound.cut_values())
    except BindingError as error:
        raise SplitError(str(error)) from error


def _sort_cuts(index: GraphIndex, cuts: Sequence[ir.Value]) -> list[ir.Value]:
    def key(value: ir.Value) -> int:
        producer = value.producer()
        return index.position.get(producer, -1) if producer is not None else -1

    return sorted(cuts, key=key)


def _stages_from_cuts(
    index: GraphIndex, cuts: Sequence[ir.Value], *, sort: bool = True
) -> dict[ir.Node, int]:
    """Stages from cut tensors, sorted into graph order or in the order given.

    ``sort=False`` for a ``.omny`` configuration: its cuts out of pipeline order are an
    error, as in the checker.
    """
    for cut in cuts:
        if cut.graph is not index.graph:
            raise SplitError(f"Cut tensor {_value_label(cut)} is not a value of the main graph.")
    ordered = _sort_cuts(index, cuts) if sort else list(cuts)
    try:
        return assign_stages(index.graph, ordered, index=index)
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
        metadata: ``.omny`` metadata (:class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata`) to
            use instead of the one stored in the model.

    Returns:
        The stage (0-based) of every main-graph node.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: No such configuration, or its cut points do not resolve.
    """
    require_model(model, "resolve_stages")
    with gc_paused():
        return _resolve(_build_index(model.graph), model, shards, configuration, metadata)


def _resolve(
    index: GraphIndex,
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
        cuts = _cuts_from_metadata(index, model, metadata, shards, configuration)
        return _stages_from_cuts(index, cuts, sort=False)
    if metadata is not None and metadata.sharding.configuration_index(shards) is not None:
        cuts = _cuts_from_metadata(index, model, metadata, shards, None)
        return _stages_from_cuts(index, cuts, sort=False)
    annotated = [c for c in pipeline_configurations(index.graph) if c.num_devices == shards]
    if annotated:
        return _stages_from_annotations(index, annotated[0])
    if shards == 1:
        return dict.fromkeys(index.nodes, 0)
    available = sorted({c.num_shards for c in metadata.sharding.configurations}) if metadata else []
    raise SplitError(
        f"No configuration for {shards} shards: the model's .omny metadata offers "
        f"{available or 'none'} and it has no pipeline annotation with {shards} devices. "
        f"Plan one first (`omny plan --shards {shards}`)."
    )
