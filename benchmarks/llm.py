"""The whole job on a billion-parameter decoder: plan, split, verify and run, in bounded memory.

The model is the TinyLlama-1.1B-shaped Llama decoder with a KV cache
(``onnx_ir_multidevice.testing.llama``, preset ``tinyllama-1.1b``, ``kv_cache=True``: 22 layers,
hidden 2048, 1.1 B float32 parameters, 4.4 GB of weights in external data), written with
``write_llama`` when the path does not exist. Every step runs in a fresh child process (so a
step's peak resident memory is its own, read from ``/proc/self/status``: ``VmHWM``, reset
through ``/proc/self/clear_refs`` where a growth is measured), one child at a time, and is
measured against a baseline taken in the same run:

1. **plan** for 2, 3 and 4 shards (``plan_model``, relaxed cuts: the rotary ``cos``/``sin``
   rows cross every layer, see the notes) against ``onnx_ir.load`` of the same file (external
   data stays lazy); best of ``--repeat``.
2. **split**: ``save_split`` of the 2-shard plan into stage folders against copying the
   model's ``.data`` file once (``shutil.copyfile``), alternated, best of ``--copies``; peak
   RSS growth of the split over the weight bytes (target <= 0.10); every stage holding more
   than 2 GiB of weights must use external data.
3. **verify**: ``verify`` of the whole model against the 2 chained stages on onnxruntime;
   peak RSS of the process over the weight bytes (target <= 1.5).
4. **run**: prefill (sequence ``--seq``, empty cache) and decode (one token after a cache of
   ``--seq`` tokens: the ``past_key_values.*`` inputs / ``present.*`` outputs) through the
   2-stage pipeline (``Pipeline`` on the split folder, one onnxruntime thread per stage) against
   the whole model in one onnxruntime session (default threads: both cores): latency of one
   request, and throughput of a stream of independent requests (``Pipeline.map`` against
   back-to-back runs).
5. **memory**: predicted against measured memory of every stage of the 2, 3 and 4-shard plans
   (``memory_accuracy.measure_model``: a child per stage, arena on and off); the worst
   predicted/measured ratio.

Each step says where its time goes (load, planning, writing, session creation, inference).
The report ends with every figure against its target. ``--only`` runs some steps.

Usage::

    python benchmarks/llm.py [/work/llm-data/tinyllama-1.1b-kv.onnx] [--scratch DIR]
        [--only plan,split,verify,run,memory] [--seq 128] [--requests 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

GIB = 1 << 30
MIB = 1 << 20
DIMS = {"batch": 1, "seq": 128, "past_seq": 1, "total_seq": 129}
"""Planning dims: a 128-token prefill after one cached token (verify feeds these shapes)."""

STEPS = ("plan", "split", "verify", "run", "memory")


# ---------------------------------------------------------------------------------------------
# Memory of this process


def status() -> dict[str, int]:
    """``VmRSS``, ``VmHWM``, ``RssAnon`` and ``RssFile`` of this process, in bytes."""
    found = {}
    with open("/proc/self/status", encoding="ascii") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak() -> None:
    """Make ``VmHWM`` the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as file:
        file.write("5")


def weight_bytes(path: Path) -> int:
    data = path.with_name(path.name + ".data")
    return data.stat().st_size


def _dims(args) -> dict[str, int]:
    return {**DIMS, "seq": args.seq, "total_seq": args.seq + DIMS["past_seq"]}


def _planned(path: Path, shards: int, dims: dict[str, int]):
    from onnx_ir_multidevice import load
    from onnx_ir_multidevice.planner.planning import plan_model

    model = load(path)
    return model, plan_model(model, shards=[shards], dims=dims, relaxed=True)


# ---------------------------------------------------------------------------------------------
# Steps, each run in a child process (``--job``)


def job_plan(args) -> dict:
    import gc

    import onnx_ir as ir

    from onnx_ir_multidevice import load
    from onnx_ir_multidevice.planner.planning import plan_model

    path, dims = Path(args.path), _dims(args)

    def best(fn):
        times = []
        result = None
        for _ in range(args.repeat):
            gc.collect()
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
        return min(times), result

    ir_load, _ = best(lambda: ir.load(path))
    omny_load, model = best(lambda: load(path))
    plans = {}
    for n in (2, 3, 4):
        seconds, result = best(lambda n=n: plan_model(model, shards=[n], dims=dims, relaxed=True))
        found = result.partitions[0]
        plans[n] = {
            "seconds": seconds,
            "ratio_to_ir_load": seconds / ir_load,
            "cuts": [c.value.name for c in found.cuts],
            "stage_mib": [m.total_mb for m in found.memory],
        }
    return {
        "nodes": len(model.graph),
        "ir_load_seconds": ir_load,
        "omny_load_seconds": omny_load,
        "plans": plans,
        "peak_rss_bytes": status()["VmHWM"],
    }


def job_split(args) -> dict:
    import onnx

    from onnx_ir_multidevice import save_split

    path = Path(args.path)
    model, result = _planned(path, 2, _dims(args))
    out = Path(args.out)
    reset_peak()
    base = status()["VmRSS"]
    start = time.perf_counter()
    manifest = save_split(model, out, 2, metadata=result.metadata, force=True)
    seconds = time.perf_counter() - start
    growth = status()["VmHWM"] - base
    stages = []
    for entry in manifest["stages"]:
        file = out / entry["file"]
        proto = onnx.load(file, load_external_data=False)
        external = sum(1 for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
        data = sum((out / name).stat().st_size for name in entry["external_data"])
        stages.append({
            "file": entry["file"],
            "model_bytes": file.stat().st_size,
            "data_bytes": data,
            "external_initializers": external,
            "embedded_initializers": len(proto.graph.initializer) - external,
        })  # fmt: skip
    return {"seconds": seconds, "rss_growth_bytes": growth, "stages": stages}


def job_copy(args) -> dict:
    source = Path(args.path)
    source = source.with_name(source.name + ".data")
    target = Path(args.out)
    start = time.perf_counter()
    shutil.copyfile(source, target)
    seconds = time.perf_counter() - start
    target.unlink()
    return {"seconds": seconds, "bytes": source.stat().st_size}


def job_verify(args) -> dict:
    from onnx_ir_multidevice.runtime.verification import verify

    dims = _dims(args)
    start = time.perf_counter()
    model, result = _planned(Path(args.path), 2, dims)
    plan_seconds = time.perf_counter() - start
    before = status()
    start = time.perf_counter()
    report = verify(model, 2, metadata=result.metadata, dims=dims)
    seconds = time.perf_counter() - start
    after = status()
    return {
        "ok": report.ok,
        "load_and_plan_seconds": plan_seconds,
        "seconds": seconds,
        "rss_before_bytes": before["VmRSS"],
        "peak_rss_bytes": after["VmHWM"],
        "report": report.to_dict(),
        "worst_abs_diff": max(o.max_abs_diff for o in report.outputs),
    }


def _requests(seq: int, past: int, count: int, seed: int = 0) -> list[dict]:
    """Prefill (``past == 0``) or decode requests for the 1.1B decoder with a KV cache."""
    import numpy as np

    from onnx_ir_multidevice.testing.llama import TINYLLAMA_1_1B as c

    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        feeds = {
            "input_ids": rng.integers(0, c.vocab, size=(1, seq), dtype=np.int64),
            "attention_mask": np.ones((1, past + seq), dtype=np.int64),
            "position_ids": np.arange(past, past + seq, dtype=np.int64)[None],
        }
        for i in range(c.layers):
            for kind in ("key", "value"):
                cache = rng.standard_normal((1, c.kv_heads, past, c.head_dim), dtype=np.float32)
                feeds[f"past_key_values.{i}.{kind}"] = cache
        result.append(feeds)
    return result


def _timed(fn, items) -> list[float]:
    times = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - start)
    return times


def job_run(args) -> dict:
    """Prefill and decode, whole model (``--side whole``) or 2-stage pipeline (``pipeline``)."""
    from onnx_ir_multidevice.runtime import Pipeline
    from onnx_ir_multidevice.runtime.sessions import ModelSession

    prefill = _requests(args.seq, 0, args.requests, seed=1)
    decode = _requests(1, args.seq, args.requests, seed=2)
    start = time.perf_counter()
    if args.side == "whole":
        owner = ModelSession(args.path)
        session = owner.session

        def run(feeds):
            return session.run(None, feeds)

        def stream(items):
            return [run(x) for x in items]

    else:
        pipe = Pipeline(args.out, intra_op_num_threads=1)
        run = pipe.run

        def stream(items):
            return list(pipe.map(items))

    create = time.perf_counter() - start
    after_create = status()
    result = {"side": args.side, "create_seconds": create, "rss_after_create_bytes": after_create["VmRSS"]}
    for name, items in (("prefill", prefill), ("decode", decode)):
        run(items[0])  # warm-up: first-run allocations, thread start
        latencies = _timed(run, items)
        start = time.perf_counter()
        stream(items)
        seconds = time.perf_counter() - start
        tokens = items[0]["input_ids"].shape[1]
        result[name] = {
            "latency_seconds": statistics.median(latencies),
            "throughput_rps": len(items) / seconds,
            "tokens_per_second": len(items) * tokens / seconds,
        }
    if args.side == "pipeline":
        stats = pipe.stats()
        result["stage_mean_ms"] = [s.mean_ms for s in stats.stages]
        pipe.close()
    result["peak_rss_bytes"] = status()["VmHWM"]
    return result


def job_memory(args) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import memory_accuracy

    rows, skipped = memory_accuracy.measure_model(
        Path(args.path).stem, Path(args.path), _dims(args), [2, 3, 4], args.scratch, lambda m: None
    )
    return {"rows": rows, "skipped": skipped}


JOBS = {
    "plan": job_plan,
    "split": job_split,
    "copy": job_copy,
    "verify": job_verify,
    "run": job_run,
    "memory": job_memory,
}


# ---------------------------------------------------------------------------------------------
# Driver


def child(args, job: str, **extra) -> dict:
    """Run one job in a fresh interpreter and return its JSON result and wall time."""
    command = [sys.executable, os.path.abspath(__file__), args.path, "--job", job,
               "--scratch", args.scratch, "--seq", str(args.seq), "--repeat", str(args.repeat),
               "--requests", str(args.requests)]  # fmt: skip
    for key, value in extra.items():
        command += [f"--{key}", str(value)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"job {job} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["child_wall_seconds"] = wall
    return result


def verdict(value: float, target: float, at_most: bool = True) -> str:
    ok = value <= target if at_most else value >= target
    return "PASS" if ok else "MISS"


def ensure_model(path: Path) -> None:
    if path.exists():
        return
    from onnx_ir_multidevice.testing import llama

    print(f"writing {path} (TinyLlama-1.1B shape, KV cache; 4.4 GB of weights)...", flush=True)
    config = dataclasses.replace(llama.TINYLLAMA_1_1B, kv_cache=True)
    llama.write_llama(path, config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="/work/llm-data/tinyllama-1.1b-kv.onnx")
    parser.add_argument("--scratch", default="/work/llm-data/scratch")
    parser.add_argument("--only", default=",".join(STEPS))
    parser.add_argument("--seq", type=int, default=128, help="prefill length (and cache length)")
    parser.add_argument("--requests", type=int, default=4, help="requests per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for load/plan")
    parser.add_argument("--copies", type=int, default=2, help="split/copy rounds")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--job", choices=sorted(JOBS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        print(json.dumps(JOBS[args.job](args)))
        return

    path = Path(args.path)
    ensure_model(path)
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    steps = args.only.split(",")
    weights = weight_bytes(path)
    split_dir = Path(args.scratch) / "llm-split-2"
    figures: dict = {"model": str(path), "weight_bytes": weights, "dims": _dims(args)}
    lines: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"model {path}: {weights / GIB:.2f} GiB of weights; planning dims {_dims(args)}")
    if "plan" in steps:
        found = figures["plan"] = child(args, "plan")
        say(f"\n[plan] {found['nodes']} nodes; onnx_ir.load {found['ir_load_seconds'] * 1e3:.1f} ms"
            f" (omny load {found['omny_load_seconds'] * 1e3:.1f} ms), best of {args.repeat}")  # fmt: skip
        for n, p in found["plans"].items():
            say(f"  {n} shards: plan {p['seconds'] * 1e3:.1f} ms = {p['ratio_to_ir_load']:.2f}x load;"
                f" stages {p['stage_mib']} MiB; cuts {p['cuts']}")  # fmt: skip

    if "split" in steps or "verify" in steps or "run" in steps:
        splits, copies = [], []
        for _ in range(args.copies):
            copies.append(child(args, "copy", out=Path(args.scratch) / "copy.data"))
            splits.append(child(args, "split", out=split_dir))
        split = min(splits, key=lambda s: s["seconds"])
        copy = min(copies, key=lambda s: s["seconds"])
        growth = max(s["rss_growth_bytes"] for s in splits)
        figures["split"] = {"runs": splits, "copies": copies}
        say(f"\n[split] save_split 2 stages: {[round(s['seconds'], 2) for s in splits]} s; "
            f"copyfile of the .data: {[round(c['seconds'], 2) for c in copies]} s")  # fmt: skip
        for stage in split["stages"]:
            say(f"  {stage['file']}: model {stage['model_bytes'] / MIB:.2f} MiB, data "
                f"{stage['data_bytes'] / GIB:.2f} GiB ({stage['external_initializers']} external, "
                f"{stage['embedded_initializers']} embedded initializers)")  # fmt: skip
        big_ok = all(s["data_bytes"] > 0 and s["model_bytes"] < 2 * GIB for s in split["stages"]
                     if s["data_bytes"] + s["model_bytes"] > 2 * GIB)  # fmt: skip
        figures["split"]["summary"] = {
            "time_ratio": split["seconds"] / copy["seconds"],
            "rss_growth_over_weights": growth / weights,
            "external_data_over_2gib": big_ok,
        }

    if "verify" in steps:
        found = figures["verify"] = child(args, "verify")
        report = found["report"]
        say(f"\n[verify] {'OK' if found['ok'] else 'MISMATCH'}: whole vs 2 stages, worst |diff| "
            f"{found['worst_abs_diff']:.2e}; {found['seconds']:.1f} s (load+plan "
            f"{found['load_and_plan_seconds']:.2f} s); peak RSS {found['peak_rss_bytes'] / GIB:.2f}"
            f" GiB")  # fmt: skip
        timing = report.get("timing") or {}
        if timing:
            say("  where the time goes: " + ", ".join(f"{k} {v:.2f} s" for k, v in timing.items()))
        say(f"  runs: whole {report['whole_seconds']:.2f} s, stages "
            f"{[round(s, 2) for s in report['stage_seconds']]} s")  # fmt: skip

    if "run" in steps:
        if not split_dir.exists():
            child(args, "split", out=split_dir)
        whole = child(args, "run", side="whole")
        pipe = child(args, "run", side="pipeline", out=split_dir)
        figures["run"] = {"whole": whole, "pipeline": pipe}
        say(f"\n[run] whole model, one session (default threads) vs 2-stage pipeline (1 thread per"
            f" stage), {args.requests} requests")  # fmt: skip
        say(f"  session creation: whole {whole['create_seconds']:.1f} s, pipeline "
            f"{pipe['create_seconds']:.1f} s; peak RSS whole {whole['peak_rss_bytes'] / GIB:.2f} "
            f"GiB, pipeline {pipe['peak_rss_bytes'] / GIB:.2f} GiB")  # fmt: skip
        for name in ("prefill", "decode"):
            w, p = whole[name], pipe[name]
            say(f"  {name:7}: latency whole {w['latency_seconds'] * 1e3:8.1f} ms, pipeline "
                f"{p['latency_seconds'] * 1e3:8.1f} ms ({p['latency_seconds'] / w['latency_seconds']:.2f}x);"
                f" throughput whole {w['throughput_rps']:.3f} req/s, pipeline "
                f"{p['throughput_rps']:.3f} req/s ({p['throughput_rps'] / w['throughput_rps']:.2f}x)")  # fmt: skip
        say(f"  pipeline stage mean ms (both phases): {[round(m, 1) for m in pipe['stage_mean_ms']]}")

    if "memory" in steps:
        found = figures["memory"] = child(args, "memory")
        rows = found["rows"]
        say("\n[memory] predicted vs measured peak RSS growth per stage (arena on / off)")
        for r in rows:
            say(f"  {r['shards']} shards stage {r['stage']}: predicted {r['predicted_bytes'] / MIB:7.0f}"
                f" MiB, measured {r['measured_bytes'] / MIB:7.0f} / {r['measured_no_arena_bytes'] / MIB:7.0f}"
                f" MiB, ratio {r['predicted_bytes'] / r['measured_bytes']:.2f} / "
                f"{r['predicted_bytes'] / r['measured_no_arena_bytes']:.2f}")  # fmt: skip

    say("\n== against the targets (issue 13) ==")
    if "plan" in figures:
        worst = max(p["ratio_to_ir_load"] for p in figures["plan"]["plans"].values())
        say(f"plan time / onnx_ir.load time (2, 3, 4 shards, worst): {worst:.2f}")
    if "split" in figures:
        s = figures["split"]["summary"]
        say(f"split time / data copy time: {s['time_ratio']:.2f} (target <= 1.5) "
            f"{verdict(s['time_ratio'], 1.5)}")
        say(f"split peak RSS growth / weight bytes: {s['rss_growth_over_weights']:.4f} "
            f"(target <= 0.10) {verdict(s['rss_growth_over_weights'], 0.10)}")
        say(f"every stage over 2 GiB uses external data: {s['external_data_over_2gib']}")
    if "verify" in figures:
        ratio = figures["verify"]["peak_rss_bytes"] / weights
        say(f"verify peak RSS / weight bytes: {ratio:.2f} (target <= 1.5) {verdict(ratio, 1.5)}")
    if "run" in figures:
        w, p = figures["run"]["whole"], figures["run"]["pipeline"]
        for name in ("prefill", "decode"):
            ratio = p[name]["throughput_rps"] / w[name]["throughput_rps"]
            say(f"2-stage {name} throughput / whole model: {ratio:.2f}; latency "
                f"{p[name]['latency_seconds'] / w[name]['latency_seconds']:.2f}x")
    if "memory" in figures and figures["memory"]["rows"]:
        rows = figures["memory"]["rows"]
        for key, label in (("measured_bytes", "arena on"), ("measured_no_arena_bytes", "arena off")):
            ratios = [r["predicted_bytes"] / r[key] for r in rows]
            say(f"predicted/measured memory over {len(rows)} stages ({label}): worst low "
                f"{min(ratios):.3f}, worst high {max(ratios):.3f} (goal 0.9 <= and 0.8..1.2)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    shutil.rmtree(split_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
