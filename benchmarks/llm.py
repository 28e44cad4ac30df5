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
    for entry in manifest.stages:
        file = out / entry.file
        proto = onnx.load(file, load_external_data=False)
        external = sum(
            1 for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
        )
        data = sum((out / name).stat().st_size for name in entry.external_data)
        stages.append({
            "file": entry.file,
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


def _decoder_shape(path: str) -> tuple[int, int, int, int]:
    """``(layers, kv_heads, head_dim, vocab)`` of a decoder from its graph inputs and outputs."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph

    def dims(value):
        return [d.dim_value for d in value.type.tensor_type.shape.dim]

    pasts = [v for v in graph.input if v.name.startswith("past_key_values.")]
    logits = next(v for v in graph.output if v.name == "logits")
    _, kv_heads, _, head_dim = dims(pasts[0])
    return len(pasts) // 2, kv_heads, head_dim, dims(logits)[-1]


def _requests(path: str, seq: int, past: int, count: int, seed: int = 0) -> list[dict]:
    """Prefill (``past == 0``) or decode requests for a Llama decoder with a KV cache."""
    import numpy as np

    layers, kv_heads, head_dim, vocab = _decoder_shape(path)
    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        feeds = {
            "input_ids": rng.integers(0, vocab, size=(1, seq), dtype=np.int64),
            "attention_mask": np.ones((1, past + seq), dtype=np.int64),
            "position_ids": np.arange(past, past + seq, dtype=np.int64)[None],
        }
        for i in range(layers):
            for kind in ("key", "value"):
                cache = rng.standard_normal((1, kv_heads, past, head_dim), dtype=np.float32)
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

    prefill = _requests(args.path, args.seq, 0, args.requests, seed=1)
    decode = _requests(args.path, 1, args.seq, args.requests, seed=2)
    start = time.perf_counter()
    if args.side in ("whole", "whole-nospin"):
        from onnx_ir_multidevice.runtime.sessions import session_options

        spin = None if args.side == "whole" else False
        owner = ModelSession(args.path, session_options(spinning=spin))
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
    result = {
        "side": args.side,
        "create_seconds": create,
        "rss_after_create_bytes": after_create["VmRSS"],
    }
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


def report_plan(found: dict, args, say) -> dict:
    say(f"\n[plan] {found['nodes']} nodes; onnx_ir.load {found['ir_load_seconds'] * 1e3:.1f} ms, "
        f"onnx_ir_multidevice.load {found['omny_load_seconds'] * 1e3:.1f} ms; best of "
        f"{args.repeat}")  # fmt: skip
    for n, p in found["plans"].items():
        ms = p["seconds"] * 1e3
        say(f"  {n} shards: plan_model {ms:.1f} ms = {p['ratio_to_ir_load']:.2f}x load; stages "
            f"{p['stage_mib']} MiB; cuts after {p['cuts']}")  # fmt: skip
    return found


def report_split(runs: list, weights: int, say) -> dict:
    copies = [c["seconds"] for c, _ in runs]
    splits = [s["seconds"] for _, s in runs]
    growth = max(s["rss_growth_bytes"] for _, s in runs)
    say(f"\n[split] save_split, 2 stages: {[round(t, 1) for t in splits]} s; shutil.copyfile of"
        f" the .data file: {[round(t, 1) for t in copies]} s; peak RSS growth "
        f"{growth / MIB:.1f} MiB")  # fmt: skip
    stages = runs[0][1]["stages"]
    for stage in stages:
        say(f"  {stage['file']}: model file {stage['model_bytes'] / MIB:.2f} MiB, data "
            f"{stage['data_bytes'] / GIB:.2f} GiB ({stage['external_initializers']} external, "
            f"{stage['embedded_initializers']} embedded initializers)")  # fmt: skip
    over = [s for s in stages if s["data_bytes"] + s["model_bytes"] > 2 * GIB]
    return {
        "runs": [s for _, s in runs],
        "copies": [c for c, _ in runs],
        "time_ratio": min(splits) / min(copies),
        "rss_growth_over_weights": growth / weights,
        "stages_over_2gib": len(over),
        "external_data_over_2gib": all(s["model_bytes"] < 2 * GIB for s in over),
    }


def report_verify(found: dict, say) -> dict:
    report = found["report"]
    creates, runs = report["stage_create_seconds"], report["stage_seconds"]
    rest = found["seconds"] - report["whole_create_seconds"] - report["whole_seconds"]
    rest -= sum(creates) + sum(runs)
    verdict_word = "OK" if found["ok"] else "MISMATCH"
    say(f"\n[verify] {verdict_word}: whole model vs 2 chained stages, worst |diff| "
        f"{found['worst_abs_diff']:.2e}; {found['seconds']:.1f} s after load + plan "
        f"({found['load_and_plan_seconds']:.2f} s); peak RSS {found['peak_rss_bytes'] / GIB:.2f} "
        "GiB")  # fmt: skip
    say(f"  where the time goes: whole-model session {report['whole_create_seconds']:.1f} s "
        f"(saved to a temporary folder, then loaded) + run {report['whole_seconds']:.1f} s; stage"
        f" sessions {[round(c, 1) for c in creates]} s + runs {[round(r, 1) for r in runs]} s; "
        f"split, inputs and comparison {rest:.1f} s")  # fmt: skip
    return found


def report_run(whole: dict, quiet: dict, pipe: dict, args, say) -> dict:
    say(f"\n[run] whole model in one session (onnxruntime's default threads; with its default "
        f"spinning, and without) vs 2-stage pipeline (Pipeline on the split folder, 1 thread per"
        f" stage, no spinning); {args.requests} requests of each kind")  # fmt: skip
    say(f"  session creation: whole {whole['create_seconds']:.1f} s, pipeline "
        f"{pipe['create_seconds']:.1f} s (both stages); peak RSS whole "
        f"{whole['peak_rss_bytes'] / GIB:.2f} GiB, pipeline {pipe['peak_rss_bytes'] / GIB:.2f} "
        "GiB")  # fmt: skip
    ratios = {}
    for name in ("prefill", "decode"):
        w, q, p = whole[name], quiet[name], pipe[name]
        ratios[name] = {
            "latency": p["latency_seconds"] / w["latency_seconds"],
            "throughput": p["throughput_rps"] / w["throughput_rps"],
            "latency_vs_no_spin": p["latency_seconds"] / q["latency_seconds"],
            "throughput_vs_no_spin": p["throughput_rps"] / q["throughput_rps"],
        }
        for label, side in (("whole", w), ("whole, no spinning", q), ("2-stage pipeline", p)):
            say(f"  {name:7} {label:18}: latency {side['latency_seconds'] * 1e3:7.0f} ms, "
                f"throughput {side['throughput_rps']:.3f} req/s "
                f"({side['tokens_per_second']:.1f} tok/s)")  # fmt: skip
    say(f"  pipeline stages, mean ms per request: {[round(m) for m in pipe['stage_mean_ms']]}")
    return {"whole": whole, "whole_no_spinning": quiet, "pipeline": pipe, "ratios": ratios}


def report_memory(found: dict, say) -> dict:
    say("\n[memory] predicted (StageMemory.resident_bytes) vs measured peak RSS growth per "
        "stage, arena on / off")  # fmt: skip
    for r in found["rows"]:
        on, off = r["measured_bytes"], r["measured_no_arena_bytes"]
        plan = f"{r['shards']} shards{' relaxed' if r['relaxed'] else ''} stage {r['stage']}"
        say(f"  {plan:26}: predicted {r['predicted_bytes'] / MIB:6.0f} MiB, measured "
            f"{on / MIB:6.0f} / {off / MIB:6.0f} MiB, ratio {r['predicted_bytes'] / on:.3f} / "
            f"{r['predicted_bytes'] / off:.3f}")  # fmt: skip
    return found


def targets(figures: dict, weights: int) -> list[str]:
    lines = []
    if "plan" in figures:
        worst = max(p["ratio_to_ir_load"] for p in figures["plan"]["plans"].values())
        lines.append(f"plan time / onnx_ir.load time, worst of 2, 3, 4 shards: {worst:.2f}")
    if "split" in figures:
        s = figures["split"]
        lines.append(f"split time / data copy time: {s['time_ratio']:.2f} (target <= 1.5) "
                     f"{verdict(s['time_ratio'], 1.5)}")  # fmt: skip
        lines.append(f"split peak RSS growth / weight bytes: {s['rss_growth_over_weights']:.4f} "
                     f"(target <= 0.10) {verdict(s['rss_growth_over_weights'], 0.10)}")  # fmt: skip
        lines.append(f"stages over 2 GiB: {s['stages_over_2gib']}, all with external data: "
                     f"{s['external_data_over_2gib']}")  # fmt: skip
    if "verify" in figures:
        ratio = figures["verify"]["peak_rss_bytes"] / weights
        lines.append(f"verify peak RSS / weight bytes: {ratio:.2f} (target <= 1.5) "
                     f"{verdict(ratio, 1.5)}")  # fmt: skip
    if "run" in figures:
        for name, r in figures["run"]["ratios"].items():
            lines.append(f"2-stage {name} throughput / whole model: {r['throughput']:.2f} "
                         f"(latency {r['latency']:.2f}x); against the whole model without "
                         f"spinning: {r['throughput_vs_no_spin']:.2f} (latency "
                         f"{r['latency_vs_no_spin']:.2f}x)")  # fmt: skip
    if "memory" in figures and figures["memory"]["rows"]:
        rows = figures["memory"]["rows"]
        for key, label in (("measured_bytes", "arena on"), ("measured_no_arena_bytes", "off")):
            ratios = [r["predicted_bytes"] / r[key] for r in rows]
            ok = min(ratios) >= 0.9 and max(ratios) <= 1.2 and min(ratios) >= 0.8
            lines.append(f"predicted/measured memory, {len(rows)} stages ({label}): worst "
                         f"{min(ratios):.3f} low, {max(ratios):.3f} high (goal: within 0.8..1.2,"
                         f" none below 0.9) {'PASS' if ok else 'MISS'}")  # fmt: skip
    return lines


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

    def say(line: str = "") -> None:
        print(line, flush=True)

    say(f"model {path}: {weights / GIB:.2f} GiB of weights; planning dims {_dims(args)}")
    if "plan" in steps:
        figures["plan"] = report_plan(child(args, "plan"), args, say)
    if "split" in steps or "verify" in steps or "run" in steps:
        runs = []
        for _ in range(args.copies):  # alternated, so that disk noise hits both
            runs.append((child(args, "copy", out=Path(args.scratch) / "copy.data"),
                         child(args, "split", out=split_dir)))  # fmt: skip
        figures["split"] = report_split(runs, weights, say)
    if "verify" in steps:
        figures["verify"] = report_verify(child(args, "verify"), say)
    if "run" in steps:
        whole = child(args, "run", side="whole")
        quiet = child(args, "run", side="whole-nospin")
        pipe = child(args, "run", side="pipeline", out=split_dir)
        figures["run"] = report_run(whole, quiet, pipe, args, say)
    if "memory" in steps:
        figures["memory"] = report_memory(child(args, "memory"), say)
    say("\n== against the targets (issue 13) ==")
    for line in targets(figures, weights):
        say(line)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    shutil.rmtree(split_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
