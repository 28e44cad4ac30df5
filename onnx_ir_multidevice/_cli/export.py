"""``omny export --format NAME IN OUT``: write a planned model in another format.

The formats are those registered with
:func:`onnx_ir_multidevice.register_exporter` (``omny export --list-formats``
lists them with their options): ``split`` writes what ``omny split`` writes, ``mlf`` a TVM
Model Library Format archive, ``ark`` ARK per-rank model files. The format is given with
``--format NAME`` or as the first word: ``omny export mlf IN OUT.tar --shards 2``.
``--shards N`` picks the plan's configuration with N shards for a format that splits the
model; each ``--option NAME=VALUE`` passes one of the format's options, and the flags
``--providers``, ``--per-stage``, ``--export-datetime``, ``--layout``, ``--ops``,
``--strict-dtypes`` and ``--dim`` are the options of the same names; ``--force`` replaces an
existing OUT; ``--json`` prints what was written as JSON. An unknown format or option, a
missing ``--shards``, an option value that does not parse (one provider too many), an ``mlf``
OUT that is not a ``.tar`` name (``out/``: name the archive, or ``--per-stage`` for a folder),
or a size the planning dims leave unknown, is a usage error (exit 2); a model that cannot be
split or exported so exits with 1.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import textwrap
import types
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_progress_argument,
    add_shards_argument,
    dim_argument,
    error,
    help_description,
    output_holds_input,
    print_json,
    progress_reporter,
)
from onnx_ir_multidevice._errors import (
    ExportError,
    ExportUsageError,
    PlanningDimsError,
    SplitError,
)

_FORMAT_HELP = "the format to write"

_USAGE = (
    "%(prog)s [FORMAT] IN OUT [--format NAME] [--shards N] [--option NAME=VALUE] "
    "[format flags] [--force] [--json] | --list-formats"
)

_FLAGS: dict[str, str] = {
    "providers": "providers",
    "per_stage": "per_stage",
    "export_datetime": "export_datetime",
    "layout": "layout",
    "ops": "ops",
    "strict_dtypes": "strict_dtypes",
    "dims": "dims",
}
"""Format flags (argparse dest) -> the exporter option each one passes."""


def _registry() -> types.ModuleType:
    """Return :mod:`onnx_ir_multidevice.exporters`, imported on first use."""
    # lazy: the registry imports the split machinery, which `omny --help` does not need
    from onnx_ir_multidevice import exporters

    return exporters


class _HelpFormatter(argparse.HelpFormatter):
    """Lists the registered formats in the help of ``--format``, only when help is shown."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        """Wrap at spaces only: format names and flags (``stage-list``) stay whole."""
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

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
        usage=_USAGE,
    )
    parser.add_argument(
        "words",
        metavar="[FORMAT] IN OUT",
        nargs="*",
        help="the format (or --format), an .omny or annotated .onnx file, and the file or "
        "directory to write",
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
    flags = parser.add_argument_group("format flags (each passes the option of its name)")
    flags.add_argument(
        "--providers",
        metavar="LIST",
        help="mlf: the device of each stage, e.g. cpu,cuda:0 (one for all, or one per stage)",
    )
    flags.add_argument(
        "--per-stage",
        action="store_true",
        default=None,
        help="mlf: one .tar per stage, in the directory OUT",
    )
    flags.add_argument(
        "--export-datetime",
        metavar="DATE",
        help="mlf: the date written, e.g. '2024-05-01 12:00:00Z' (fixed: reproducible bytes)",
    )
    flags.add_argument("--layout", choices=("main", "seed"), help="ark: the file layout")
    flags.add_argument(
        "--ops", choices=("skeleton", "translate"), help="ark: how the compute is written"
    )
    flags.add_argument(
        "--strict-dtypes",
        action="store_true",
        default=None,
        help="ark: refuse tensors of types ARK lacks instead of writing byte views",
    )
    flags.add_argument(
        "--dim",
        dest="dims",
        action="append",
        type=dim_argument,
        metavar="NAME=N",
        help="a planning dim the plan did not record, e.g. seq=128 (repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--list-formats", action="store_true", help="list the formats and their options, and exit"
    )
    add_progress_argument(parser)
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


def _positionals(args: argparse.Namespace, registry: types.ModuleType) -> str | None:
    """Sort ``[FORMAT] IN OUT`` into ``args.format``, ``args.input``, ``args.output``.

    Returns:
        An error message, or ``None``.
    """
    words = list(args.words)
    if len(words) == 3:
        if args.format is not None and args.format != words[0]:
            return f"export: the format is given twice ({words[0]!r} and --format {args.format})"
        args.format = words.pop(0)
    elif len(words) > 3:
        return f"export: expected [FORMAT] IN OUT, got {len(words)} words: {' '.join(words)}"
    args.input = Path(words[0]) if words else None
    args.output = Path(words[1]) if len(words) > 1 else None
    if args.format is None or args.input is None or args.output is None:
        if len(words) == 2 and words[0] in registry.exporters():
            return f"export: OUT required after IN ({words[1]}) (see 'omny export --help')"
        missing = [
            what
            for what, value in (("--format", args.format), ("IN", args.input), ("OUT", args.output))
            if value is None
        ]
        return f"export: {', '.join(missing)} required (see 'omny export --help')"
    return None


def _options(args: argparse.Namespace) -> dict[str, object] | str:
    """The format's options from ``--option`` and the format flags, or an error message."""
    options: dict[str, object] = dict(args.options)
    if len(options) < len(args.options):
        return "export: an --option is given twice"
    for dest, option in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if option in options:
            return f"export: option {option} is given twice (--option and its flag)"
        options[option] = dict(value) if dest == "dims" else value
    return options


def run(args: argparse.Namespace) -> int:
    """Export ``args.input`` to ``args.output`` in ``args.format``."""
    from onnx_ir_multidevice._util import plural  # lazy: `omny --help` stays fast

    if args.list_formats:
        return _list_formats(args.json)
    registry = _registry()
    problem = _positionals(args, registry)
    if problem is not None:
        error(problem)
        return EXIT_USAGE
    options = _options(args)
    if isinstance(options, str):
        error(options)
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
    refusal = output_holds_input(args.output, args.input)
    if refusal is not None:
        error(refusal)
        return EXIT_USAGE
    from onnx_ir_multidevice._proto.files import load  # lazy: `omny --help` stays fast

    progress = progress_reporter(args, "export")
    progress(f"loading {args.input}")
    model = load(args.input)
    progress(f"exporting to {args.output} ({args.format})")
    try:
        result = registry.export(
            model, args.output, args.format, shards=args.shards, force=args.force, **options
        )
    except ExportUsageError as exc:  # asked wrongly: a usage error, as in `omny run`
        error(f"{args.input}: {exc.cli_message or exc}")
        return EXIT_USAGE
    except PlanningDimsError as exc:
        error(f"{args.input}: {exc}")
        return EXIT_USAGE
    except (ExportError, SplitError) as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    if args.json:
        print_json(result.to_dict())
        return EXIT_OK
    print(f"{args.input} -> {args.output} ({result.format}, {plural(len(result.files), 'file')})")
    if result.destination.is_dir():
        for path in result.files:
            print(f"  {path.relative_to(result.destination)}")
    return EXIT_OK
