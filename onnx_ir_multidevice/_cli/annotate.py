"""``omny annotate IN OUT``: write IR v11 pipeline stages and cut placements from the .omny plan.

Each selected shard configuration becomes a device configuration ``omny/<n>-shards``; every
main-graph node gets its stage and each cut tensor placement-only sharding specs. ``IN`` is
never modified unless ``OUT`` is the same path. The model is checked first (``--no-check``
skips it): errors print like ``omny check`` and exit with status 1.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import sys
from pathlib import Path

from onnx_ir_multidevice._cli import EXIT_FINDINGS, EXIT_OK, error, positive_int, print_json
from onnx_ir_multidevice._errors import BindingError, CheckError


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
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    parser.add_argument("input", type=Path, help="an .omny model file (not modified)")
    parser.add_argument("output", type=Path, help="the annotated model file to write")
    parser.add_argument(
        "--shards",
        type=positive_int,
        nargs="+",
        action="extend",
        metavar="N",
        help="annotate only the configurations with these shard counts (default: all)",
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Annotate ``args.input`` into ``args.output``."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice._proto.files import load, save
    from onnx_ir_multidevice.passes.api import annotate

    model = load(args.input)
    try:
        annotate(
            model,
            configurations=args.shards,
            device_names=args.device_names,
            check=not args.no_check,
            relaxed_cuts=args.relaxed,
        )
    except CheckError as exc:
        for diagnostic in exc.diagnostics:
            print(diagnostic, file=sys.stderr)
        error(f"{args.input}: {len(exc.diagnostics)} error(s); nothing written")
        return EXIT_FINDINGS
    except BindingError as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    save(model, args.output)
    summary = []
    for configuration in model.device_configurations:
        if not configuration.name.startswith("omny/"):
            continue
        counts = [0] * configuration.num_devices
        for node in model.graph:
            for entry in node.device_configurations:
                stage = entry.pipeline_stage
                in_range = stage is not None and 0 <= stage < len(counts)
                if entry.configuration is configuration and in_range:
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
