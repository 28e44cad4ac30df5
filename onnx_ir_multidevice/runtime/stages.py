"""Stage chains: which models a pipeline runs, and which tensors each reads and writes.

A :class:`StageChain` is what every engine of :class:`~onnx_ir_multidevice.runtime.Pipeline`
executes. :func:`load_stages` builds one from one of three sources:

* a planned model (``.omny`` metadata or pipeline annotations), split with
  :func:`onnx_ir_multidevice.split`;
* a directory written by ``omny split`` (``manifest.json``, read by
  :func:`onnx_ir_multidevice._split.manifest.read_manifest`, plus ``stage_<i>.onnx``);
* a list of stage models whose input and output names chain.

Routing follows the split contract: stage ``i`` reads its inputs by name from the graph inputs
and the outputs of earlier stages; stage outputs keep the original tensor names. After stage
``i`` runs, every tensor that no later stage reads and that is not a graph output is dropped,
so requests carry only what is still needed.

The declared shape, type and index bound of each graph input (a
:class:`~onnx_ir_multidevice.runtime.inputs.TensorSpec`) come from the whole model when the
chain is built from one, else from the stage models that read the input (the smallest bound
any of them finds).

.. deprecated:: 0.1
    ``StagePlan`` and ``load_plan`` are the former names of :class:`StageChain` and
    :func:`load_stages` (in the package, *plan* means the ``.omny`` plan the planner writes).
    They still work, with a :class:`DeprecationWarning`, and will be removed in the next
    release.
"""

from __future__ import annotations

__all__ = ["StageChain", "StageModel", "load_stages"]

import collections
import dataclasses
import os
import pathlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError, PipelineError
from onnx_ir_multidevice._proto.convert import from_proto
from onnx_ir_multidevice._proto.files import load as load_model
from onnx_ir_multidevice._regular_files import require_regular
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice._split.manifest import (
    MANIFEST_NAME,
    ManifestError,
    ManifestStage,
    read_manifest,
)
from onnx_ir_multidevice.omny.planning_dims import read_planning_dims
from onnx_ir_multidevice.runtime.inputs import TensorSpec, input_specs
from onnx_ir_multidevice.runtime.sessions import session_source

_DEPRECATED = {"StagePlan": "StageChain", "load_plan": "load_stages"}


@dataclasses.dataclass(frozen=True)
class StageModel:
    """One stage: its model and the names of the tensors it reads and writes."""

    index: int
    """0-based stage index; stage ``k`` runs on device ``k`` of the pipeline."""

    source: bytes | str | ir.Model
    """What the stage's session is made from (see
    :func:`~onnx_ir_multidevice.runtime.sessions.session_source`): the serialized
    ``ModelProto``; the path of the ``.onnx`` file (external data next to it is found by
    onnxruntime); or, for a model with external data or over the protobuf limit, the IR
    model, which each session saves to a temporary folder it removes when it closes."""

    inputs: tuple[str, ...]
    """Names the stage reads (graph inputs or outputs of earlier stages)."""

    outputs: tuple[str, ...]
    """Names the stage produces, in the order of its graph outputs."""

    def __repr__(self) -> str:
        if isinstance(self.source, bytes):
            src: object = f"<{len(self.source)} bytes>"
        elif isinstance(self.source, ir.Model):
            src = f"<onnx_ir.Model {self.source.graph.name!r}>"
        else:
            src = self.source
        return (
            f"StageModel(index={self.index}, source={src}, inputs={self.inputs}, "
            f"outputs={self.outputs})"
        )


@dataclasses.dataclass(frozen=True)
class StageChain:
    """The stages of a pipeline and how tensors flow between them.

    Build one with :func:`load_stages`; the constructor only checks that the names chain.
    Formerly named ``StagePlan`` (a deprecated alias for one release).
    """

    stages: tuple[StageModel, ...]
    """The stages in pipeline order."""

    graph_inputs: tuple[str, ...]
    """Names a request must provide."""

    graph_outputs: tuple[str, ...]
    """Names a request returns, in order."""

    input_specs: Mapping[str, TensorSpec] = dataclasses.field(default_factory=dict)
    """Declared shape, type and index bound of each graph input."""

    planning_dims: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """The planning dims the model (or its stage models) records
    (:func:`~onnx_ir_multidevice.omny.read_planning_dims`): what generated requests use for
    the dims not given."""

    keep_after: tuple[frozenset[str], ...] = dataclasses.field(init=False)
    """``keep_after[i]``: the names still needed once stage ``i`` has run (read by a later
    stage, or a graph output); everything else is dropped from the request."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise PipelineError("a pipeline needs at least one stage")
        available = set(self.graph_inputs)
        for stage in self.stages:
            missing = [name for name in stage.inputs if name not in available]
            if missing:
                raise PipelineError(
                    f"stage {stage.index} reads {missing} which neither a graph input nor an "
                    "earlier stage provides; the stage models do not chain (check the order of "
                    "the stages and their input names)",
                    stage=stage.index,
                )
            available.update(stage.outputs)
        missing_out = [name for name in self.graph_outputs if name not in available]
        if missing_out:
            raise PipelineError(
                f"graph outputs {missing_out} are produced by no stage and are no graph input"
            )
        needed_after: list[set[str]] = []
        needed = set(self.graph_outputs)
        for stage in reversed(self.stages):
            needed_after.append(set(needed))
            needed.update(stage.inputs)
        needed_after.reverse()
        keep: list[frozenset[str]] = []
        available = set(self.graph_inputs)
        for stage, later in zip(self.stages, needed_after, strict=True):
            available.update(stage.outputs)
            keep.append(frozenset(available & later))
        object.__setattr__(self, "keep_after", tuple(keep))

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        """The spec of each graph input, in the order of :attr:`graph_inputs`."""
        return tuple(self.input_specs.get(n, TensorSpec(n, None, None)) for n in self.graph_inputs)


# ---------------------------------------------------------------------------------------------
# Stages from models, protos and files

_Stage = tuple[StageModel, dict[str, TensorSpec], dict[str, int]]
"""A stage, the specs of the inputs it reads and the planning dims its model records."""


def _recorded_dims(model: ir.Model) -> dict[str, int]:
    try:
        return read_planning_dims(model) or {}
    except OmnyFormatError:  # an unreadable entry: generated requests use example dims
        return {}


def _stage_from_ir(
    index: int, model: ir.Model, source: bytes | str | ir.Model | None = None
) -> _Stage:
    graph = model.graph
    initializers = graph.initializers
    inputs = tuple(v.name or "" for v in graph.inputs if v.name not in initializers)
    outputs = tuple(v.name or "" for v in graph.outputs)
    if source is None:
        source = session_source(model)
    stage = StageModel(index, source, inputs, outputs)
    return stage, input_specs(model), _recorded_dims(model)


def _stage_from_path(index: int, path: str | os.PathLike) -> _Stage:
    path = os.fspath(path)
    require_regular(path, "stage model")
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as exc:  # onnx raises OSError, DecodeError or its own errors
        raise OmnyIOError(f"cannot read stage model {path}: {exc}") from exc
    # The session loads the file itself (external data included); the IR model, without its
    # weights, gives the names and the input specs.
    return _stage_from_ir(index, from_proto(proto), path)


def _stage_from_any(index: int, model: Any) -> _Stage:
    if isinstance(model, ir.Model):
        return _stage_from_ir(index, model)
    if isinstance(model, onnx.ModelProto):
        return _stage_from_ir(index, from_proto(model), session_source(model))
    if isinstance(model, (str, os.PathLike)):
        return _stage_from_path(index, model)
    raise TypeError(
        f"stage {index}: expected an onnx_ir.Model, an onnx.ModelProto or a path, "
        f"got {type(model).__name__}"
    )


def _tighter(first: TensorSpec, other: TensorSpec) -> TensorSpec:
    """``first``, with the smaller index bound of the two (a stage that reads the input)."""
    if other.high is None or (first.high is not None and first.high <= other.high):
        return first
    return dataclasses.replace(first, high=other.high)


# ---------------------------------------------------------------------------------------------
# Chains


def _chain_from_stages(
    stages: Sequence[_Stage],
    graph_outputs: Sequence[str] | None,
    graph_inputs: Sequence[str] | None = None,
    specs: Mapping[str, TensorSpec] | None = None,
    planning_dims: Mapping[str, int] | None = None,
) -> StageChain:
    """Chain ``stages``; ``specs`` (of the whole model) replace those the stages declare."""
    producer = {name: stage.index for stage, _, _ in reversed(stages) for name in stage.outputs}
    produced: set[str] = set()
    inputs: list[str] = []
    found: dict[str, TensorSpec] = {}
    for stage, stage_specs, _ in stages:
        late = [n for n in stage.inputs if producer.get(n, -1) >= stage.index]
        if late:
            raise PipelineError(
                f"stage {stage.index} reads {late}, which stage {producer[late[0]]} produces "
                "(not an earlier one); give the stages in pipeline order",
                stage=stage.index,
            )
        for name in stage.inputs:
            if name in produced:
                continue
            spec = stage_specs.get(name, TensorSpec(name, None, None))
            if name in found:
                found[name] = _tighter(found[name], spec)
            else:
                inputs.append(name)
                found[name] = spec
        produced.update(stage.outputs)
    if graph_inputs is not None:
        inputs = list(graph_inputs)
    if specs is not None:
        found.update(specs)
    found = {n: found.get(n, TensorSpec(n, None, None)) for n in inputs}
    if graph_outputs is None:
        # Without the original model: the last stage's outputs, plus any earlier output that
        # no later stage reads (a list of stages carries no other record of the graph outputs).
        read_later: set[str] = set(stages[-1][0].inputs)
        extra: list[str] = []
        for stage, _, _ in reversed(stages[:-1]):
            extra[:0] = [n for n in stage.outputs if n not in read_later]
            read_later.update(stage.inputs)
        graph_outputs = [*extra, *stages[-1][0].outputs]
    if planning_dims is None:  # the first stage model that records them
        planning_dims = next((dims for _, _, dims in stages if dims), {})
    return StageChain(
        tuple(stage for stage, _, _ in stages),
        tuple(inputs),
        tuple(graph_outputs),
        found,
        planning_dims=planning_dims,
    )


def _agrees(file: pathlib.Path, entry: ManifestStage, stage: StageModel) -> None:
    """The stage file reads and writes what its manifest entry says (a stale manifest fails)."""
    where = f"{file}: stages[{entry.index}]"
    listed = set(entry.input_names)
    unlisted = [name for name in stage.inputs if name not in listed]
    if unlisted:
        raise PipelineError(
            f"{where}.inputs: {entry.file} reads {unlisted}, which the manifest does not list; "
            "the stage files and the manifest come from different splits (split the model "
            "again with `omny split`)"
        )
    if tuple(stage.outputs) != entry.output_names:
        raise PipelineError(
            f"{where}.outputs: {entry.file} writes {list(stage.outputs)}, the manifest says "
            f"{list(entry.output_names)}; the stage files and the manifest come from different "
            "splits (split the model again with `omny split`)"
        )


_TENSOR_PARALLEL_LOADER: Callable[[ManifestStage], Any] | None = None


def register_tensor_parallel_loader(loader: Callable[[ManifestStage], Any]) -> None:
    """Set the loader of a split folder's tensor-parallel stages.

    :mod:`~onnx_ir_multidevice.runtime.tensor_parallel`, which builds on this module, registers
    its ``stage_from_manifest`` when the runtime package is imported (a registration instead
    of an import keeps the layers one way).
    """
    global _TENSOR_PARALLEL_LOADER  # noqa: PLW0603 (the one registration point)
    _TENSOR_PARALLEL_LOADER = loader


_TENSOR_PARALLEL_CHAIN: (
    Callable[[ir.Model, int, Sequence[str] | None], StageChain | None] | None
) = None


def register_tensor_parallel_chain(
    builder: Callable[[ir.Model, int, Sequence[str] | None], StageChain | None],
) -> None:
    """Set the builder of a model's chain from its tensor-parallel record.

    ``builder(model, shards, outputs)`` returns the chain of the split of ``shards`` stages
    with the degrees the model's record gives them, or ``None`` when the record gives none
    (no record, or every stage at degree 1). :mod:`~onnx_ir_multidevice.runtime.tensor_parallel`
    registers it, as it does :func:`register_tensor_parallel_loader`.
    """
    global _TENSOR_PARALLEL_CHAIN  # noqa: PLW0603 (the one registration point)
    _TENSOR_PARALLEL_CHAIN = builder


def _chain_from_directory(folder: pathlib.Path, outputs: Sequence[str] | None) -> StageChain:
    try:
        manifest = read_manifest(folder)
    except ManifestError as exc:  # a pipeline's errors are PipelineErrors (the path stays)
        raise PipelineError(str(exc)) from exc
    stages = []
    for entry in manifest.stages:
        if entry.tensor_parallel is not None:
            if _TENSOR_PARALLEL_LOADER is None:  # pragma: no cover (the package registers it)
                raise PipelineError(
                    f"stage {entry.index} of {folder} is tensor-parallel; import "
                    "onnx_ir_multidevice.runtime to run it"
                )
            stages.append(_TENSOR_PARALLEL_LOADER(entry))
        else:
            stages.append(_stage_from_path(entry.index, manifest.stage_path(entry.index)))
    for entry, (stage, _, _) in zip(manifest.stages, stages, strict=True):
        _agrees(folder / MANIFEST_NAME, entry, stage)
    graph_outputs = outputs if outputs is not None else manifest.graph_outputs
    return _chain_from_stages(stages, graph_outputs, manifest.graph_inputs)


def _chain_from_model(model: ir.Model, shards: int, outputs: Sequence[str] | None) -> StageChain:
    if _TENSOR_PARALLEL_CHAIN is not None:
        # A model whose record gives a stage of this split a degree runs as it is verified.
        recorded = _TENSOR_PARALLEL_CHAIN(model, shards, outputs)
        if recorded is not None:
            return recorded
    graph_outputs = list(outputs) if outputs is not None else [v.name for v in model.graph.outputs]
    if shards == 1:
        stage_models = [model]
    else:
        stage_models = split(model, shards)
    if len(stage_models) != shards:
        raise PipelineError(f"split returned {len(stage_models)} stages for shards={shards}")
    stages = [_stage_from_any(i, m) for i, m in enumerate(stage_models)]
    # The whole model's specs: its Gather analysis sees every use of an input, whichever
    # stage it lands in, and gives the bounds `verify` uses.
    specs = input_specs(model)
    return _chain_from_stages(
        stages,
        graph_outputs,  # type: ignore[arg-type]  # onnx-ir types names Optional; outputs are named
        list(specs),
        specs,
        _recorded_dims(model),
    )


def load_stages(
    source: Any,
    shards: int | None = None,
    *,
    outputs: Sequence[str] | None = None,
) -> StageChain:
    """Build the stage chain of a pipeline.

    Args:
        source: One of: a planned model (:class:`onnx_ir.Model`, :class:`onnx.ModelProto`, or
            the path of a ``.onnx`` / ``.omny`` file), split into ``shards`` stages with
            :func:`onnx_ir_multidevice.split` (``shards=1`` runs the whole model as one
            stage); a directory written by ``omny split``; a list of stage models (IR models,
            protos or paths) whose names chain; or a :class:`StageChain`.
        shards: Number of stages. Required for a single model; for a directory or a list it
            is optional and must match when given.
        outputs: Names the pipeline returns (a string is one name). Default: the model's
            graph outputs (for a directory, the manifest's ``graph_outputs``; for a list, the
            last stage's outputs plus earlier outputs that no later stage reads).

    Returns:
        The chain.

    Raises:
        PipelineError: The stages do not chain, the manifest of a directory is malformed (the
            message names the JSON path), or the number of stages differs from ``shards``.
        OmnyIOError: A file cannot be read.

    Formerly named ``load_plan`` (a deprecated alias for one release).
    """
    if isinstance(outputs, str):  # one name, not a sequence of one-letter names
        outputs = [outputs]
    if outputs is not None:
        not_names = [n for n in outputs if not isinstance(n, str)]
        if not_names:
            raise PipelineError(
                f"outputs must be tensor names (strings), got {not_names[:5]!r}; e.g. outputs=['y']"
            )
        repeated = sorted((n for n, k in collections.Counter(outputs).items() if k > 1), key=str)
        if repeated:
            raise PipelineError(
                f"outputs names {repeated} more than once; a result holds each output once, "
                "so give each name once"
            )
    if isinstance(source, StageChain):
        chain = source
    elif isinstance(source, (list, tuple)):
        if not source:
            raise PipelineError("a pipeline needs at least one stage; the list is empty")
        stages = [_stage_from_any(i, m) for i, m in enumerate(source)]
        chain = _chain_from_stages(stages, outputs)
    elif isinstance(source, (str, os.PathLike)) and pathlib.Path(source).is_dir():
        chain = _chain_from_directory(pathlib.Path(source), outputs)
    else:
        if shards is None:
            raise PipelineError(
                "shards= is required to split a single model; pass shards=N (N >= 1), or a "
                "directory written by `omny split`, or a list of stage models"
            )
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise PipelineError(f"shards must be a positive integer, got {shards!r}")
        if isinstance(source, (str, os.PathLike)):
            if not os.path.exists(source):
                raise OmnyIOError(f"{os.fspath(source)}: no such model file or split directory")
            model = load_model(source)
        elif isinstance(source, onnx.ModelProto):
            model = from_proto(source)
        elif isinstance(source, ir.Model):
            model = source
        else:
            raise TypeError(
                "Pipeline source must be an onnx_ir.Model, an onnx.ModelProto, a path, a split "
                f"directory or a list of stage models, got {type(source).__name__}"
            )
        return _chain_from_model(model, shards, outputs)
    if shards is not None and shards != chain.num_stages:
        raise PipelineError(f"shards={shards} but the source has {chain.num_stages} stages")
    return chain


def _deprecated_alias(name: str, stacklevel: int) -> Any:
    """The object a deprecated name stands for, after a :class:`DeprecationWarning`."""
    new = _DEPRECATED[name]
    warnings.warn(
        f"{name} is deprecated and will be removed in the next release; use {new} "
        "(in onnx_ir_multidevice, a *plan* is the .omny plan the planner writes)",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )
    return globals()[new]


def __getattr__(name: str) -> Any:
    """The deprecated names ``StagePlan`` and ``load_plan`` (:pep:`562`), with a warning."""
    if name in _DEPRECATED:
        return _deprecated_alias(name, 2)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
