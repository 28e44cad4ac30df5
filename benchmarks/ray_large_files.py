"""Stages whose files are over 2 GiB, shipped to the nodes of a 3-node local Ray cluster.

Runs a split folder (``omny split``; e.g. the 1.1B decoder of ``benchmarks/llm.py`` in 2
stages, each with a 2.05 GiB data file, or its degree-2 tensor-parallel split, each rank with
2.17 GiB) on a ``ray.cluster_utils.Cluster`` of three raylets on this machine, one stage per
worker node (custom resources ``box1``, ``box2``), with ``ship_files=True``: every model and
data file goes through the object store in chunks
(``runtime.engines.ray.SHIP_CHUNK_BYTES``) and each actor writes its copy into a temporary
folder. Prints the time to start the pipeline (ship + write + session creation), the driver's
peak RSS growth over the start, one request's outputs compared with the thread engine on the
same folder (max abs diff), and the bytes shipped.

Run::

    omny plan tinyllama-1.1b-kv.onnx -o p2.omny --shards 2 --dim seq=128 --dim past_seq=1 \\
        --dim total_seq=129
    omny split p2.omny split2 --shards 2
    PYTHONPATH=$PWD python benchmarks/ray_large_files.py split2 [--store-gib 3]

The object stores spill to disk when the files do not fit them (Ray's object spilling).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np
import ray
from ray.cluster_utils import Cluster

from onnx_ir_multidevice.runtime import Pipeline

GIB = 1 << 30


def _status(key: str) -> int:
    """``VmRSS``, ``VmHWM`` or ``RssAnon`` of this process, in bytes."""
    with open("/proc/self/status", encoding="ascii") as file:
        for line in file:
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) * 1024
    raise KeyError(key)


class _AnonPeak:
    """The peak ``RssAnon`` (private memory, not the object store's shared pages that
    ``ray.put`` writes through the driver's map) sampled every 10 ms in a thread."""

    def __init__(self) -> None:
        self.peak = _status("RssAnon")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, _status("RssAnon"))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def _reset_peak() -> None:
    """Make ``VmHWM`` the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as file:
        file.write("5")


def _folder_bytes(folder: Path) -> tuple[int, int]:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    files = [p for p in folder.iterdir() if p.name != "manifest.json"]
    return len(manifest["stages"]), sum(p.stat().st_size for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a split folder (omny split)")
    parser.add_argument("--store-gib", type=float, default=3.0, help="object store per node")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stages, shipped = _folder_bytes(args.folder)
    with Pipeline(args.folder, backend="thread", intra_op_num_threads=1) as local:
        inputs = local.example_inputs(seed=args.seed)
        expected = local.run(inputs)
    store = int(args.store_gib * GIB)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": store, "include_dashboard": False},
    )
    try:
        for k in range(1, stages + 1):
            cluster.add_node(num_cpus=1, resources={f"box{k}": 1}, object_store_memory=store)
        cluster.wait_for_nodes()
        _reset_peak()
        before, anon_before = _status("VmRSS"), _status("RssAnon")
        sampler = _AnonPeak()
        start = time.perf_counter()
        with Pipeline(
            args.folder,
            backend="ray",
            address=cluster.address,
            placement=[f"box{k}" for k in range(1, stages + 1)],
            intra_op_num_threads=1,
            ray_actor_options={"num_cpus": 1},
            engine_options={"ship_files": True, "start_timeout": 1800},
        ) as pipe:
            started = time.perf_counter() - start
            grown = _status("VmHWM") - before
            anon = sampler.stop() - anon_before
            start = time.perf_counter()
            got = pipe.run(inputs, timeout=1800)
            ran = time.perf_counter() - start
            where = [s.node_id[:8] for s in pipe.stats().stages]
        worst = max(float(np.max(np.abs(got[k] - expected[k]))) for k in expected)
    finally:
        ray.shutdown()
        cluster.shutdown()
    largest = max(p.stat().st_size for p in args.folder.iterdir())
    print(f"{args.folder}: {stages} stages, {shipped / GIB:.2f} GiB of files shipped "
          f"(largest file {largest / GIB:.2f} GiB), one stage per node {where}")  # fmt: skip
    print(f"pipeline start (ship, write, sessions): {started:.1f} s; one request {ran:.1f} s")
    print(f"driver while shipping: peak RSS growth {grown / GIB:.3f} GiB (object store pages "
          f"included), private memory (RssAnon) growth {anon / GIB:.3f} GiB")  # fmt: skip
    print(f"outputs vs the thread engine on the same folder: max |diff| {worst:.3g}")


if __name__ == "__main__":
    main()
