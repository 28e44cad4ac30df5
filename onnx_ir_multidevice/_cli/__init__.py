"""The ``omny`` command line.

``main()`` builds an :mod:`argparse` parser with one subcommand per module listed in
:data:`_SUBCOMMANDS`. A subcommand module defines ``register(subparsers)``, which adds its
parser and sets ``func=run``, where ``run(args) -> int`` returns the exit status. Modules not
present yet are skipped, so the command line grows as the package does.

Exit statuses: 0 success, 1 findings in the content (a check failed, a verification mismatch),
2 unreadable input or bad usage. An :class:`~onnx_ir_multidevice._errors.OmnyError` escaping a
subcommand prints one line ``omny: error: <message>`` on stderr and exits with 2.
"""

from __future__ import annotations

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from onnx_ir_multidevice._errors import OmnyError

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
    "verify",
    "run",
    "demo",
)
"""Subcommand modules of this package, in ``--help`` order; missing ones are skipped."""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("onnx-ir-multidevice")
    except Exception:  # not installed: fall back to the source tree's version
        from onnx_ir_multidevice import __version__

        return __version__


def _load_subcommand(name: str) -> Any | None:
    """Import ``onnx_ir_multidevice._cli.<name>``; ``None`` if that module does not exist.

    An import error raised *inside* an existing module is not hidden.
    """
    module_name = f"{__name__}.{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """Return the ``omny`` parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="omny",
        description=(
            "Plan, annotate, check, split and run ONNX models across several devices "
            "(.omny files and ONNX IR v11 multi-device metadata)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"omny {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        module = _load_subcommand(name)
        if module is not None:
            module.register(subparsers)
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
    except OmnyError as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("omny: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `omny inspect x | head`
        sys.stderr.close()
        return EXIT_OK
