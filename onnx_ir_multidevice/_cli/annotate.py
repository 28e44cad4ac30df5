"""``omny annotate IN OUT``: write IR v11 pipeline stages and cut placements from the .omny plan.

Each selected shard configuration becomes a device configuration ``omny/<n>-shards``; every
main-graph node gets its stage and each cut tensor placement-only sharding specs. ``IN`` is
never modified unless ``OUT`` is the same path, and an existing ``OUT`` is replaced only with
``--force``. The model is checked first (``--no-check``
skips it): errors print like ``omny check`` and exit with status 1.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import os
import sys
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_force_argument,
    add_shards_argument,
    error,
    existing_output,
    help_description,
    print_json,
)
from onnx_ir_multidevice._errors import BindingError, CheckError, OmnyFormatError

_MAX_PER_CODE = 20
"""Errors of one code printed when the check refuses the plan (as ``omny check``)."""


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty device name in {text!r}; use A,B,C")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``annotate`` subcommand."""
    parser = subparsers.add_parser(
        "annotate",
        help="write IR v11 pipeline stages and cut placements from the .omny plan",
        description=help_description(__doc__),
    )
    parser.add_argument("input", type=Path, help="an .omny model file (not modified)")
    parser.add_argument("output", type=Path, help="the annotated model file to write")
    add_shards_argument(
        parser,
        several=True,
        help="annotate only the configurations with these shard counts, e.g. 2 4 or 2,4 "
        "(default: all)",
    )
    parser.add_argument(
        "--device-names",
        type=_names,
        metavar="A,B,...",
        help="device names; an N-shard configuration takes the first N",
    )
    parser.add_argument("--no-check", action="store_true", help="do not check the model first")
    parser.add_argument(
        "--relaxed", action="store_true", help="accept cuts crossed by several activations"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    add_force_argument(parser, "output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Annotate ``args.input`` into ``args.output``."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.files import load, save
    from onnx_ir_multidevice.omny import read, read_tensor_parallel
    from onnx_ir_multidevice.passes.api import annotate

    refusal = existing_output(args.output, args.force, source=args.input)
    if refusal is not None:
        error(refusal)
        return EXIT_USAGE
    # Allowed above: --force, or the input itself. An output that appears meanwhile is not.
    replace = args.force or os.path.lexists(args.output)
    model = load(args.input)
    read(model)  # a plan that cannot be read is an unreadable input (exit 2), as for split
    try:
        annotate(
            model,
            configurations=args.shards,
            device_names=args.device_names,
            check=not args.no_check,
            relaxed_cuts=args.relaxed,
        )
    except CheckError as exc:
        shown: dict[str, int] = {}
        for diagnostic in exc.diagnostics:
            shown[diagnostic.code] = shown.get(diagnostic.code, 0) + 1
            if shown[diagnostic.code] <= _MAX_PER_CODE:
                print(diagnostic, file=sys.stderr)
        for code, count in shown.items():
            if count > _MAX_PER_CODE:
                print(f"... and {count - _MAX_PER_CODE:,} more {code} errors", file=sys.stderr)
        count = len(exc.diagnostics)
        error(f"{args.input}: {count:,} error{'' if count == 1 else 's'}; nothing written")
        return EXIT_FINDINGS
    except BindingError as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    save(model, args.output, overwrite=replace)  # refused above unless --force or in place
    summary = []
    try:
        record = read_tensor_parallel(model)
    except OmnyFormatError:  # annotate wrote no sharding from it; the devices are the stages
        record = None
    for configuration in model.device_configurations:
        if not configuration.name.startswith("omny/"):
            continue
        # With tensor parallelism a stage has several devices: count the stages.
        parallel = record.configuration(configuration.name) if record is not None else None
        counts = [0] * (parallel.num_shards if parallel else configuration.num_devices)
        for node in model.graph:
            for entry in node.device_configurations:
                stage = entry.pipeline_stage
                in_range = stage is not None and 0 <= stage < len(counts)
                if entry.configuration is configuration and in_range:
                    assert stage is not None  # in_range
                    counts[stage] += 1
        summary.append(
            {
                "name": configuration.name,
                "num_devices": configuration.num_devices,
                "device_names": list(configuration.device_names),
                "nodes_per_stage": counts,
            }
        )
    if args.json:
        print_json(
            {"input": str(args.input), "output": str(args.output), "configurations": summary}
        )
    else:
        for item in summary:
            print(f"{item['name']}: nodes per stage {item['nodes_per_stage']}")
        print(f"wrote {args.output}")
    return EXIT_OK
