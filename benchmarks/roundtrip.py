"""Benchmark: our load + save against plain onnx_ir.load + onnx_ir.save, same model, same run.

Builds a synthetic chain model (default 50 000 nodes, see ``_synthetic.py``), saves it to a
temporary folder, then times, interleaved over several repeats:

* ours:     ``onnx_ir_multidevice._proto.files.load`` + ``onnx_ir_multidevice._proto.files.save``
* baseline: ``onnx_ir.load`` + ``onnx_ir.save``

and prints min and median of each, the ratio of medians and PASS/MISS against the target
ratio (<= 1.10). Our save also fsyncs and renames atomically; the baseline does neither.

Run: ``.venv/bin/python benchmarks/roundtrip.py [--nodes 50000] [--repeats 5] [--stages 4]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx_ir as ir

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _synthetic import make_chain_model  # noqa: E402

from onnx_ir_multidevice._proto import files as _io  # noqa: E402

TARGET_RATIO = 1.10


def _ours(src: Path, dst: Path) -> None:
    _io.save(_io.load(src), dst)


def _baseline(src: Path, dst: Path) -> None:
    ir.save(ir.load(src), dst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--stages", type=int, default=4, help="pipeline stages annotated on every node (0: none)"
    )
    args = parser.parse_args(argv)

    model = make_chain_model(args.nodes, num_stages=args.stages or None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = folder / "model.onnx"
        ir.save(model, src)
        del model
        size_mb = src.stat().st_size / 2**20
        print(f"model: {args.nodes} nodes, {size_mb:.1f} MiB, stages={args.stages}")
        times: dict[str, list[float]] = {"ours": [], "baseline": []}
        runs = {"ours": _ours, "baseline": _baseline}
        for r in range(args.repeats):
            order = ("ours", "baseline") if r % 2 == 0 else ("baseline", "ours")
            for name in order:
                start = time.perf_counter()
                runs[name](src, folder / f"{name}.onnx")
                times[name].append(time.perf_counter() - start)
        if (folder / "ours.onnx").read_bytes() != (folder / "baseline.onnx").read_bytes():
            print("note: outputs differ in bytes (expected only where onnx-ir loses information)")
    for name, values in times.items():
        print(
            f"{name:>8}: min {min(values):.3f} s  median {statistics.median(values):.3f} s  "
            f"({', '.join(f'{v:.3f}' for v in values)})"
        )
    ratio = statistics.median(times["ours"]) / statistics.median(times["baseline"])
    ratio_min = min(times["ours"]) / min(times["baseline"])
    verdict = "PASS" if ratio <= TARGET_RATIO else "MISS"
    print(
        f"ratio ours/baseline: median {ratio:.3f}, min {ratio_min:.3f} "
        f"(target <= {TARGET_RATIO}): {verdict}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
