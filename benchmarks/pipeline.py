"""Benchmark the pipeline runtime against one onnxruntime session of the whole model.

All ratios are measured in the same run, on the same inputs, with the runs of the two sides
interleaved (so a busy neighbour slows both alike). Each side runs ``--repeats`` blocks (a
block: the median latency of ``requests / 2`` single requests, or the throughput of a stream
of ``--requests``); the best block of each side is reported, since noise only adds time:

1. **overhead**: latency of one request through the N stages (``Pipeline.run``, T threads per
   stage) / latency of one ``InferenceSession.run`` of the whole model with T threads.
   Target <= 1.05. Also the 1-stage pipeline (the runtime's own cost, no split).
2. **pipelining**: streaming throughput of 2 stages with 1 thread each (``Pipeline.map``)
   against **both baselines** of every speed-up benchmark here: the whole model on one
   stage's share of the cores (1 thread), one request after another (target >= 1.7 on a
   2-core machine; efficiency = speed-up / stages), and the whole model on all the cores the
   pipeline uses (2 intra-op threads, onnxruntime's default spinning): whether the pipeline
   beats onnxruntime's own threads. Per-stage utilisation from ``Pipeline.stats()``.
3. **ray** (``--ray``): streaming throughput of the same plan on the Ray backend (one actor
   per stage) / the in-process backend.

The model is a zoo ViT (``--model vit``, default) or BERT, sized so that one request takes
tens of milliseconds on one core, cut with ``_split.split_at`` after the middle layer
(``layer.<ceil(L/2)-1>.out``: the layers are identical, the embedding and the head are small),
so the two stages are balanced; their times alone are reported.

Usage: python benchmarks/pipeline.py [--model vit|bert] [--requests 40] [--repeats 5]
       [--ray] [--cpus 0,1] [--timeline FILE.png] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnx_ir_multidevice._split import split_at
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.testing import zoo


def build(name: str, layers: int) -> ir.Model:
    if name == "vit":
        return zoo.vit(layers=layers, hidden=256, patch=8, image=128)
    if name == "bert":
        return zoo.bert(layers=layers, hidden=256, heads=4, seq=128)
    raise SystemExit(f"unknown model {name!r}")


def session(model: ir.Model, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(ir.to_proto(model).SerializeToString(), options)


def stage_times(stages: list[ir.Model]) -> list[float]:
    """Median ms of each stage run alone on one thread (how balanced the cut is)."""
    with Pipeline(stages, intra_op_num_threads=1) as pipe:
        inputs = pipe.example_inputs({"batch": 1})
        for _ in range(3):
            pipe.run(inputs)
        pipe.reset_stats()
        for _ in range(10):
            pipe.run(inputs)
        return [s.p50_ms for s in pipe.stats().stages]


def latency(fn, inputs, n: int) -> float:
    """Median seconds of ``fn(inputs)`` over ``n`` calls."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn(inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def stream(fn_map, inputs, k: int) -> float:
    """Requests per second of ``fn_map`` over ``k`` copies of ``inputs``."""
    start = time.perf_counter()
    count = sum(1 for _ in fn_map([inputs] * k))
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit", choices=("vit", "bert"))
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--cut", help="cut tensor (default: the middle layer's output)")
    parser.add_argument("--requests", type=int, default=40, help="requests per stream")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="T for the overhead test")
    parser.add_argument("--ray", action="store_true", help="also measure the Ray backend")
    parser.add_argument("--cpus", help="pin the process to these CPUs first (e.g. 0,1)")
    parser.add_argument("--timeline", help="save the streaming timeline picture here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    cpus = len(os.sched_getaffinity(0))

    model = build(args.model, args.layers)
    outputs = [v.name for v in model.graph.outputs]
    cut = args.cut or f"layer.{(args.layers + 1) // 2 - 1}.out"
    stages = split_at(model, [cut])
    balance = stage_times(stages)
    whole = session(model, 1)
    whole_t = session(model, args.threads) if args.threads != 1 else whole
    whole_all = session(model, 2)  # all the cores the 2 x 1-thread pipeline uses
    pipe = Pipeline(stages, outputs=outputs, intra_op_num_threads=args.threads)
    pipe1 = Pipeline(stages, outputs=outputs, intra_op_num_threads=1) if args.threads != 1 else pipe
    single = Pipeline(model, shards=1, intra_op_num_threads=args.threads)
    inputs = pipe.example_inputs({"batch": 1})

    def whole_run(x):
        return whole_t.run(None, x)

    def whole_map(items):
        for x in items:
            yield whole.run(None, x)

    def whole_all_map(items):
        for x in items:
            yield whole_all.run(None, x)

    for _ in range(3):  # warm up every session
        whole_run(inputs), whole.run(None, inputs), pipe.run(inputs), pipe1.run(inputs)
        whole_all.run(None, inputs)
        single.run(inputs)

    n = max(args.requests // 2, 10)
    rows = {k: [] for k in ("whole", "pipeline", "single", "whole_tp", "all_tp", "pipe_tp")}
    for _ in range(args.repeats):
        rows["whole"].append(latency(whole_run, inputs, n))
        rows["pipeline"].append(latency(pipe.run, inputs, n))
        rows["single"].append(latency(single.run, inputs, n))
        rows["whole_tp"].append(stream(whole_map, inputs, args.requests))
        rows["all_tp"].append(stream(whole_all_map, inputs, args.requests))
        pipe1.reset_stats()
        rows["pipe_tp"].append(stream(pipe1.map, inputs, args.requests))
    stats = pipe1.stats()
    # Best block of each side (noise only ever adds time): lowest latency, highest throughput.
    med = {k: (max if k.endswith("_tp") else min)(v) for k, v in rows.items()}
    speedup = med["pipe_tp"] / med["whole_tp"]
    speedup_all = med["pipe_tp"] / med["all_tp"]
    result = {
        "model": f"zoo.{args.model}(layers={args.layers}, hidden=256) cut at {cut}",
        "stage_ms_alone": balance,
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
        "cpus": cpus,
        "onnxruntime": ort.__version__,
        "overhead": {
            "threads": args.threads,
            "whole_ms": med["whole"] * 1e3,
            "pipeline_2_stages_ms": med["pipeline"] * 1e3,
            "pipeline_1_stage_ms": med["single"] * 1e3,
            "ratio_2_stages": med["pipeline"] / med["whole"],
            "ratio_1_stage": med["single"] / med["whole"],
            "target": "<= 1.05",
        },
        "pipelining": {
            "whole_1_thread_rps": med["whole_tp"],
            "whole_2_threads_rps": med["all_tp"],
            "pipeline_2x1_thread_rps": med["pipe_tp"],
            "speedup": speedup,
            "speedup_vs_2_threads": speedup_all,
            "efficiency": speedup / 2,
            "stage_mean_ms": [s.mean_ms for s in stats.stages],
            "stage_utilisation": [s.utilisation for s in stats.stages],
            "target": ">= 1.7",
        },
    }
    if args.timeline:
        import matplotlib

        matplotlib.use("Agg")
        ax = stats.plot_timeline(max_requests=12)
        ax.figure.savefig(args.timeline, dpi=120, bbox_inches="tight")
    pipe.close(), pipe1.close(), single.close()

    if args.ray:
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        init_s = time.perf_counter() - start
        with (
            Pipeline(stages, outputs=outputs, intra_op_num_threads=1, backend="ray") as rpipe,
            Pipeline(stages, outputs=outputs, intra_op_num_threads=1) as tpipe,
        ):
            for _ in range(3):
                rpipe.run(inputs), tpipe.run(inputs)
            ray_tp, thread_tp, ray_lat, thread_lat = [], [], [], []
            for _ in range(args.repeats):
                ray_tp.append(stream(rpipe.map, inputs, args.requests))
                thread_tp.append(stream(tpipe.map, inputs, args.requests))
                ray_lat.append(latency(rpipe.run, inputs, n))
                thread_lat.append(latency(tpipe.run, inputs, n))
        ray.shutdown()
        result["ray"] = {
            "version": ray.__version__,
            "init_s": init_s,
            "ray_rps": max(ray_tp),
            "thread_rps": max(thread_tp),
            "throughput_ratio": max(ray_tp) / max(thread_tp),
            "ray_latency_ms": min(ray_lat) * 1e3,
            "thread_latency_ms": min(thread_lat) * 1e3,
        }

    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    o, p = result["overhead"], result["pipelining"]
    print(f"{result['model']}, inputs {result['inputs']}, {cpus} CPUs, ort {ort.__version__}")
    print("stages alone: " + ", ".join(f"{ms:.1f} ms" for ms in result["stage_ms_alone"]))
    print(
        f"overhead ({o['threads']} thread(s)): whole {o['whole_ms']:.2f} ms, 2 stages "
        f"{o['pipeline_2_stages_ms']:.2f} ms (x{o['ratio_2_stages']:.3f}), 1 stage "
        f"{o['pipeline_1_stage_ms']:.2f} ms (x{o['ratio_1_stage']:.3f})  target <= 1.05"
    )
    print(
        f"pipelining: whole on 1 thread {p['whole_1_thread_rps']:.1f} req/s, 2 stages x 1 "
        f"thread {p['pipeline_2x1_thread_rps']:.1f} req/s: speed-up x{p['speedup']:.2f}, "
        f"efficiency {p['efficiency']:.0%}  target >= 1.7"
    )
    print(
        f"  against the whole model on all the pipeline's cores (2 threads) "
        f"{p['whole_2_threads_rps']:.1f} req/s: x{p['speedup_vs_2_threads']:.2f} "
        f"({'the pipeline' if p['speedup_vs_2_threads'] > 1 else 'onnxruntime threads'} faster)"
    )
    print(
        "  stages: "
        + ", ".join(
            f"{ms:.1f} ms/req {u:.0%} busy"
            for ms, u in zip(p["stage_mean_ms"], p["stage_utilisation"], strict=True)
        )
    )
    if "ray" in result:
        r = result["ray"]
        print(
            f"ray {r['version']} (init {r['init_s']:.1f} s): {r['ray_rps']:.1f} req/s vs "
            f"in-process {r['thread_rps']:.1f} req/s (x{r['throughput_ratio']:.2f}); latency "
            f"{r['ray_latency_ms']:.1f} ms vs {r['thread_latency_ms']:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    raise SystemExit(main())
