"""``omny verify FILE [--shards N] [--json]``: check that the split computes what the model does.

Splits the model, runs the whole model and the chained stages on onnxruntime with the same
inputs (generated from the input types at the planning dims the file records, else at
example dims such as 128 tokens or 224 x 224 images; ``--dim batch=2`` sets one) and
compares every graph output. Without ``--shards``, every shard count the model's
configurations offer is verified. Exits with 1 when an output differs by more than
``--rtol``/``--atol`` or a stage fails in onnxruntime.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    check_dim_names,
    dim_argument,
    error,
    positive_int,
    print_json,
    tolerance_argument,
)
from onnx_ir_multidevice._errors import SplitError, VerifyError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    parser = subparsers.add_parser(
        "verify",
        help="compare the split stages with the whole model on onnxruntime",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    parser.add_argument("file", type=Path, help="an .omny or annotated .onnx model file")
    parser.add_argument(
        "--shards", type=positive_int, help="number of stages (default: every one offered)"
    )
    parser.add_argument(
        "--rtol", type=tolerance_argument, default=1e-4, help="relative tolerance (1e-4)"
    )
    parser.add_argument(
        "--atol", type=tolerance_argument, default=1e-4, help="absolute tolerance (1e-4)"
    )
    parser.add_argument(
        "--dim", type=dim_argument, action="append", default=[], metavar="NAME=INT",
        help="value of a symbolic input dimension (default: the planning dims); repeatable",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def _shard_counts(model: object) -> list[int]:
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._split import pipeline_configurations
    from onnx_ir_multidevice.omny import read

    counts: set[int] = set()
    metadata = read(model)  # type: ignore[arg-type]
    if metadata is not None:
        counts.update(c.num_shards for c in metadata.sharding.configurations)
    counts.update(c.num_devices for c in pipeline_configurations(model.graph))  # type: ignore[attr-defined]
    return sorted(counts)


def run(args: argparse.Namespace) -> int:
    """Verify ``args.file``; print a table or JSON; 1 on a mismatch."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.files import load
    from onnx_ir_multidevice.analysis.shapes import input_symbols
    from onnx_ir_multidevice.runtime.verification import verify

    model = load(args.file)
    problem = check_dim_names(args.file, dict(args.dim), input_symbols(model.graph))
    if problem is not None:
        error(problem)
        return EXIT_USAGE
    counts = [args.shards] if args.shards is not None else _shard_counts(model)
    if not counts:
        error(
            f"{args.file}: no shard configuration to verify; give --shards N for an annotated "
            "model or plan one first (omny plan)"
        )
        return EXIT_USAGE
    reports = []
    failed = False
    for shards in counts:
        try:
            report = verify(
                model, shards, rtol=args.rtol, atol=args.atol, dims=dict(args.dim),
                seed=args.seed,
            )  # fmt: skip
        except (SplitError, VerifyError) as exc:
            error(f"{args.file}: {shards} shards: {exc}")
            reports.append({"shards": shards, "ok": False, "error": str(exc)})
            failed = True
            continue
        failed = failed or not report.ok
        reports.append({"shards": shards, **report.to_dict()})
        if not args.json:
            print(report)
    if args.json:
        print_json({"file": str(args.file), "ok": not failed, "results": reports})
    return EXIT_FINDINGS if failed else EXIT_OK
