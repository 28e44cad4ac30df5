"""The whole job on one model file, step by step, with real files: the real-model matrix.

:func:`run_job` takes an ``.onnx`` file as a user brings it and does what the ``omny``
command line does, in one process, writing every intermediate file to disk:

1. ``plan`` (strict cuts; relaxed cuts when strict ones give no plan), the metadata written
   into the model, the ``.omny`` file saved and loaded back;
2. ``check`` of that file (no error allowed);
3. ``annotate``, the annotated model saved, loaded back and checked (no error allowed);
4. for every planned shard count: ``save_split`` to a folder, and ``verify`` (the stages
   chained against the whole model on onnxruntime, at the tolerance of the model's arithmetic:
   :func:`~onnx_ir_multidevice.analysis.default_tolerance`);
5. a short ``run``: a :class:`~onnx_ir_multidevice.runtime.Pipeline` over the 2-stage split
   folder serves a few requests; each answer is compared with the whole model's.

A model that has no cut at all is a result too: :attr:`JobReport.no_cut` holds the planner's
message (which tensors cross, where). The test suite runs it on every model of the corpus
(``tests/corpus``); the docs page *Real models* shows its table.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["JobReport", "StepFailure", "compute_boundaries", "run_job"]

import dataclasses
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._proto import load, save
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice.analysis.cut_points import analyse_cut_points
from onnx_ir_multidevice.analysis.precision import TOLERANCES, arithmetic_family
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.analysis.tensor_classes import HEAVY_OPS, TensorClass
from onnx_ir_multidevice.checker import Severity, check
from onnx_ir_multidevice.omny import write
from onnx_ir_multidevice.passes import annotate
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.runtime import Pipeline, verify
from onnx_ir_multidevice.runtime.sessions import ModelSession
from onnx_ir_multidevice.runtime.verification import compare_outputs


def compute_boundaries(
    graph: ir.Graph,
    *,
    classes: Mapping[ir.Value, TensorClass] | None = None,
    relaxed: bool = False,
) -> tuple[int, ...]:
    """Where ``graph`` can be cut, counted in heavy ops: comparable across exporters.

    For each cut (strict, or relaxed too), the number of heavy ops
    (:data:`~onnx_ir_multidevice.analysis.tensor_classes.HEAVY_OPS`, replicable ones aside)
    that run before it; the distinct numbers, sorted. Two exports of one module have the
    same heavy ops in the same order, but one boundary between two of them can be cut at a
    different number of tensors (TorchScript writes ``Conv`` then ``Clip``, or an explicit
    ``Pad``, where dynamo fuses): their raw cut counts differ, these numbers agree.

    Args:
        graph: A main graph.
        classes: Tensor classes to use (default: the package's).
        relaxed: Count relaxed cuts too.

    Returns:
        The sorted distinct counts of heavy ops before a cut.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sizes at unbound dims: irrelevant to where cuts are
        analysis = analyse_cut_points(graph, classes=classes, relaxed=relaxed)
    replicable = set(analysis.replicable_nodes)
    heavy = [n for n in graph if n.op_type in HEAVY_OPS and n not in replicable]
    found = set()
    for cut in analysis.candidates:
        stages = assign_stages(graph, [cut.value], classes=analysis.classes)
        found.add(sum(1 for node in heavy if stages[node] == 0))
    return tuple(sorted(found))


class StepFailure(AssertionError):
    """A step of :func:`run_job` did not do its job; the message names the model and step."""


@dataclasses.dataclass
class JobReport:
    """What :func:`run_job` did and measured for one model."""

    name: str
    """The model's name (the file name without extension unless given)."""
    nodes: int
    """Nodes of the main graph."""
    relaxed: bool = False
    """Whether strict cuts gave no plan and relaxed ones were used."""
    cut_points: int = 0
    """Cut points in the plan."""
    shard_counts: tuple[int, ...] = ()
    """Shard counts planned (each split and verified)."""
    max_abs_diff: dict[int, float] = dataclasses.field(default_factory=dict)
    """Largest difference of any output, stages against whole model, per shard count."""
    family: str = "fp32"
    """The model's arithmetic (:func:`~onnx_ir_multidevice.analysis.arithmetic_family`)."""
    rtol: float = 1e-4
    """Relative tolerance of ``verify`` (the default for :attr:`family`)."""
    atol: float = 1e-4
    """Absolute tolerance of ``verify``."""
    plan_warnings: tuple[str, ...] = ()
    """Warnings ``plan`` gave (one line naming the unbound dims, when there are)."""
    no_cut: str | None = None
    """The planner's message when the model has no cut at all (then no other step ran)."""
    pipeline_requests: int = 0
    """Requests the 2-stage pipeline served, each checked against the whole model."""
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    """Wall time of each step."""

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data."""
        data = dataclasses.asdict(self)
        data["max_abs_diff"] = {str(k): v for k, v in self.max_abs_diff.items()}
        return data


def _errors(diagnostics: list) -> list[str]:
    return [str(d) for d in diagnostics if d.severity == Severity.ERROR]


def run_job(
    path: str | Path,
    workdir: str | Path,
    *,
    dims: Mapping[str, int] | None = None,
    name: str | None = None,
    requests: int = 2,
    shard_counts: tuple[int, ...] | None = None,
) -> JobReport:
    """Plan, check, annotate, split, verify and run ``path``; raise at the first failure.

    Args:
        path: The model file, as the user brings it (it is only read).
        workdir: An existing folder for the files the job writes (``.omny``, annotated
            model, split folders).
        dims: Planning dims (``--dim`` on the command line); default: none, as a new user.
        name: The model's name in the report and file names (default: the file's stem).
        requests: Requests the 2-stage pipeline serves (0: no pipeline run).
        shard_counts: Shard counts to split and verify (default: every count planned).

    Returns:
        The report. A model with no possible cut returns with :attr:`JobReport.no_cut` set.

    Raises:
        StepFailure: A check found errors, a split disagrees with the whole model beyond the
            tolerance, or a pipeline answer disagrees.
    """
    path, workdir = Path(path), Path(workdir)
    name = name or path.stem
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[step] = round(now - clock, 3)
        clock = now

    model = load(path)
    family = arithmetic_family(model)
    rtol, atol = TOLERANCES[family]
    report = JobReport(name, len(model.graph), family=family, rtol=rtol, atol=atol, seconds=seconds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            metadata = plan(model, dims=dims, assign_names=True)
        except PlanError:
            try:
                metadata = plan(model, dims=dims, assign_names=True, relaxed=True)
            except PlanError as exc:
                report.no_cut = str(exc)
                return report
            report.relaxed = True
    report.plan_warnings = tuple(dict.fromkeys(str(w.message) for w in caught))
    write(model, metadata)
    omny_path = workdir / f"{name}.omny"
    save(model, omny_path)
    lap("plan")

    planned = load(omny_path)
    report.cut_points = len(metadata.cut_points)
    report.shard_counts = tuple(c.num_shards for c in metadata.sharding.configurations)
    errors = _errors(check(planned, relaxed_cuts=report.relaxed))
    if errors:
        raise StepFailure(f"{name}: check of the planned file: {errors}")
    annotated_path = workdir / f"{name}.annotated.onnx"
    save(annotate(planned, relaxed_cuts=report.relaxed), annotated_path)
    errors = _errors(check(load(annotated_path), relaxed_cuts=report.relaxed))
    if errors:
        raise StepFailure(f"{name}: check of the annotated model: {errors}")
    lap("check+annotate")

    counts = report.shard_counts if shard_counts is None else shard_counts
    for count in counts:
        save_split(planned, workdir / f"split{count}", count)
        result = verify(planned, count, rtol=rtol, atol=atol, dims=dims)
        report.max_abs_diff[count] = max((o.max_abs_diff for o in result.outputs), default=0.0)
        if not result.ok:
            worst = [o for o in result.outputs if not o.ok]
            raise StepFailure(
                f"{name}: {count} stages disagree with the whole model (rtol={rtol}, "
                f"atol={atol}): "
                + ", ".join(f"{o.name} max abs diff {o.max_abs_diff:.3g}" for o in worst)
            )
    lap("split+verify")

    if requests and 2 in counts:
        _run_pipeline(report, planned, workdir / "split2", dims, requests)
        lap("run")
    return report


def _run_pipeline(
    report: JobReport,
    planned: ir.Model,
    folder: Path,
    dims: Mapping[str, int] | None,
    requests: int,
) -> None:
    with (
        Pipeline(folder, intra_op_num_threads=1) as pipeline,
        ModelSession(planned) as whole,
    ):
        names = [o.name for o in whole.session.get_outputs()]
        for seed in range(requests):
            feeds = pipeline.example_inputs(dims, seed=seed)
            expected = dict(zip(names, whole.session.run(None, feeds), strict=True))
            answer = pipeline.run(feeds, timeout=300)
            for output in pipeline.output_names:
                comparison = compare_outputs(
                    output,
                    expected[output],
                    np.asarray(answer[output]),
                    rtol=report.rtol,
                    atol=report.atol,
                )
                if not comparison.ok:
                    raise StepFailure(
                        f"{report.name}: the 2-stage pipeline's {output!r} disagrees with the "
                        f"whole model (max abs diff {comparison.max_abs_diff:.3g})"
                    )
            report.pipeline_requests += 1
