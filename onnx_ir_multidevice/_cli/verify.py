"""``omny verify FILE [--shards N] [--json]``: check that the split computes what the model does.

Splits the model, runs the whole model and the chained stages on onnxruntime with the same
inputs (generated from the input types at the planning dims the file records, else at
example dims such as 128 tokens or 224 x 224 images; ``--dim batch=2`` sets one) and
compares every graph output. Without ``--shards``, every shard count the model's
configurations offer is verified (``--shards 2 4`` or ``--shards 2,4``: these). Exits with 1 when
an output differs by more than ``--rtol``/``--atol`` (default ``1e-4``, ``1e-2`` for a model
that computes in fp16 or quantized arithmetic), a stage fails in onnxruntime or the model
has no plan to verify, with one ``omny: error:`` line naming the shard counts that failed.
A model whose tensor-parallel record (``omny plan --tensor-parallel``) gives a stage a degree
above 1 is verified as ``omny split`` splits it (the ranks' segments, collectives in process).
``--split DIR`` compares the split directory ``DIR`` (``omny split``) with the model instead.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    print_json,
    progress_reporter,
    tolerance_argument,
)
from onnx_ir_multidevice._errors import (
    OmnyFormatError,
    OmnyIOError,
    PipelineError,
    SplitError,
    VerifyError,
)

if TYPE_CHECKING:
    import onnx_ir as ir


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    parser = subparsers.add_parser(
        "verify",
        help="compare the split stages with the whole model on onnxruntime",
        description=help_description(__doc__),
    )
    parser.add_argument("file", type=Path, help="an .omny or annotated .onnx model file")
    add_shards_argument(
        parser,
        several=True,
        help="numbers of stages, e.g. 2 4 or 2,4 (default: every one the model offers)",
    )
    parser.add_argument(
        "--rtol",
        type=tolerance_argument,
        help="relative tolerance (default: 1e-4, or 1e-2 for an fp16 or quantized model)",
    )
    parser.add_argument(
        "--atol", type=tolerance_argument, help="absolute tolerance (default: as --rtol)"
    )
    parser.add_argument(
        "--dim", type=dim_argument, action="append", default=[], metavar="NAME=INT",
        help="value of a symbolic input dimension (default: the planning dims); repeatable",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    parser.add_argument(
        "--split", type=Path, metavar="DIR",
        help="compare the split directory DIR (written by omny split; tensor-parallel stages "
        "included) with FILE instead of splitting FILE",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_progress_argument(parser)
    parser.set_defaults(func=run)


def _shard_counts(model: ir.Model) -> list[int]:
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._split import pipeline_configurations
    from onnx_ir_multidevice.omny import read

    counts: set[int] = set()
    metadata = read(model)
    if metadata is not None:
        counts.update(c.num_shards for c in metadata.sharding.configurations)
    counts.update(c.num_devices for c in pipeline_configurations(model.graph))
    return sorted(counts)


def run(args: argparse.Namespace) -> int:
    """Verify ``args.file``; print a table or JSON; 1 on a mismatch."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.files import load
    from onnx_ir_multidevice.analysis.shapes import input_symbols
    from onnx_ir_multidevice.runtime.verification import verify

    progress = progress_reporter(args, "verify")
    progress(f"loading {args.file}")
    model = load(args.file)
    problem = check_dim_names(args.file, dict(args.dim), input_symbols(model.graph))
    if problem is not None:
        error(problem)
        return EXIT_USAGE
    if args.split is not None:
        return _verify_folder(args, model, progress)
    counts = sorted(set(args.shards)) if args.shards else _shard_counts(model)
    if not counts:
        error(
            f"{args.file}: no shard configuration to verify: the model has no .omny plan and no "
            "pipeline annotation; plan it first (omny plan), or give --shards N for a model "
            "annotated by other means"
        )
        return EXIT_FINDINGS
    reports = []
    failed: list[int] = []
    for shards in counts:
        progress(f"splitting into {_stages(shards)} and running them against the whole model")
        try:
            with warnings.catch_warnings(record=True) as caught:  # said below, in CLI words
                warnings.simplefilter("always", UserWarning)
                report = verify(
                    model, shards, rtol=args.rtol, atol=args.atol, dims=dict(args.dim),
                    seed=args.seed,
                )  # fmt: skip
        except (SplitError, VerifyError) as exc:
            reports.append({"shards": shards, "ok": False, "error": str(exc)})
            failed.append(shards)
            if not args.json:
                print(f"{_stages(shards)}: FAILED: {exc}")
            continue
        for warning in caught:
            print(f"omny verify: warning: {warning.message}", file=sys.stderr)
        if not report.ok:
            failed.append(shards)
        reports.append({"shards": shards, **report.to_dict()})
        if not args.json:
            print(report)
    if args.json:
        print_json({"file": str(args.file), "ok": not failed, "results": reports})
    if failed:
        numbers = ", ".join(map(str, failed[:-1])) + (" and " if len(failed) > 1 else "")
        splits = "split" if len(failed) == 1 else "splits"
        error(
            f"{args.file}: verification failed for the {splits} into {numbers}"
            f"{_stages(failed[-1])} (details above)"
        )
        return EXIT_FINDINGS
    return EXIT_OK


def _verify_folder(args: argparse.Namespace, model: ir.Model, progress: Any) -> int:
    """``--split DIR``: run the folder's stages against the whole model."""
    # lazy: `omny --help` imports no runtime
    from onnx_ir_multidevice.runtime.tensor_parallel import verify_folder

    progress(f"running the stages of {args.split} against the whole model")
    try:
        report = verify_folder(
            model, args.split, rtol=args.rtol, atol=args.atol, dims=dict(args.dim),
            seed=args.seed,
        )  # fmt: skip
    except (PipelineError, VerifyError) as exc:
        if _unreadable(exc):  # its manifest or a data file: as `omny run DIR`, 2
            error(str(exc))
            return EXIT_USAGE
        if args.json:
            print_json({"file": str(args.file), "split": str(args.split), "ok": False,
                        "error": str(exc)})  # fmt: skip
        error(f"{args.file}: {args.split}: {exc}")
        return EXIT_FINDINGS
    if args.json:
        print_json(
            {"file": str(args.file), "split": str(args.split), "ok": report.ok,
             "results": [{"shards": report.num_stages, **report.to_dict()}]}
        )  # fmt: skip
    else:
        print(report)
    if not report.ok:
        error(f"{args.file}: verification of {args.split} failed (details above)")
        return EXIT_FINDINGS
    return EXIT_OK


def _stages(count: int) -> str:
    return f"{count} stage{'' if count == 1 else 's'}"


def _unreadable(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a split folder that cannot be read (manifest, data file)."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, (OmnyFormatError, OmnyIOError)):
            return True
        cause = cause.__cause__
    return False
