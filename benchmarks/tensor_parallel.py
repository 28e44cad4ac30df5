"""Tensor parallelism on one machine: a degree-2 split of a Llama-style decoder vs the whole model.

Measured in one run (best of ``--repeats``), prefill at ``--seq`` tokens:

* **whole 1 thread**: the whole model, one onnxruntime session, ``intra_op_num_threads=1``;
* **whole 2 threads**: the same with 2 intra-op threads (onnxruntime's own parallelism);
* **ceiling**: the whole model's 1-thread session run from two threads at once (what two
  cores give two independent sessions on this machine; see ``real_pipelines.py``);
* **tp2**: the degree-2 split (``tensor_parallel_chain``) in a ``Pipeline``, one thread per
  rank.

Also: per-rank weights / whole weights. With ``--decode`` the decoder is built with a KV
cache (``kv_cache=True``) and one decode step is timed: one new token (seq 1) after
``--past`` cached positions. Run::

    PYTHONPATH=$PWD python benchmarks/tensor_parallel.py [--model PATH] [--seq 128]
    PYTHONPATH=$PWD python benchmarks/tensor_parallel.py --decode [--past 127]

``--out FILE`` appends the printed lines to ``FILE`` (``benchmarks/results/tensor_parallel.txt``).

Without ``--model`` a mid-size decoder of ``onnx_ir_multidevice.testing.llama`` is built in
memory. With ``--split DIR`` (a folder written by ``omny split`` from a plan with a degree-2
stage) the pipeline runs that folder and the whole model is ``--model``'s file, loaded by
path: the form for the 1.1B decoder of ``benchmarks/llm.py``, whose weights are over
protobuf's 2 GiB::

    omny plan tinyllama-1.1b-kv.onnx -o tl.omny --devices 4GiB,4GiB --tensor-parallel 2 \
        --dim seq=128 --dim past_seq=1 --dim total_seq=129
    omny split tl.omny split --shards 1
    PYTHONPATH=$PWD python benchmarks/tensor_parallel.py --model tinyllama-1.1b-kv.onnx \
        --split split [--decode]

No timing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
import threading
import time
from pathlib import Path

import onnx_ir as ir
import onnxruntime as ort

from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.runtime.sessions import ModelSession, session_options
from onnx_ir_multidevice.runtime.tensor_parallel import (
    TensorParallelStage,
    tensor_parallel_chain,
)
from onnx_ir_multidevice.testing.llama import LlamaConfig, build_llama

MID = LlamaConfig(
    layers=4, hidden=512, intermediate=1408, heads=8, kv_heads=4, vocab=4096, max_positions=512
)


def _timed(run, count: int) -> float:
    start = time.perf_counter()
    run(count)
    return (time.perf_counter() - start) / count


def _built(args, dims):
    """The mid-size decoder (or ``--model``) and its degree-2 chain, built in memory."""
    config = dataclasses.replace(MID, kv_cache=args.decode)
    model = ir.load(args.model) if args.model else build_llama(config)
    chain = tensor_parallel_chain(model, 1, 2, dims=dims)
    stage = chain.stages[0]
    assert isinstance(stage, TensorParallelStage), "no tensor-parallel region found"
    whole_bytes = sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value
    )
    rank_bytes = 0
    for segment in stage.ranks[0]:
        source = segment.source
        if isinstance(source, bytes):  # a small segment: its serialized size
            rank_bytes += len(source)
        elif isinstance(source, ir.Model):
            rank_bytes += sum(
                v.const_value.nbytes for v in source.graph.initializers.values() if v.const_value
            )
    stats = {
        "segments": stage.num_segments,
        "collectives": sum(len(step) for step in stage.steps),
        "whole_bytes": whole_bytes,
        "rank_bytes": rank_bytes,
    }
    return model, chain, stats


def _from_folder(model_path: str, folder: str):
    """The whole model's path and a split folder whose first stage is tensor-parallel."""
    manifest = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
    parallel = manifest["stages"][0].get("tensor_parallel")
    assert parallel, f"{folder}: stage 0 is not tensor-parallel"
    rank = parallel["ranks"][0]
    files = [*rank["segments"], *rank.get("external_data", [])]
    stats = {
        "segments": len(rank["segments"]),
        "collectives": sum(len(step) for step in parallel["steps"]),
        "whole_bytes": Path(model_path + ".data").stat().st_size,
        "rank_bytes": sum((Path(folder) / f).stat().st_size for f in files),
    }
    return model_path, folder, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a decoder .onnx (default: a mid-size built decoder)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode", action="store_true", help="one KV-cache decode step")
    parser.add_argument("--past", type=int, default=127, help="cached positions (--decode)")
    parser.add_argument("--split", help="a split folder with one degree-2 stage (see above)")
    parser.add_argument("--out", help="append the results to this file")
    args = parser.parse_args()
    if args.decode:
        args.seq = 1
    dims = {"batch": 1, "seq": args.seq, "past_seq": args.past, "total_seq": args.seq + args.past}
    if not args.decode:  # a KV-cache model's prefill: after one cached position, as llm.py
        dims = {"batch": 1, "seq": args.seq, "past_seq": 1, "total_seq": args.seq + 1}
    if args.split:
        if not args.model:
            parser.error("--split needs --model (the whole model's file)")
        source, chain, stats = _from_folder(args.model, args.split)
    else:
        source, chain, stats = _built(args, dims)
    sessions = {}
    for name, threads in (("whole", 1), ("all_cores", 2)):
        options = session_options(intra_op_num_threads=threads, sequential=True, spinning=False)
        sessions[name] = ModelSession(source, options, ["CPUExecutionProvider"])
    with Pipeline(chain, intra_op_num_threads=1) as pipe:
        feeds = pipe.example_inputs(dims=dims)

        def runner(name: str):
            session = sessions[name].session

            def run(count: int) -> None:
                for _ in range(count):
                    session.run(None, feeds)

            return run

        def run_two(count: int) -> None:
            threads = [
                threading.Thread(target=runner("whole"), args=(max(count // 2, 1),))
                for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        def run_tp(count: int) -> None:
            for _ in range(count):
                pipe.run(feeds)

        for run in (runner("whole"), runner("all_cores"), run_tp):
            run(2)  # warm up
        best = dict.fromkeys(("whole", "all_cores", "two", "tp2"), float("inf"))
        for _ in range(args.repeats):
            best["whole"] = min(best["whole"], _timed(runner("whole"), args.count))
            best["all_cores"] = min(best["all_cores"], _timed(runner("all_cores"), args.count))
            best["two"] = min(best["two"], _timed(run_two, args.count - args.count % 2))
            best["tp2"] = min(best["tp2"], _timed(run_tp, args.count))
    for owner in sessions.values():
        owner.close()
    out = io.StringIO()
    what = f"decode step after {args.past} cached" if args.decode else f"prefill seq {args.seq}"
    print(
        f"onnxruntime {ort.__version__}, {what}, {stats['segments']} segments/rank, "
        f"{stats['collectives']} collectives, {args.model or 'built mid-size decoder'}",
        file=out,
    )
    for name, seconds in best.items():
        print(f"  {name:10s} {seconds * 1e3:9.2f} ms", file=out)
    print(f"tp2 vs whole 1 thread : {best['whole'] / best['tp2']:.3f}x", file=out)
    print(f"tp2 vs whole 2 threads: {best['all_cores'] / best['tp2']:.3f}x", file=out)
    print(f"2-thread ceiling      : {best['whole'] / best['two']:.3f}x", file=out)
    if stats["rank_bytes"]:
        ratio = stats["rank_bytes"] / stats["whole_bytes"]
        print(f"per-rank weights / whole weights: {ratio:.3f}", file=out)
    sys.stdout.write(out.getvalue())
    if args.out:
        with open(args.out, "a", encoding="utf-8") as handle:
            handle.write(out.getvalue() + "\n")


if __name__ == "__main__":
    main()
