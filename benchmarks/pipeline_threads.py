"""Hammer a pipeline from several threads and count results that belong to another caller.

Threads call ``Pipeline.run`` (``--runners`` of them), the queue API (``send_input`` in bursts,
then ``receive_output``) and ``Pipeline.map`` at the same time, on a zoo ViT cut in two. Every
result is compared with the outputs of one onnxruntime session of the whole model for the
caller's own request; a result that matches another request, or none, is *wrong*. A call
the pipeline refuses is *refused*. The suite runs a bounded version of this
(``tests/test_pipeline_threads.py``); this script runs as many requests as asked.

Usage: python benchmarks/pipeline_threads.py [--requests 400] [--runners 3] [--no-queue]
       [--no-map] [--json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from onnx_ir_multidevice import split_at
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.testing import zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per thread")
    parser.add_argument("--runners", type=int, default=3, help="threads calling run()")
    parser.add_argument("--burst", type=int, default=4, help="send_input calls per burst")
    parser.add_argument("--no-queue", action="store_true", help="no thread on the queue API")
    parser.add_argument("--no-map", action="store_true", help="no thread calling map()")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    model = zoo.vit(layers=2, hidden=32, patch=8, image=32)
    whole = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    oracle_lock = threading.Lock()
    counts = {"ok": 0, "wrong": 0, "refused": 0}
    count_lock = threading.Lock()

    with Pipeline(split_at(model, ["layer.0.out"]), intra_op_num_threads=1) as pipe:
        names = list(pipe.output_names)

        def inputs(seed: int) -> dict[str, np.ndarray]:
            return pipe.example_inputs({"batch": 1}, seed=seed)

        def check(out: dict[str, np.ndarray], seed: int) -> None:
            with oracle_lock:
                expected = whole.run(names, inputs(seed))
            same = all(
                np.allclose(out[n], e, rtol=1e-4, atol=1e-5)
                for n, e in zip(names, expected, strict=True)
            )
            with count_lock:
                counts["ok" if same else "wrong"] += 1

        def refused() -> None:
            with count_lock:
                counts["refused"] += 1

        def runner(t: int) -> None:
            for k in range(args.requests):
                seed = 1_000_000 * (t + 1) + k
                try:
                    out = pipe.run(inputs(seed), timeout=60)
                except Exception:  # noqa: BLE001 - counted
                    refused()
                    continue
                check(out, seed)

        def queue_user() -> None:
            for k in range(0, args.requests, args.burst):
                seeds = [k + j for j in range(min(args.burst, args.requests - k))]
                for seed in seeds:
                    pipe.send_input(inputs(seed), timeout=60)
                for seed in seeds:
                    check(pipe.receive_output(timeout=60), seed)

        def map_user() -> None:
            seeds = [500_000 + k for k in range(args.requests)]
            try:
                for out, seed in zip(
                    pipe.map((inputs(s) for s in seeds), timeout=60), seeds, strict=True
                ):
                    check(out, seed)
            except Exception:  # noqa: BLE001 - counted
                refused()

        threads = [threading.Thread(target=runner, args=(t,)) for t in range(args.runners)]
        if not args.no_queue:
            threads.append(threading.Thread(target=queue_user))
        if not args.no_map:
            threads.append(threading.Thread(target=map_user))
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start

    report = {"threads": len(threads), **counts, "seconds": round(elapsed, 2)}
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"{report['threads']} threads: {counts['ok']} results right, {counts['wrong']} "
            f"wrong, {counts['refused']} calls refused, in {elapsed:.1f} s"
        )


if __name__ == "__main__":
    main()
