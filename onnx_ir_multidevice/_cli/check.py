"""``omny check FILE``: check a model's .omny plan, IR v11 device fields and pipeline stages.

Prints one line per error and warning (errors first; at most 20 of one code, then one line
saying how many more, unless ``--all``) and a summary; the info diagnostics (what crosses each
stage boundary...) are counted in the summary and listed with ``--verbose``. Exit status: 0
when there is no error, 1 when there are errors, 2 when the file cannot be read as ONNX or
its ``.omny`` plan cannot be read (the status the other commands give for that file).
``--strict`` makes every warning an error. ``--verify-data`` reads every data file to compare
its CRC-32 with the model's record (by default only a changed size, time or inode makes it read
one). ``--json`` prints one JSON document instead (schema
in ``docs/diagnostics.md``)::

    {"format": "onnx-ir-multidevice/check", "version": 1, "file": "model.omny",
     "ok": false, "counts": {"error": 1, "warning": 0, "info": 2}, "omitted": {},
     "diagnostics": [{"code": "OMNY132", "severity": "error", "message": "...",
                      "location": "sharding.configurations[1].cut_point_ids[2]"}]}
"""

from __future__ import annotations

__all__ = ["JSON_FORMAT", "JSON_VERSION", "register", "report_document", "run"]

import argparse
from pathlib import Path
from typing import Any

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    error,
    help_description,
    in_cli_words,
    print_json,
)

JSON_FORMAT = "onnx-ir-multidevice/check"
"""Value of ``"format"`` in the ``--json`` document."""
JSON_VERSION = 1
"""Value of ``"version"`` in the ``--json`` document; bumped on incompatible changes."""
_MAX_PER_CODE = 20
"""Diagnostics of one code listed without ``--all`` (the checker's ``DEFAULT_MAX_PER_CODE``,
repeated here so that ``omny --help`` does not import the checker)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``check`` subcommand."""
    parser = subparsers.add_parser(
        "check",
        help="check a model's .omny plan, IR v11 device fields and pipeline stages",
        description=help_description(__doc__),
    )
    parser.add_argument("file", type=Path, help="an .onnx or .omny model file")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--relaxed",
        action="store_true",
        help="accept cuts crossed by several activations (OMNY320 becomes a warning)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="make every warning an error: for files shipped to a runtime that allocates "
        "fixed buffers from the .omny spec",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help=f"list every diagnostic (default: at most {_MAX_PER_CODE} of one code)",
    )
    parser.add_argument(
        "--verify-data",
        action="store_true",
        help="read every data file and compare its CRC-32 with the model's record, even when "
        "its size, time and inode match (OMNY109 on a mismatch; costs reading the weights)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also list the info diagnostics"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="do not list info diagnostics (the default)"
    )
    parser.set_defaults(func=run)


def report_document(file: str, report: Any) -> dict[str, Any]:
    """Return the ``--json`` document of a :class:`~onnx_ir_multidevice.checker.CheckReport`.

    ``counts`` are every diagnostic found by severity, those left out by the limit per code
    included; ``omitted`` says how many of each code were left out of ``diagnostics``.
    """
    counts = report.counts()
    omitted: dict[str, int] = {}
    for (code, _), count in report.omitted_counts.items():
        omitted[code] = omitted.get(code, 0) + count
    left_out = set(report.omitted)
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "file": file,
        "ok": counts["error"] == 0 and not report.unreadable,
        "counts": counts,
        "omitted": omitted,
        "diagnostics": [d.to_dict() for d in report.diagnostics if d not in left_out],
    }


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def run(args: argparse.Namespace) -> int:
    """Check ``args.file``."""
    from onnx_ir_multidevice.checker.core import run_check  # lazy: `omny --help` stays fast

    report = run_check(
        args.file,
        relaxed_cuts=args.relaxed,
        strict=args.strict,
        max_per_code=None if args.all else _MAX_PER_CODE,
        verify_data=args.verify_data,
    )
    if args.json:
        print_json(report_document(str(args.file), report))
    else:
        infos = args.verbose and not args.quiet
        summaries = set(report.omitted)
        for diagnostic in report.diagnostics:
            if infos or diagnostic.severity.value != "info":
                print(in_cli_words(str(diagnostic)) if diagnostic in summaries else diagnostic)
        counts = report.counts()
        hidden = "" if infos or not counts["info"] else " (--verbose lists them)"
        print(
            f"{args.file}: {_plural(counts['error'], 'error')}, "
            f"{_plural(counts['warning'], 'warning')}, {_plural(counts['info'], 'info')}{hidden}"
        )
    if report.model is None:
        codes = {d.code for d in report.diagnostics}
        if codes & {"OMNY108", "OMNY109"}:  # valid ONNX; its data files are missing or changed
            reason = "its external data cannot be read (see the errors above)"
        elif "OMNY106" in codes:  # valid ONNX
            reason = "cannot be loaded (see the errors above)"
        else:
            reason = "cannot be read as an ONNX model"
        error(f"{args.file}: {reason}")
        return EXIT_USAGE
    if report.unreadable:
        error(f"{args.file}: its model or .omny plan cannot be read (see the errors above)")
        return EXIT_USAGE
    return EXIT_FINDINGS if report.errors else EXIT_OK
