"""Plan time against onnx_ir.load on synthetic models of ~3k to ~52k nodes.

Two shapes of graph, each written to a temporary file, loaded with ``onnx_ir.load`` (timed),
then planned with ``plan_model`` (cut points, memory model, partitions for 2..8 shards; timed)
on the loaded model, best of ``--repeat`` runs each, in CPU time (``time.process_time``: the
machine's cores are shared, and CPU time of a single-threaded step varies less than wall time):

* ``chain``: ``zoo.synthetic_chain(n)``, a residual MLP chain whose every value is typed;
* ``transformer``: ``zoo.synthetic_transformer(layers)``, shaped like a dynamo export: symbolic
  ``batch``/``seq`` dims and no ``value_info`` (residuals, attention with a mask input,
  LayerNorm, GELU, tied embeddings), so every size comes from the shape layer. Planned
  without ``--dim`` (the sizes that depend on ``seq`` are unknown) unless ``--dim seq=N``.

Prints per-node times, the plan/load ratio (target <= 0.5 at the largest size) and the growth
of per-node plan time from the smallest to the largest model of each shape (target <= 1.3x),
and for every configuration the ratio of its largest stage to the lower bound
``max(total / N, largest single segment)``.

``--shards 2,4,8`` plans those shard counts only (default: every count from 2 to 8).

Usage: ``python benchmarks/plan.py [--models chain,transformer] [--repeat 3] [--relaxed]
[--chain-sizes 3000,13000,50000] [--transformer-sizes 13000,52000] [--dim seq=128]
[--shards 2,4,8]``
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import warnings
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.testing import zoo

TRANSFORMER_LAYER_NODES = 34
"""Nodes per layer of ``zoo.synthetic_transformer`` (plus 16 for embeddings, mask, head)."""


def best_of(repeat, func):
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = func()
        best = min(best, time.process_time() - start)
    return best, result


def lower_bound_ratios(result):
    memory = result.memory
    whole = memory.whole().total_bytes
    singles = memory.total_bytes(range(memory.num_segments), range(1, memory.num_segments + 1))
    ratios = {}
    for found in result.partitions:
        bound = max(whole / found.num_stages, int(singles.max()))
        ratios[found.num_stages] = found.bottleneck_bytes / bound
    return ratios


def build(kind: str, nodes: int) -> ir.Model:
    """The benchmark model of ``kind`` with about ``nodes`` nodes."""
    if kind == "chain":
        return zoo.synthetic_chain(nodes)
    layers = max(1, round((nodes - 16) / TRANSFORMER_LAYER_NODES))
    return zoo.synthetic_transformer(layers)


def measure(kind, sizes, args, folder):
    dims = dict(item.split("=") for item in args.dim)
    dims = {name: int(value) for name, value in dims.items()}
    shards = [int(n) for n in args.shards.split(",")] if args.shards else None
    rows = []
    for n in sizes:
        path = Path(folder) / f"{kind}_{n}.onnx"
        ir.save(build(kind, n), path)
        load_s, model = best_of(args.repeat, lambda p=path: ir.load(p))
        with warnings.catch_warnings():  # unbound dims: lower bounds, said once per plan
            warnings.simplefilter("ignore")
            plan_s, result = best_of(
                args.repeat,
                lambda m=model: plan_model(
                    m, relaxed=args.relaxed, dims=dims or None, shards=shards
                ),
            )
        rows.append((len(model.graph), load_s, plan_s, result))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="chain,transformer")
    parser.add_argument("--chain-sizes", "--sizes", dest="chain_sizes", default="3000,13000,50000")
    parser.add_argument("--transformer-sizes", default="13000,52000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--relaxed", action="store_true")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N")
    parser.add_argument("--shards", help="shard counts to plan (default: 2 to 8)")
    args = parser.parse_args()
    sizes = {
        "chain": [int(s) for s in args.chain_sizes.split(",")],
        "transformer": [int(s) for s in args.transformer_sizes.split(",")],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models.split(","):
            rows = measure(kind, sizes[kind], args, tmp)
            print(f"{kind}:")
            print(
                f"{'nodes':>7} {'cuts':>6} {'load ms':>9} {'plan ms':>9} {'plan us/node':>13} "
                f"{'plan/load':>9}  largest stage / lower bound (N: ratio)"
            )
            for n, load_s, plan_s, result in rows:
                ratios = "  ".join(f"{k}:{v:.3f}" for k, v in lower_bound_ratios(result).items())
                print(
                    f"{n:>7} {len(result.analysis.candidates):>6} {load_s * 1e3:>9.1f} "
                    f"{plan_s * 1e3:>9.1f} {plan_s / n * 1e6:>13.2f} {plan_s / load_s:>9.2f}  "
                    f"{ratios}"
                )
            (n0, _, p0, _), (n1, _, p1, _) = rows[0], rows[-1]
            growth = (p1 / n1) / (p0 / n0)
            print(
                f"per-node plan time growth {n0} -> {n1}: {growth:.2f}x (target <= 1.3x); "
                f"plan/load at {n1}: {rows[-1][2] / rows[-1][1]:.2f} (target <= 0.5)"
            )


if __name__ == "__main__":
    main()
