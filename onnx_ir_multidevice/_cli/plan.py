"""``omny plan IN -o OUT.omny``: find cut points and shard configurations, write ``.omny``.

Plans every feasible shard count from 2 to 8 unless ``--shards`` or ``--devices`` says
otherwise, stores the ``.omny`` metadata in the model and writes it to ``OUT``. Unnamed
nodes and values are given names first (onnx-ir ``NameFixPass``), since ``.omny`` refers to
cut points by name: the written graph may differ from ``IN`` in those names, in the types of
the cut tensors and graph outputs a model without ``value_info`` leaves out (written as the
metadata states them), and in the order of its nodes when they are not topologically sorted.

Prints a table of the chosen configurations: each stage's memory, FLOPs and share of the
model's compute, the bytes each cut sends per request and what bound each configuration
(``--json``: the metadata document, with these figures under ``"plan"``). The cuts are those
of the fastest plan that fits the devices (``--balance speed``, the default);
``--balance memory`` chooses the smallest largest-stage memory instead, ``--balance compute``
the smallest largest-stage compute with free transfers. An existing ``OUT`` is replaced only
with ``--force``. Exit
status 1 when no plan fits the request (the message names the stage, device and overflow),
2 for an option that is not valid.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    add_force_argument,
    add_progress_argument,
    add_shards_argument,
    error,
    existing_output,
    help_description,
    positive_int,
    print_json,
    progress_reporter,
)
from onnx_ir_multidevice._errors import PlanError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``plan`` subcommand."""
    parser = subparsers.add_parser(
        "plan",
        help="find cut points and shard configurations; write an .omny file",
        description=help_description(__doc__),
    )
    parser.add_argument("input", type=Path, help="an .onnx or .omny model file")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .omny file to write")
    add_shards_argument(
        parser, several=True, help="shard counts to plan, e.g. 2 4 or 2,4 (each must fit)"
    )
    parser.add_argument(
        "--devices",
        metavar="SIZE,SIZE...",
        help="device memory in pipeline order, e.g. 24GiB,8GiB,8GiB (stage k on device k)",
    )
    parser.add_argument(
        "--max-shard-mb",
        type=positive_int,
        metavar="N",
        help="largest memory of one shard, in MiB",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="planning value of a symbolic dimension, e.g. seq=512 (repeatable; batch=1 default)",
    )
    parser.add_argument(
        "--relaxed", action="store_true", help="also cut where small side activations cross"
    )
    parser.add_argument(
        "--static",
        action="store_true",
        help="pin every symbolic dim in the written model (at the --dim values, else example "
        "values) so that every cut has a fixed shape",
    )
    parser.add_argument(
        "--balance",
        choices=("speed", "memory", "compute"),
        default="speed",
        help="what the cuts optimise first, within the devices' memory: the estimated time of "
        "the slowest stage or transfer (speed, default), the largest stage memory, or the "
        "largest stage compute with free transfers",
    )
    parser.add_argument(
        "--flops-per-byte",
        type=float,
        default=None,
        metavar="F",
        help="price of a byte sent between stages, in FLOPs (device FLOP/s over link bytes/s; "
        "default 64; 0: free transfers)",
    )
    parser.add_argument(
        "--tensor-parallel",
        default=None,
        metavar="N|auto",
        help="also choose a tensor-parallel degree per stage, up to N (auto: up to the device "
        "count), for the devices given by --devices or the largest --shards; the fastest "
        "combination of stages and degrees that fits wins (default: pipeline stages only)",
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=0.2,
        help="share of device memory kept for the runtime (default 0.2)",
    )
    parser.add_argument("--name", help="model name in the metadata (default: the file name)")
    parser.add_argument("--json", action="store_true", help="print the metadata as JSON")
    add_force_argument(parser)
    add_progress_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan ``args.input`` and write ``args.output``."""
    # lazy: the implementation is imported when the command runs, so `omny --help` stays fast
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice._proto.files import load, save
    from onnx_ir_multidevice._util import plural
    from onnx_ir_multidevice.analysis.shapes import unknown_dim_names
    from onnx_ir_multidevice.planner.devices import parse_dims, parse_memory_sizes
    from onnx_ir_multidevice.planner.options import PlanOptions
    from onnx_ir_multidevice.planner.planning import (
        describe,
        plan_model,
        plan_summary,
        tensor_parallel_summary,
        unknown_dims_message,
        unknown_sizes_message,
    )

    try:  # every bad option is a usage error (exit 2), found before the model is read
        options = PlanOptions(
            devices=None if args.devices is None else parse_memory_sizes(args.devices),
            shards=args.shards,
            max_shard_size_mb=args.max_shard_mb,
            dims=parse_dims(args.dim),
            relaxed=args.relaxed,
            static=args.static,
            headroom=args.headroom,
            balance=args.balance,
            **({} if args.flops_per_byte is None else {"flops_per_byte": args.flops_per_byte}),
            name=args.name or args.input.stem,
            assign_names=True,
            tensor_parallel=_tensor_parallel(args.tensor_parallel),
        )
    except ValueError as exc:  # PlanError included
        error(str(exc))
        return EXIT_USAGE
    refusal = existing_output(args.output, args.force, source=args.input)
    if refusal is not None:
        error(refusal)
        return EXIT_USAGE
    # Allowed above: --force, or the input itself. An output that appears meanwhile is not.
    replace = args.force or os.path.lexists(args.output)
    progress = progress_reporter(args, "plan")
    progress(f"loading {args.input}")
    model = load(args.input)
    unknown = unknown_dim_names(model.graph, options.dims or {})
    if unknown:
        error(f"{args.input}: {unknown_dims_message(model.graph, unknown, flag='--dim')}")
        return EXIT_USAGE
    try:
        with warnings.catch_warnings():  # said once below, in command-line words
            warnings.simplefilter("ignore")
            result = plan_model(model, options, progress=progress)
    except PlanError as exc:
        error(f"{args.input}: {exc}")
        return EXIT_FINDINGS
    for caveat in unknown_sizes_message(result.unbound_dims, result.unknown_values, flag="--dim"):
        print(f"omny plan: warning: {caveat}", file=sys.stderr)
    omny.write(model, result.metadata)
    progress(f"writing {args.output}")
    save(model, args.output, overwrite=replace)  # refused above unless --force or in place
    if args.json:
        document = json.loads(result.metadata.to_json())
        document["plan"] = {
            "balance": result.balance,
            "planning_dims": dict(result.planning_dims),
            "configurations": plan_summary(result),
        }
        if result.tensor_parallel is not None:
            document["plan"]["tensor_parallel"] = tensor_parallel_summary(result)
        print_json(document)
        return EXIT_OK
    cuts = len(result.metadata.cut_points)  # those the file holds, not the candidates
    print(
        f"{args.input} -> {args.output}: {plural(cuts, 'cut point')}, "
        f"{plural(len(result.partitions), 'configuration')}"
    )
    print(describe(result))
    for n, why in result.skipped:
        print(f"{plural(n, 'shard')}: not feasible ({why})")
    return EXIT_OK


def _tensor_parallel(text: str | None) -> int | str | None:
    """``--tensor-parallel``: ``None``, ``"auto"`` or a degree (a bad one: ``PlanError``)."""
    if text is None or text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        from onnx_ir_multidevice._errors import PlanError

        raise PlanError(f"--tensor-parallel takes a degree or 'auto', got {text!r}") from None
