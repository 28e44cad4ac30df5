"""Two-device pipeline check for a GPU machine: stage 0 on the CPU, stage 1 on CUDA.

Needs onnxruntime-gpu for the CUDA part. Reports, for a zoo ViT cut in the middle:

* latency of the whole model alone on the CPU and alone on CUDA (one onnxruntime session);
* latency (one request) and streaming throughput of the pipeline ``["cpu", "cuda:0"]``, with
  per-stage time and utilisation, and its outputs checked against the CPU session;
* the reverse plan ``["cuda:0", "cpu"]``.

On a machine without a CUDA-enabled onnxruntime (or without a GPU) it says so, runs the same
measurements with both stages on the CPU so the script itself is exercised, and exits 0.

Usage: python benchmarks/gpu_check.py [--batch 8] [--layers 4] [--requests 40] [--json]

Measured once on a lent NVIDIA H200 machine (onnxruntime-gpu 1.31.1 for CUDA 13, whose wheel was
carried there in xz-compressed parts and unpacked onto PYTHONPATH, since that machine has no
network; `ort.preload_dlls()` finds the CUDA/cuDNN libraries of the nvidia-* wheels): whole model
alone on CPU 21.9 ms, alone on CUDA 1.13 ms; pipeline cpu -> cuda:0 12.7 ms latency, 75 req/s;
cuda:0 -> cpu 12.0 ms, 91 req/s; max |diff| vs the CPU session 3.5e-4.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice._split import split_at
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.testing import zoo


def median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def whole_session(model: ir.Model, provider: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    providers = (
        [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
    )
    sess = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), options, providers=providers
    )
    if sess.get_providers()[0] != provider:
        raise RuntimeError(f"{provider} did not load (session runs on {sess.get_providers()})")
    return sess


def measure_plan(stages, outputs, devices, inputs, reference, n, requests) -> dict:
    with Pipeline(stages, outputs=outputs, providers=devices) as pipe:
        for _ in range(3):
            out = pipe.run(inputs)
        error = max(float(np.max(np.abs(out[k] - reference[k]))) for k in outputs)
        lat = median_ms(lambda: pipe.run(inputs), n)
        pipe.reset_stats()
        start = time.perf_counter()
        for _ in pipe.map([inputs] * requests):
            pass
        rps = requests / (time.perf_counter() - start)
        stats = pipe.stats()
    return {
        "devices": list(devices),
        "latency_ms": lat,
        "throughput_rps": rps,
        "max_abs_error_vs_cpu": error,
        "stages": [
            {"device": s.device, "mean_ms": s.mean_ms, "utilisation": s.utilisation}
            for s in stats.stages
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    if hasattr(ort, "preload_dlls"):
        # onnxruntime-gpu >= 1.21 finds the CUDA/cuDNN libraries of the nvidia-* wheels.
        try:
            ort.preload_dlls()
        except Exception as exc:  # a CPU-only onnxruntime has nothing to preload
            print(f"preload_dlls: {exc}", file=sys.stderr)
    providers = ort.get_available_providers()
    cuda = "CUDAExecutionProvider" in providers
    report: dict = {"onnxruntime": ort.__version__, "providers": providers, "cuda": cuda}
    model = zoo.vit(layers=args.layers, hidden=256, patch=8, image=128)
    outputs = [v.name for v in model.graph.outputs]
    stages = split_at(model, [f"layer.{args.layers // 2 - 1}.out"])
    rng = np.random.default_rng(0)
    inputs = {"pixel_values": rng.standard_normal((args.batch, 3, 128, 128), dtype=np.float32)}
    n = max(args.requests // 2, 10)

    cpu = whole_session(model, "CPUExecutionProvider")
    reference = dict(zip(outputs, cpu.run(None, inputs), strict=True))
    report["whole_cpu_ms"] = median_ms(lambda: cpu.run(None, inputs), n)
    plans = [("cpu", "cpu")]
    if cuda:
        try:
            gpu = whole_session(model, "CUDAExecutionProvider")
            for _ in range(3):
                gpu.run(None, inputs)
            report["whole_cuda_ms"] = median_ms(lambda: gpu.run(None, inputs), n)
            plans = [("cpu", "cuda:0"), ("cuda:0", "cpu")]
        except (RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail) as exc:
            report["cuda"] = False
            report["cuda_error"] = str(exc)
    report["plans"] = []
    for devices in plans:
        try:
            report["plans"].append(
                measure_plan(stages, outputs, devices, inputs, reference, n, args.requests)
            )
        except PipelineError as exc:
            report["plans"].append({"devices": list(devices), "error": str(exc)})

    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(f"onnxruntime {report['onnxruntime']}, providers {', '.join(providers)}")
    if not report["cuda"]:
        reason = report.get("cuda_error", "this onnxruntime has no CUDAExecutionProvider")
        print(f"CUDA unavailable: {reason}; install onnxruntime-gpu on a machine with a GPU.")
        print("Running the CPU-only plan so the script itself is exercised.")
    print(f"zoo.vit(layers={args.layers}) batch {args.batch}")
    print(f"  whole model on cpu:  {report['whole_cpu_ms']:8.2f} ms")
    if "whole_cuda_ms" in report:
        print(f"  whole model on cuda: {report['whole_cuda_ms']:8.2f} ms")
    for plan in report["plans"]:
        name = " -> ".join(plan["devices"])
        if "error" in plan:
            print(f"  pipeline {name}: failed: {plan['error']}")
            continue
        per_stage = ", ".join(
            f"{s['device']} {s['mean_ms']:.2f} ms {s['utilisation']:.0%} busy"
            for s in plan["stages"]
        )
        print(
            f"  pipeline {name}: latency {plan['latency_ms']:.2f} ms, "
            f"{plan['throughput_rps']:.1f} req/s streaming ({per_stage}); "
            f"max |diff| vs cpu {plan['max_abs_error_vs_cpu']:.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
