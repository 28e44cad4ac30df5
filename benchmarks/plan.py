"""Plan time against onnx_ir.load on synthetic chains of ~3k, ~13k and ~50k nodes.

For each size: write ``zoo.synthetic_chain(n)`` to a temporary file, time ``onnx_ir.load`` of
it, then time ``plan_model`` (cut points, memory model, partitions for 2..8 shards) on the
loaded model, best of ``--repeat`` runs each. Prints per-node times, the plan/load ratio
(target <= 0.5 at 50k) and the growth of per-node plan time from the smallest to the largest
model (target <= 1.3x), and for every configuration the ratio of its largest stage to the
lower bound ``max(total / N, largest single segment)``.

Usage: ``python benchmarks/plan.py [--sizes 3000,13000,50000] [--repeat 3] [--relaxed]``
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice import zoo
from onnx_ir_multidevice.planner.planning import plan_model


def best_of(repeat, func):
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - start)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3000,13000,50000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--relaxed", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"chain_{n}.onnx"
            ir.save(zoo.synthetic_chain(n), path)
            load_s, model = best_of(args.repeat, lambda p=path: ir.load(p))
            plan_s, result = best_of(
                args.repeat, lambda m=model: plan_model(m, relaxed=args.relaxed)
            )
            rows.append((n, load_s, plan_s, result))
    print(
        f"{'nodes':>7} {'cuts':>6} {'load ms':>9} {'plan ms':>9} {'plan us/node':>13} "
        f"{'plan/load':>9}  largest stage / lower bound (N: ratio)"
    )
    for n, load_s, plan_s, result in rows:
        ratios = "  ".join(f"{k}:{v:.3f}" for k, v in lower_bound_ratios(result).items())
        print(
            f"{n:>7} {len(result.analysis.candidates):>6} {load_s * 1e3:>9.1f} "
            f"{plan_s * 1e3:>9.1f} {plan_s / n * 1e6:>13.2f} {plan_s / load_s:>9.2f}  {ratios}"
        )
    (n0, _, p0, _), (n1, _, p1, _) = rows[0], rows[-1]
    growth = (p1 / n1) / (p0 / n0)
    print(
        f"per-node plan time growth {n0} -> {n1}: {growth:.2f}x (target <= 1.3x); "
        f"plan/load at {n1}: {rows[-1][2] / rows[-1][1]:.2f} (target <= 0.5)"
    )


if __name__ == "__main__":
    main()
