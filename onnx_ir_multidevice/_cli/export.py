"""``omny export --format NAME IN OUT``: write a planned model in another format.

The formats are those registered with
:func:`onnx_ir_multidevice.register_exporter` (``omny export --list-formats``
lists them with their options): ``split`` writes what ``omny split`` writes. ``--shards N``
picks the plan's configuration with N shards for a format that splits the model; each
``--option NAME=VALUE`` passes one of the format's options; ``--force`` replaces an existing
OUT; ``--json`` prints what was written as JSON. An unknown format or option is a usage
error (exit 2); a model that cannot be split or exported so exits with 1.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import types
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_shards_argument,
    error,
    help_description,
    print_json,
)
from onnx_ir_multidevice._errors import ExportError, SplitError

_FORMAT_HELP = "the format to write"


def _registry() -> types.ModuleType:
    """Return :mod:`onnx_ir_multidevice.exporters`, imported on first use."""
    # lazy: the registry imports the split machinery, which `omny --help` does not need
    from onnx_ir_multidevice import exporters

    return exporters


class _HelpFormatter(argparse.HelpFormatter):
    """Lists the registered formats in the help of ``--format``, only when help is shown."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.dest == "format":
            names = ", ".join(_registry().exporters())
            return f"{_FORMAT_HELP}, one of: {names} (see --list-formats)"
        return super()._get_help_string(action)


def _option(text: str) -> tuple[str, str]:
    """Parse ``--option NAME=VALUE`` for argparse."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE (e.g. configuration=1), got {text!r}"
        )
    return name, value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` subcommand."""
    parser = subparsers.add_parser(
        "export",
        help="write a planned model in another format (--list-formats)",
        description=help_description(__doc__),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "input", metavar="IN", type=Path, nargs="?", help="an .omny or annotated .onnx file"
    )
    parser.add_argument(
        "output", metavar="OUT", type=Path, nargs="?", help="the file or directory to write"
    )
    parser.add_argument("--format", metavar="NAME", help=_FORMAT_HELP)
    add_shards_argument(
        parser, several=False, help="number of pipeline stages (formats that split)"
    )
    parser.add_argument(
        "--option",
        dest="options",
        metavar="NAME=VALUE",
        type=_option,
        action="append",
        default=[],
        help="an option of the format (repeatable; see --list-formats)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--list-formats", action="store_true", help="list the formats and their options, and exit"
    )
    parser.set_defaults(func=run)


def _list_formats(as_json: bool) -> int:
    formats = _registry().exporters()
    if as_json:
        print_json(
            [
                {
                    "name": name,
                    "description": exporter.description,
                    "options": dict(exporter.option_help),
                }
                for name, exporter in formats.items()
            ]
        )
        return EXIT_OK
    width = max(map(len, formats), default=0)
    for name, exporter in formats.items():
        print(f"{name:<{width}}  {exporter.description}")
        for option, text in exporter.option_help.items():
            print(f"{'':<{width}}    --option {option}=...: {text}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Export ``args.input`` to ``args.output`` in ``args.format``."""
    if args.list_formats:
        return _list_formats(args.json)
    if args.format is None or args.input is None or args.output is None:
        missing = [
            what
            for what, value in (("--format", args.format), ("IN", args.input), ("OUT", args.output))
            if value is None
        ]
        error(f"export: {', '.join(missing)} required (see 'omny export --help')")
        return EXIT_USAGE
    registry = _registry()
    options = dict(args.options)
    if len(options) < len(args.options):
        error("export: an --option is given twice")
        return EXIT_USAGE
    try:
        exporter = registry.get_exporter(args.format)
    except ExportError as exc:
        error(f"export: {exc}")
        return EXIT_USAGE
    unknown = sorted(set(options).difference(exporter.option_help))
    if unknown:
        accepted = ", ".join(exporter.option_help) or "none"
        error(
            f"export: format {args.format!r} has no option {', '.join(unknown)} "
            f"(its options: {accepted})"
        )
        return EXIT_USAGE
    from onnx_ir_multidevice._proto.files import load  # lazy: `omny --help` stays fast

    model = load(args.input)
    try:
        result = registry.export(
            model, args.output, args.format, shards=args.shards, force=args.force, **options
        )
    except (ExportError, SplitError) as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    if args.json:
        print_json(result.to_dict())
        return EXIT_OK
    print(f"{args.input} -> {args.output} ({result.format}, {len(result.files)} files)")
    if result.destination.is_dir():
        for path in result.files:
            print(f"  {path.relative_to(result.destination)}")
    return EXIT_OK
