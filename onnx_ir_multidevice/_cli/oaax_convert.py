"""``omny oaax-convert INPUT OUTDIR``: the OAAX toolchain (also ``omny-oaax-toolchain``).

Converts a model file (``.onnx``, ``.omny`` v1 or v2) or an archive (``.zip``, ``.tar.gz``:
one model and an optional ``config.json`` with ``shards``, ``devices``, ``dims``,
``relaxed``) into ``OUTDIR/<model>.omny``, a model with a plan of exactly one configuration,
checked, split and verified against the whole model, and writes the conversion log
``OUTDIR/logs.json`` (and ``conversion-log.json``, the same bytes), also on failure. Exit
status 0 on success, 1 when the content cannot be converted (an unsupported operator or type,
no feasible plan, a verification mismatch), 2 when the input cannot be read or the usage is
wrong. The error codes are listed in ``docs/interop.md``.
"""

from __future__ import annotations

__all__ = ["main", "register", "run"]

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from onnx_ir_multidevice._cli import EXIT_USAGE, help_description
from onnx_ir_multidevice._version import __version__

_PROGRAM = "omny-oaax-toolchain"
_USAGE = f"usage: {_PROGRAM} INPUT OUTDIR"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``oaax-convert`` subcommand."""
    parser = subparsers.add_parser(
        "oaax-convert",
        help="the OAAX toolchain: convert a model or archive into an .omny artifact and a log",
        description=help_description(__doc__),
    )
    parser.add_argument("input", metavar="INPUT", type=Path, help="a model file or an archive")
    parser.add_argument("outdir", metavar="OUTDIR", type=Path, help="the output directory")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert ``args.input`` into ``args.outdir``; return the toolchain's exit status."""
    from onnx_ir_multidevice.oaax.toolchain import convert  # lazy: `omny --help` stays fast

    return convert(args.input, args.outdir).exit_status


def main(argv: Sequence[str] | None = None) -> int:
    """The ``omny-oaax-toolchain`` console script: exactly ``INPUT OUTDIR``.

    ``--help`` or ``--version`` alone are the only options (OAAX toolchains take two
    arguments; everything else comes from the input). Any other argument count, or an
    argument that starts with ``-``, prints the usage and exits with 2.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, 1 or 2.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--help"], ["-h"]):
        print(_USAGE)
        print()
        print(__doc__.split("\n\n", 1)[1].strip().replace("``", ""))  # plain text, not reST
        return 0
    if args == ["--version"]:
        print(f"{_PROGRAM} {__version__}")
        return 0
    options = [a for a in args if a.startswith("-")]
    if len(args) != 2 or options:
        print(_USAGE, file=sys.stderr)
        problem = (
            f"options {options} are not accepted"
            if options
            else f"expected exactly two arguments, INPUT and OUTDIR (got {len(args)})"
        )
        print(
            f"{_PROGRAM}: error: {problem}; options come from the input (an archive with a "
            "config.json); write a path that starts with '-' as ./-name",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from onnx_ir_multidevice.oaax.toolchain import convert  # lazy: `--help` stays fast

    return convert(args[0], args[1]).exit_status
