"""``omny inspect FILE [--json]``: what a model file holds.

Prints the model (IR version, opsets, producer, sizes), its inputs and outputs and, for an
``.omny`` file, the metadata: model info, cut points (and whether each resolves to a node and
a tensor of the graph) and shard configurations. ``--json`` prints the same as one JSON
document; its schema is documented in ``docs/cli.md``. ``--verify-data`` reads every data file
to compare its CRC-32 with the model's record (as ``omny check --verify-data``).
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
from pathlib import Path

from onnx_ir_multidevice._cli import EXIT_OK, help_description, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``inspect`` subcommand."""
    parser = subparsers.add_parser(
        "inspect",
        help="show a model's inputs/outputs, cut points and shard configurations",
        description=help_description(__doc__),
    )
    parser.add_argument("file", type=Path, help="an .omny or .onnx model file")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--verify-data",
        action="store_true",
        help="read every data file and compare its CRC-32 with the model's record, even when "
        "its size, time and inode match (exit 2 on a mismatch; costs reading the weights)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Inspect ``args.file``; print text or JSON. Errors propagate as ``OmnyError``."""
    # lazy: the report loads models, which `omny --help` does not need
    from onnx_ir_multidevice._cli._inspect_report import collect, format_text

    document = collect(args.file, verify_data=args.verify_data)
    if args.json:
        print_json(document)
    else:
        print(format_text(document))
    return EXIT_OK
