"""``omny split IN OUTDIR --shards N``: write one runnable ONNX model per pipeline stage.

Writes ``OUTDIR/stage_<i>.onnx`` (weights over 1 KiB in ``stage_<i>.onnx.data``) and
``OUTDIR/manifest.json``, which says what each stage reads and from where. The files are
written into a temporary sibling directory that is then renamed to ``OUTDIR``; a non-empty
``OUTDIR`` is refused unless ``--force``, and so is an ``OUTDIR`` that is a file or whose
parent folder does not exist (create it first, as for ``omny annotate`` / ``omny plan``).
An ``OUTDIR`` that holds the input model is refused even with ``--force`` (the rename would
delete the model).
``--json`` prints the manifest.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import sys
import warnings
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_progress_argument,
    add_shards_argument,
    error,
    help_description,
    output_holds_input,
    print_json,
    progress_reporter,
)
from onnx_ir_multidevice._errors import SplitError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``split`` subcommand."""
    parser = subparsers.add_parser(
        "split",
        help="write one runnable ONNX model per pipeline stage, and a manifest",
        description=help_description(__doc__),
    )
    parser.add_argument("input", type=Path, help="an .omny or annotated .onnx model file")
    parser.add_argument(
        "outdir", type=Path, help="directory to write: absent or empty, in an existing folder"
    )
    add_shards_argument(parser, several=False, required=True, help="number of stages")
    parser.add_argument(
        "--configuration",
        metavar="ID",
        help="index of an .omny shard configuration or name of an IR v11 configuration "
        "(default: the one with N shards)",
    )
    parser.add_argument("--force", action="store_true", help="replace a non-empty OUTDIR")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    add_progress_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Split ``args.input`` into ``args.outdir``."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.files import load
    from onnx_ir_multidevice._split import save_split
    from onnx_ir_multidevice.omny._schema import parse_configuration

    refusal = output_holds_input(args.outdir, args.input)
    if refusal is not None:
        error(refusal)
        return EXIT_USAGE
    progress = progress_reporter(args, "split")
    progress(f"loading {args.input}")
    model = load(args.input)
    progress(f"splitting into {args.shards} stages and writing {args.outdir}")
    try:
        with warnings.catch_warnings(record=True) as caught:  # said below, in CLI words
            warnings.simplefilter("always", UserWarning)
            manifest = save_split(
                model,
                args.outdir,
                args.shards,
                configuration=parse_configuration(args.configuration),
                force=args.force,
            )
    except SplitError as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    for warning in caught:
        print(f"omny split: warning: {warning.message}", file=sys.stderr)
    progress("done")
    if args.json:
        print_json(manifest.to_dict())
        return EXIT_OK
    print(f"{args.input} -> {args.outdir}/ ({manifest.num_stages} stages)")
    for stage in manifest.stages:
        reads = ", ".join(
            f"{i.name} ({'input' if i.is_graph_input else f'stage {i.source}'})"
            for i in stage.inputs
        )
        print(f"  {stage.file}: reads {reads or 'nothing'}")
        print(f"  {' ' * len(stage.file)}  writes {', '.join(stage.output_names)}")
    return EXIT_OK
