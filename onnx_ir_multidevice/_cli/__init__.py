"""The ``omny`` command line.

``main()`` builds an :mod:`argparse` parser with one subcommand per module listed in
:data:`_SUBCOMMANDS`. A subcommand module defines ``register(subparsers)``, which adds its
parser and sets ``func=run``, where ``run(args) -> int`` returns the exit status. Subcommand
modules import only the standard library and this module at import time; ``run`` imports
what it needs when called, so ``omny --help`` and ``omny --version`` start fast.

Exit statuses: 0 success, 1 findings in the content (a check failed, a verification mismatch),
2 unreadable input or bad usage. An :class:`~onnx_ir_multidevice._errors.OmnyError` escaping a
subcommand prints one line ``omny: error: <message>`` on stderr and exits with 2.
"""

from __future__ import annotations

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "check_dim_names",
    "dim_argument",
    "main",
    "positive_int",
    "tolerance_argument",
]

import argparse
import importlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from onnx_ir_multidevice._errors import OmnyError, OmnyFormatError
from onnx_ir_multidevice._version import __version__

EXIT_OK = 0
"""Success."""
EXIT_FINDINGS = 1
"""The input was read, and its content has problems (check failed, verify mismatch)."""
EXIT_USAGE = 2
"""Unreadable input or bad usage."""

_SUBCOMMANDS: tuple[str, ...] = (
    "inspect",
    "check",
    "annotate",
    "plan",
    "split",
    "export",
    "convert",
    "oaax-convert",
    "verify",
    "run",
    "demo",
)
"""Subcommands, in ``--help`` order; each is a module of this package (``-`` spelt ``_``)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line ``omny: error: ...`` (exit 2).

    Subcommand parsers are of this class too (``add_subparsers`` uses the parent's class).
    """

    def error(self, message: str) -> NoReturn:
        """Print ``omny: error: [<subcommand>: ]<message>``, a pointer to ``--help``; exit 2."""
        command = self.prog.partition(" ")[2]
        error(f"{command + ': ' if command else ''}{message} (see '{self.prog} --help')")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``omny`` parser with every available subcommand registered."""
    parser = _Parser(
        prog="omny",
        description=(
            "Plan, annotate, check, split and run ONNX models across several devices "
            "(.omny files and ONNX IR v11 multi-device metadata)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"omny {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name.replace('-', '_')}").register(subparsers)
    return parser


def error(message: str) -> None:
    """Print ``omny: error: <message>`` on stderr."""
    print(f"omny: error: {message}", file=sys.stderr)


def print_json(document: Any) -> None:
    """Print one JSON document on stdout (what ``--json`` options emit)."""
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--progress``: report progress on stderr even when it is not a terminal."""
    parser.add_argument(
        "--progress",
        action="store_true",
        help="report progress on stderr (default: only when stderr is a terminal)",
    )


def progress_enabled(args: argparse.Namespace) -> bool:
    """Whether to print progress: ``--progress`` was given or stderr is a terminal."""
    return bool(getattr(args, "progress", False)) or sys.stderr.isatty()


def dim_argument(text: str) -> tuple[str, int]:
    """Parse ``--dim NAME=N`` (a symbolic dimension and its positive size) for argparse."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(
            f"expected NAME=N with N a positive integer (e.g. batch=8), got {text!r}"
        )
    return name, int(value)


def check_dim_names(
    file: str | Path, given: Mapping[str, int], declared: Iterable[str]
) -> str | None:
    """Return an error message if a ``--dim`` names no symbolic dimension of the inputs.

    Args:
        file: The model file, for the message.
        given: The ``--dim`` values by name.
        declared: The symbolic dimension names of the model's inputs.

    Returns:
        ``None`` when every name is declared, else the message to print.
    """
    names = set(declared)
    unknown = sorted(set(given).difference(names))
    if not unknown:
        return None
    have = ", ".join(sorted(names)) or "none: every input dimension is fixed"
    return (
        f"{file}: --dim {', '.join(unknown)}: no input of the model has a symbolic dimension "
        f"of that name (it has: {have})"
    )


def positive_int(text: str) -> int:
    """Parse a positive integer (``--shards N``) for argparse."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def tolerance_argument(text: str) -> float:
    """Parse a non-negative finite tolerance (``--rtol``, ``--atol``) for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0 (e.g. 1e-4), got {text!r}")
    return value


def _input_file(args: argparse.Namespace) -> Path | None:
    """The model file a subcommand reads (its ``input`` or ``file`` argument), if any."""
    for name in ("input", "file"):
        value = getattr(args, name, None)
        if isinstance(value, Path):
            return value
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``omny`` command line.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status (0 ok, 1 findings, 2 unreadable input or bad usage).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, usage errors
        return int(exit_.code) if isinstance(exit_.code, int) else EXIT_USAGE
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args))
    except OmnyFormatError as exc:  # its path is inside the model: say which file
        source = None if getattr(exc, "source", None) else _input_file(args)
        error(f"{source}: {exc}" if source is not None else str(exc))
        return EXIT_USAGE
    except OmnyError as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("omny: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `omny inspect x | head`
        sys.stderr.close()
        return EXIT_OK
