"""``omny check FILE``: check a model's .omny plan, IR v11 device fields and pipeline stages.

Prints one line per diagnostic (errors first) and a summary. Exit status: 0 when there is no
error, 1 when there are errors, 2 when the file cannot be read as ONNX. ``--json`` prints
one JSON document instead (schema in ``docs/diagnostics.md``)::

    {"format": "onnx-ir-multidevice/check", "version": 1, "file": "model.omny",
     "ok": false, "counts": {"error": 1, "warning": 0, "info": 2},
     "diagnostics": [{"code": "OMNY132", "severity": "error", "message": "...",
                      "location": "sharding.configurations[1].cut_point_ids[2]"}]}
"""

from __future__ import annotations

__all__ = ["JSON_FORMAT", "JSON_VERSION", "register", "report_document", "run"]

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnx_ir_multidevice._cli import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, error, print_json

JSON_FORMAT = "onnx-ir-multidevice/check"
"""Value of ``"format"`` in the ``--json`` document."""
JSON_VERSION = 1
"""Value of ``"version"`` in the ``--json`` document; bumped on incompatible changes."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``check`` subcommand."""
    parser = subparsers.add_parser(
        "check",
        help="check a model's .omny plan, IR v11 device fields and pipeline stages",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    parser.add_argument("file", type=Path, help="an .onnx or .omny model file")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--relaxed",
        action="store_true",
        help="accept cuts crossed by several activations (OMNY320 becomes a warning)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print info diagnostics")
    parser.set_defaults(func=run)


def report_document(file: str, diagnostics: Sequence[Any]) -> dict[str, Any]:
    """Return the ``--json`` document for ``diagnostics`` of ``file``."""
    counts = dict.fromkeys(("error", "warning", "info"), 0)
    for diagnostic in diagnostics:
        counts[diagnostic.severity.value] += 1
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "file": file,
        "ok": counts["error"] == 0,
        "counts": counts,
        "diagnostics": [d.to_dict() for d in diagnostics],
    }


def run(args: argparse.Namespace) -> int:
    """Check ``args.file``."""
    from onnx_ir_multidevice.checker.core import run_check  # lazy: `omny --help` stays fast

    report = run_check(args.file, relaxed_cuts=args.relaxed)
    diagnostics = list(report.diagnostics)
    readable = report.model is not None
    if args.json:
        print_json(report_document(str(args.file), diagnostics))
    else:
        shown = [d for d in diagnostics if not (args.quiet and d.severity.value == "info")]
        for diagnostic in shown:
            print(diagnostic)
        document = report_document(str(args.file), diagnostics)
        counts = document["counts"]
        print(
            f"{args.file}: {counts['error']} error(s), {counts['warning']} warning(s), "
            f"{counts['info']} info(s)",
            file=sys.stdout,
        )
    if not readable:
        if not args.json:
            error(f"{args.file}: cannot be read as an ONNX model")
        return EXIT_USAGE
    return EXIT_FINDINGS if report.errors else EXIT_OK
