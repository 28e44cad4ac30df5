"""``plan()``: cut points and shard configurations of a model, as ``.omny`` metadata.

Steps: find the cut points of the main graph
(:func:`~onnx_ir_multidevice.analysis.cut_points.analyse_cut_points`), build the memory model
(:class:`~onnx_ir_multidevice.planner.memory.MemoryModel`), choose an optimal partition for
each requested shard count (:func:`~onnx_ir_multidevice.planner.partition.partition`) and
fill every field of the ``.omny`` spec, and only those (the reference reader rejects other
keys).

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
  them *in place* with onnx-ir's ``NameFixPass`` (the only way ``plan`` modifies its input).

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
]

import dataclasses
import datetime
import math
import numbers
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._util import gc_paused, require_model
from onnx_ir_multidevice.analysis.cut_points import (
    DEFAULT_SIDE_LIMIT_BYTES,
    CutAnalysis,
    CutCandidate,
    analyse_cut_points,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes, dtype_name
from onnx_ir_multidevice.graph.index import GraphIndex, node_subgraphs
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice.planner.devices import parse_size
from onnx_ir_multidevice.planner.memory import (
    DEFAULT_HEADROOM,
    MIB,
    MemoryModel,
    format_bytes,
    required_bytes,
    to_mib,
)
from onnx_ir_multidevice.planner.partition import Partition, partition

DEFAULT_MAX_SHARDS = 8
"""Largest shard count tried when neither ``shards`` nor ``devices`` is given."""


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
    """Caveats (unknown sizes: numbers are lower bounds)."""


def plan(
    model: ir.Model,
    *,
    devices: Sequence[int | str] | None = None,
    shards: int | Iterable[int] | None = None,
    max_shard_size_mb: int | None = None,
    dims: Mapping[str, int] | None = None,
    relaxed: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    side_limit_bytes: int = DEFAULT_SIDE_LIMIT_BYTES,
    name: str | None = None,
    assign_names: bool = False,
) -> OmnyMetadata:
    """Plan how to run ``model`` on several devices; return the ``.omny`` metadata.

    Store the result with :func:`onnx_ir_multidevice.omny.write`. See :func:`plan_model` for
    the arguments and errors; this returns its ``metadata``. ``model`` must be an
    :class:`onnx_ir.Model`: load a file with :func:`onnx_ir_multidevice.load` first (a path
    or an ``onnx.ModelProto`` raises ``TypeError``).

    Example:
        >>> from onnx_ir_multidevice import zoo
        >>> meta = plan(zoo.resnet(), shards=[2])
        >>> meta.sharding.configurations[0].cut_point_ids
        ('cut_1',)

    .. versionadded:: 0.1
    """
    require_model(model, "plan")
    return plan_model(
        model,
        devices=devices,
        shards=shards,
        max_shard_size_mb=max_shard_size_mb,
        dims=dims,
        relaxed=relaxed,
        headroom=headroom,
        side_limit_bytes=side_limit_bytes,
        name=name,
        assign_names=assign_names,
    ).metadata


def plan_model(
    model: ir.Model,
    *,
    devices: Sequence[int | str] | None = None,
    shards: int | Iterable[int] | None = None,
    max_shard_size_mb: int | None = None,
    dims: Mapping[str, int] | None = None,
    relaxed: bool = False,
    headroom: float = DEFAULT_HEADROOM,
    side_limit_bytes: int = DEFAULT_SIDE_LIMIT_BYTES,
    name: str | None = None,
    assign_names: bool = False,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    """Plan ``model`` for its devices and return the metadata with the details behind it.

    Args:
        model: The model, an :class:`onnx_ir.Model`. It is not modified (unless
            ``assign_names``). ``plan`` does not load files: pass
            ``onnx_ir_multidevice.load(path)`` (the plan's names refer to this object, which
            is the one to :func:`~onnx_ir_multidevice.omny.write` the metadata into).
        devices: Device memory sizes in pipeline order, as bytes or strings (``"24GiB"``).
            Stage ``k`` must fit device ``k`` with the headroom. Without ``shards``, plans
            one configuration with ``len(devices)`` shards; with ``shards``, each count ``n``
            uses the first ``n`` devices.
        shards: Shard count(s) to plan: an int (``2``) or an iterable of ints (``[2, 4]``),
            each at least 1; each must be feasible. Default: every count from 2 to
            ``DEFAULT_MAX_SHARDS`` that is feasible.
        max_shard_size_mb: Upper bound on each shard's memory in MiB (headroom excluded).
        dims: Planning dims for symbolic dimensions (``{"seq": 512}``); a graph input's
            symbolic first dimension defaults to 1.
        relaxed: Also cut where small side activations cross (see
            :mod:`~onnx_ir_multidevice.analysis.cut_points`).
        headroom: Share of each device kept for the runtime, in ``[0, 1)``.
        side_limit_bytes: Budget of side activations per relaxed cut.
        name: Model name for the metadata (default: the graph name, else ``"model"``).
        assign_names: Name unnamed nodes and values in place (onnx-ir ``NameFixPass``)
            instead of refusing a cut on an unnamed one.
        progress: Called with a short message before each long step.

    Returns:
        The plan.

    Raises:
        TypeError: If ``model`` is not an :class:`onnx_ir.Model`.
        PlanError: If ``shards``, ``devices`` or ``max_shard_size_mb`` is not valid, a
            requested shard count has no feasible plan (the message names the stage, its
            device and the overflow), no count is feasible, or a chosen cut has no name.

    .. versionadded:: 0.1
    """
    require_model(model, "plan_model")
    with gc_paused():  # the analysis allocates many small objects and no cycles
        return _plan_model(
            model,
            devices=devices,
            shards=shards,
            max_shard_size_mb=max_shard_size_mb,
            dims=dims,
            relaxed=relaxed,
            headroom=headroom,
            side_limit_bytes=side_limit_bytes,
            name=name,
            assign_names=assign_names,
            progress=progress or (lambda message: None),
        )


def _plan_model(
    model: ir.Model,
    *,
    devices: Sequence[int | str] | None,
    shards: int | Iterable[int] | None,
    max_shard_size_mb: int | None,
    dims: Mapping[str, int] | None,
    relaxed: bool,
    headroom: float,
    side_limit_bytes: int,
    name: str | None,
    assign_names: bool,
    progress: Callable[[str], None],
) -> PlanResult:
    report = progress
    capacities = _capacities(devices)
    counts, explicit = _shard_counts(shards, capacities)
    if max_shard_size_mb is not None and max_shard_size_mb < 1:
        raise PlanError(
            f"max_shard_size_mb must be a positive number of MiB, got {max_shard_size_mb}"
        )
    if assign_names:
        from onnx_ir.passes.common import NameFixPass

        NameFixPass()(model)
    graph = model.graph
    try:
        sizes = ValueSizes(graph, dims)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc
    report(f"finding cut points in {len(graph)} nodes")
    # One index of the graph for every analysis step. Built without the local functions:
    # the tensor classes judge a call by its op type, as ``classify_values(graph)`` does.
    index = GraphIndex.build(graph)
    analysis = analyse_cut_points(
        graph, relaxed=relaxed, side_limit_bytes=side_limit_bytes, sizes=sizes, index=index
    )
    report(f"building the memory model over {len(analysis.chain) + 1} segments")
    memory = MemoryModel(analysis, headroom=headroom)
    max_stage = None if max_shard_size_mb is None else max_shard_size_mb * MIB

    partitions: list[Partition] = []
    used_capacities: list[tuple[int, ...] | None] = []
    skipped: list[tuple[int, str]] = []
    for n in counts:
        report(f"partitioning into {n} stages")
        caps = None if capacities is None else capacities[:n]
        try:
            found = partition(memory, n, capacities=caps, max_stage_bytes=max_stage)
        except PlanError as exc:
            if explicit:
                raise
            skipped.append((n, str(exc)))
            continue
        partitions.append(found)
        used_capacities.append(caps)
    if not partitions:
        reasons = "; ".join(f"{n} shards: {why}" for n, why in skipped[:2])
        raise PlanError(
            f"no shard count from {counts[0]} to {counts[-1]} has a feasible plan ({reasons})"
        )
    _check_names(model, partitions)
    caveats = _caveats(memory, partitions)
    for caveat in caveats:
        warnings.warn(caveat, stacklevel=4)
    metadata = _metadata(model, sizes, memory, partitions, max_shard_size_mb, name)
    return PlanResult(
        metadata=metadata,
        partitions=tuple(partitions),
        capacities=tuple(used_capacities),
        skipped=tuple(skipped),
        analysis=analysis,
        memory=memory,
        warnings=tuple(caveats),
    )


def _capacities(devices: Sequence[int | str] | None) -> tuple[int, ...] | None:
    if devices is None:
        return None
    if isinstance(devices, str):
        devices = devices.split(",")
    result = []
    for device in devices:
        if isinstance(device, str):
            try:
                result.append(parse_size(device))
            except ValueError as exc:
                raise PlanError(str(exc)) from exc
        elif isinstance(device, int) and not isinstance(device, bool) and device > 0:
            result.append(device)
        else:
            raise PlanError(f"device size {device!r} must be a positive byte count or e.g. '24GiB'")
    if not result:
        raise PlanError("devices is empty; give one memory size per device, e.g. ['24GiB', '8GiB']")
    return tuple(result)


def _is_count(n: object) -> bool:
    """Whether ``n`` is an integer (Python or NumPy, not a bool) of at least 1."""
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1


def _shard_counts(
    shards: int | Iterable[int] | None, capacities: tuple[int, ...] | None
) -> tuple[list[int], bool]:
    """The shard counts to plan, and whether the caller asked for them explicitly."""
    if shards is None:
        if capacities is not None:
            return [len(capacities)], True
        return list(range(2, DEFAULT_MAX_SHARDS + 1)), False
    if isinstance(shards, numbers.Integral) and not isinstance(shards, bool):
        given: list[object] = [shards]
    elif isinstance(shards, (str, bytes)) or not isinstance(shards, Iterable):
        raise PlanError(
            f"shards must be a shard count or a list of them (e.g. 2 or [2, 4]), got {shards!r}"
        )
    else:
        given = list(shards)
    if not given:
        raise PlanError("shards is empty; give at least one shard count, e.g. [2, 4]")
    for n in given:
        if not _is_count(n):
            raise PlanError(
                f"shards: shard count {n!r} must be a positive integer (at least 1), "
                "e.g. shards=[2, 4]"
            )
    counts = sorted({int(n) for n in given if isinstance(n, numbers.Integral)})
    for n in counts:
        if capacities is not None and n > len(capacities):
            raise PlanError(
                f"{n} shards need {n} devices but only {len(capacities)} device sizes were given"
            )
    return counts, True


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


def _caveats(memory: MemoryModel, partitions: Sequence[Partition]) -> list[str]:
    unknown: dict[str, None] = {}
    for found in partitions:
        for stage in found.memory:
            unknown.update(dict.fromkeys(stage.unknown))
    if not unknown:
        return []
    names = ", ".join(list(unknown)[:5]) + (", ..." if len(unknown) > 5 else "")
    return [
        f"the size of {len(unknown)} value(s) is unknown at the planning dims ({names}); "
        "their memory is not counted, so the figures are lower bounds. Give the symbolic "
        "dims (dims={'seq': 512}) or shapes"
    ]


def _metadata(
    model: ir.Model,
    sizes: ValueSizes,
    memory: MemoryModel,
    partitions: Sequence[Partition],
    max_shard_size_mb: int | None,
    name: str | None,
) -> OmnyMetadata:
    graph = model.graph
    chain_index = {cut.value: b for b, cut in enumerate(memory.analysis.chain, start=1)}
    used = sorted({cut.value for p in partitions for cut in p.cuts}, key=chain_index.__getitem__)
    ids = {value: f"cut_{k}" for k, value in enumerate(used, start=1)}
    cut_points = []
    cumulative = 0
    previous = 0
    for value in used:
        segment = chain_index[value]
        stage_mb = memory.stage(previous, segment).total_mb
        cumulative += stage_mb
        previous = segment
        cut: CutCandidate = memory.analysis.chain[segment - 1]
        cut_points.append(
            CutPoint(
                id=ids[value],
                after_node=cut.node.name or "",
                tensor_name=value.name or "",
                shape=sizes.static_shape(value) or (),
                dtype=dtype_name(sizes.dtype(value)),
                cumulative_memory_mb=cumulative,
                shard_memory_mb=stage_mb,
            )
        )
    configurations = tuple(
        ShardConfiguration(
            num_shards=p.num_stages,
            memory_per_shard_mb=tuple(m.total_mb for m in p.memory),
            cut_point_ids=tuple(ids[c.value] for c in p.cuts),
        )
        for p in partitions
    )
    counts = sorted({p.num_stages for p in partitions})
    largest_mb = max(max(m.total_mb for m in p.memory) for p in partitions)
    shard_limit_mb = largest_mb if max_shard_size_mb is None else max_shard_size_mb
    sharding = Sharding(
        min_vram_mb=to_mib(required_bytes(shard_limit_mb * MIB, memory.headroom)),
        max_shard_size_mb=shard_limit_mb,
        min_shards=counts[0],
        max_shards=counts[-1],
        allowed_shards=tuple(counts),
        configurations=configurations,
    )
    weights_bytes, params = _weights(graph, sizes)
    info = ModelInfo(
        name=name or graph.name or "model",
        architecture=guess_architecture(graph),
        total_params=params,
        total_size_mb=to_mib(weights_bytes),
        inference_memory_mb=memory.whole().total_mb,
    )
    return OmnyMetadata(
        model=info,
        inputs=tuple(_tensor_info(v, sizes) for v in graph.inputs if v not in _initializers(graph)),
        outputs=tuple(_tensor_info(v, sizes) for v in graph.outputs),
        cut_points=tuple(cut_points),
        sharding=sharding,
        export_info=ExportInfo(
            exported_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            exporter_version=_package_version(),
            source_framework="onnx",
            source_version=onnx.__version__,
            onnx_opset=model.opset_imports.get("", 0),
        ),
    )


def _initializers(graph: ir.Graph) -> set[ir.Value]:
    return set(graph.initializers.values())


def _tensor_info(value: ir.Value, sizes: ValueSizes) -> TensorInfo:
    return TensorInfo(
        name=value.name or "",
        shape=sizes.static_shape(value) or (),
        dtype=dtype_name(sizes.dtype(value)),
    )


def _weights(graph: ir.Graph, sizes: ValueSizes) -> tuple[int, int]:
    """Bytes and element count of every initializer and ``Constant``, bodies included."""
    nbytes = 0
    count = 0

    def visit(g: ir.Graph) -> None:
        nonlocal nbytes, count
        for value in g.initializers.values():
            shape = sizes.shape(value)
            n = sizes.nbytes(value)
            if shape is not None and n is not None:
                nbytes += n
                count += math.prod(shape)
        for node in g:
            if node.op_type == "Constant" and node.domain == "":
                attr = node.attributes.get("value")
                if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                    nbytes += attr.value.nbytes
                    count += attr.value.size
            if node.attributes:
                for body in node_subgraphs(node):
                    visit(body)

    visit(graph)
    return nbytes, count


def guess_architecture(graph: ir.Graph) -> str:
    """Guess the ``.omny`` ``architecture`` from the op types of the main graph.

    Returns ``"cnn"`` (convolutions, no attention), ``"vision_transformer"`` (a convolution or
    image input and attention), ``"transformer_decoder"`` (attention with a causal mask:
    ``Trilu`` or a ``Less``/``LessOrEqual`` comparison), ``"transformer_encoder"`` (other
    attention), ``"mlp"`` (matrix products only) or ``"unknown"``.

    .. versionadded:: 0.1
    """
    ops = Counter(node.op_type for node in graph)
    attention = (
        ops["Softmax"] > 0
        and ops["MatMul"] >= 2
        or any(op in ops for op in ("Attention", "MultiHeadAttention", "GroupQueryAttention"))
    )
    conv = ops["Conv"] > 0
    if conv and not attention:
        return "cnn"
    if attention and (conv or any(len(v.shape or ()) == 4 for v in graph.inputs)):
        return "vision_transformer"
    if attention:
        causal = any(op in ops for op in ("Trilu", "Less", "LessOrEqual"))
        return "transformer_decoder" if causal else "transformer_encoder"
    if ops["MatMul"] or ops["Gemm"]:
        return "mlp"
    return "unknown"


def _package_version() -> str:
    from onnx_ir_multidevice._version import __version__

    return __version__


def describe(result: PlanResult) -> str:
    """Return a table of the chosen configurations, one line per stage, for people.

    .. versionadded:: 0.1
    """
    lines = []
    for found, caps, config in zip(
        result.partitions, result.capacities, result.metadata.sharding.configurations
    ):
        cuts = ", ".join(
            f"{cid} ({c.value.name}{'' if c.strict else f' +{len(c.side)} side'})"
            for cid, c in zip(config.cut_point_ids, found.cuts)
        )
        lines.append(f"{found.num_stages} shards: cuts {cuts or '-'}")
        for k, (stage, flops) in enumerate(zip(found.memory, found.flops)):
            device = "" if caps is None else f" / device {format_bytes(caps[k])}"
            lines.append(
                f"  stage {k}: {stage.total_mb:>6} MiB (weights "
                f"{format_bytes(stage.weights_bytes)}, activations "
                f"{format_bytes(stage.activations_bytes)}, buffers "
                f"{format_bytes(stage.io_bytes)}), needs {stage.required_mb} MiB{device},"
                f" {flops / 1e9:.3g} GFLOP"
            )
    return "\n".join(lines)
