"""``omny run FILE --shards N``: stream requests through a pipeline and report its timing.

``FILE`` is a planned model (``.omny`` or annotated ``.onnx``), split into ``N`` stages, or a
directory written by ``omny split``. Each stage gets its own onnxruntime session on the device
given by ``--providers`` (one per stage, comma-separated, e.g. ``cpu,cuda:0``). The command
sends ``--requests`` random requests (after ``--warmup`` untimed ones) and prints per-stage
latency, throughput and utilisation (busy time / wall time per stage), then the baseline the
pipeline is for: the whole model in one onnxruntime session (for a split directory, its stages
one after another in one thread), one request after another, over the same inputs (at most
:data:`BASELINE_REQUESTS` of them; ``--no-baseline`` skips it). The requests are the
inputs ``omny verify`` would generate for the same ``--seed`` and ``--dim`` values (by default
at the planning dims the file records); for a model file the baseline also reports how far the
pipeline's outputs are from the whole model's (``max_abs_diff``). ``--backend``
names a registered engine (``thread``, ``ray``, or one added with ``register_engine``). Exit
status 1 when a request fails in a stage, 2 for an unknown backend.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_progress_argument,
    add_shards_argument,
    check_dim_names,
    dim_argument,
    error,
    help_description,
    in_cli_words,
    print_json,
    progress_reporter,
)
from onnx_ir_multidevice._errors import PipelineError, SplitError

BASELINE_REQUESTS = 100
"""Requests the baseline runs at most (it is a reference, not the job)."""

_PROGRESS_EVERY = 100
"""Timed requests between two progress lines of ``--progress``."""


def _threads(text: str) -> list[int] | int:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = [0]
    if min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive thread count or one per stage (e.g. 1,2), got {text!r}"
        )
    return values[0] if len(values) == 1 else values


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run a split model as a pipeline and report per-stage timing",
        description=help_description(__doc__),
    )
    parser.add_argument(
        "input",
        type=Path,
        help="an .omny or annotated .onnx model, or a directory written by omny split",
    )
    add_shards_argument(parser, several=False, help="number of stages (required for a model file)")
    parser.add_argument(
        "--providers",
        default="cpu",
        metavar="DEVICES",
        help="device of each stage, comma-separated (e.g. cpu,cuda:0), or one for all "
        "(default: cpu)",
    )
    parser.add_argument(
        "--requests", type=int, default=32, metavar="K", help="timed requests (default: 32)"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, metavar="W", help="untimed requests first (default: 2)"
    )
    parser.add_argument(
        "--threads",
        type=_threads,
        metavar="T",
        help="onnxruntime intra-op threads per stage: one count or one per stage (1,2)",
    )
    parser.add_argument(
        "--dim",
        type=dim_argument,
        action="append",
        default=[],
        metavar="NAME=SIZE",
        help="size of a symbolic input dimension (default: the planning dims); repeatable",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    parser.add_argument(
        "--backend",
        default="thread",
        metavar="ENGINE",
        help="engine running the stages: thread, ray, or a registered one (default: thread)",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="with --backend ray: the running Ray cluster to use (HOST:PORT as `ray start "
        "--head` prints it, or auto); default: a local Ray instance",
    )
    parser.add_argument(
        "--placement",
        metavar="WHERE",
        help="with --backend ray: pack, spread, strict_pack or strict_spread (a placement "
        "group), or one node per stage, comma-separated: a node id, IP address or custom "
        "resource name (ray start --resources)",
    )
    parser.add_argument(
        "--max-in-flight", type=int, metavar="M", help="requests inside the stages at once"
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not time the whole model in one session after the pipeline",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_progress_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``args.input`` as a pipeline and print its timing."""
    from onnx_ir_multidevice.runtime.inputs import (  # lazy: `omny --help` stays fast
        dim_names,
        generated_at,
    )
    from onnx_ir_multidevice.runtime.pipeline import Pipeline  # lazy: `omny --help` stays fast

    problem = _usage_problem(args)
    if problem is not None:
        error(problem)
        return EXIT_USAGE
    dims = dict(args.dim)
    progress = progress_reporter(args, "run")
    progress(f"loading {args.input} and starting the stage sessions")
    try:
        pipeline = Pipeline(
            args.input,
            args.shards,
            providers=args.providers,
            intra_op_num_threads=args.threads,
            backend=args.backend,
            max_in_flight=args.max_in_flight,
            **_ray_options(args),
        )
    except SplitError as exc:
        error(f"{args.input}: {in_cli_words(str(exc))}")
        return EXIT_FINDINGS

    with pipeline:
        problem = check_dim_names(args.input, dims, dim_names(pipeline.inputs))
        if problem is not None:
            error(problem)
            return EXIT_USAGE
        inputs = pipeline.example_inputs(dims, seed=args.seed)
        try:
            _time_requests(args, pipeline, inputs, progress)
        except PipelineError as exc:
            # The requests are generated: name the dims they took (a model that runs at some
            # sizes only fails inside onnxruntime with a message about a node, not the sizes).
            note = generated_at(pipeline.inputs, {**pipeline.chain.planning_dims, **dims})
            error(in_cli_words(f"{args.input}: {exc}" + (f"; {note}" if note else "")))
            return EXIT_FINDINGS
        stats = pipeline.stats()
        baseline = None
        if not args.no_baseline:
            progress("timing the baseline")
            baseline = _baseline(args, pipeline, inputs)
    if args.json:
        _print_json(args, pipeline, dims, inputs, stats, baseline)
    else:
        _print_text(args, pipeline, inputs, stats, baseline)
    return EXIT_OK


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line (checked before anything loads), or ``None``."""
    from onnx_ir_multidevice.runtime.engines import get_engine  # lazy: `omny --help` stays fast

    if args.requests < 1 or args.warmup < 0:
        return "--requests must be at least 1 and --warmup at least 0"
    if not args.input.exists():
        return f"{args.input}: no such model file or split directory"
    if not args.input.is_dir() and args.shards is None:
        return f"{args.input}: --shards N is required for a model file"
    try:
        get_engine(args.backend)
    except PipelineError as exc:
        return str(exc)
    if (args.address is not None or args.placement is not None) and args.backend != "ray":
        return "--address and --placement need --backend ray"
    return None


_RAY_STRATEGIES = ("pack", "spread", "strict_pack", "strict_spread")


def _ray_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Ray engine's ``address`` and ``placement`` from ``--address`` and ``--placement``.

    ``--placement`` is a strategy name, or one node per stage, comma-separated (an empty one:
    ``None``, anywhere).
    """
    ray_options: dict[str, Any] = {}
    if args.address is not None:
        ray_options["address"] = args.address
    if args.placement is not None:
        placement = args.placement.strip()
        ray_options["placement"] = (
            placement.lower()
            if placement.lower() in _RAY_STRATEGIES
            else [part.strip() or None for part in placement.split(",")]
        )
    return ray_options


def _time_requests(args: argparse.Namespace, pipeline, inputs, progress) -> None:  # type: ignore[no-untyped-def]
    """Run the warm-up requests, reset the statistics, then run the timed requests."""
    from onnx_ir_multidevice._util import plural  # lazy: `omny --help` stays fast

    progress(f"{plural(args.warmup, 'warm-up request')}")
    for _ in pipeline.map(itertools.repeat(inputs, args.warmup)):
        pass
    pipeline.reset_stats()
    progress(f"timing {plural(args.requests, 'request')}")
    for done, _ in enumerate(pipeline.map(itertools.repeat(inputs, args.requests)), 1):
        if done % _PROGRESS_EVERY == 0:
            progress(f"{done}/{args.requests} requests")


def _print_json(args: argparse.Namespace, pipeline, dims, inputs, stats, baseline) -> None:  # type: ignore[no-untyped-def]
    print_json(
        {
            "input": str(args.input),
            "num_stages": pipeline.num_stages,
            "providers": [str(d) for d in pipeline.devices],
            "backend": pipeline.backend,
            "warmup": args.warmup,
            "seed": args.seed,
            "dims": dims,
            "input_shapes": {name: list(a.shape) for name, a in inputs.items()},
            **stats.to_dict(),
            "baseline": baseline,
        }
    )


def _print_text(args: argparse.Namespace, pipeline, inputs, stats, baseline) -> None:  # type: ignore[no-untyped-def]
    from onnx_ir_multidevice._util import plural  # lazy: `omny --help` stays fast

    shapes = ", ".join(f"{name}{list(a.shape)}" for name, a in inputs.items())
    print(
        f"{args.input}: {pipeline.num_stages} stage{'s' if pipeline.num_stages != 1 else ''} on "
        f"{', '.join(str(d) for d in pipeline.devices)}; inputs {shapes}"
    )
    print(stats.format())
    if any(stage.node_id for stage in stats.stages):
        for stage in stats.stages:
            print(f"stage {stage.index} ran on node {stage.node_id} ({stage.node_address})")
    if baseline is not None:
        speedup = stats.throughput / baseline["throughput"] if baseline["throughput"] else 0.0
        print(
            f"baseline: {baseline['what']}, one request after another: "
            f"{plural(baseline['requests'], 'request')} in {baseline['wall_s'] * 1000:.1f} ms, "
            f"{baseline['throughput']:.1f} requests/s; the pipeline's throughput is "
            f"{speedup:.2f}x that"
            + (
                ""
                if baseline["max_abs_diff"] is None
                else f"; the outputs differ from the pipeline's by {baseline['max_abs_diff']:.3g}"
                " at most"
            )
        )
    sys.stdout.flush()


def _baseline(args: argparse.Namespace, pipeline, inputs) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Time what the pipeline is compared with, on the same inputs (see the module docstring).

    The whole model in one session, with the first stage's onnxruntime thread count; for a
    split directory, :meth:`Pipeline.run` on the idle pipeline, which runs the stages one
    after another in the calling thread.
    """
    import time

    from onnx_ir_multidevice._proto.files import load  # lazy: `omny --help` stays fast
    from onnx_ir_multidevice.runtime.sessions import ModelSession, session_options

    count = min(args.requests, BASELINE_REQUESTS)
    threads = args.threads[0] if isinstance(args.threads, list) else args.threads
    max_abs_diff = None
    if args.input.is_dir():
        what = f"the {pipeline.num_stages} stages in one thread"
        pipeline.run(inputs)  # warm-up
        start = time.perf_counter()
        for _ in range(count):
            pipeline.run(inputs)
        wall = time.perf_counter() - start
    else:
        what = "the whole model in one onnxruntime session"
        providers = pipeline.devices[0].ort_providers()
        options = session_options(intra_op_num_threads=threads)
        # loaded as verify loads it (external data checked, small tensors made inline)
        with ModelSession(load(args.input), options, providers) as owner:
            names = [o.name for o in owner.session.get_outputs()]
            expected = dict(zip(names, owner.session.run(None, inputs), strict=True))  # warm-up
            max_abs_diff = _max_abs_diff(pipeline.run(inputs), expected)
            start = time.perf_counter()
            for _ in range(count):
                owner.session.run(None, inputs)
            wall = time.perf_counter() - start
    return {
        "what": what,
        "requests": count,
        "wall_s": wall,
        "throughput": count / wall if wall > 0 else 0.0,
        "max_abs_diff": max_abs_diff,
    }


def _max_abs_diff(got: dict[str, Any], expected: dict[str, Any]) -> float:
    """The largest absolute difference between the pipeline's outputs and the whole model's.

    ``inf`` when an output is missing, its shape differs, or a non-numeric output differs.
    """
    import numpy as np  # lazy: `omny --help` stays fast

    worst = 0.0
    for name, expected_value in expected.items():
        if name not in got or np.shape(got[name]) != np.shape(expected_value):
            return float("inf")
        have, want = np.asarray(got[name]), np.asarray(expected_value)
        if have.dtype.kind not in "biuf" or want.dtype.kind not in "biuf":
            if not np.array_equal(have, want):
                return float("inf")
        elif want.size:
            diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
            worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0)
    return worst
