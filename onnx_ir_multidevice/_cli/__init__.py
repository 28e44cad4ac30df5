"""The ``omny`` command line.

``main()`` builds an :mod:`argparse` parser with one subcommand per module listed in
:data:`_SUBCOMMANDS`. A subcommand module defines ``register(subparsers)``, which adds its
parser and sets ``func=run``, where ``run(args) -> int`` returns the exit status. Subcommand
modules import only the standard library and this module at import time; ``run`` imports
what it needs when called, so ``omny --help`` and ``omny --version`` start fast.

Exit statuses (the table of situations is in ``docs/cli.md``): 0 success, 1 the input was read
and its content stops the job or has problems (a check failed, a verification mismatch, no plan
for the shard count asked), 2 unreadable input or bad usage, 130 interrupted. An
:class:`~onnx_ir_multidevice._errors.OmnyError` escaping a subcommand prints one line
``omny: error: <message>`` on stderr and exits with 2.

Ctrl-C: when this module is imported by the ``omny`` command (or ``python -m
onnx_ir_multidevice._cli``), SIGINT prints ``omny: interrupted`` and exits with 130 at once
until :func:`main` dispatches to a subcommand (the imports of the package and of the parser),
without a traceback from the middle of an import; from then on it raises
:class:`KeyboardInterrupt` as usual (what a running pipeline cleans up on), which :func:`main`
turns into the same line and status. Imported by anything else (tests, notebooks), this module
leaves signal handling alone.

Interrupted, the command ends with :func:`os._exit` once the subcommand has unwound (its
pipelines closed and joined, its temporary files removed, stdout and stderr flushed). The
interpreter's own shutdown would stop a daemon worker thread still inside an onnxruntime call
(a stage run finishing after its cancellation) with ``pthread_exit``, which C++ answers with
``terminate called without an active exception`` and status 134 instead of 130.
"""

# ruff: noqa: E402 - the SIGINT handler is installed before the other imports (see above)
from __future__ import annotations

# Before any other import: Ctrl-C during start-up is not a traceback (see the docstring).
import signal as _signal
import sys as _sys

EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C): 128 + SIGINT, as shells report it."""


def _interrupted_at_start(signum: int, frame: object) -> None:
    """SIGINT before a subcommand runs: one line and status 130, no traceback."""
    try:
        _sys.stderr.write("omny: interrupted\n")
        _sys.stderr.flush()
    finally:
        raise SystemExit(EXIT_INTERRUPTED)


def _started_as_command() -> bool:
    """Whether the process is the ``omny`` command.

    ``sys.argv[0]`` is its script, or ``-m`` while ``python -m onnx_ir_multidevice._cli``
    locates its module.
    """
    name = _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1] if _sys.argv else ""
    return name in ("omny", "omny.exe", "omny-script.py", "-m")


_AS_COMMAND = _started_as_command()
"""Whether this process is the ``omny`` command (decided at import, see above)."""

if _AS_COMMAND and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_at_start)

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "add_shards_argument",
    "build_parser",
    "check_dim_names",
    "help_description",
    "in_cli_words",
    "dim_argument",
    "main",
    "positive_int",
    "tolerance_argument",
]

import argparse
import contextlib
import importlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    "view",
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


def help_description(doc: str) -> str:
    """The ``--help`` description of a subcommand, from its module docstring.

    The first line after the usage (``omny plan IN -o OUT.omny``: *find cut points...*), in
    plain text.
    """
    return doc.splitlines()[0].split(": ", 1)[1].replace("``", "")


def error(message: str) -> None:
    """Print ``omny: error: <message>`` on stderr (and keep it for the ``--json`` envelope)."""
    print(f"omny: error: {message}", file=sys.stderr)
    if _envelope is not None:
        _envelope.errors.append(message)


class _Envelope:
    """What ``--json`` prints once the command ends: one document, the same for every command.

    ``{"command": NAME, "ok": bool, "status": EXIT_STATUS, "result": DOCUMENT, "error": TEXT}``
    on stdout, also when the command fails: ``result`` is the command's own document (its
    keys documented with each command; ``null`` when it failed before making one) and
    ``error`` what it printed as ``omny: error: ...`` on stderr (lines joined; ``null`` when
    none).
    """

    def __init__(self, command: str | None) -> None:
        self.command = command
        self.result: Any = None
        self.errors: list[str] = []

    def document(self, status: int) -> dict[str, Any]:
        return {
            "command": self.command,
            "ok": status == EXIT_OK,
            "status": status,
            "result": self.result,
            "error": "\n".join(self.errors) or None,
        }


_envelope: _Envelope | None = None
"""The ``--json`` envelope of the command :func:`main` runs, if it was asked for."""


def print_json(document: Any) -> None:
    """Emit a command's ``--json`` document.

    Under :func:`main` it becomes the ``result`` of the envelope printed when the command
    ends (see :class:`_Envelope`); called otherwise, the document is printed on stdout as is.
    """
    if _envelope is not None:
        _envelope.result = document
        return
    _dump_json(document)


def _dump_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


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


def progress_reporter(args: argparse.Namespace, command: str) -> Callable[[str], None]:
    """Return the function a subcommand reports its progress with.

    It prints ``omny <command>: <message> (<seconds since this call>s)`` on stderr when
    :func:`progress_enabled`, and does nothing otherwise; stdout (tables, ``--json``) is
    never touched.

    Args:
        args: The parsed arguments (``--progress``).
        command: The subcommand's name, as typed.
    """
    show = progress_enabled(args)
    started = time.perf_counter()

    def progress(message: str) -> None:
        if show:
            elapsed = time.perf_counter() - started
            print(f"omny {command}: {message} ({elapsed:.1f}s)", file=sys.stderr, flush=True)

    return progress


def add_force_argument(parser: argparse.ArgumentParser, what: str = "OUT") -> None:
    """Add ``--force``: replace an existing output (every command refuses one without it)."""
    parser.add_argument("--force", action="store_true", help=f"replace an existing {what}")


def existing_output(path: Path, force: bool, *, source: Path | None = None) -> str | None:
    """The message refusing to write the file ``path``, or ``None``.

    One policy for every command that writes (``plan``, ``annotate``, ``convert``, ``split``,
    ``export``): an existing output is replaced only with ``--force`` (exit status 2
    otherwise, before any work is done). Writing over the input itself (``annotate m.omny
    m.omny``) names it twice on purpose and needs no ``--force``. A directory is never
    replaced by a file.

    Args:
        path: The output file.
        force: Whether ``--force`` was given.
        source: The input file, when the command reads one.
    """
    if path.is_dir():
        return f"{path}: is a directory; name the file to write (e.g. {path / 'model.omny'})"
    if force or not os.path.lexists(path):
        return None
    if source is not None and path.exists() and source.exists() and os.path.samefile(path, source):
        return None  # (a dangling link ``path`` exists as a link only: refused as any file)
    return f"{path}: exists; choose another path or pass --force to replace it"


def output_holds_input(outdir: Path, source: Path) -> str | None:
    """The message refusing to write the folder ``outdir`` over the one holding ``source``.

    A folder output (``split``, ``export``) replaces ``outdir`` whole with ``--force``: where
    ``outdir`` is the input's folder or one above it, that would delete the input (and what
    lies beside it). Refused, with or without ``--force`` (exit status 2, before any work).

    Args:
        outdir: The output folder.
        source: The input file.
    """
    if not outdir.is_dir():  # a file or a new folder holds nothing (the writer says so)
        return None
    folder = os.path.realpath(outdir)
    # the input as named (a link in the folder goes with it) and the file it points to
    paths = {os.path.join(os.path.realpath(source.parent), source.name), os.path.realpath(source)}
    if not any(os.path.commonpath([folder, path]) == folder for path in paths):
        return None
    return (
        f"{outdir}: holds the input {source}; writing the output there would replace the "
        "folder and delete the input: choose a new folder outside it"
    )


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
    """Return an error message if a ``--dim`` names no dimension of the model's inputs.

    The same words as ``omny plan`` (:func:`~onnx_ir_multidevice.planner.planning.
    unknown_dims_message`): ``plan``, ``verify`` and ``run`` refuse an unknown name alike
    (exit status 2).

    Args:
        file: The model file, for the message.
        given: The ``--dim`` values by name.
        declared: The dimension names of the model's inputs (its input symbols, see
            :func:`~onnx_ir_multidevice.analysis.shapes.input_symbols`).

    Returns:
        ``None`` when every name is declared, else the message to print.
    """
    names = list(dict.fromkeys(declared))
    unknown = [name for name in given if name not in names]
    if not unknown:
        return None
    have = ", ".join(names) or "none: every input dimension is fixed"
    return (
        f"{file}: --dim {', '.join(repr(n) for n in unknown)}: no input of the model has a "
        f"dimension of that name (its dimensions: {have})"
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


def shard_counts(text: str) -> list[int]:
    """Parse one ``--shards`` word: ``2`` or a comma-separated list ``2,4`` (for argparse)."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected shard counts such as 2 or 2,4, got {text!r}")
    return [positive_int(part) for part in parts]


class _ShardCounts(argparse.Action):
    """Collect ``--shards`` values, written ``--shards 2 4``, ``--shards 2,4`` or repeated."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        counts = list(getattr(namespace, self.dest, None) or [])
        for value in values if self.nargs == "+" else [values]:
            counts.extend(value)
        if self.const == "one" and len(counts) != 1:
            parser.error(
                f"{option_string}: one shard count, got {', '.join(map(str, counts))}; run the "
                "command once per shard count"
            )
        setattr(namespace, self.dest, counts[0] if self.const == "one" else counts)


def add_shards_argument(
    parser: argparse.ArgumentParser, *, several: bool, help: str, required: bool = False
) -> None:
    """Add ``--shards`` as every subcommand reads it: ``--shards 2 4`` or ``--shards 2,4``.

    Args:
        parser: The subcommand's parser.
        several: Whether several shard counts are accepted (the value is a list of ints);
            otherwise exactly one (the value is an int), and the option takes one word, so
            that a positional argument after it (``split m.omny --shards 2 stages``) stays
            one.
        help: The help text.
        required: Whether the option is required.
    """
    parser.add_argument(
        "--shards",
        type=shard_counts,
        nargs="+" if several else None,
        action=_ShardCounts,
        const=None if several else "one",
        required=required,
        metavar="N",
        help=help,
    )


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
    for name in ("input", "file", "model"):
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
    global _envelope  # noqa: PLW0603  # the --json envelope of the one command this process runs
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    _envelope = _Envelope(_command_word(words)) if "--json" in words else None
    try:
        try:
            args = parser.parse_args(words)
        except SystemExit as exit_:  # --help, --version, usage errors
            status = int(exit_.code) if isinstance(exit_.code, int) else EXIT_USAGE
            return _finish(status) if status != EXIT_OK else status
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return _finish(EXIT_USAGE)
        if not getattr(args, "json", False):
            _envelope = None  # "--json" was a value of another option
        elif _envelope is not None:
            _envelope.command = args.command
        if _signal.getsignal(_signal.SIGINT) is _interrupted_at_start:
            # From here Ctrl-C raises KeyboardInterrupt, which the subcommands clean up on.
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        return _finish(_dispatch(func, args))
    finally:
        _envelope = None


def _command_word(words: Sequence[str]) -> str | None:
    """The subcommand named in ``words`` (the first word that is one), for the envelope."""
    return next((word for word in words if word in _SUBCOMMANDS), None)


def _finish(status: int) -> int:
    """Print the ``--json`` envelope, if one was asked for; return ``status``."""
    if _envelope is not None:
        with contextlib.suppress(BrokenPipeError, ValueError):  # `omny ... --json | head`
            _dump_json(_envelope.document(status))
    return status


def _dispatch(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run the subcommand; turn the errors it lets escape into a message and a status."""
    try:
        return int(func(args))
    except OmnyFormatError as exc:  # its path is inside the model: say which file
        source = None if getattr(exc, "source", None) else _input_file(args)
        message = in_cli_words(str(exc))
        error(f"{source}: {message}" if source is not None else message)
        return EXIT_USAGE
    except OmnyError as exc:
        error(in_cli_words(str(exc)))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("omny: interrupted", file=sys.stderr)
        if _envelope is not None:
            _envelope.errors.append("interrupted")
        if _AS_COMMAND:  # everything has unwound: end without the interpreter's shutdown
            _exit_now(_finish(EXIT_INTERRUPTED))
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `omny inspect x | head`
        sys.stderr.close()
        return EXIT_OK


_PYTHON_WORDS = re.compile(r" \([^()]*\bin Python\b[^()]*\)")
"""What messages of the Python API add for Python callers beside a flag's name: a
parenthesis that says ``in Python`` ("(force=True in Python)", "(intra_op_num_threads in
Python, or pass ray_actor_options)")."""


def in_cli_words(message: str) -> str:
    """``message`` without the Python argument names it gives beside a command-line flag.

    The package's errors serve both audiences ("pass --force (force=True in Python)"); on
    the command line only the flag is said.
    """
    return _PYTHON_WORDS.sub("", message)


def _exit_now(status: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``status`` at once (see above)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
    os._exit(status)
