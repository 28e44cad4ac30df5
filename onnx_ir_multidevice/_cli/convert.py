"""``omny convert IN OUT --container v2|v1``: rewrite an ``.omny`` file in the v1 or v2 container.

v1 → v2 writes exactly what the upstream writer's ``upgrade`` writes (the v1 file must hold a
plan); an unchanged v2 file is written back byte for byte; v2 → v1 writes the embedded model
(its metadata holds the plan) and says on stderr which manifest keys the v1 file cannot hold.
A model that cannot fit one container (2 GiB or more, external data) is refused before OUT is
touched; rewriting a file that has an upstream ``.sig`` companion warns that the signature no
longer verifies. A malformed v2 header exits with 2, naming the field and the numbers.
``--json`` prints what was done. An existing OUT is replaced only with ``--force``.
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
    add_force_argument,
    error,
    existing_output,
    help_description,
    print_json,
)

_PLAN_PATH = "metadata_props[omnynet_metadata]"
"""Where a v1 file's plan is: a plain ONNX model has none there."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``convert`` subcommand."""
    parser = subparsers.add_parser(
        "convert",
        help="rewrite an .omny file in the v1 (ONNX) or v2 (OMNY container) format",
        description=help_description(__doc__),
    )
    parser.add_argument("input", metavar="IN", type=Path, help="a v1 or v2 .omny file")
    parser.add_argument("output", metavar="OUT", type=Path, help="the file to write")
    parser.add_argument(
        "--container",
        choices=("v2", "v1"),
        required=True,
        help="v2: the OMNY binary container; v1: a plain ONNX model with .omny metadata",
    )
    parser.add_argument("--json", action="store_true", help="print what was done as JSON")
    add_force_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert ``args.input`` to ``args.output``; warnings go to stderr."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.container_files import ContainerWarning, convert_container
    from onnx_ir_multidevice.omny.container import OmnyContainerError

    refusal = existing_output(args.output, args.force, source=args.input)
    if refusal is not None:
        error(refusal)
        return EXIT_USAGE
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ContainerWarning)
        try:
            result = convert_container(
                args.input, args.output, container=args.container
            )  # an existing OUT was refused above unless --force or in place
        except OmnyContainerError as exc:
            if exc.path == _PLAN_PATH and exc.reason.startswith("missing"):
                # No plan: a content problem (1), as for split, verify and run.
                error(str(exc))
                return EXIT_FINDINGS
            if exc.path == "model" and _unfit(exc.reason):
                # Read, but no container can hold it (external data, 2 GiB): content, 1.
                error(str(exc))
                return EXIT_FINDINGS
            raise
    for warning in caught:
        if issubclass(warning.category, ContainerWarning):
            print(f"omny: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if args.json:
        print_json(
            {
                "input": str(result.source),
                "output": str(result.destination),
                "from": result.source_container,
                "to": result.container,
                "dropped": list(result.dropped),
                "warnings": list(result.warnings),
            }
        )
    else:
        print(f"{args.input} ({result.source_container}) -> {args.output} ({result.container})")
    return EXIT_OK


def _unfit(reason: str) -> bool:
    """Whether ``reason`` says that no v2 container can hold the model (external data, 2 GiB)."""
    # lazy: `omny --help` does not import the container package
    from onnx_ir_multidevice.omny.container import unfit_model_reason

    if reason == unfit_model_reason(external_data=True):
        return True
    words = reason.split()  # "the serialized model is N bytes, ..."
    return (
        len(words) > 4
        and words[4].isdigit()
        and reason == unfit_model_reason(n_bytes=int(words[4]))
    )
