"""``plan()``: cut points and shard configurations of a model, as ``.omny`` metadata.

Steps: find the cut points of the main graph
(:func:`~onnx_ir_multidevice.analysis.cut_points.analyse_cut_points`), build the memory model
(:class:`~onnx_ir_multidevice.planner.memory.MemoryModel`), choose an optimal partition for
each requested shard count (:func:`~onnx_ir_multidevice.planner.partition.partition`) and
fill every field of the ``.omny`` spec, and only those (the reference reader rejects other
keys), with :func:`~onnx_ir_multidevice.analysis.omny_document.build_metadata` (the builder the
reverse pass uses too). What to plan for is a
:class:`~onnx_ir_multidevice.planner.options.PlanOptions`, checked before any analysis.

Decisions:

* ``cut_points`` lists the cuts used by at least one configuration, in pipeline order, with
  ids ``cut_1``, ``cut_2``... Its ``shard_memory_mb`` is the memory of the stage from the
  previous listed cut (or the model start) to it, ``cumulative_memory_mb`` the running sum.
* ``memory_per_shard_mb`` and ``shard_memory_mb`` exclude the runtime headroom (the spec's
  1.2 GB shard on a 1.5 GB device). ``max_shard_size_mb`` is ``max_shard_size_mb`` when
  given, else the largest shard of any configuration; ``min_vram_mb`` is that plus the
  headroom, so every listed configuration runs on devices of ``min_vram_mb``.
* Shapes use ``-1`` for symbolic dimensions; memory is measured at the planning dims.
* ``after_node`` is the producer's node name and ``tensor_name`` the cut value's name. A
  model with unnamed nodes or values on a chosen cut is refused with
  :class:`~onnx_ir_multidevice._errors.PlanError`, unless ``assign_names=True``, which names
  them *in place* with onnx-ir's ``NameFixPass``.
* The model is made to describe itself (:func:`_describe_cuts`, the other way ``plan``
  modifies its input, and only where the file lacks it): a chosen cut tensor or a graph output
  without a type or shape gets the dtype and shape the metadata states, and a graph whose
  nodes are not in topological order (onnxruntime's fp16 converter appends Casts at the end)
  is sorted, as ``onnx.checker`` requires. ``omny plan`` calls :func:`plan_model` and writes
  what it planned, so the API and the command line write the same bytes.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_SHARDS",
    "PlanResult",
    "describe",
    "guess_architecture",
    "plan",
    "plan_model",
    "plan_summary",
    "unknown_dims_message",
    "unknown_sizes_message",
]

import dataclasses
import os
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx_ir as ir
from onnx_ir.passes.common import NameFixPass

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._util import gc_paused, plural, require_model
from onnx_ir_multidevice.analysis.cut_points import CutAnalysis, analyse_cut_points
from onnx_ir_multidevice.analysis.omny_document import (
    StagedConfiguration,
    build_metadata,
    guess_architecture,
)
from onnx_ir_multidevice.analysis.shapes import (
    dims_conflict_message,
    input_symbols,
    unknown_dim_names,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.binding.naming import configuration_names
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.omny._schema import OmnyMetadata
from onnx_ir_multidevice.omny.planning_dims import write_planning_dims
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TensorParallelConfiguration,
    TensorParallelRecord,
    write_tensor_parallel,
)
from onnx_ir_multidevice.planner.memory import MIB, MemoryModel, format_bytes
from onnx_ir_multidevice.planner.options import DEFAULT_MAX_SHARDS, PlanOptions
from onnx_ir_multidevice.planner.partition import Partition, partition
from onnx_ir_multidevice.planner.static_dims import pin_dims
from onnx_ir_multidevice.planner.tensor_parallel import TensorParallelPlan, plan_tensor_parallel


@dataclasses.dataclass(frozen=True)
class PlanResult:
    """What :func:`plan_model` decided, with the details behind the ``.omny`` numbers.

    .. versionadded:: 0.1
    """

    metadata: OmnyMetadata
    """The ``.omny`` metadata (what :func:`plan` returns)."""

    partitions: tuple[Partition, ...]
    """One partition per configuration, in the order of ``metadata.sharding.configurations``."""

    capacities: tuple[tuple[int, ...] | None, ...]
    """Device capacities (bytes) each partition was planned for; ``None`` when not given."""

    skipped: tuple[tuple[int, str], ...]
    """Shard counts tried automatically that have no feasible plan, with the reason."""

    analysis: CutAnalysis
    """The cut-point analysis."""

    memory: MemoryModel
    """The memory model."""

    warnings: tuple[str, ...] = ()
    """Caveats (unknown sizes: numbers are lower bounds), worded for Python callers."""

    planning_dims: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """The dims the plan was made at: the given ``dims`` plus the batch defaults (recorded in
    the model with :func:`~onnx_ir_multidevice.omny.write_planning_dims`)."""

    unbound_dims: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """The symbols no planning dim binds and on which some size depends, each with the graph
    inputs that carry it (their sizes are unknown: the memory figures are lower bounds)."""

    unknown_values: tuple[str, ...] = ()
    """Values whose size is unknown even with every dim bound (inference could not tell)."""

    tensor_parallel: TensorParallelPlan | None = None
    """The stages and tensor-parallel degrees chosen (with ``tensor_parallel``); its
    ``reason`` says in one line why no stage is tensor-parallel, when none is."""

    balance: str = "speed"
    """The objective the cuts were chosen for (:attr:`PlanOptions.balance
    <onnx_ir_multidevice.planner.options.PlanOptions.balance>`)."""

    @property
    def flops_estimated(self) -> bool:
        """Whether some FLOPs counts needed an unbound dim, taken at example values.

        The FLOPs shares are then estimates; bind the dims for exact ones.
        """
        return bool(self.memory.unknown_flops)


def plan(
    model: ir.Model | str | os.PathLike,
    options: PlanOptions | None = None,
    **keywords: Any,
) -> OmnyMetadata:
    """Plan how to run ``model`` on several devices; return the ``.omny`` metadata.

    Store the result with :func:`onnx_ir_multidevice.omny.write`. See :func:`plan_model` for
    the arguments and errors; this returns its ``metadata``. ``model`` is an
    :class:`onnx_ir.Model` or the path of a model file (``str`` or ``os.PathLike``, loaded
    with :func:`onnx_ir_multidevice.load`; the file is not modified); an
    ``onnx.ModelProto`` raises ``TypeError``.

    .. versionchanged:: 0.2
        ``model`` may be a path, as for :func:`~onnx_ir_multidevice.annotate`.

    Example:
        >>> from onnx_ir_multidevice.testing import zoo
        >>> meta = plan(zoo.resnet(), shards=[2])
        >>> meta.sharding.configurations[0].cut_point_ids
        ('cut_1',)

    .. versionadded:: 0.1
    """
    model = loaded(model, "plan")
    return plan_model(model, PlanOptions.of(options, **keywords)).metadata


def loaded(model: object, function: str) -> ir.Model:
    """``model``, or the model loaded from it when it is a path (``str``/``os.PathLike``).

    Raises:
        TypeError: ``model`` is neither an :class:`onnx_ir.Model` nor a path (the message
            says how to get a model; ``function`` is the public name the user called).
    """
    if isinstance(model, (str, os.PathLike)):
        from onnx_ir_multidevice._proto.files import load  # lazy: only for a path

        return load(model)
    require_model(model, function)
    assert isinstance(model, ir.Model)  # require_model raised otherwise
    return model


def plan_model(
    model: ir.Model | str | os.PathLike,
    options: PlanOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    **keywords: Any,
) -> PlanResult:
    """Plan ``model`` for its devices and return the metadata with the details behind it.

    Args:
        model: The model, an :class:`onnx_ir.Model`. Its graph is not modified (unless
            ``assign_names`` or ``static``), except where it lacks the types and shapes of the
            chosen cut tensors and of its outputs, or is not topologically sorted (see the
            module docstring); the planning dims are recorded in its ``metadata_props``
            (:func:`~onnx_ir_multidevice.omny.write_planning_dims`), so that ``check``,
            ``split``, ``verify`` and ``run`` reuse them, and so is the tensor-parallel
            record (:func:`~onnx_ir_multidevice.omny.write_tensor_parallel`; one from an
            earlier plan is removed when this one has no tensor-parallel stage). Or the
            path of a model file (``str`` or ``os.PathLike``): it is loaded here and not
            modified; the plan's names are the file's (with ``assign_names``, those of the
            loaded copy, which the result's ``analysis.graph`` holds). To write the plan
            into a model, pass the :class:`onnx_ir.Model` you will
            :func:`~onnx_ir_multidevice.omny.write` it into.
        options: What to plan for: a :class:`~onnx_ir_multidevice.planner.options.PlanOptions`
            (``devices``, ``shards``, ``max_shard_size_mb``, ``dims``, ``relaxed``,
            ``headroom``, ``side_limit_bytes``, ``name``, ``assign_names``, ``static``,
            ``balance``, ``flops_per_byte``; each field is documented there). Default: the
            default of every field.
        progress: Called with a short message before each long step.
        **keywords: Fields of :class:`~onnx_ir_multidevice.planner.options.PlanOptions`,
            replacing those of ``options``: ``plan_model(model, shards=[2, 4])``.

    Returns:
        The plan.

    Raises:
        TypeError: If ``model`` is not an :class:`onnx_ir.Model`, ``options`` is not a
            ``PlanOptions`` or a keyword is not one of its fields.
        PlanError: If an option is not valid (``shards``, ``devices``, ``max_shard_size_mb``,
            ``dims``, ``headroom``...; a name in ``dims`` that is no dimension of the model's
            inputs), a requested shard count has no feasible plan (the
            message names the stage, its device and the overflow), no count is feasible, or a
            chosen cut has no name.

    .. versionadded:: 0.1
    """
    model = loaded(model, "plan_model")
    options = PlanOptions.of(options, **keywords)
    with gc_paused():  # the analysis allocates many small objects and no cycles
        return _plan_model(model, options, progress or (lambda message: None))


def _plan_model(model: ir.Model, options: PlanOptions, report: Callable[[str], None]) -> PlanResult:
    capacities: tuple[int, ...] | None = options.devices  # type: ignore[assignment]  # normalised to byte capacities
    counts = options.shard_counts
    if options.assign_names:
        NameFixPass()(model)
    graph = model.graph
    unknown = unknown_dim_names(graph, options.dims or {})
    if unknown:
        raise PlanError(unknown_dims_message(graph, unknown, flag="dims"))
    if options.static:
        report("pinning the symbolic dims")
        pinned = pin_dims(model, options.dims)
        options = dataclasses.replace(options, dims=pinned, static=False)
    report(f"finding cut points in {len(graph)} nodes")
    # One index of the graph for every analysis step. Built without the local functions:
    # the tensor classes judge a call by its op type, as ``classify_values(graph)`` does.
    index = GraphIndex.build(graph)
    sizes = ValueSizes(graph, options.dims, index=index)
    conflict = sizes.shapes.conflict()
    if conflict is not None:  # onnxruntime would refuse the written plan (check: OMNY124)
        raise PlanError(dims_conflict_message(graph, sizes.dims, *conflict))
    analysis = analyse_cut_points(
        graph,
        relaxed=options.relaxed,
        side_limit_bytes=options.side_limit_bytes,
        sizes=sizes,
        index=index,
    )
    report(f"building the memory model over {len(analysis.chain) + 1} segments")
    memory = MemoryModel(analysis, headroom=options.headroom)
    max_stage = None if options.max_shard_size_mb is None else options.max_shard_size_mb * MIB

    partitions: list[Partition] = []
    used_capacities: list[tuple[int, ...] | None] = []
    skipped: list[tuple[int, str]] = []
    parallel: TensorParallelPlan | None = None
    if options.tensor_parallel is not None:
        report("choosing pipeline stages and tensor-parallel degrees")
        found, parallel = plan_tensor_parallel(
            model,
            memory,
            sizes,
            options.num_devices,  # type: ignore[arg-type]  # set with tensor_parallel
            max_degree=options.max_degree,  # type: ignore[arg-type]
            capacity=min(capacities) if capacities else None,
            max_stage_bytes=max_stage,
            balance=options.balance,
            flops_per_byte=options.flops_per_byte,
            collective_flops_per_byte=options.collective_flops_per_byte,
        )
        partitions.append(found)
        used_capacities.append(None if capacities is None else capacities[: found.num_stages])
        counts = ()
    for n in counts:
        report(f"partitioning into {n} stages")
        caps = None if capacities is None else capacities[:n]
        try:
            found = partition(
                memory,
                n,
                capacities=caps,
                max_stage_bytes=max_stage,
                balance=options.balance,
                flops_per_byte=options.flops_per_byte,
            )
        except PlanError as exc:
            if options.explicit:
                raise
            skipped.append((n, str(exc)))
            no_cut = getattr(exc, "max_stages", None) == 1
            if no_cut:  # no cut at all: every larger count fails for the same reason
                raise PlanError(f"the model cannot be split into stages: {exc}") from None
            continue
        partitions.append(found)
        used_capacities.append(caps)
    if not partitions:
        reasons = "; ".join(f"{plural(n, 'shard')}: {why}" for n, why in skipped[:2])
        raise PlanError(
            f"no shard count from {counts[0]} to {counts[-1]} has a feasible plan ({reasons})"
        )
    _check_names(model, partitions)
    unbound, unknown_values = _unknown_sizes(memory, partitions, sizes)
    caveats = unknown_sizes_message(unbound, unknown_values, flag="dims")
    for caveat in caveats:
        warnings.warn(caveat, stacklevel=4)
    metadata = _metadata(model, sizes, memory, partitions, options)
    _describe_cuts(analysis, partitions)
    write_planning_dims(model, sizes.dims)
    # Always: a record from an earlier plan with tensor parallelism would outlive this one.
    write_tensor_parallel(model, _record(metadata, parallel, sizes.dims))
    return PlanResult(
        metadata=metadata,
        partitions=tuple(partitions),
        capacities=tuple(used_capacities),
        skipped=tuple(skipped),
        analysis=analysis,
        memory=memory,
        warnings=tuple(caveats),
        planning_dims=types.MappingProxyType(dict(sizes.dims)),
        unbound_dims=types.MappingProxyType(unbound),
        unknown_values=unknown_values,
        balance=options.balance,
        tensor_parallel=parallel,
    )


def _record(
    metadata: OmnyMetadata, parallel: TensorParallelPlan | None, dims: Mapping[str, int]
) -> TensorParallelRecord | None:
    """The tensor-parallel record of a plan (``None``: no stage is tensor-parallel)."""
    if parallel is None or not parallel.parallel:
        return None
    name = configuration_names(metadata.sharding.configurations)[0]
    configuration = TensorParallelConfiguration.contiguous(name, parallel.degrees, dims)
    return TensorParallelRecord((configuration,))


def _describe_cuts(analysis: CutAnalysis, partitions: Sequence[Partition]) -> None:
    """Make the model describe itself: typed cut tensors and outputs, nodes sorted.

    A model without ``value_info`` leaves its cut tensors untyped (and some converters its
    graph outputs): they get the dtype and shape the metadata states, so that ``check``
    compares them without inferring the graph's shapes and ``onnx.checker`` accepts the
    outputs. A graph whose nodes are not in topological order is sorted, as ``onnx.checker``
    requires. Nothing changes in a model that already says all this.
    """
    shapes = analysis.sizes.shapes
    values = [cut.value for found in partitions for cut in found.cuts]
    for value in (*values, *analysis.graph.outputs):
        if value.type is None:
            dtype = shapes.dtype(value)
            if dtype is not None:
                value.type = ir.TensorType(dtype)
        if value.shape is None:
            value.shape = shapes.onnx_shape(value)
    if analysis.index is not None and not analysis.index.in_graph_order:
        analysis.graph.sort()


def _check_names(model: ir.Model, partitions: Sequence[Partition]) -> None:
    for found in partitions:
        for cut in found.cuts:
            if not cut.node.name or not cut.value.name:
                what = "node" if not cut.node.name else "value"
                raise PlanError(
                    f"a chosen cut ({cut.node.op_type} node at position {cut.position}) has no "
                    f"{what} name, which .omny needs; name the model's nodes first "
                    "(onnx_ir.passes.common.NameFixPass) or pass assign_names=True"
                )


def _unknown_sizes(
    memory: MemoryModel, partitions: Sequence[Partition], sizes: ValueSizes
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The unbound symbols behind unknown sizes (with their inputs), and the other unknowns.

    A value counts only when it is used (read by a node or a graph output): an unused
    ``Dropout`` mask is nobody's memory.
    """
    if not partitions:
        return {}, ()
    # Every partition covers every segment: the names are those of the whole model, in
    # segment order (the order the first partition's stages give them).
    names = memory.whole().unknown
    if not names:
        return {}, ()
    shapes = sizes.shapes
    unbound = {
        symbol: tuple(dict.fromkeys(name for name, _ in shapes.symbols[symbol]))
        for symbol in shapes.unbound
    }
    others: list[str] = []
    if unbound:
        by_name = memory.unknown_values
        for name in names:
            value = by_name.get(name)
            if value is None or shapes.estimate(value) is not None:
                continue
            if value.uses() or value.is_graph_output():
                others.append(name)
    else:
        others = list(names)
    return unbound, tuple(others)


def unknown_dims_message(graph: ir.Graph, unknown: Sequence[str], *, flag: str) -> str:
    """The error for dims that name no dimension of the graph inputs.

    Args:
        graph: The main graph.
        unknown: The names given that are no input symbol.
        flag: ``"dims"`` (Python wording) or ``"--dim"`` (command-line wording).

    .. versionadded:: 0.1
    """
    symbols = list(input_symbols(graph))
    have = ", ".join(symbols) if symbols else "none: every input dimension is fixed"
    return (
        f"{flag} {', '.join(repr(n) for n in unknown)}: no input of the model has a dimension "
        f"of that name (its dimensions: {have})"
    )


def unknown_sizes_message(
    unbound: Mapping[str, Sequence[str]], unknown_values: Sequence[str], *, flag: str
) -> list[str]:
    """The caveats of a plan whose sizes are not all known.

    One line for the unbound dims (naming each, the inputs that carry it and how to bind
    it), one for the other unknown sizes.

    Args:
        unbound: :attr:`PlanResult.unbound_dims`.
        unknown_values: :attr:`PlanResult.unknown_values`.
        flag: ``"dims"`` (Python wording: ``dims={"seq": N}``) or ``"--dim"`` (command
            line: ``--dim seq=N``).

    .. versionadded:: 0.1
    """
    lines = []
    if unbound:
        which = "; ".join(
            f"{symbol} (input{'s' if len(inputs) > 1 else ''} {', '.join(inputs)})"
            for symbol, inputs in unbound.items()
        )
        if flag == "--dim":
            how = " ".join(f"--dim {symbol}=N" for symbol in unbound)
        else:
            how = "dims={" + ", ".join(f'"{symbol}": N' for symbol in unbound) + "}"
        lines.append(
            f"the memory figures are lower bounds: sizes that depend on {which} are unknown; "
            f"give {how} to plan for your data"
        )
    if unknown_values:
        names = ", ".join(unknown_values[:5]) + (", ..." if len(unknown_values) > 5 else "")
        lines.append(
            f"the size of {len(unknown_values)} value(s) cannot be inferred ({names}); their "
            "memory is not counted, so the figures are lower bounds"
        )
    return lines


def _metadata(
    model: ir.Model,
    sizes: ValueSizes,
    memory: MemoryModel,
    partitions: Sequence[Partition],
    options: PlanOptions,
) -> OmnyMetadata:
    """The document: every cut a partition uses, in chain order, with its stage's bytes."""
    chain_index = {cut.value: b for b, cut in enumerate(memory.analysis.chain, start=1)}
    used = sorted({cut.value for p in partitions for cut in p.cuts}, key=chain_index.__getitem__)
    cut_bytes: dict[ir.Value, int] = {}
    previous = 0
    for value in used:
        segment = chain_index[value]
        cut_bytes[value] = memory.stage(previous, segment).total_bytes
        previous = segment
    configurations = [
        StagedConfiguration(
            cuts=tuple(c.value for c in p.cuts),
            stage_bytes=tuple(m.total_bytes for m in p.memory),
        )
        for p in partitions
    ]
    return build_metadata(
        model,
        configurations,
        cut_bytes,
        sizes=sizes,
        inference_memory_bytes=memory.whole().total_bytes,
        name=options.name,
        max_shard_size_mb=options.max_shard_size_mb,
        headroom=memory.headroom,
    )


def plan_summary(result: PlanResult) -> list[dict[str, Any]]:
    """Compute and traffic of each configuration, as JSON-ready data (``omny plan --json``).

    One dict per configuration, in the order of ``result.partitions``: ``num_shards``,
    ``balance`` (the objective), ``stage_bytes`` (the ``.omny`` memory of each stage),
    ``stage_flops`` and ``flops_share`` (each stage's share of the FLOPs, 0 to 1),
    ``flops_estimated`` (some counts were taken at example values of unbound dims),
    ``cut_tensors`` and ``transfer_bytes`` (bytes sent across each cut per request at the
    planning dims; ``None`` where a size depends on an unbound dim), ``bound`` (what bound
    the configuration: :meth:`Bound.to_dict
    <onnx_ir_multidevice.planner.partition.Bound.to_dict>` with ``text``, its sentence) and
    ``duplicated_weight_bytes`` (weights held by more than one stage, such as a tied
    embedding).

    .. versionadded:: 0.1
    """
    return [
        {
            "num_shards": found.num_stages,
            "balance": result.balance,
            "stage_bytes": [m.total_bytes for m in found.memory],
            "stage_flops": list(found.flops),
            "flops_share": [round(share, 4) for share in found.flops_share],
            "flops_estimated": result.flops_estimated,
            "cut_tensors": [c.value.name for c in found.cuts],
            "transfer_bytes": list(found.sent_bytes),
            "bound": _bound_dict(found),
            "duplicated_weight_bytes": found.duplicated_weight_bytes,
        }
        for found in result.partitions
    ]


def tensor_parallel_summary(result: PlanResult) -> dict[str, Any] | None:
    """The tensor-parallel choice as JSON-ready data (``omny plan --json``), or ``None``.

    ``num_devices``, ``degrees`` (per stage), ``step_flops`` (the slowest stage or link, in
    FLOPs), ``reason`` (why no stage is tensor-parallel, or ``None``), ``stages`` (per stage:
    ``degree``, ``regions``, ``weights_bytes``, ``memory_bytes`` (shard memory),
    ``required_bytes`` (with headroom) and ``resident_bytes`` (predicted resident memory on
    onnxruntime's CPU) per device, ``sliced_weights_bytes``, ``flops`` per device,
    ``allreduce_bytes`` per device and request) and ``considered`` (the best degrees of each
    stage count tried, then the joint search's choice of cuts and degrees).

    .. versionadded:: 0.1
    """
    parallel = result.tensor_parallel
    if parallel is None:
        return None
    return {
        "num_devices": parallel.num_devices,
        "degrees": list(parallel.degrees),
        "step_flops": parallel.step_time,
        "reason": parallel.reason,
        "stages": [
            {
                "stage": s.stage,
                "degree": s.degree,
                "regions": s.regions,
                "weights_bytes": s.weights_bytes,
                "sliced_weights_bytes": s.sliced_weights_bytes,
                "memory_bytes": s.memory_bytes,
                "required_bytes": s.required_bytes,
                "resident_bytes": s.resident_bytes,
                "flops": s.flops,
                "allreduce_bytes": s.allreduce_bytes,
            }
            for s in parallel.stages
        ],
        "considered": [
            {"num_stages": n, "degrees": list(d), "step_flops": t}
            for n, d, t in parallel.considered
        ],
    }


def _describe_parallel(parallel: TensorParallelPlan | None) -> list[str]:
    if parallel is None:
        return []
    if parallel.reason is not None:
        return [f"tensor parallelism: none ({parallel.reason})"]
    degrees = "x".join(map(str, parallel.degrees))
    lines = [f"tensor parallelism on {plural(parallel.num_devices, 'device')}: degrees {degrees}"]
    for s in parallel.stages:
        sliced = (
            f" ({format_bytes(s.sliced_weights_bytes)} sliced in {s.degree})"
            if s.sliced_weights_bytes
            else ""
        )
        lines.append(
            f"  stage {s.stage}: degree {s.degree}, {plural(s.regions, 'region')}, weights per "
            f"device {format_bytes(s.weights_bytes)}{sliced}, memory per device "
            f"{format_bytes(s.memory_bytes)} (needs {format_bytes(s.required_bytes)}, resident "
            f"{format_bytes(s.resident_bytes)}), AllReduce "
            f"{format_bytes(s.allreduce_bytes)} per device per request"
        )
    return lines


def _bound_dict(found: Partition) -> dict[str, Any] | None:
    if found.bound is None:
        return None
    return {**found.bound.to_dict(), "text": found.bound.describe()}


def describe(result: PlanResult) -> str:
    """Return a table of the chosen configurations, one line per stage, for people.

    Each stage shows its memory, what its device needs, its FLOPs and its share of the
    model's FLOPs; each cut the bytes it sends per request at the planning dims; each
    configuration what bound it (:class:`~onnx_ir_multidevice.planner.partition.Bound`:
    compute-bound stage ``k``, transfer-bound cut ``k``, memory-bound by device ``d``) and
    the weights more than one stage holds.

    .. versionadded:: 0.1
    """
    lines = []
    approx = "~" if result.flops_estimated else ""
    for found, caps, config in zip(
        result.partitions, result.capacities, result.metadata.sharding.configurations, strict=True
    ):
        cuts = ", ".join(
            f"{cid} ({c.value.name}{'' if c.strict else f' +{len(c.side)} side'})"
            for cid, c in zip(config.cut_point_ids, found.cuts, strict=True)
        )
        lines.append(f"{plural(found.num_stages, 'shard')}: cuts {cuts or '-'}")
        for k, (stage, flops, share) in enumerate(
            zip(found.memory, found.flops, found.flops_share, strict=True)
        ):
            device = "" if caps is None else f" / device {format_bytes(caps[k])}"
            lines.append(
                f"  stage {k}: {stage.total_mb:>6} MiB (weights "
                f"{format_bytes(stage.weights_bytes)}, activations "
                f"{format_bytes(stage.activations_bytes)}, buffers "
                f"{format_bytes(stage.io_bytes)}), needs {format_bytes(stage.required_bytes)}"
                f"{device}, {approx}{flops / 1e9:.3g} GFLOP ({approx}{share:.0%} of compute)"
            )
        if found.cuts:
            sent = ", ".join(
                f"{cid} {'unknown' if n is None else format_bytes(n)}"
                for cid, n in zip(config.cut_point_ids, found.sent_bytes, strict=True)
            )
            lines.append(f"  sent per request: {sent}")
        if found.duplicated_weight_bytes:
            lines.append(
                f"  weights held by more than one stage: "
                f"{format_bytes(found.duplicated_weight_bytes)} (counted in each)"
            )
        if found.bound is not None:
            lines.append(f"  {approx}{found.bound.describe()}")
    lines.extend(_describe_parallel(result.tensor_parallel))
    if result.flops_estimated:
        lines.append(
            "~: FLOPs counted with unbound dims at example values (bind them for exact figures)"
        )
    return "\n".join(lines)
