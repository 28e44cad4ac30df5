"""``omny demo``: the main job of the package, end to end, on the bundled example model.

The steps are in :mod:`onnx_ir_multidevice._cli._demo_steps` (loaded when the demo runs, so
that ``omny --help`` stays fast). Exit status 1 if any step failed or the model holds no
``.omny`` plan (the steps that need it are skipped), 0 otherwise; ``--json``
prints one JSON document with each step's status and figures instead of the text.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import io
import tempfile
import time
from pathlib import Path

from onnx_ir_multidevice._cli import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, error, print_json
from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice.examples import EXAMPLE


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="the whole job on the bundled example: load, check, plan, annotate, split, "
        "verify, run",
        description="Run the package end to end on the bundled example (or --model): load it "
        "and show what it holds, round-trip it byte for byte, check it; plan it for 2, 3 and 4 "
        "shards and for unequal devices, write, check and annotate the plan, split and verify "
        "every configuration, stream requests through a 2-stage pipeline. Exit status 1 if a "
        "step fails.",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="an .omny file to run the demo on (default: the bundled bert_tiny.omny)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="STEP",
        help="run only these steps and those whose results they use (see --list)",
    )
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument(
        "--relaxed",
        action="store_true",
        help="accept relaxed cuts in the check and plan with them (for models such as "
        "the bundled gpt_tiny.omny)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of the text"
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of failures")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 if no step failed, 1 otherwise."""
    # lazy: the steps import the whole package, which `omny --help` does not need
    from onnx_ir_multidevice._cli._demo_steps import (
        STEPS,
        DemoContext,
        run_steps,
        with_prerequisites,
    )

    if args.list:
        for step in STEPS:
            print(f"{step.name:<10} {step.title}")
        return EXIT_OK
    path = EXAMPLE if args.model is None else args.model
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "no such file"
        raise OmnyIOError(f"{path}: {what}; pass an existing .omny file to --model")
    if args.model is not None:
        # lazy: `omny --help` stays fast. An unreadable model or plan is an unreadable input
        # (exit 2, as for the other commands), not a failed step.
        from onnx_ir_multidevice._proto.files import load
        from onnx_ir_multidevice.omny import read

        read(load(path))
    unknown = sorted(set(args.only or ()) - {s.name for s in STEPS})
    if unknown:
        names = ", ".join(s.name for s in STEPS)
        error(f"demo: --only: no step named {', '.join(unknown)} (steps: {names})")
        return EXIT_USAGE
    steps = with_prerequisites(args.only) if args.only else list(STEPS)
    as_json = bool(getattr(args, "json", False))
    out = io.StringIO() if as_json else None
    if not as_json:
        print(f"omny demo on {path}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="omny-demo-") as tmp:
        ctx = DemoContext(
            path=path, workdir=Path(tmp), out=out, relaxed=bool(getattr(args, "relaxed", False))
        )
        results = run_steps(steps, ctx, verbose_errors=args.traceback)
    seconds = time.perf_counter() - start
    counts = {k: sum(1 for v in results.values() if v == k) for k in ("ok", "skipped", "failed")}
    failed = [name for name, status in results.items() if status == "failed"]
    no_plan = ctx.model is not None and ctx.metadata is None  # said once, by the load step
    if as_json:
        print_json(
            {
                "schema": "onnx-ir-multidevice/demo",
                "schema_version": 1,
                "model": str(path),
                "ok": not failed and not no_plan,
                "seconds": round(seconds, 3),
                "steps": [
                    {"name": s.name, "title": s.title, **ctx.figures.get(s.name, {})} for s in steps
                ],
            }
        )
    else:
        print()
        if failed:
            print(f"demo: FAILED steps: {', '.join(failed)} (details above; --traceback for more)")
        print(f"demo took {seconds:.1f} s")
        print(f"demo: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed")
    # Status 1 says why on stderr (and in the --json envelope), as the other commands do.
    if failed:
        error(f"{path}: demo steps failed: {', '.join(failed)} (see the step output)")
    elif no_plan:
        error(
            f"{path}: has no .omny plan; run `omny plan` first, or run the bundled example "
            "(`omny demo` without --model)"
        )
    return EXIT_FINDINGS if failed or no_plan else EXIT_OK
