"""Generate a Llama decoder with streamed external-data weights, then optionally run it in ORT.

Writes ``<out>/<preset>[-kv][-novi].onnx`` and its ``.onnx.data`` with
``onnx_ir_multidevice.testing.llama.write_llama`` and prints the wall time, the process's peak RSS
(``VmHWM``) and the file sizes. With ``--ort``, a fresh child process then creates an
onnxruntime CPU session from the file and runs one prefill (batch 1, ``--seq`` tokens, empty
past when the model has a KV cache), and prints the session-creation time, the run time and
that process's peak RSS; ``--save-logits FILE`` keeps the logits (``.npy``).

Usage::

    python benchmarks/make_llama.py --out /work/llm-data --preset tinyllama-1.1b [--kv-cache]
        [--no-value-info] [--ort] [--seq 16]
    python benchmarks/make_llama.py --ort-only /work/llm-data/tinyllama-1.1b.onnx [--seq 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def peak_rss_mib() -> dict[str, float]:
    """VmHWM and VmRSS of this process from /proc, and ru_maxrss, in MiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                fields[key] = int(value.split()[0]) / 1024
    fields["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return fields


def write(args) -> Path:
    from onnx_ir_multidevice.testing import llama

    config = dataclasses.replace(llama.PRESETS[args.preset], kv_cache=args.kv_cache)
    name = args.preset + ("-kv" if args.kv_cache else "") + ("-novi" if args.no_value_info else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.onnx"
    before = peak_rss_mib()
    start = time.perf_counter()
    llama.write_llama(path, config, value_info=not args.no_value_info)
    wall = time.perf_counter() - start
    data = path.with_name(path.name + ".data")
    report = {
        "step": "write",
        "path": str(path),
        "parameters": config.num_parameters,
        "wall_s": round(wall, 2),
        "rss_before_write_mib": round(before["VmRSS"], 1),
        "peak_rss_mib": round(peak_rss_mib()["VmHWM"], 1),
        "model_bytes": path.stat().st_size,
        "data_bytes": data.stat().st_size,
    }
    print(json.dumps(report), flush=True)
    return path


def ort_check(path: Path, seq: int, save_logits: str | None) -> None:
    import numpy as np
    import onnxruntime as ort

    start = time.perf_counter()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    created = time.perf_counter() - start
    after_create = peak_rss_mib()
    feeds = {}
    rng = np.random.default_rng(0)
    for meta in sess.get_inputs():
        if meta.name == "input_ids":
            vocab = next(o.shape[-1] for o in sess.get_outputs() if o.name == "logits")
            feeds[meta.name] = rng.integers(0, vocab, size=(1, seq), dtype=np.int64)
        elif meta.name == "attention_mask":
            feeds[meta.name] = np.ones((1, seq), dtype=np.int64)
        elif meta.name == "position_ids":
            feeds[meta.name] = np.arange(seq, dtype=np.int64)[None]
        else:  # past_key_values.<i>.key / .value: [batch, kv_heads, past_seq, head_dim]
            _, kv_heads, _, head_dim = meta.shape
            feeds[meta.name] = np.zeros((1, kv_heads, 0, head_dim), dtype=np.float32)
    start = time.perf_counter()
    outputs = sess.run(None, feeds)
    ran = time.perf_counter() - start
    start = time.perf_counter()
    sess.run(None, feeds)
    second = time.perf_counter() - start
    logits = outputs[0]
    if save_logits:
        np.save(save_logits, logits)
    names = [o.name for o in sess.get_outputs()]
    decode = {}
    if len(names) > 1 and seq > 1:
        # KV cache: prefill seq - 1 tokens, decode the last one with the returned presents.
        tokens = ("input_ids", "position_ids", "attention_mask")
        prefill = {k: (v[:, : seq - 1] if k in tokens else v) for k, v in feeds.items()}
        presents = sess.run(None, prefill)[1:]
        step = {k: feeds[k][:, -1:] for k in tokens[:2]}
        step["attention_mask"] = feeds["attention_mask"]
        for name, value in zip(names[1:], presents, strict=False):
            step[name.replace("present.", "past_key_values.")] = value
        start = time.perf_counter()
        last = sess.run(None, step)[0]
        decode = {
            "decode_step_s": round(time.perf_counter() - start, 3),
            "decode_vs_full_max_abs_diff": float(np.abs(last[:, -1] - logits[:, -1]).max()),
        }
    report = {
        "step": "ort",
        "path": str(path),
        "ort_version": ort.__version__,
        "session_create_s": round(created, 2),
        "first_run_s": round(ran, 3),
        "second_run_s": round(second, 3),
        "peak_rss_after_create_mib": round(after_create["VmHWM"], 1),
        "rss_after_create_mib": round(after_create["VmRSS"], 1),
        "peak_rss_mib": round(peak_rss_mib()["VmHWM"], 1),
        "logits_shape": list(logits.shape),
        "presents": len(outputs) - 1,
        "present_shape": list(outputs[1].shape) if len(outputs) > 1 else None,
        **decode,
        "logits_finite": bool(np.isfinite(logits).all()),
        "logits_std": float(logits.std()),
    }
    print(json.dumps(report), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/work/llm-data")
    parser.add_argument("--preset", default="tinyllama-1.1b")
    parser.add_argument("--kv-cache", action="store_true")
    parser.add_argument("--no-value-info", action="store_true")
    parser.add_argument("--ort", action="store_true", help="run one prefill in a child process")
    parser.add_argument("--ort-only", metavar="PATH", help="only run the onnxruntime check")
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--save-logits", metavar="FILE")
    args = parser.parse_args()

    if args.ort_only:
        ort_check(Path(args.ort_only), args.seq, args.save_logits)
        return
    path = write(args)
    if args.ort:
        command = [sys.executable, os.path.abspath(__file__), "--ort-only", str(path)]
        command += ["--seq", str(args.seq)]
        if args.save_logits:
            command += ["--save-logits", args.save_logits]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
