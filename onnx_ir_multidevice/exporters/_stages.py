"""The stages an exporter writes: the split machinery's stages, sizes and the planner's memory.

:func:`export_stages` is what every stage-wise format (``mlf``, ``ark``) starts from, so that
they agree with ``omny split`` and ``omny plan`` by construction:

* the stage of every node comes from :func:`~onnx_ir_multidevice._split.resolve_stages` (the
  resolver of ``omny split``), the stage models from
  :func:`~onnx_ir_multidevice.split_by_stages` and the chaining from
  :meth:`~onnx_ir_multidevice.SplitManifest.build`: the transfers, stage inputs and outputs are
  those of ``manifest.json``;
* sizes are measured at the *planning dims*: those the plan recorded
  (:func:`~onnx_ir_multidevice.omny.read_planning_dims`), completed by the ``dims`` the caller
  gives, through the planner's :class:`~onnx_ir_multidevice.analysis.sizes.ValueSizes` of the
  whole model (the same shapes ``omny plan`` measured);
* memory figures, when asked for, come from the planner's
  :class:`~onnx_ir_multidevice.planner.MemoryModel`: the split's stage boundaries are located
  on the planning chain (:func:`~onnx_ir_multidevice.analysis.cut_points.analyse_cut_points`)
  and each stage is measured as the planner measured it.

A size that the planning dims leave unknown is refused with
:class:`~onnx_ir_multidevice.PlanningDimsError`, naming the dim.
"""

from __future__ import annotations

__all__ = ["ExportStages", "export_stages", "measure_memory"]

import bisect
import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import ExportError, PlanningDimsError
from onnx_ir_multidevice._split import SplitManifest, resolve_stages, split_by_stages
from onnx_ir_multidevice.analysis.cut_points import CutAnalysis, analyse_cut_points
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.graph.dtypes import tensor_nbytes
from onnx_ir_multidevice.planner import MemoryModel, StageMemory

_EXPRESSION = re.compile(r"[-+*/%() ]")
"""A dim name with one of these characters is an expression (``batch*seq``), not a dim."""

Configuration = int | str | None
"""Which configuration to export: a ``.omny`` configuration index, an IR v11 configuration
name, or ``None`` (the one with ``shards`` shards, as :func:`~onnx_ir_multidevice.split`)."""


def _planning_dims(model: ir.Model, given: Mapping[str, int]) -> dict[str, int]:
    """The recorded planning dims, completed by ``given``; a contradiction is refused."""
    recorded = omny.read_planning_dims(model) or {}
    clashes = sorted(n for n, v in given.items() if n in recorded and recorded[n] != v)
    if clashes:
        said = ", ".join(f"{n}={given[n]} (the plan says {n}={recorded[n]})" for n in clashes)
        raise PlanningDimsError(
            f"the plan was made at {omny.PLANNING_DIMS_KEY} {recorded}; the given dims "
            f"contradict it: {said}. Leave them out, or re-plan at those dims (`omny plan --dim`)",
            dims=clashes,
        )
    return {**recorded, **given}


def _names(graph: ir.Graph) -> dict[str, ir.Value]:
    """The values of the main graph by name: inputs, initializers, node outputs."""
    values: dict[str, ir.Value] = {}
    for value in graph.inputs:
        if value.name:
            values.setdefault(value.name, value)
    for name, value in graph.initializers.items():
        values.setdefault(name, value)
    for node in graph:
        for value in node.outputs:
            if value.name:
                values.setdefault(value.name, value)
    return values


def _configuration_mb(
    model: ir.Model, shards: int, configuration: Configuration
) -> tuple[int, ...] | None:
    """``memory_per_shard_mb`` of the ``.omny`` configuration the split used, if any."""
    if isinstance(configuration, str):
        return None
    metadata = omny.read(model)  # readable: the split read it already
    if metadata is None:
        return None
    position = metadata.sharding.configuration_index(shards, configuration)
    if position is None:
        return None
    return tuple(metadata.sharding.configurations[position].memory_per_shard_mb)


@dataclasses.dataclass(frozen=True)
class ExportStages:
    """The stages of one configuration, ready to be written in another format."""

    model: ir.Model
    """The exported model (not modified)."""

    stages: tuple[ir.Model, ...]
    """The stage models, as :func:`~onnx_ir_multidevice.split` makes them."""

    manifest: SplitManifest
    """Their ``manifest.json`` (:meth:`~onnx_ir_multidevice.SplitManifest.build`)."""

    dims: Mapping[str, int]
    """The planning dims every size is measured at (recorded, given, and the default batch)."""

    sizes: ValueSizes
    """Shapes and bytes of the model's values at :attr:`dims` (the planner's measure)."""

    values: Mapping[str, ir.Value]
    """The model's main-graph values by name (stage tensors keep the model's names)."""

    memory: tuple[StageMemory, ...] | None
    """The planner's memory of each stage (``None`` unless asked for)."""

    configuration_mb: tuple[int, ...] | None
    """``memory_per_shard_mb`` of the ``.omny`` configuration used (``None``: not ``.omny``)."""

    stage_of: Mapping[ir.Node, int] = dataclasses.field(default_factory=dict, repr=False)
    """The stage of every main-graph node (what the split was made from)."""

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)

    def dtype(self, name: str) -> ir.DataType:
        """The data type of the model's value ``name``.

        Raises:
            ExportError: It is not known.
        """
        value = self.values.get(name)
        dtype = None if value is None else self.sizes.dtype(value)
        if dtype is None:
            raise ExportError(
                f"tensor {name!r}: its data type is neither stated in the model nor "
                "inferable (ONNX type inference cannot tell it); give the value a type in the "
                "model's value_info"
            )
        return dtype

    def shape(self, name: str) -> tuple[int, ...]:
        """The concrete shape of the model's value ``name`` at the planning dims.

        Raises:
            PlanningDimsError: A dimension is symbolic without a value at the planning dims
                (named), or the shape is not known at all.
        """
        value = self.values.get(name)
        shape = None if value is None else self.sizes.shape(value)
        if shape is not None:
            return tuple(int(d) for d in shape)
        raise self._unknown([name])

    def nbytes(self, name: str) -> int:
        """The bytes of the model's value ``name`` at the planning dims (:func:`tensor_nbytes`).

        Raises:
            PlanningDimsError: Its shape is not known at the planning dims.
            ExportError: Its data type has no fixed size (``string``).
        """
        shape = self.shape(name)
        dtype = self.dtype(name)
        size = tensor_nbytes(shape, dtype)
        if size is None:
            raise ExportError(
                f"tensor {name!r} is of type {dtype.name.lower()}, whose elements have no fixed "
                "size; the format holds fixed-size tensors only"
            )
        return size

    def _unknown(self, names: Sequence[str]) -> PlanningDimsError:
        """The error for values whose size is unknown at the planning dims, naming the dims."""
        missing: dict[str, None] = {}  # plain dim names without a value: --dim NAME=N
        expressions: dict[str, None] = {}  # dim expressions the sizes do not evaluate
        described = []
        for name in names:
            value = self.values.get(name)
            shape = None if value is None else value.shape
            if shape is None:
                described.append(f"{name!r} (its shape could not be inferred)")
                continue
            for dim in shape:
                if isinstance(dim, int) or dim.value in self.dims:
                    continue
                if dim.value is None:
                    continue
                if _EXPRESSION.search(dim.value):
                    expressions[dim.value] = None
                else:
                    missing[dim.value] = None
            text = ", ".join(str(d) if isinstance(d, int) else (d.value or "?") for d in shape)
            described.append(f"{name!r} [{text}]")
        shown = ", ".join(described[:3]) + (
            f" and {len(described) - 3} more" if len(described) > 3 else ""
        )
        at = ", ".join(f"{k}={v}" for k, v in sorted(self.dims.items())) or "none"
        hints = []
        if missing:
            hints.append(
                f"the dim(s) {', '.join(map(repr, missing))} have no value: give "
                + " ".join(f"--dim {d}=N" for d in missing)
                + " (dims={...})"
            )
        if expressions:
            listed = list(expressions)
            hints.append(
                f"the dim expression(s) {', '.join(map(repr, listed[:3]))}"
                f"{f' and {len(listed) - 3} more' if len(listed) > 3 else ''} are not evaluated "
                "at the planning dims"
            )
        if not hints:
            hints.append("some dims are unnamed: give the model's values concrete shapes")
        verb = "is" if len(described) == 1 else "are"
        recorded = omny.PLANNING_DIMS_KEY in self.model.metadata_props
        return PlanningDimsError(
            f"the size of {shown} {verb} unknown at the planning dims ({at}): "
            f"{'; '.join(hints)}. The format needs whole byte counts"
            + ("" if recorded else "; the model records no planning dims (`omny plan --dim`)"),
            dims=(*missing, *expressions),
        )


def export_stages(
    model: ir.Model,
    shards: int,
    *,
    configuration: Configuration = None,
    dims: Mapping[str, int] | None = None,
) -> ExportStages:
    """Split ``model`` as ``omny split`` does, and size its values as ``omny plan`` does.

    Args:
        model: The model with its plan (not modified).
        shards: Number of stages.
        configuration: See :data:`Configuration`.
        dims: Planning dims given by the caller, completing those the plan recorded.

    Returns:
        The stages, their manifest and sizes (no memory: see :func:`measure_memory`).

    Raises:
        SplitError: The model cannot be split so.
        PlanningDimsError: ``dims`` contradicts the recorded planning dims.
    """
    planning = _planning_dims(model, dict(dims or {}))
    stage_of = resolve_stages(model, shards, configuration=configuration)
    stages = tuple(split_by_stages(model, stage_of, shards))
    sizes = ValueSizes(model.graph, planning)
    return ExportStages(
        model=model,
        stages=stages,
        manifest=SplitManifest.build(model, stages),
        dims=dict(sizes.dims),
        sizes=sizes,
        values=_names(model.graph),
        memory=None,
        configuration_mb=_configuration_mb(model, shards, configuration),
        stage_of=stage_of,
    )


def measure_memory(stages: ExportStages) -> ExportStages:
    """Return ``stages`` with the planner's memory of every stage (:attr:`ExportStages.memory`).

    The split's stage boundaries are located on the planning chain and each stage is measured
    by the planner's :class:`~onnx_ir_multidevice.planner.MemoryModel` at the planning dims.

    Raises:
        PlanningDimsError: A stage's memory depends on a size unknown at the planning dims.
        ExportError: A stage boundary is not a cut the planner measures.
    """
    planning = dict(stages.dims)
    analysis = analyse_cut_points(stages.model.graph, relaxed=True, dims=planning)
    memories = _stage_memory(analysis, MemoryModel(analysis), stages.stage_of, stages.num_stages)
    result = dataclasses.replace(stages, sizes=analysis.sizes, memory=memories)
    unknown = list(dict.fromkeys(n for m in memories for n in m.unknown))
    if unknown:
        raise result._unknown(unknown)
    return result


def _stage_memory(
    analysis: CutAnalysis, model: MemoryModel, stage_of: Mapping[ir.Node, int], shards: int
) -> tuple[StageMemory, ...]:
    """The planner's memory of each stage of ``stage_of``, located on the planning chain.

    Stage ``k`` is the run of segments from the chain boundary where the planning order first
    reaches a node of stage ``k``; a stage that does not start at a chain boundary cannot be
    measured as the planner measures it.
    """
    order = analysis.order
    sequence = [stage_of[node] for node in order]
    for position in range(1, len(sequence)):
        if sequence[position] < sequence[position - 1]:
            node = order[position]
            raise ExportError(
                f"node {node.name or node.op_type!r} (stage {sequence[position]}) comes after a "
                f"node of stage {sequence[position - 1]} in the planner's order: the stages do "
                "not follow the planning chain, so their memory cannot be measured; re-plan "
                "the model (`omny plan`)"
            )
    boundaries = analysis.boundaries
    segments = [0]
    for k in range(1, shards):
        position = bisect.bisect_left(sequence, k)
        where = bisect.bisect_left(boundaries, position)
        if where == len(boundaries) or boundaries[where] != position:
            first = order[position] if position < len(order) else None
            label = "the end of the graph" if first is None else repr(first.name or first.op_type)
            raise ExportError(
                f"stage {k} starts at {label}, which is not a cut point the planner measures "
                "(strict, or relaxed within the default side limit); its memory cannot be "
                "measured as `omny plan` does: re-plan the model (`omny plan`)"
            )
        segments.append(where + 1)
    segments.append(model.num_segments)
    return tuple(model.stage(i, j) for i, j in itertools.pairwise(segments))
