"""Per-hop overhead and throughput of the Ray backend on a 3-node local cluster vs threads.

Stages are Identity-like models (``y = x + 0``) so that the time measured is the hop: the
activation goes from one stage's actor to the next one's through the object stores of
different nodes (``placement`` puts stage ``i`` on node ``box{i}``). For each activation size
(float32, 1 KB to 64 MB) and 2 and 3 stages it reports the latency of one request alone
(``Pipeline.run``) and the throughput of ``REQUESTS`` requests streamed with ``map``, on the
Ray backend and on the thread backend in this process; the per-hop overhead is
(Ray latency - thread latency) / (stages + 1) (one hop into each stage and one back), and the
bytes per request that went from one stage's node to the next one's
(``PipelineStats.between_nodes_bytes``: the sizes of the arrays the stages pass on, summed by
the engine; not Ray's transfer counters, which add a small header per object; the request the
driver sends and the outputs it gets back not counted).

Run: ``PYTHONPATH=$PWD python benchmarks/ray_nodes.py`` (writes benchmarks/results/ray_nodes.txt).
All three raylets run on this machine: a hop crosses object stores through shared memory and
local sockets, not a network; on real machines add the transfer time of the activation over
the link.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx_ir as ir
import ray
from ray.cluster_utils import Cluster

from onnx_ir_multidevice.runtime import Pipeline

SIZES = [1 << 10, 1 << 20, 16 << 20, 64 << 20]
REQUESTS = 8
STORE = 400 * 1024 * 1024
RESULTS = Path(__file__).parent / "results" / "ray_nodes.txt"


def stage(n: int, k: int) -> ir.Model:
    x = ir.Value(
        name="x" if k == 0 else f"h{k}", shape=ir.Shape([n]), type=ir.TensorType(ir.DataType.FLOAT)
    )
    zero = ir.Value(name=f"zero{k}", const_value=ir.tensor(np.zeros(1, np.float32)))
    zero.shape = ir.Shape([1])
    zero.type = ir.TensorType(ir.DataType.FLOAT)
    node = ir.node("Add", [x, zero], outputs=[ir.Value(name=f"h{k + 1}")])
    out = node.outputs[0]
    out.shape, out.type = ir.Shape([n]), ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], [out], nodes=[node], initializers=[zero], opset_imports={"": 17})
    return ir.Model(graph, ir_version=10)


def measure(stages, inputs, **kwargs):
    """(latency s, throughput requests/s, bytes between nodes per request or None)."""
    with Pipeline(stages, intra_op_num_threads=1, **kwargs) as pipe:
        for _ in range(2):
            pipe.run(inputs)
        start = time.perf_counter()
        for _ in range(REQUESTS):
            pipe.run(inputs)
        latency = (time.perf_counter() - start) / REQUESTS
        start = time.perf_counter()
        for _ in pipe.map([inputs] * REQUESTS):
            pass
        throughput = REQUESTS / (time.perf_counter() - start)
        moved = pipe.stats().between_nodes_bytes
    return latency, throughput, moved


def main() -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"box0": 1}, "object_store_memory": STORE},
    )
    for k in (1, 2):
        cluster.add_node(num_cpus=1, resources={f"box{k}": 1}, object_store_memory=STORE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    header = "size      stages  thread ms  ray ms  hop ms  thread req/s  ray req/s  "
    lines = [header + "bytes between nodes/request"]
    try:
        for size in SIZES:
            n = size // 4
            inputs = {"x": np.ones(n, np.float32)}
            for count in (2, 3):
                stages = [stage(n, k) for k in range(count)]
                t_lat, t_thr, _ = measure(stages, inputs)
                r_lat, r_thr, moved = measure(
                    stages, inputs, backend="ray", placement=[f"box{k}" for k in range(count)]
                )
                hop = (r_lat - t_lat) / (count + 1)
                lines.append(
                    f"{size:>9}  {count:>6}  {t_lat * 1e3:>9.2f}  {r_lat * 1e3:>6.2f}  "
                    f"{hop * 1e3:>6.2f}  {t_thr:>12.1f}  {r_thr:>9.1f}  {moved or 0:>27,.0f}"
                )
                print(lines[-1], flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    RESULTS.write_text(
        "benchmarks/ray_nodes.py: 3 raylets on one machine (2 cores, shared with other "
        f"processes while it ran), float32 activations, {REQUESTS} requests\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    main()
