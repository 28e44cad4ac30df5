"""Benchmark: what the data check costs at load, and what a save next to the data writes.

Issue 17 §9. Builds a model with ``--mib`` MiB of float32 weights (a chain of ``Add`` nodes
over ``--tensors`` initializers), saves it with :func:`onnx_ir_multidevice.save` (external
data, with the data record), then times, interleaved over ``--repeats`` rounds, in the same
run:

* ``onnx_ir.load`` of that file (the baseline: no check at all);
* ``load`` (the default check: a ``stat`` of the data file against the record);
* ``load(verify_data=True)`` (the full check: the CRC-32 of the whole data file).

It prints the medians and their ratios to ``onnx_ir.load``. Then, as ``omny plan model.onnx
-o model.omny`` does, it saves an exporter-written model (``onnx_ir.save``, no record) next to
its data, which refers to the data in place, and into another folder (a copy), and prints the
time and the bytes each wrote.

Run: ``.venv/bin/python benchmarks/load_check.py [--mib 400] [--tensors 100] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice import load, save


def make_model(mib: int, tensors: int) -> ir.Model:
    """``y = x + w0 + w1 + ...``: ``tensors`` float32 weights, ``mib`` MiB in all."""
    elems = max(1, (mib << 20) // 4 // tensors)
    float_type = ir.TensorType(ir.DataType.FLOAT)
    x = ir.Value(name="x", type=float_type, shape=ir.Shape([elems]))
    rng = np.random.default_rng(0)
    initializers, nodes, h = [], [], x
    for i in range(tensors):
        array = rng.standard_normal(elems, dtype=np.float32)
        weight = ir.Value(name=f"w{i}", const_value=ir.tensor(array, name=f"w{i}"))
        weight.type, weight.shape = float_type, ir.Shape([elems])
        initializers.append(weight)
        out = ir.Value(name=f"h{i}")
        nodes.append(ir.Node("", "Add", [h, weight], outputs=[out], name=f"add{i}"))
        h = out
    graph = ir.Graph([x], [h], nodes=nodes, initializers=initializers, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def _time(function: Callable[[], object], rounds: list[float]) -> None:
    """Append the seconds one call of ``function`` takes to ``rounds``."""
    start = time.perf_counter()
    function()
    rounds.append(time.perf_counter() - start)


def _written(folder: Path, before: set[str]) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name not in before)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=400)
    parser.add_argument("--tensors", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    model = make_model(args.mib, args.tensors)
    with tempfile.TemporaryDirectory(prefix="load-check-") as temporary:
        root = Path(temporary)
        path = root / "m.omny"
        save(model, path, external_data=True)
        data_bytes = (root / "m.omny.data").stat().st_size
        times: dict[str, list[float]] = {"onnx_ir.load": [], "load": [], "load(verify_data)": []}
        for _ in range(args.repeats):
            _time(lambda: ir.load(path), times["onnx_ir.load"])
            _time(lambda: load(path), times["load"])
            _time(lambda: load(path, verify_data=True), times["load(verify_data)"])
        base = statistics.median(times["onnx_ir.load"])
        print(f"model: {args.tensors} weights, {data_bytes / 2**20:.0f} MiB of external data")
        for name, values in times.items():
            median = statistics.median(values)
            ratio = median / base
            print(f"  {name:<20} median {median * 1000:8.1f} ms   {ratio:6.2f}x onnx_ir.load")

        exported = root / "exported"
        exported.mkdir()
        ir.save(model, exported / "model.onnx", external_data="model.onnx.data")
        before = {p.name for p in exported.iterdir()}
        start = time.perf_counter()
        save(load(exported / "model.onnx"), exported / "model.omny")
        in_place = time.perf_counter() - start
        print(
            f"save next to the data (as omny plan -o): {in_place * 1000:.1f} ms, "
            f"{_written(exported, before) / 2**20:.2f} MiB written"
        )
        other = root / "other"
        other.mkdir()
        start = time.perf_counter()
        save(load(exported / "model.onnx"), other / "model.omny")
        copied = time.perf_counter() - start
        print(
            f"save into another folder (a copy):       {copied * 1000:.1f} ms, "
            f"{_written(other, set()) / 2**20:.2f} MiB written"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
