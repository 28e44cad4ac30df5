"""Tensor-parallel stages: the ranks of a stage run concurrently, the collectives in process.

A :class:`TensorParallelStage` is one pipeline stage split over ``degree`` ranks
(:func:`~onnx_ir_multidevice._split.tensor_parallel.split_tensor_parallel`, form (a)): every
rank holds one segment model per span between collectives. To the pipeline it is one stage
(it reads and writes the tensors of the stage it replaces); :class:`TensorParallelRunner` runs
it: segment ``s`` of all ranks at once (one onnxruntime session per rank and segment, one
intra-op thread each by default; rank 0 in the calling thread, the others in a thread pool),
then the collectives of step ``s`` in process (``AllReduce``: the sum of the ranks' partial
sums; ``AllGather``: their concatenation, block-aware), whose result every rank reads in
segment ``s + 1``. A rank that fails fails the request with a
:class:`~onnx_ir_multidevice.PipelineError` naming the stage, the rank and the segment.

:func:`tensor_parallel_chain` builds the stage chain of a model split into pipeline stages,
some of them tensor-parallel; :class:`~onnx_ir_multidevice.runtime.Pipeline` runs it as any
chain, and :func:`verify_tensor_parallel` compares it with the whole model.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "TensorParallelRunner",
    "TensorParallelStage",
    "make_runner",
    "tensor_parallel_chain",
    "stage_from_manifest",
    "tensor_parallel_stage",
    "verify_folder",
    "verify_tensor_parallel",
]

import dataclasses
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import PipelineError, VerifyError
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice._split.manifest import ManifestStage
from onnx_ir_multidevice._split.tensor_parallel import (
    TensorParallelCollective,
    TensorParallelSplit,
    split_tensor_parallel,
    tensor_parallel_configuration,
    tensor_parallel_degrees,
)
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.runtime import stages as _stages
from onnx_ir_multidevice.runtime import verification
from onnx_ir_multidevice.runtime.devices import Device, parse_device
from onnx_ir_multidevice.runtime.inputs import TensorSpec, input_specs
from onnx_ir_multidevice.runtime.runner import StageRunner, as_numpy, failure_message
from onnx_ir_multidevice.runtime.stages import (
    StageChain,
    StageModel,
    _chain_from_stages,
    _recorded_dims,
    _Stage,
    _stage_from_ir,
    _stage_from_path,
    load_stages,
)


@dataclasses.dataclass(frozen=True, repr=False)
class TensorParallelStage(StageModel):
    """A pipeline stage split over the ranks of a tensor-parallel group.

    :attr:`source` is rank 0's first segment (what a tool that opens one model sees); the
    runner uses :attr:`ranks`.
    """

    ranks: tuple[tuple[StageModel, ...], ...] = ()
    """``ranks[k][s]``: segment ``s`` of rank ``k`` (its ``index`` is ``s``)."""

    steps: tuple[tuple[TensorParallelCollective, ...], ...] = ()
    """``steps[s]``: the collectives run after segment ``s``."""

    @property
    def degree(self) -> int:
        """How many ranks."""
        return len(self.ranks)

    @property
    def num_segments(self) -> int:
        """Segments per rank."""
        return len(self.steps)

    def __repr__(self) -> str:
        return (
            f"TensorParallelStage(index={self.index}, degree={self.degree}, "
            f"segments={self.num_segments}, inputs={self.inputs}, outputs={self.outputs})"
        )


def tensor_parallel_stage(index: int, result: TensorParallelSplit) -> _Stage:
    """The stage (and its input specs and planning dims) of a tensor-parallel split.

    With no tensor parallelism (degree 1) it is a plain :class:`StageModel`.
    """
    if result.degree == 1:
        return _stage_from_ir(index, result.segments[0][0])
    ranks = []
    for segments in result.segments:
        ranks.append(tuple(_stage_from_ir(s, model)[0] for s, model in enumerate(segments)))
    wholes = {c.value for step in result.steps for c in step}
    produced: set[str] = set(wholes)
    inputs: list[str] = []
    for segment in ranks[0]:
        for name in segment.inputs:
            if name not in produced and name not in inputs:
                inputs.append(name)
        produced.update(segment.outputs)
    first = ranks[0][0]
    stage = TensorParallelStage(
        index,
        first.source,
        tuple(inputs),
        result.graph_outputs,
        ranks=tuple(ranks),
        steps=tuple(result.steps),
    )
    specs = {}
    for model in result.segments[0]:
        specs.update({k: v for k, v in input_specs(model).items() if k in inputs})
    return stage, specs, _recorded_dims(result.segments[0][0])


def stage_from_manifest(entry: ManifestStage) -> _Stage:
    """The :class:`TensorParallelStage` of a split folder's tensor-parallel stage entry.

    ``entry`` comes from a manifest read from its folder (its ranks' segment paths are set).
    The segment files are opened without their weights (onnxruntime loads them, external
    data included).

    Raises:
        PipelineError: The segments do not read and write what the entry says (a stale
            manifest).
    """
    parallel = entry.tensor_parallel
    if parallel is None:
        raise ValueError(f"stage {entry.index} is not tensor-parallel")
    ranks = []
    specs: dict[str, TensorSpec] = {}
    dims: dict[str, int] = {}
    for rank in parallel.ranks:
        row = []
        for s, path in enumerate(rank.paths):
            segment, segment_specs, segment_dims = _stage_from_path(s, path)
            row.append(segment)
            if rank.rank == 0:
                specs.update(segment_specs)
                dims = dims or segment_dims
        ranks.append(tuple(row))
    steps = tuple(
        tuple(TensorParallelCollective.from_dict(c.to_dict()) for c in step)
        for step in parallel.steps
    )
    wholes = {c.value for step in steps for c in step}
    produced: set[str] = set(wholes)
    inputs: list[str] = []
    for segment in ranks[0]:
        inputs.extend(n for n in segment.inputs if n not in produced and n not in inputs)
        produced.update(segment.outputs)
    missing = [name for name in entry.output_names if name not in produced]
    if missing:
        raise PipelineError(
            f"stages[{entry.index}].tensor_parallel: the segments of rank 0 produce no "
            f"{missing}; the segment files and the manifest come from different splits "
            "(split the model again with `omny split`)",
            stage=entry.index,
        )
    stage = TensorParallelStage(
        entry.index,
        ranks[0][0].source,
        tuple(inputs),
        entry.output_names,
        ranks=tuple(ranks),
        steps=steps,
    )
    return stage, {k: v for k, v in specs.items() if k in inputs}, dims


class TensorParallelRunner:
    """Runs a :class:`TensorParallelStage`: its ranks concurrently, its collectives in process.

    It has :class:`~onnx_ir_multidevice.runtime.StageRunner`'s interface (``run``,
    ``cancel``, ``close``), so an engine runs it as one stage.

    Args:
        stage: The stage.
        device: The device of every rank (this runtime runs the ranks in one process).
        threads: onnxruntime intra-op threads of each rank's sessions (``None``: 1).
        spinning: Whether onnxruntime's threads spin while idle.

    Raises:
        PipelineError: A segment's session cannot be made (those made are closed); the
            message names the rank, the segment and its file.
    """

    def __init__(
        self,
        stage: TensorParallelStage,
        device: Device,
        threads: int | None = None,
        *,
        spinning: bool = False,
    ) -> None:
        self.stage = stage
        self.device = device
        self._runners: list[list[StageRunner]] = []
        try:
            for rank, segments in enumerate(stage.ranks):
                row: list[StageRunner] = []
                self._runners.append(row)
                for number, segment in enumerate(segments):
                    try:
                        runner = StageRunner(
                            dataclasses.replace(segment, index=stage.index),
                            device,
                            1 if threads is None else threads,
                            spinning=spinning,
                        )
                    except PipelineError as error:  # say which rank and file
                        file = segment.source
                        named = f" ({os.path.basename(file)})" if isinstance(file, str) else ""
                        reason = str(error).removeprefix(f"[stage {stage.index}] ")
                        raise PipelineError(
                            f"rank {rank} of {stage.degree}, segment {number}{named}: {reason}",
                            stage=stage.index,
                        ) from error
                    row.append(runner)
        except BaseException:
            self.close()
            raise
        self._inputs = frozenset(stage.inputs)
        self._pool = ThreadPoolExecutor(
            max_workers=max(stage.degree - 1, 1),
            thread_name_prefix=f"omny-tp-stage-{stage.index}",
        )

    def _segment(self, rank: int, segment: int, env: Mapping[str, Any]) -> dict[str, Any]:
        return self._runners[rank][segment].run(env)

    def run(self, env: Mapping[str, Any], *, ort_values: bool = False) -> dict[str, Any]:
        """Run the stage on one request (numpy outputs; ``ort_values`` is ignored).

        Segment ``s`` of every rank runs at once (rank 0 in the calling thread); a last
        segment after which no collective runs (replicated work whose outputs only rank 0
        returns) runs on rank 0 alone. An ``AllReduce`` sums in place into rank 0's piece
        (the ranks' outputs are fresh arrays of this request), and every rank reads the same
        whole array.

        Raises:
            PipelineError: A rank failed (the first failing rank is named; the cause is
                chained).
        """
        del ort_values
        degree = self.stage.degree
        steps = self.stage.steps
        last = len(steps) - 1
        first = {k: as_numpy(v) for k, v in env.items() if k in self._inputs}
        envs = [first] + [dict(first) for _ in range(degree - 1)]
        for s, step in enumerate(steps):
            ranks = 1 if s == last and not step else degree
            futures = [self._pool.submit(self._segment, k, s, envs[k]) for k in range(1, ranks)]
            results: list[dict[str, Any] | None] = [None] * ranks
            errors: list[tuple[int, BaseException]] = []
            try:
                results[0] = self._segment(0, s, envs[0])
            except Exception as exc:  # the request fails; the other ranks are waited for
                errors.append((0, exc))
            for k, future in enumerate(futures, start=1):
                try:
                    results[k] = future.result()
                except Exception as exc:
                    errors.append((k, exc))
            if errors:
                rank, cause = errors[0]
                raise PipelineError(
                    f"rank {rank} of {degree} of the tensor-parallel stage failed in segment "
                    f"{s} of {self.stage.num_segments}: {failure_message(cause)}",
                    stage=self.stage.index,
                ) from cause
            for k in range(ranks):
                envs[k].update(results[k] or {})
            for collective in step:
                pieces = [envs[k].pop(collective.partial) for k in range(degree)]
                whole = collective.combine(pieces, in_place=True)
                for k in range(degree):
                    envs[k][collective.value] = whole
        return {name: envs[0][name] for name in self.stage.outputs}

    def cancel(self) -> None:
        """Stop the runs in progress of every rank, and any later one."""
        for row in self._runners:
            for runner in row:
                runner.cancel()

    def close(self) -> None:
        """Cancel, release every session and the thread pool."""
        for row in self._runners:
            for runner in row:
                runner.close()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


def make_runner(
    stage: StageModel, device: Device, threads: int | None = None, *, spinning: bool = False
) -> StageRunner | TensorParallelRunner:
    """The runner of ``stage``: a :class:`TensorParallelRunner` for a tensor-parallel stage."""
    if isinstance(stage, TensorParallelStage):
        return TensorParallelRunner(stage, device, threads, spinning=spinning)
    return StageRunner(stage, device, threads, spinning=spinning)


def _degrees(model: ir.Model, shards: int, degree: int | Sequence[int] | None) -> list[int]:
    if degree is None:
        recorded = tensor_parallel_degrees(model, shards)
        return [recorded.get(i, 1) for i in range(shards)]
    if isinstance(degree, int):
        return [degree] * shards
    if isinstance(degree, str) or not isinstance(degree, Sequence):
        raise ValueError(
            f"degree must be a positive integer or one per stage, got {degree!r}"
        )  # a float or a string would be read as a sequence further on
    degrees = list(degree)
    if len(degrees) != shards:
        raise PipelineError(f"{len(degrees)} tensor-parallel degrees given for {shards} stages")
    return degrees


def tensor_parallel_splits(
    model: ir.Model,
    shards: int = 1,
    degree: int | Sequence[int] | None = None,
    *,
    dims: Mapping[str, int] | None = None,
) -> list[TensorParallelSplit]:
    """Split ``model`` into ``shards`` pipeline stages, each over its degree's ranks.

    Args:
        model: The model (not modified); with ``shards > 1`` it must be planned (see
            :func:`~onnx_ir_multidevice.split`).
        shards: Pipeline stages.
        degree: Tensor-parallel degree: one for every stage, one per stage, or ``None`` for
            the degrees the model's record states (``onnx_ir_multidevice.tensor_parallel``).
        dims: The planning dims the regions are found at.

    Returns:
        One split per stage (a :class:`UserWarning` names a stage the record gives a degree
        that finds no region: it runs whole).
    """
    require_model(model, "tensor_parallel_splits")
    degrees = _degrees(model, shards, degree)
    if dims is None and degree is None:
        recorded = tensor_parallel_configuration(model, shards)
        dims = recorded.dims_dict if recorded is not None else None
    stage_models = [model] if shards == 1 else split(model, shards)
    splits = [
        split_tensor_parallel(stage_model, d, dims=dims)
        for stage_model, d in zip(stage_models, degrees, strict=True)
    ]
    for index, (d, result) in enumerate(zip(degrees, splits, strict=True)):
        if degree is None and d > 1 and result.degree == 1:
            # Said, not dropped silently: the record asked for more devices than run.
            warnings.warn(
                f"stage {index} runs whole, not over the {d} devices the tensor-parallel "
                f"record gives it: {result.reason}; plan the model again (`omny plan "
                "--tensor-parallel N`) for a degree that finds regions",
                UserWarning,
                stacklevel=2,
            )
    return splits


def tensor_parallel_chain(
    model: ir.Model,
    shards: int = 1,
    degree: int | Sequence[int] | None = None,
    *,
    dims: Mapping[str, int] | None = None,
    outputs: Sequence[str] | None = None,
) -> StageChain:
    """The stage chain of ``model`` split into pipeline stages, some tensor-parallel.

    :class:`~onnx_ir_multidevice.runtime.Pipeline` runs it (``Pipeline(chain)``); a stage of
    degree ``d > 1`` is a :class:`TensorParallelStage` whose ``d`` ranks run concurrently.
    Arguments as :func:`tensor_parallel_splits`; ``outputs``: the names the chain returns.
    """
    splits = tensor_parallel_splits(model, shards, degree, dims=dims)
    stages = [tensor_parallel_stage(i, result) for i, result in enumerate(splits)]
    specs = input_specs(model)
    graph_outputs = (
        list(outputs) if outputs is not None else [v.name or "" for v in model.graph.outputs]
    )
    return _chain_from_stages(stages, graph_outputs, list(specs), specs, _recorded_dims(model))


def verify_tensor_parallel(
    model: ir.Model | str | os.PathLike,
    degree: int | Sequence[int] | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    shards: int = 1,
    rtol: float | None = None,
    atol: float | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    threads: int | None = None,
    input_dims: Mapping[str, int] | None = None,
) -> Any:
    """Compare the tensor-parallel split of ``model`` with the whole model on onnxruntime (CPU).

    The whole model runs once; then the stages run in order, each tensor-parallel one through
    :class:`TensorParallelRunner` (its ranks concurrently, its collectives in process). Every
    graph output is compared at the model's dtype tolerance, as :func:`verify` does
    (:func:`~onnx_ir_multidevice.runtime.compare_outputs`).

    Args:
        model: The model, or the path of a model file.
        degree: Tensor-parallel degree (one, one per stage, or ``None``: the model's record).
        inputs: Arrays by graph input name; missing ones are generated.
        shards: Pipeline stages (``> 1`` needs a planned model).
        rtol: Relative tolerance (default: by the model's arithmetic).
        atol: Absolute tolerance (likewise).
        dims: The dims of generated inputs, and where the regions are found.
        seed: Seed of generated inputs.
        threads: Intra-op threads of each rank's sessions (default 1).
        input_dims: The dims of generated inputs only (the regions are then found at
            ``dims``, by default the record's).

    Returns:
        A :class:`~onnx_ir_multidevice.runtime.VerifyReport` (``stage_seconds``: one run of
        each stage, all its ranks together).

    Raises:
        VerifyError: onnxruntime cannot load or run the model or a stage (named).
    """
    model = _model(model, "verify_tensor_parallel")
    rtol, atol = verification._tolerances(model, rtol, atol)
    feeds = verification.make_inputs(
        model, dims=input_dims if input_dims is not None else dims, seed=seed
    )
    if inputs:
        feeds.update({k: np.asarray(v) for k, v in inputs.items()})
    if dims is None and degree is None:
        recorded = tensor_parallel_configuration(model, shards)
        dims = recorded.dims_dict if recorded is not None else None
    chain = tensor_parallel_chain(model, shards, degree, dims=dims)
    return _verify_chain(model, chain, feeds, rtol, atol, threads)


def _model(model: ir.Model | str | os.PathLike, caller: str) -> ir.Model:
    if isinstance(model, (str, os.PathLike)):
        from onnx_ir_multidevice._proto.files import load

        model = load(model)
    require_model(model, caller)
    return model


def _verify_chain(
    model: ir.Model,
    chain: StageChain,
    feeds: dict[str, np.ndarray],
    rtol: float,
    atol: float,
    threads: int | None,
) -> Any:
    """Run the whole model, then ``chain``'s stages in order, and compare the outputs."""
    expected, whole_seconds, whole_create = verification._run(model, feeds, "whole model", None)
    device = parse_device("cpu")
    env: dict[str, Any] = dict(feeds)
    seconds, created = [], []
    for stage in chain.stages:
        start = time.perf_counter()
        try:
            runner = make_runner(stage, device, threads)
        except PipelineError as error:
            raise VerifyError(f"stage {stage.index}: {error}") from error
        created.append(time.perf_counter() - start)
        try:
            start = time.perf_counter()
            env.update(runner.run(env))
            seconds.append(time.perf_counter() - start)
        except Exception as error:
            raise VerifyError(
                f"onnxruntime failed running stage {stage.index}: {failure_message(error)}"
            ) from error
        finally:
            runner.close()
    comparisons = [
        verification.compare_outputs(name, expected[name], env[name], rtol, atol)
        for name in (v.name or "" for v in model.graph.outputs)
    ]
    return verification.VerifyReport(
        num_stages=chain.num_stages,
        rtol=rtol,
        atol=atol,
        outputs=tuple(comparisons),
        inputs=tuple((n, tuple(a.shape), str(a.dtype)) for n, a in feeds.items()),
        whole_seconds=whole_seconds,
        stage_seconds=tuple(seconds),
        whole_create_seconds=whole_create,
        stage_create_seconds=tuple(created),
    )


def verify_folder(
    model: ir.Model | str | os.PathLike,
    folder: str | os.PathLike,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    threads: int | None = None,
) -> Any:
    """Compare a split folder with the whole model on onnxruntime (CPU).

    The folder is written by ``omny split`` or :func:`~onnx_ir_multidevice.save_split`. Its
    stages run in order, a tensor-parallel stage through :class:`TensorParallelRunner` (its
    ranks concurrently, its collectives in process); every graph output is compared at the
    model's dtype tolerance, as :func:`~onnx_ir_multidevice.verify` does.

    Args:
        model: The whole model, or the path of its file.
        folder: The split directory.
        inputs: Arrays by graph input name; missing ones are generated.
        rtol: Relative tolerance (default: by the model's arithmetic).
        atol: Absolute tolerance (likewise).
        dims: The dims of generated inputs.
        seed: Seed of generated inputs.
        threads: Intra-op threads of each session (default 1).

    Returns:
        A :class:`~onnx_ir_multidevice.runtime.VerifyReport`.

    Raises:
        PipelineError: ``folder`` is not a directory, its manifest is malformed or its
            stages do not chain.
        VerifyError: onnxruntime cannot load or run the model or a stage (named).
    """
    if not os.path.isdir(folder):  # else load_stages reads a file as a model to split
        what = "a file" if os.path.lexists(folder) else "no such directory"
        raise PipelineError(
            f"{os.fspath(folder)}: not a split directory ({what}); pass the directory "
            "`omny split` or save_split wrote"
        )
    model = _model(model, "verify_folder")
    rtol, atol = verification._tolerances(model, rtol, atol)
    feeds = verification.make_inputs(model, dims=dims, seed=seed)
    if inputs:
        feeds.update({k: np.asarray(v) for k, v in inputs.items()})
    chain = load_stages(folder)
    return _verify_chain(model, chain, feeds, rtol, atol, threads)


def _recorded_chain(
    model: ir.Model, shards: int, outputs: Sequence[str] | None
) -> StageChain | None:
    """The chain of ``model`` by its record's degrees, or ``None`` when none is above 1."""
    if not tensor_parallel_degrees(model, shards):
        return None
    return tensor_parallel_chain(model, shards, outputs=outputs)


# Lower runtime modules run tensor-parallel stages and checks through these registrations.
_stages.register_tensor_parallel_loader(stage_from_manifest)
_stages.register_tensor_parallel_chain(_recorded_chain)
verification.register_tensor_parallel_verify(verify_tensor_parallel)
