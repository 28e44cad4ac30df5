"""The steps of ``omny demo``: the main job of the package, end to end, on the bundled example.

The demo is a list of steps (:data:`STEPS`): load the bundled ``.omny`` example and show what
it holds, bind its cut points, rename a tensor, round-trip it byte for byte, check it; then plan
the model afresh for 2, 3 and 4 shards and for a heterogeneous device list, write the plan as
``.omny``, check and annotate it, split it and verify every configuration against the whole
model, and stream requests through a 2-stage pipeline.

Each step names the earlier steps whose results it uses (``after``: skipped when one of them
did not succeed; ``--only`` runs them too). A model without an ``.omny`` plan (``--model
plain.onnx``) is said once by the ``load`` step (:data:`NO_PLAN`); the steps that read the
file's own plan (``uses_plan``) are skipped, the others (check, and the plan made afresh,
annotated, split, verified and run) still run. Steps share a :class:`DemoContext` (the
loaded model, its metadata, a scratch folder, what earlier steps handed on). A step raises to
fail; every other step still runs when it can. The exit status is 1 if any step failed, 0
otherwise. ``--json`` prints one JSON document with each step's status and figures instead of
the text.
"""

from __future__ import annotations

__all__ = [
    "DEMO_DEVICES",
    "DEMO_SHARDS",
    "PIPELINE_DIMS",
    "PIPELINE_REQUESTS",
    "PIPELINE_STAGES",
    "STEPS",
    "NO_PLAN",
    "DemoContext",
    "Step",
    "run_steps",
    "scaled_devices",
    "with_prerequisites",
]

import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import onnx
import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._proto.convert import diff, roundtrip
from onnx_ir_multidevice._proto.external import DATA_RECORD_KEY, proto_tensors
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice._split import split
from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.analysis.precision import default_tolerance
from onnx_ir_multidevice.binding.bind import bind
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.planner.devices import parse_size
from onnx_ir_multidevice.planner.memory import format_bytes
from onnx_ir_multidevice.planner.planning import describe, plan_model
from onnx_ir_multidevice.runtime.pipeline import Pipeline
from onnx_ir_multidevice.runtime.sessions import ModelSession, session_options
from onnx_ir_multidevice.runtime.verification import compare_outputs, make_inputs, verify_stages

DEMO_SHARDS = (2, 3, 4)
"""Shard counts the ``plan`` step plans for."""

DEMO_DEVICES = ("24GiB", "8GiB", "8GiB")
"""A heterogeneous device list; the ``plan`` step scales it down to the model's size."""

PIPELINE_REQUESTS = 32
"""Requests the ``pipeline`` step streams (after two warm-up requests)."""

PIPELINE_STAGES = 2
"""Stages of the ``pipeline`` step."""

PIPELINE_DIMS = {"batch": 8}
"""Symbolic dimensions of each request of the ``pipeline`` step."""

NO_PLAN = (
    "no .omny plan: run `omny plan` first, or run the bundled example (`omny demo` without --model)"
)
"""What the ``load`` step says, once, of a model that holds no ``.omny`` plan."""


@dataclasses.dataclass
class DemoContext:
    """State shared by the demo steps."""

    path: Path
    """The ``.omny`` file the demo runs on."""
    workdir: Path
    """A scratch folder, deleted when the demo ends."""
    out: TextIO | None = None
    """Where the steps print (default: the current ``sys.stdout``)."""
    model: ir.Model | None = None
    """The loaded model (set by the ``load`` step)."""
    metadata: Any = None
    """Its :class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata` (set by ``load``)."""
    relaxed: bool = False
    """Accept relaxed cuts when checking the input and plan with them (``--relaxed``)."""
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Anything a step hands to a later one."""
    figures: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """What each step measured, by step name (the ``--json`` document)."""
    step: str = ""
    """Name of the step running now."""

    def say(self, text: str = "") -> None:
        """Print a line of the demo."""
        print(text, file=self.out or sys.stdout)

    def record(self, **values: Any) -> None:
        """Keep JSON-ready figures of the running step (for ``--json``)."""
        self.figures.setdefault(self.step, {}).update(values)

    def require_model(self) -> tuple[ir.Model, Any]:
        """The loaded model and metadata; raise if the ``load`` step did not set them."""
        if self.model is None or self.metadata is None:
            raise RuntimeError("the model was not loaded (the 'load' step failed or was skipped)")
        return self.model, self.metadata


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of the demo."""

    name: str
    """Short name (``--only`` selects by it)."""
    title: str
    """Heading printed before the step."""
    func: Callable[[DemoContext], None]
    """The step; raises on failure."""
    uses_model: bool = True
    """Whether it reads :attr:`DemoContext.model` (skipped when the model was not loaded)."""
    after: tuple[str, ...] = ()
    """Earlier steps whose results it uses: skipped unless they succeeded."""
    uses_plan: bool = False
    """Whether it reads the file's own ``.omny`` plan (skipped when the file has none)."""


# ---------------------------------------------------------------------------------------------
# Steps


def _step_load(ctx: DemoContext) -> None:

    ctx.model = load(ctx.path)
    ctx.metadata = omny.read(ctx.model)
    graph = ctx.model.graph
    ctx.say(f"file        {ctx.path} ({ctx.path.stat().st_size:,} bytes)")
    if ctx.metadata is not None:
        m = ctx.metadata.model
        ctx.say(f"model       {m.name} ({m.architecture}), {m.total_params:,} parameters")
    ctx.say(f"graph       {len(graph)} nodes, {len(graph.initializers)} initializers")
    for value in graph.inputs:
        ctx.say(f"input       {value.name}: {value.dtype} {value.shape}")
    for value in graph.outputs:
        ctx.say(f"output      {value.name}: {value.dtype} {value.shape}")
    if ctx.metadata is None:
        ctx.say(f"sharding    {NO_PLAN}")
        ctx.record(
            file=str(ctx.path),
            bytes=ctx.path.stat().st_size,
            nodes=len(graph),
            plan=None,
            message=NO_PLAN,
        )
        return
    m = ctx.metadata.model
    sharding = ctx.metadata.sharding
    ctx.say(
        f"sharding    {len(ctx.metadata.cut_points)} cut points, "
        f"{len(sharding.configurations)} configurations "
        f"(shard counts {[c.num_shards for c in sharding.configurations]})"
    )
    ctx.record(
        file=str(ctx.path),
        bytes=ctx.path.stat().st_size,
        model=m.name,
        architecture=m.architecture,
        parameters=m.total_params,
        nodes=len(graph),
        cut_points=len(ctx.metadata.cut_points),
        shard_counts=[c.num_shards for c in sharding.configurations],
    )


def _step_cut_points(ctx: DemoContext) -> None:

    model, metadata = ctx.require_model()
    plan = bind(model, metadata)
    for cut in plan.cut_points:
        where = (
            f"node {cut.node.name!r} ({cut.node.op_type}) -> value {cut.value.name!r} "
            f"{cut.value.shape}"
            if cut.resolved and cut.node is not None and cut.value is not None
            else "UNRESOLVED"
        )
        ctx.say(
            f"{cut.id:<6} {cut.spec.shard_memory_mb:>3} MiB stage, "
            f"{cut.spec.cumulative_memory_mb:>3} MiB so far: {where}"
        )
    for config in plan.configurations:
        ids = [c.id if c is not None else "?" for c in config.cut_points]
        ctx.say(
            f"configuration {config.index}: {plural(config.num_shards, 'shard')}, cuts {ids}, "
            f"MiB per shard {list(config.spec.memory_per_shard_mb)}"
        )
    if plan.unresolved:
        raise RuntimeError(
            f"{plural(len(plan.unresolved), 'unresolved reference')}: {plan.unresolved}"
        )


def _step_rename(ctx: DemoContext) -> None:

    # Work on a fresh copy so later steps see the file as it is.
    model = load(ctx.path)
    metadata = omny.read(model)
    if metadata is None:
        raise RuntimeError("the planned file has no plan")
    plan = bind(model, metadata)
    cut = next(c for c in plan.cut_points if c.resolved and c.value is not None)
    assert cut.value is not None  # chosen so
    old = cut.value.name
    new = f"hidden_states_{cut.id}"
    cut.value.name = new
    renamed = plan.to_metadata().cut_point(cut.id)
    if renamed is None:
        raise RuntimeError("the cut point is gone after the rename")
    ctx.say(f"renamed value {old!r} -> {new!r} in the graph")
    ctx.say(f"cut point {cut.id}: tensor_name is now {renamed.tensor_name!r}")
    if renamed.tensor_name != new:
        raise RuntimeError("the cut point did not follow the rename")
    ctx.say(f"(after_node stays {renamed.after_node!r}: the node was not renamed)")


def _has_external_data(proto: onnx.ModelProto) -> bool:
    return any(
        tensor.data_location == onnx.TensorProto.EXTERNAL for _, _, tensor in proto_tensors(proto)
    )


def _with_weights_inline(path: Path) -> onnx.ModelProto:
    """The model at ``path`` with its external weights read in and the data record removed.

    Which tensors a save puts in the data file is the writer's choice (small ones may stay
    inline): ``data_location`` is cleared where it says the data is inline.
    """
    proto = onnx.load(str(path), load_external_data=True)
    for _, _, tensor in proto_tensors(proto):
        if tensor.data_location == onnx.TensorProto.DEFAULT:
            tensor.ClearField("data_location")
    kept = [e for e in proto.metadata_props if e.key != DATA_RECORD_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    return proto


def _step_roundtrip(ctx: DemoContext) -> None:
    original = ctx.path.read_bytes()
    proto = onnx.ModelProto()
    proto.ParseFromString(original)
    again = roundtrip(proto).SerializeToString()
    ctx.say(f"proto -> ir.Model -> proto: {'byte-identical' if again == original else 'DIFFERS'}")
    # Same file name in another folder: a model without external data must come back byte for
    # byte. With external data, the data file is written anew (its name and the record that
    # ties it to the model may change), so the comparison is field by field with the weights
    # read back in.
    copy = ctx.workdir / "roundtrip" / ctx.path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    save(load(ctx.path), copy)
    saved = copy.read_bytes()
    if _has_external_data(proto):
        differences = diff(_with_weights_inline(ctx.path), _with_weights_inline(copy))
        same = not differences
        ctx.say(
            "load -> save, weights read back in: "
            + ("identical field by field" if same else f"DIFFERS: {differences[0]}")
        )
    else:
        same = saved == original
        ctx.say(f"load -> save under the same name: {'byte-identical' if same else 'DIFFERS'}")
    ctx.record(bytes=len(original), proto_identical=again == original, save_identical=same)
    if again != original or not same:
        raise RuntimeError("the round trip changed the file")
    ctx.say(f"({len(original):,} bytes, .omny metadata and all)")


def _severity(diagnostic: Any) -> str:
    return str(getattr(diagnostic.severity, "value", diagnostic.severity))


def _report_check(ctx: DemoContext, label: str, diagnostics: Sequence[Any]) -> None:
    """Print a check's counts and its errors and warnings; raise on errors."""
    counts = {k: sum(1 for d in diagnostics if _severity(d) == k) for k in ("error", "warning")}
    infos = len(diagnostics) - counts["error"] - counts["warning"]
    ctx.say(
        f"{label}: {plural(counts['error'], 'error')}, {plural(counts['warning'], 'warning')}, "
        f"{plural(infos, 'info')}"
    )
    shown = [d for d in diagnostics if _severity(d) in counts]
    for diagnostic in shown[:12]:
        ctx.say(f"  {diagnostic}")
    if len(shown) > 12:
        ctx.say(f"  ... and {len(shown) - 12} more")
    ctx.record(
        **{label: {"errors": counts["error"], "warnings": counts["warning"], "infos": infos}}
    )
    if counts["error"]:
        codes = sorted({d.code for d in diagnostics if _severity(d) == "error"})
        raise RuntimeError(
            f"{label}: the checker found {plural(counts['error'], 'error')} ({codes})"
        )


def _step_check(ctx: DemoContext) -> None:

    diagnostics = check(ctx.path, relaxed_cuts=ctx.relaxed)
    mode = "relaxed cuts accepted" if ctx.relaxed else "strict cuts"
    ctx.say(f"omny check {ctx.path.name} ({mode}, ONNX checker included)")
    _report_check(ctx, ctx.path.name, diagnostics)


def scaled_devices(
    model: ir.Model,
    devices: Sequence[str] = DEMO_DEVICES,
    *,
    relaxed: bool = False,
) -> tuple[list[int], int, Any]:
    """Scale ``devices`` down by the largest power of two that still fits ``model``.

    The bundled example needs a few MiB, not 40 GiB: the device sizes keep their ratios and
    shrink until one more halving would leave no feasible plan.

    Returns:
        The scaled sizes in bytes, the divisor, and the :class:`PlanResult` for them.

    Raises:
        PlanError: Not even the unscaled devices fit the model.
    """
    sizes = [parse_size(d) for d in devices]
    best = None
    divisor = 1
    while min(sizes) // divisor >= 1024:  # try up to 2**k while the devices keep 1 KiB
        divisor *= 2
    while divisor >= 1:
        scaled = [size // divisor for size in sizes]
        try:
            result = plan_model(model, devices=scaled, relaxed=relaxed, name="demo")
        except PlanError:
            if best is not None:
                break
        else:
            best = (scaled, divisor, result)
            break
        divisor //= 2
    if best is None:
        raise PlanError(f"the devices {', '.join(devices)} cannot hold the model")
    return best


def _step_plan(ctx: DemoContext) -> None:

    # Plan a fresh copy: the planner reads only the graph, the bundled plan is replaced.
    model = load(ctx.path)
    name = ctx.metadata.model.name if ctx.metadata is not None else None
    start = time.perf_counter()
    result = plan_model(model, shards=list(DEMO_SHARDS), relaxed=ctx.relaxed, name=name)
    took = time.perf_counter() - start
    cuts = "relaxed" if ctx.relaxed else "strict"
    ctx.say(
        f"plan(model, shards={list(DEMO_SHARDS)}): {len(result.analysis.chain)} {cuts} cut "
        f"candidates, {len(result.partitions)} configurations in {took * 1000:.0f} ms"
    )
    ctx.say(describe(result))
    bundled = ctx.metadata
    if bundled is not None and bundled.sharding.configurations:

        def tensors(meta: Any) -> dict[int, list[str]]:
            by_id = {c.id: c.tensor_name for c in meta.cut_points}
            return {
                c.num_shards: [by_id.get(i, "?") for i in c.cut_point_ids]
                for c in meta.sharding.configurations
            }

        same = tensors(bundled) == tensors(result.metadata)
        ctx.say(f"same cuts as the plan stored in {ctx.path.name}: {'yes' if same else 'no'}")
    omny.write(model, result.metadata)
    planned = ctx.workdir / f"{ctx.path.stem}.planned.omny"
    save(model, planned)
    ctx.say(f"wrote {planned.name} ({planned.stat().st_size:,} bytes)")

    scaled, divisor, hetero = scaled_devices(model, relaxed=ctx.relaxed)
    shown = ", ".join(format_bytes(b) for b in scaled)
    ctx.say()
    ctx.say(
        f"plan(model, devices=[{shown}]): {', '.join(DEMO_DEVICES)} scaled by 1/{divisor}, "
        "the tightest power-of-two scale that fits this model"
    )
    ctx.say(describe(hetero))
    hetero_model = load(ctx.path)
    omny.write(hetero_model, hetero.metadata)
    hetero_path = ctx.workdir / f"{ctx.path.stem}.{len(scaled)}-devices.omny"
    save(hetero_model, hetero_path)
    ctx.say(f"wrote {hetero_path.name} ({hetero_path.stat().st_size:,} bytes)")
    ctx.state.update(
        planned=planned,
        planned_model=model,
        planned_metadata=result.metadata,
        hetero=hetero_path,
        hetero_model=hetero_model,
        hetero_metadata=hetero.metadata,
    )

    def summary(found: Any) -> list[dict[str, Any]]:
        return [
            {
                "num_shards": c.num_shards,
                "memory_per_shard_mb": list(c.memory_per_shard_mb),
                "cuts": [found.metadata.cut_point(i).tensor_name for i in c.cut_point_ids],
            }
            for c in found.metadata.sharding.configurations
        ]

    ctx.record(
        shards=list(DEMO_SHARDS),
        configurations=summary(result),
        devices=list(DEMO_DEVICES),
        device_scale=divisor,
        scaled_devices_bytes=scaled,
        device_configurations=summary(hetero),
    )


def _step_check_annotate(ctx: DemoContext) -> None:

    for key in ("planned", "hetero"):
        path: Path = ctx.state[key]
        _report_check(ctx, f"check {path.name}", check(path, relaxed_cuts=ctx.relaxed))
    path = ctx.state["planned"]
    model = annotate(path, relaxed_cuts=ctx.relaxed)  # raises CheckError on errors
    annotated = ctx.workdir / f"{ctx.path.stem}.annotated.onnx"
    save(model, annotated)
    ctx.say(f"annotate({path.name}) -> {annotated.name} (IR version {model.ir_version})")
    summary = {}
    for configuration in model.device_configurations:
        counts = [0] * configuration.num_devices
        for node in model.graph:
            for entry in node.device_configurations:
                stage = entry.pipeline_stage
                if entry.configuration is configuration and stage is not None:
                    counts[stage] += 1
        summary[configuration.name] = counts
        ctx.say(f"  {configuration.name:<16} nodes per pipeline stage {counts}")
    _report_check(ctx, f"check {annotated.name}", check(annotated, relaxed_cuts=ctx.relaxed))
    ctx.record(annotated_nodes_per_stage=summary)


def _step_verify(ctx: DemoContext) -> None:

    runs = [
        (ctx.state["planned_model"], config, "")
        for config in ctx.state["planned_metadata"].sharding.configurations
    ]
    hetero = ctx.state["hetero_metadata"].sharding.configurations[0]
    runs.append((ctx.state["hetero_model"], hetero, " (device plan)"))
    records = []
    failures = []
    for model, config, label in runs:
        start = time.perf_counter()
        stages = split(model, config.num_shards, configuration=config)
        report = verify_stages(model, stages)  # verify's tolerance rule
        took = time.perf_counter() - start
        crossing = [[v.name for v in stage.graph.inputs] for stage in stages[1:]]
        ctx.say(
            f"{plural(config.num_shards, 'shard')}{label}: nodes per stage "
            f"{[len(stage.graph) for stage in stages]}, stage inputs after the first "
            f"{crossing} ({took * 1000:.0f} ms)"
        )
        for line in str(report).splitlines():
            ctx.say(f"  {line}")
        records.append(
            {
                "num_shards": config.num_shards,
                "device_plan": bool(label),
                "ok": report.ok,
                "rtol": report.rtol,
                "atol": report.atol,
                "outputs": report.to_dict()["outputs"],
            }
        )
        if not report.ok:
            failures.append(f"{config.num_shards} shards{label}")
    ctx.record(runs=records)
    if failures:
        raise RuntimeError(
            "the stages differ from the whole model beyond verify's tolerance: "
            + ", ".join(failures)
        )


def _step_pipeline(ctx: DemoContext) -> None:

    model = ctx.state["planned_model"]
    requests = [
        make_inputs(model, dims=PIPELINE_DIMS, seed=seed) for seed in range(PIPELINE_REQUESTS)
    ]
    names = [v.name for v in model.graph.outputs]
    options = session_options(intra_op_num_threads=1)
    with ModelSession(model, options, ["CPUExecutionProvider"]) as owner:
        whole = owner.session
        whole.run(names, requests[0])  # warm up
        start = time.perf_counter()
        expected = [dict(zip(names, whole.run(names, r), strict=True)) for r in requests]
        whole_s = time.perf_counter() - start
    path = ctx.state["planned"]
    with Pipeline(path, PIPELINE_STAGES, intra_op_num_threads=1) as pipe:
        for _ in pipe.map(requests[:2]):  # warm up
            pass
        pipe.reset_stats()
        results = list(pipe.map(requests))
        stats = pipe.stats()
    ctx.say(
        f"Pipeline({path.name}, {PIPELINE_STAGES}) on {', '.join(str(d) for d in pipe.devices)},"
        f" one onnxruntime thread per stage; {PIPELINE_REQUESTS} requests "
        f"{', '.join(f'{k}{list(v.shape)}' for k, v in requests[0].items())}"
    )
    ctx.say(
        f"  {stats.requests} requests in {stats.wall_s * 1000:.1f} ms: "
        f"{stats.throughput:.0f} requests/s, latency mean {stats.latency_mean_ms:.2f} ms, "
        f"p90 {stats.latency_p90_ms:.2f} ms"
    )
    for s in stats.stages:
        ctx.say(
            f"  stage {s.index} ({s.device}): {s.requests} requests, {s.mean_ms:.2f} ms mean "
            f"(p90 {s.p90_ms:.2f}), busy {s.busy_s * 1000:.1f} ms = {s.utilisation:.0%} of the "
            f"wall time, {s.requests / s.busy_s if s.busy_s else 0:.0f} requests/s when busy"
        )
    ctx.say(
        f"  whole model in one session, one request after another: {whole_s * 1000:.1f} ms "
        f"({PIPELINE_REQUESTS / whole_s:.0f} requests/s)"
    )
    rtol, atol = default_tolerance(model)  # verify's tolerance rule
    per_output: dict[str, dict[str, Any]] = {}
    for name in names:
        # verify's comparison, request by request; the worst figures over all requests.
        comparisons = [
            compare_outputs(name, want[name], got[name], rtol, atol)
            for got, want in zip(results, expected, strict=True)
        ]
        worst_abs = max((c.max_abs_diff for c in comparisons), default=0.0)
        worst_rel = max((c.max_rel_diff for c in comparisons), default=0.0)
        bad = sum(c.mismatches for c in comparisons)
        per_output[name] = {
            "max_abs_diff": worst_abs if math.isfinite(worst_abs) else None,  # JSON has no inf
            "max_rel_diff": worst_rel if math.isfinite(worst_rel) else None,
            "mismatches": bad,
        }
        ctx.say(
            f"  {name}, pipeline vs whole model over {len(results)} requests: max abs diff "
            f"{worst_abs:.3g}, max rel diff {worst_rel:.3g}, "
            f"{'all within' if not bad else plural(bad, 'element') + ' beyond'} "
            f"rtol={rtol:g}, atol={atol:g}"
        )
    bad = sum(o["mismatches"] for o in per_output.values())
    ctx.record(
        requests=len(results),
        dims=PIPELINE_DIMS,
        stats=stats.to_dict(),
        whole_model_seconds=whole_s,
        outputs=per_output,
    )
    if len(results) != PIPELINE_REQUESTS or bad:
        raise RuntimeError("the pipeline's outputs differ from the whole model's")


STEPS: list[Step] = [
    Step("load", "Load the .omny file and show what it holds", _step_load),
    Step("cuts", "Cut points, bound to the graph", _step_cut_points, uses_plan=True),
    Step(
        "rename",
        "Rename a tensor: the plan follows",
        _step_rename,
        uses_model=False,
        uses_plan=True,
    ),
    Step(
        "roundtrip",
        "Round trip, byte for byte",
        _step_roundtrip,
        uses_model=False,
    ),
    Step("check", "Check the file (omny check)", _step_check),
    Step(
        "plan",
        "Plan the model for 2, 3 and 4 shards and for unequal devices (omny plan)",
        _step_plan,
    ),
    Step(
        "annotate",
        "Check the plans, annotate IR v11 pipeline stages (omny check, omny annotate)",
        _step_check_annotate,
        after=("plan",),
    ),
    Step(
        "verify",
        "Split each configuration and compare with the whole model (omny split, omny verify)",
        _step_verify,
        after=("plan",),
    ),
    Step(
        "pipeline",
        f"Stream {PIPELINE_REQUESTS} requests through a {PIPELINE_STAGES}-stage pipeline "
        "(omny run)",
        _step_pipeline,
        after=("plan",),
    ),
]
"""The demo, in order."""


def with_prerequisites(names: Sequence[str]) -> list[Step]:
    """The steps named, the earlier steps they use (recursively), in demo order."""
    by_name = {s.name: s for s in STEPS}
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in wanted or name not in by_name:
            continue
        wanted.add(name)
        todo.extend(by_name[name].after)
        if by_name[name].uses_model or by_name[name].uses_plan:
            todo.append("load")
    return [s for s in STEPS if s.name in wanted]


def run_steps(
    steps: Sequence[Step], ctx: DemoContext, *, verbose_errors: bool = False
) -> dict[str, str]:
    """Run ``steps`` in order; return ``{name: "ok" | "skipped" | "failed"}``."""
    results: dict[str, str] = {}
    for number, step in enumerate(steps, 1):
        ctx.step = step.name
        ctx.say()
        heading = f"[{number}/{len(steps)}] {step.title}"
        ctx.say(heading)
        ctx.say("-" * len(heading))
        blocked = [name for name in step.after if results.get(name) != "ok"]
        reason = None
        if step.uses_model and step.name != "load" and ctx.model is None:
            reason = "the model was not loaded"
        elif step.uses_plan and ctx.model is not None and ctx.metadata is None:
            reason = "needs the file's own .omny plan (see step 'load')"
        elif blocked:
            reason = f"needs the results of {', '.join(repr(b) for b in blocked)}"
        if reason is not None:
            ctx.say(f"  skipped: {reason}")
            results[step.name] = "skipped"
            ctx.record(status="skipped", reason=reason)
            continue
        start = time.perf_counter()
        try:
            step.func(ctx)
        except Exception as error:  # a demo step failing must not hide the other steps
            ctx.say(f"  FAILED: {type(error).__name__}: {error}")
            if verbose_errors:
                ctx.say(traceback.format_exc())
            results[step.name] = "failed"
            ctx.record(status="failed", error=f"{type(error).__name__}: {error}")
        else:
            results[step.name] = "ok"
            ctx.record(status="ok")
        ctx.record(seconds=round(time.perf_counter() - start, 3))
    return results
