"""Benchmark `save_split` (split + write stage files) against one `onnx_ir.save` of the model.

Targets (issue 4): split time <= 1.5x the time of saving the whole model once, and peak
memory of the split <= 1.3x the model's weight bytes.

Measured on a synthetic residual chain (`zoo.synthetic_chain`) with ~200 MB of float32
weights, in three settings:

1. in memory: the model was built in this process; time of `ir.save` (external data) vs
   `save_split(..., weights="copy")`, and the tracemalloc peak of each (Python and NumPy
   allocations: what the split itself allocates on top of the model);
2. from a file, like `omny split model.onnx OUT --shards N`: a fresh subprocess loads the
   model (external data, memory-mapped) and splits it; its peak RSS growth (which would
   count the mapped weight pages it reads) relative to the weight bytes;
3. the same subprocess doing a plain load + `ir.save` to another folder, as the baseline.

4. graph-heavy: a 50 000-node chain (`zoo.synthetic_chain(50000)`, few weight bytes per
   node) planned with `plan(m, shards=[shards])` and `omny.write`; `ir.save` vs `save_split`
   in memory, with the ratio and PASS/MISS against the 1.5x target.

Usage: python benchmarks/split.py [--width 1024] [--blocks 48] [--shards 4] [--nodes 50000]
[--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc

import onnx_ir as ir

from onnx_ir_multidevice._split import save_split, split
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.testing import zoo

MB = 1 << 20


def _weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values())


def _metadata(blocks: int, shards: int) -> OmnyMetadata:
    cuts = [f"block.{(blocks * k) // shards - 1}.out" for k in range(1, shards)]
    return OmnyMetadata(
        cut_points=tuple(CutPoint(c, c, c, (1,)) for c in cuts),
        sharding=Sharding(configurations=(ShardConfiguration(shards, (1,) * shards, tuple(cuts)),)),
    )


def _peak(fn) -> int:
    """tracemalloc peak (bytes) of one call of ``fn``."""
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _interleaved(fns: dict[str, object], repeat: int) -> dict[str, list[float]]:
    """Seconds of each function, run alternately ``repeat`` times (disk noise hits all)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            times[name].append(time.perf_counter() - start)
    return times


def _in_memory(model: ir.Model, metadata: OmnyMetadata, tmp: str, shards: int, repeat: int):
    weights = _weight_bytes(model)

    def save_whole() -> None:
        ir.save(model, os.path.join(tmp, "whole.onnx"), external_data="whole.onnx.data")

    def split_all() -> None:
        save_split(model, os.path.join(tmp, "split"), shards, metadata=metadata, force=True)

    def split_only() -> None:
        split(model, shards, metadata=metadata)

    times = _interleaved({"save": save_whole, "split": split_all, "split_only": split_only}, repeat)
    result = {}
    for name, values in times.items():
        result[f"{name}_s_min"] = min(values)
        result[f"{name}_s_median"] = statistics.median(values)
    result["time_ratio_min"] = result["split_s_min"] / result["save_s_min"]
    result["time_ratio_median"] = result["split_s_median"] / result["save_s_median"]
    result["save_tracemalloc_peak_ratio"] = _peak(save_whole) / weights
    result["split_tracemalloc_peak_ratio"] = _peak(split_all) / weights
    result["split_tracemalloc_peak_mb"] = _peak(split_all) / MB
    return result


_CHILD = textwrap.dedent(
    """
    import resource, sys, time
    import onnx_ir as ir
    from onnx_ir_multidevice._proto.files import load
    from onnx_ir_multidevice._split import save_split, split
    path, out, shards, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    model = load(path)
    if mode == "save":
        ir.save(model, out + "/whole.onnx", external_data="whole.onnx.data")
    else:
        save_split(model, out + "/split", shards)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(seconds, (peak - base) * 1024)
    """
)


def _child(path: str, out: str, shards: int, mode: str) -> tuple[float, int]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, path, out, str(shards), mode],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        raise RuntimeError(f"benchmark child ({mode}) failed:\n{result.stderr}")
    seconds, rss = result.stdout.split()
    return float(seconds), int(rss)


TARGET_RATIO = 1.5


def _graph_heavy(nodes: int, shards: int, tmp: str, repeat: int) -> dict[str, float]:
    """``ir.save`` vs ``save_split`` (min / median seconds) on a ``nodes``-node planned chain."""
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice.planner.planning import plan

    model = zoo.synthetic_chain(nodes)
    omny.write(model, plan(model, shards=[shards]))

    def save_whole() -> None:
        ir.save(model, os.path.join(tmp, "graph.onnx"), external_data="graph.onnx.data")

    def split_all() -> None:
        save_split(model, os.path.join(tmp, "graph-split"), shards, force=True)

    def split_only() -> None:
        split(model, shards)

    times = _interleaved({"save": save_whole, "split": split_all, "split_only": split_only}, repeat)
    result = {"nodes": float(nodes)}
    for name, values in times.items():
        result[f"{name}_s_min"] = min(values)
        result[f"{name}_s_median"] = statistics.median(values)
    result["time_ratio_min"] = result["split_s_min"] / result["save_s_min"]
    result["time_ratio_median"] = result["split_s_median"] / result["save_s_median"]
    return result


def _verdict(ratio: float) -> str:
    return "PASS" if ratio <= TARGET_RATIO else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=48)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=50_000, help="graph-heavy case size")
    parser.add_argument("--scaling", action="store_true", help="also time split() at 5k-50k nodes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    model = zoo.synthetic_chain(args.blocks * 4, width=args.width)
    weights = _weight_bytes(model)
    metadata = _metadata(args.blocks, args.shards)
    results: dict[str, object] = {"weight_mb": weights / MB, "shards": args.shards}
    tmp = tempfile.mkdtemp(prefix="omny-bench-split-")
    try:
        results.update(_in_memory(model, metadata, tmp, args.shards, args.repeat))
        # From a file, in fresh processes.
        from onnx_ir_multidevice import omny

        omny.write(model, metadata)
        source = os.path.join(tmp, "src")
        os.mkdir(source)
        path = os.path.join(source, "model.onnx")
        ir.save(model, path, external_data="model.onnx.data")
        del model
        gc.collect()
        modes = ("save", "copy")
        runs: dict[str, list[tuple[float, int]]] = {mode: [] for mode in modes}
        for _ in range(args.repeat):
            for mode in modes:
                out = os.path.join(tmp, f"out-{mode}")
                shutil.rmtree(out, ignore_errors=True)
                os.mkdir(out)
                runs[mode].append(_child(path, out, args.shards, mode))
        for mode in modes:
            results[f"file_{mode}_s_median"] = statistics.median(t for t, _ in runs[mode])
            results[f"file_{mode}_rss_ratio"] = max(r for _, r in runs[mode]) / weights
        results["file_time_ratio_copy_median"] = (
            results["file_copy_s_median"] / results["file_save_s_median"]
        )
        results["graph_heavy"] = _graph_heavy(args.nodes, args.shards, tmp, args.repeat)
        if args.scaling:
            results["scaling"] = _scaling()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(results, indent=2))
        return
    r = results
    print(f"synthetic chain: {args.blocks} blocks of {args.width}x{args.width}, "
          f"{weights / MB:.0f} MiB of weights, {args.shards} shards, "
          f"{args.repeat} runs")  # fmt: skip
    print("model in memory (min / median seconds):")
    print(f"  ir.save whole model     {r['save_s_min']:6.3f} / {r['save_s_median']:6.3f}   "
          f"tracemalloc peak {r['save_tracemalloc_peak_ratio']:.3f}x weights")  # fmt: skip
    print(f"  save_split (copy)       {r['split_s_min']:6.3f} / {r['split_s_median']:6.3f}   "
          f"tracemalloc peak {r['split_tracemalloc_peak_ratio']:.3f}x weights "
          f"({r['split_tracemalloc_peak_mb']:.1f} MiB)")  # fmt: skip
    print(f"  split() only, no write  {r['split_only_s_min']:6.3f} / "
          f"{r['split_only_s_median']:6.3f}")  # fmt: skip
    print(f"  split/save time ratio   {r['time_ratio_min']:.2f}x min, "
          f"{r['time_ratio_median']:.2f}x median (target <= 1.5x) "
          f"{_verdict(r['time_ratio_median'])}")  # fmt: skip
    print("from a file, fresh process: load + write (median seconds, peak RSS growth):")
    for mode, label in (("save", "ir.save whole"), ("copy", "save_split")):
        print(f"  {label:<22} {r[f'file_{mode}_s_median']:7.3f} s   "
              f"{r[f'file_{mode}_rss_ratio']:.3f}x weights")  # fmt: skip
    g = r["graph_heavy"]
    print(f"graph-heavy: synthetic chain of {int(g['nodes'])} nodes, planned, {args.shards} shards "
          "(min / median seconds):")  # fmt: skip
    print(f"  ir.save whole model     {g['save_s_min']:6.3f} / {g['save_s_median']:6.3f}")
    print(f"  save_split              {g['split_s_min']:6.3f} / {g['split_s_median']:6.3f}")
    print(f"  split() only, no write  {g['split_only_s_min']:6.3f} / "
          f"{g['split_only_s_median']:6.3f}")  # fmt: skip
    print(f"  split/save time ratio   {g['time_ratio_min']:.2f}x min, "
          f"{g['time_ratio_median']:.2f}x median (target <= {TARGET_RATIO}x) "
          f"{_verdict(g['time_ratio_median'])}")  # fmt: skip
    if args.scaling:
        print("split() time against graph size (synthetic chain, width 8):")
        for nodes, seconds in r["scaling"]:
            print(f"  {nodes:>6} nodes  {seconds:6.3f} s  ({seconds / nodes * 1e6:.1f} us/node)")


def _scaling() -> list[tuple[int, float]]:
    rows = []
    for nodes in (5_000, 20_000, 50_000):
        model = zoo.synthetic_chain(nodes, width=8)
        blocks = nodes // 4
        metadata = _metadata(blocks, 4)
        start = time.perf_counter()
        split(model, 4, metadata=metadata)
        rows.append((nodes, time.perf_counter() - start))
    return rows


if __name__ == "__main__":
    main()
