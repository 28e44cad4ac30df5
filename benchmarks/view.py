"""Time to produce Model Explorer overlays for a planned graph, as a ratio to ``onnx_ir.load``.

Builds ``zoo.synthetic_transformer`` with about ``--nodes`` nodes (``--nodes 50000``: 1470
layers), plans it into 2 and 4 stages, saves it, then times ``onnx_ir.load`` of the file and
the overlays (load, annotate, name the nodes as the adapter does, FLOP estimate, one file per
configuration) and prints the ratio and the file sizes.

    PYTHONPATH=$PWD python benchmarks/view.py --nodes 50000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice import omny, save
from onnx_ir_multidevice.planner import plan_model
from onnx_ir_multidevice.testing import zoo
from onnx_ir_multidevice.view import prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    args = parser.parse_args()
    model = zoo.synthetic_transformer(max(1, round((args.nodes - 16) / 34)))
    result = plan_model(model, shards=[2, 4], dims={"batch": 1, "seq": 16})
    omny.write(model, result.metadata)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.omny"
        save(model, path)
        start = time.perf_counter()
        loaded = ir.load(path)
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        (overlay,) = prepare(path, Path(folder) / "out", write_model=False)
        view_s = time.perf_counter() - start
        print(f"nodes: {len(loaded.graph)}")
        print(
            f"onnx_ir.load: {load_s:.2f} s; overlays: {view_s:.2f} s; ratio {view_s / load_s:.1f}"
        )
        for item in overlay.node_data:
            assert item.path is not None
            print(f"  {item.path.name}: {item.path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
