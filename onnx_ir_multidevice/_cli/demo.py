"""``omny demo``: a guided tour on the bundled example model.

The demo is a list of steps (:data:`STEPS`). Each step names the package modules it needs; a
step whose modules are not available is reported as skipped, so the tour grows with the
package. Steps share a :class:`DemoContext` (the loaded model, its metadata, a scratch
folder). Every step runs even when an earlier one failed (when it can); the exit status is 1 if
any step failed, 0 otherwise.
"""

from __future__ import annotations

__all__ = ["STEPS", "DemoContext", "Step", "register", "run", "run_steps"]

import argparse
import dataclasses
import importlib.util
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._cli import EXIT_FINDINGS, EXIT_OK


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
    """Its :class:`~onnx_ir_multidevice._format.OmnyMetadata` (set by ``load``)."""
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Anything a step hands to a later one."""

    def say(self, text: str = "") -> None:
        """Print a line of the demo."""
        print(text, file=self.out or sys.stdout)

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
    requires: tuple[str, ...] = ()
    """Modules it needs (``onnx_ir_multidevice._split``...); missing ones skip the step."""
    requires_attrs: tuple[str, ...] = ()
    """``module:attribute`` names it needs (a function not written yet skips the step)."""
    uses_model: bool = True
    """Whether it reads :attr:`DemoContext.model` (skipped when the model was not loaded)."""

    def missing(self) -> list[str]:
        """What this step needs that is not available."""
        missing = [m for m in self.requires if not _module_exists(m)]
        for spec in self.requires_attrs:
            module, attr = spec.split(":")
            if module in missing:
                continue
            if not _module_exists(module) or not hasattr(importlib.import_module(module), attr):
                missing.append(spec)
        return missing


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


_PKG = "onnx_ir_multidevice"


# ---------------------------------------------------------------------------------------------
# Steps


def _step_load(ctx: DemoContext) -> None:
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice._io import load

    ctx.model = load(ctx.path)
    ctx.metadata = omny.read(ctx.model)
    if ctx.metadata is None:
        raise RuntimeError(f"{ctx.path} has no .omny metadata")
    graph = ctx.model.graph
    m = ctx.metadata.model
    ctx.say(f"file        {ctx.path} ({ctx.path.stat().st_size:,} bytes)")
    ctx.say(f"model       {m.name} ({m.architecture}), {m.total_params:,} parameters")
    ctx.say(f"graph       {len(graph)} nodes, {len(graph.initializers)} initializers")
    for value in graph.inputs:
        ctx.say(f"input       {value.name}: {value.dtype} {value.shape}")
    for value in graph.outputs:
        ctx.say(f"output      {value.name}: {value.dtype} {value.shape}")
    sharding = ctx.metadata.sharding
    ctx.say(
        f"sharding    {len(ctx.metadata.cut_points)} cut points, "
        f"{len(sharding.configurations)} configurations "
        f"(shard counts {[c.num_shards for c in sharding.configurations]})"
    )


def _step_cut_points(ctx: DemoContext) -> None:
    from onnx_ir_multidevice._binding import bind

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
            f"configuration {config.index}: {config.num_shards} shards, cuts {ids}, "
            f"MiB per shard {list(config.spec.memory_per_shard_mb)}"
        )
    if plan.unresolved:
        raise RuntimeError(f"{len(plan.unresolved)} unresolved reference(s): {plan.unresolved}")


def _step_rename(ctx: DemoContext) -> None:
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice._binding import bind
    from onnx_ir_multidevice._io import load

    # Work on a fresh copy so later steps see the file as it is.
    model = load(ctx.path)
    metadata = omny.read(model)
    plan = bind(model, metadata)
    cut = next(c for c in plan.cut_points if c.resolved and c.value is not None)
    old = cut.value.name  # type: ignore[union-attr]
    new = f"hidden_states_{cut.id}"
    cut.value.name = new  # type: ignore[union-attr]
    renamed = plan.to_metadata().cut_point(cut.id)
    ctx.say(f"renamed value {old!r} -> {new!r} in the graph")
    ctx.say(f"cut point {cut.id}: tensor_name is now {renamed.tensor_name!r}")
    if renamed.tensor_name != new:
        raise RuntimeError("the cut point did not follow the rename")
    ctx.say(f"(after_node stays {renamed.after_node!r}: the node was not renamed)")


def _step_roundtrip(ctx: DemoContext) -> None:
    import onnx

    from onnx_ir_multidevice._io import load, save
    from onnx_ir_multidevice._roundtrip import roundtrip

    original = ctx.path.read_bytes()
    proto = onnx.ModelProto()
    proto.ParseFromString(original)
    again = roundtrip(proto).SerializeToString()
    ctx.say(f"proto -> ir.Model -> proto: {'byte-identical' if again == original else 'DIFFERS'}")
    copy = ctx.workdir / "copy.omny"
    save(load(ctx.path), copy)
    saved = copy.read_bytes()
    ctx.say(f"load -> save to a new file:  {'byte-identical' if saved == original else 'DIFFERS'}")
    if again != original or saved != original:
        raise RuntimeError("the round trip changed the file")
    ctx.say(f"({len(original):,} bytes, .omny metadata and all)")


def _step_check(ctx: DemoContext) -> None:
    from onnx_ir_multidevice._check import check

    model, _ = ctx.require_model()
    diagnostics = check(model, relaxed_cuts=True)
    errors = [d for d in diagnostics if str(getattr(d.severity, "value", d.severity)) == "error"]
    ctx.say(f"{len(diagnostics)} diagnostic(s), {len(errors)} error(s)")
    for diagnostic in diagnostics[:12]:
        ctx.say(f"  {diagnostic}")
    if len(diagnostics) > 12:
        ctx.say(f"  ... and {len(diagnostics) - 12} more")
    if errors:
        raise RuntimeError("the checker found errors in the bundled example")


def _feeds(model: ir.Model, batch: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.inputs:
        assert value.shape is not None and value.dtype is not None
        shape = tuple(d if isinstance(d, int) else batch for d in value.shape)
        if value.dtype.is_integer():
            feeds[value.name] = rng.integers(0, 10, shape).astype(value.dtype.numpy())
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(value.dtype.numpy())
    return feeds


def _session(model: ir.Model) -> Any:
    import onnxruntime as ort

    from onnx_ir_multidevice._roundtrip import to_proto

    return ort.InferenceSession(
        to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )


def _step_split(ctx: DemoContext) -> None:
    from onnx_ir_multidevice._split import split

    model, metadata = ctx.require_model()
    config = max(metadata.sharding.configurations, key=lambda c: c.num_shards)
    stages = split(model, config.num_shards, configuration=config)
    feeds = _feeds(model)
    (expected,) = _session(model).run(None, feeds)
    env: dict[str, np.ndarray] = dict(feeds)
    for i, stage in enumerate(stages):
        names = [v.name for v in stage.graph.inputs]
        start = time.perf_counter()
        outputs = _session(stage).run(None, {n: env[n] for n in names})
        took = (time.perf_counter() - start) * 1000
        produced = [v.name for v in stage.graph.outputs]
        env.update(zip(produced, outputs))
        ctx.say(
            f"stage {i}: {len(stage.graph)} nodes, reads {names}, writes {produced} ({took:.1f} ms)"
        )
    got = env[model.graph.outputs[0].name]
    diff = float(np.max(np.abs(got - expected)))
    ctx.say(f"stages in sequence vs the whole model: max |difference| = {diff:.2e}")
    if diff > 1e-4:
        raise RuntimeError("the stages do not reproduce the model's output")


STEPS: list[Step] = [
    Step(
        "load",
        "Load the bundled .omny example",
        _step_load,
        (f"{_PKG}._format", f"{_PKG}.omny", f"{_PKG}._io"),
    ),
    Step("cuts", "Cut points, bound to the graph", _step_cut_points, (f"{_PKG}._binding",)),
    Step(
        "rename",
        "Rename a tensor: the plan follows",
        _step_rename,
        (f"{_PKG}._format", f"{_PKG}.omny", f"{_PKG}._io", f"{_PKG}._binding"),
        uses_model=False,
    ),
    Step(
        "roundtrip",
        "Round trip, byte for byte",
        _step_roundtrip,
        (f"{_PKG}._io", f"{_PKG}._roundtrip"),
        uses_model=False,
    ),
    Step("check", "Check the file", _step_check, (f"{_PKG}._check",)),
    Step(
        "split",
        "Split into stages and run them one after another",
        _step_split,
        ("onnxruntime",),
        (f"{_PKG}._split:split",),
    ),
]
"""The demo, in order. Later capabilities append their step here."""


def run_steps(
    steps: Sequence[Step], ctx: DemoContext, *, verbose_errors: bool = False
) -> dict[str, str]:
    """Run ``steps`` in order; return ``{name: "ok" | "skipped" | "failed"}``."""
    results: dict[str, str] = {}
    for number, step in enumerate(steps, 1):
        ctx.say()
        ctx.say(f"[{number}/{len(steps)}] {step.title}")
        missing = step.missing()
        if missing:
            ctx.say(f"  skipped: needs {', '.join(missing)} (not available yet)")
            results[step.name] = "skipped"
            continue
        if step.uses_model and step.name != "load" and ctx.model is None:
            ctx.say("  skipped: the model was not loaded")
            results[step.name] = "skipped"
            continue
        try:
            step.func(ctx)
        except Exception as error:  # a demo step failing must not hide the other steps
            ctx.say(f"  FAILED: {type(error).__name__}: {error}")
            if verbose_errors:
                ctx.say(traceback.format_exc())
            results[step.name] = "failed"
        else:
            results[step.name] = "ok"
    return results


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="a guided tour on the bundled example model",
        description="Run the guided tour: load the bundled .omny example, show its cut points, "
        "rename a tensor, round-trip it byte for byte, check, split and run it.",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="an .omny file to run the tour on (default: the bundled gpt_tiny.omny)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="STEP",
        choices=[s.name for s in STEPS],
        help="run only these steps (names: %(choices)s)",
    )
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of failures")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 if no step failed, 1 otherwise."""
    if args.list:
        for step in STEPS:
            missing = step.missing()
            note = f"  (skipped: needs {', '.join(missing)})" if missing else ""
            print(f"{step.name:<10} {step.title}{note}")
        return EXIT_OK
    if args.model is None:
        from onnx_ir_multidevice.examples import GPT_TINY

        path = GPT_TINY
    else:
        path = args.model
    if not path.is_file():
        from onnx_ir_multidevice._errors import OmnyIOError

        raise OmnyIOError(f"{path}: no such file; pass an existing .omny file to --model")
    steps = [s for s in STEPS if not args.only or s.name in args.only]
    print(f"omny demo on {path}")
    with tempfile.TemporaryDirectory(prefix="omny-demo-") as tmp:
        ctx = DemoContext(path=path, workdir=Path(tmp))
        results = run_steps(steps, ctx, verbose_errors=args.traceback)
    counts = {k: sum(1 for v in results.values() if v == k) for k in ("ok", "skipped", "failed")}
    print()
    print(f"demo: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed")
    return EXIT_FINDINGS if counts["failed"] else EXIT_OK
