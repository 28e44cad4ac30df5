"""Benchmark: annotate + check of a synthetic model, against ``onnx_ir.load`` of the same model.

Builds ``zoo.synthetic_chain(N)`` (``--model chain``, every value typed) or
``zoo.synthetic_transformer(layers)`` (``--model transformer``: symbolic ``batch``/``seq``, no
``value_info``, as dynamo exports are) with a ``.omny`` plan (one configuration per
``--shards`` count, default a 2-shard and a 4-shard one, cutting at evenly spaced block /
layer outputs; cut shapes from the shape layer, cut tensors typed as ``omny plan`` writes
them, or left untyped with ``--untyped-cuts``, as other writers and older files leave them),
saves it, then in the same run times:

* ``onnx_ir.load`` of the file (the reference);
* ``annotate(model)`` (checker gate included) followed by ``check(model)``, sharing one
  :class:`~onnx_ir_multidevice.analysis.GraphIndex` built in the timed region
  (``--no-shared-index``: each call builds its own).

Prints the ratio (target <= 0.10; <= 0.15 for the transformer with three configurations and
untyped cuts) and the time per node at each size (target: growth <= 1.3x from the smallest to
the largest). Best of ``--repeat`` runs for each timing, in CPU time (``time.process_time``:
the machine's cores are shared).

``--breakdown`` also times, at the largest size and on fresh loads, the three steps that
annotate + check cannot skip without giving up a guarantee, each alone: the graph fingerprint
(taken twice: by ``annotate()`` when it keeps its analyses with the graph, and by ``check()``
to prove the graph unchanged before reusing them), the graph index, and the shapes of the cut
tensors (propagated through the nodes they are computed from, no further). Their sum is the
floor of annotate + check as designed, before any rule runs or any annotation is written.

    python benchmarks/annotate.py                # 3000 and 50000 nodes
    python benchmarks/annotate.py --sizes 3000 20000 --repeat 1
    python benchmarks/annotate.py --model transformer --sizes 13000 52000
    python benchmarks/annotate.py --model transformer --sizes 3000 13000 52000 \
        --shards 2,4,8 --untyped-cuts --no-shared-index   # untyped cuts, separate calls
    python benchmarks/annotate.py --model transformer --sizes 13000 52000 --shards 2,4,8 \
        --untyped-cuts --no-shared-index --breakdown      # ... and the floor's three steps
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice import omny
from onnx_ir_multidevice.analysis import GraphIndex
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.graph.fingerprint import GraphFingerprint
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.testing import zoo


def add_plan(model: ir.Model, shards: Sequence[int] = (2, 4), *, typed_cuts: bool = True) -> None:
    """Write one configuration per shard count, cutting at evenly spaced block outputs.

    ``typed_cuts``: give the cut tensors their dtype and shape, as ``omny plan`` writes them
    (``False``: left as they are, untyped in the transformer, as other writers leave them).
    """
    outs = [  # block.<i>.out / layer.<i>.out (not layer.<i>.attn.out)
        v
        for node in model.graph
        for v in node.outputs
        if v.name.endswith(".out") and v.name.count(".") == 2
    ]
    position = {v: i for i, v in enumerate(outs)}
    chosen = {n: [outs[len(outs) * k // n] for k in range(1, n)] for n in shards}
    picks = sorted({v for cuts in chosen.values() for v in cuts}, key=position.__getitem__)
    sizes = ValueSizes(model.graph)  # the shapes a plan writes, typed or not
    if typed_cuts:  # `omny plan` writes its cut tensors typed (the transformer has no types)
        for v in picks:
            if v.shape is None:
                v.type, v.shape = ir.TensorType(sizes.dtype(v)), sizes.shapes.onnx_shape(v)
    cuts = tuple(
        CutPoint(
            id=f"cut_{i + 1}",
            after_node=v.producer().name,
            tensor_name=v.name,
            shape=sizes.static_shape(v),
            cumulative_memory_mb=10 * (i + 1),
            shard_memory_mb=10,
        )
        for i, v in enumerate(picks)
    )
    ids = {v: f"cut_{i + 1}" for i, v in enumerate(picks)}
    configurations = tuple(
        ShardConfiguration(n, (10,) * n, tuple(ids[v] for v in chosen[n])) for n in shards
    )
    omny.write(
        model, OmnyMetadata(cut_points=cuts, sharding=Sharding(configurations=configurations))
    )


def best_of(repeat: int, func) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        result = func()
        best = min(best, time.process_time() - start)
    return best, result


def build(kind: str, num_nodes: int) -> ir.Model:
    """The benchmark model of ``kind`` with about ``num_nodes`` nodes."""
    if kind == "chain":
        return zoo.synthetic_chain(num_nodes)
    return zoo.synthetic_transformer(max(1, round((num_nodes - 16) / 34)))


def measure(
    num_nodes: int,
    repeat: int,
    folder: Path,
    shared_index: bool = True,
    kind: str = "chain",
    shards: Sequence[int] = (2, 4),
    typed_cuts: bool = True,
) -> tuple[float, float]:
    """Return (load seconds, annotate + check seconds) for a model of ``num_nodes`` nodes."""
    model = build(kind, num_nodes)
    add_plan(model, shards, typed_cuts=typed_cuts)
    path = folder / f"{kind}_{num_nodes}.omny"
    ir.save(model, path)
    del model
    load_s, _ = best_of(repeat, lambda: ir.load(path))

    def work() -> list:
        fresh = ir.load(path)
        start = time.process_time()
        index = GraphIndex.for_model(fresh) if shared_index else None
        annotate(fresh, index=index)
        diagnostics = check(fresh, index=index)
        work.elapsed = time.process_time() - start  # type: ignore[attr-defined]
        assert not [d for d in diagnostics if d.is_error], diagnostics
        return diagnostics

    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        work()
        best = min(best, work.elapsed)  # type: ignore[attr-defined]
    return load_s, best


def breakdown(path: Path, repeat: int) -> dict[str, float]:
    """Seconds of each step annotate + check cannot skip, alone, on fresh loads (best of N).

    The shapes are those of the plan's cut tensors, walked from a new index with the cut
    tensors as the focus, as the checker asks for them.
    """
    times: dict[str, float] = {}

    def timed(label: str, func) -> object:
        gc.collect()
        start = time.process_time()
        result = func()
        elapsed = time.process_time() - start
        times[label] = min(times.get(label, float("inf")), elapsed)
        return result

    for _ in range(repeat):
        fresh = ir.load(path)
        graph = fresh.graph
        metadata = omny.read(fresh)
        assert metadata is not None
        names = {cut.tensor_name for cut in metadata.cut_points}
        cuts = [v for node in graph for v in node.outputs if v.name in names]
        timed("fingerprint (x1)", lambda graph=graph: GraphFingerprint(graph))
        index = timed("index", lambda graph=graph: GraphIndex.build(graph))

        def shapes(graph=graph, index=index, cuts=cuts) -> None:
            found = ValueShapes(graph, index=index, focus=cuts)
            assert all(found.symbolic(v) is not None for v in cuts)

        timed("cut shapes", shapes)
        del fresh, graph, index, cuts
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=(3000, 50000))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", choices=("chain", "transformer"), default="chain")
    parser.add_argument(
        "--no-shared-index",
        action="store_true",
        help="let annotate() and check() each build their own graph index",
    )
    parser.add_argument("--shards", default="2,4", help="shard counts, one configuration each")
    parser.add_argument(
        "--untyped-cuts",
        action="store_true",
        help="leave the cut tensors untyped, as other writers do (check infers their shapes)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also time, at the largest size, the steps annotate + check cannot skip",
    )
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    small, large = sizes[0], sizes[-1]
    shared = not args.no_shared_index
    shards = [int(n) for n in args.shards.split(",")]
    typed = not args.untyped_cuts
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            n: measure(n, args.repeat, Path(tmp), shared, args.model, shards, typed) for n in sizes
        }
        steps = (
            breakdown(Path(tmp) / f"{args.model}_{large}.omny", args.repeat)
            if args.breakdown
            else None
        )
    print(f"{'nodes':>8} {'ir.load s':>10} {'annotate+check s':>17} {'ratio':>7} {'us/node':>8}")
    for n, (load_s, work_s) in rows.items():
        ratio, per_node = work_s / load_s, work_s / n * 1e6
        print(f"{n:>8} {load_s:>10.3f} {work_s:>17.3f} {ratio:>7.3f} {per_node:>8.1f}")
    growth = (rows[large][1] / large) / (rows[small][1] / small)
    ratio = rows[large][1] / rows[large][0]
    target = "0.15" if args.model == "transformer" and not typed else "0.10"
    print(f"ratio at {large} nodes: {ratio:.3f} (target <= {target})")
    print(f"time per node growth {small} -> {large}: {growth:.2f}x (target <= 1.3x)")
    if steps is not None:
        load_s, work_s = rows[large]
        print(f"steps annotate + check cannot skip, at {large} nodes (each alone, fresh loads):")
        floor = 2 * steps["fingerprint (x1)"] + steps["index"] + steps["cut shapes"]
        for label, seconds in (*steps.items(), ("floor: 2 fingerprints + index + shapes", floor)):
            print(f"  {label:<40} {seconds:7.3f} s {seconds / load_s:7.3f} x load")
        rest = work_s - floor
        label = "the rest (rules, stages, annotation)"
        print(f"  {label:<40} {rest:7.3f} s {rest / load_s:7.3f} x load")


if __name__ == "__main__":
    main()
