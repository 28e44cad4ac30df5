"""Time to produce Model Explorer overlays for a planned graph, as a ratio to ``onnx_ir.load``.

The planned model is either ``zoo.synthetic_transformer`` with about ``--nodes`` nodes
(``--nodes 50000``: 1470 layers) or the model at ``--model PATH`` (for instance the 1.1B
decoder of ``benchmarks/llm.py``), planned into 2 and 4 stages with ``plan_model`` (the model
at ``--model`` at the dims of ``benchmarks/llm.py``: batch 1, seq 128, past_seq 1, total_seq
129, relaxed cuts) and saved as a ``.omny``. Then, best of ``--repeat`` each, alternated, every
call in a fresh child process (so no call inherits another's heap):

- ``onnx_ir.load`` of the ``.omny`` (external data stays lazy);
- ``prepare(FILE, OUT, write_model=False)`` (what ``omny view FILE --write OUT`` does: load,
  annotate, name the nodes as the adapter does, FLOP estimate, one node-data file per
  configuration), with this checkout's code and, with ``--baseline DIR``, with the code of
  another checkout (``DIR`` holds its ``onnx_ir_multidevice``), alternately.

It prints wall and CPU seconds, the ratios to ``onnx_ir.load`` and the overlay files' sizes.

The ``.omny`` of ``--model`` must not copy the weights: it is saved beside the model (a
``scratch-view-<random>.omny`` removed afterwards), so ``save`` references the model's data
files in place (same folder, ``"owned": false``) and writes the graph only; the script stops if
the ``.omny`` reads any other data file. (A hard-linked copy in another folder is no way out:
``load`` refuses a data file with two names, as onnxruntime does.)

    PYTHONPATH=$PWD python benchmarks/view.py --nodes 50000 [--baseline DIR]
    PYTHONPATH=$PWD python benchmarks/view.py --model /work/llm-data/tinyllama-1.1b-kv.onnx
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx_ir as ir

from onnx_ir_multidevice import load, omny, save
from onnx_ir_multidevice.planner import plan_model
from onnx_ir_multidevice.testing import zoo

ROOT = Path(__file__).resolve().parent.parent
LLM_DIMS = {"batch": 1, "seq": 128, "past_seq": 1, "total_seq": 129}
"""The planning dims of ``benchmarks/llm.py``: a 128-token prefill after one cached token."""

_CHILD = """
import json, sys, time
path, out, what = sys.argv[1:4]
if what == "load":
    import onnx_ir as ir
    call = lambda: ir.load(path)
else:
    from onnx_ir_multidevice.view import prepare
    call = lambda: prepare(path, out, write_model=False)
wall, cpu = time.perf_counter(), time.process_time()
call()
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))
"""


def _timed(code: Path, path: Path, out: Path, what: str) -> dict[str, float]:
    """One call in a fresh child process importing the package from ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [sys.executable, "-c", _CHILD, str(path), str(out), what]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def _data_files(model: Path) -> set[str]:
    """The external data files ``model`` reads, relative to its folder."""
    found = set()
    for graph in ir.load(model).graphs():
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                found.add(os.path.normpath(value.const_value.location))
    return found


@contextmanager
def _planned_model(model: Path) -> Iterator[Path]:
    """``model`` planned into 2 and 4 stages, as a ``.omny`` beside it that borrows its data."""
    folder = model.parent
    path = folder / f"scratch-view-{secrets.token_hex(4)}.omny"
    loaded = load(model)
    result = plan_model(loaded, shards=[2, 4], dims=LLM_DIMS, relaxed=True)
    omny.write(loaded, result.metadata)
    try:
        save(loaded, path, overwrite=False)
        del loaded
        if not _data_files(path) <= _data_files(model):
            raise SystemExit(f"{path} reads weights from a new data file: they were copied")
        yield path
    finally:
        path.unlink(missing_ok=True)


@contextmanager
def _planned_synthetic(nodes: int) -> Iterator[Path]:
    model = zoo.synthetic_transformer(max(1, round((nodes - 16) / 34)))
    result = plan_model(model, shards=[2, 4], dims={"batch": 1, "seq": 16})
    omny.write(model, result.metadata)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.omny"
        save(model, path)
        yield path


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: min(r[key] for r in runs) for key in ("wall", "cpu")}


def _measure(path: Path, repeat: int, baseline: Path | None) -> None:
    codes = {"new": ROOT} | ({"baseline": baseline} if baseline is not None else {})
    runs: dict[str, list[dict[str, float]]] = {"load": [], **{name: [] for name in codes}}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(repeat):
            runs["load"].append(_timed(ROOT, path, Path(out) / "load", "load"))
            for name, code in codes.items():
                runs[name].append(_timed(code, path, Path(out) / name, "prepare"))
        print(f"nodes: {len(ir.load(path).graph)}; .omny {path.stat().st_size / 2**20:.1f} MiB")
        load_s = _best(runs["load"])
        print(f"onnx_ir.load: {load_s['wall']:.2f} s wall, {load_s['cpu']:.2f} s CPU")
        for name in codes:
            best = _best(runs[name])
            print(
                f"overlays ({name}): {best['wall']:.2f} s wall, {best['cpu']:.2f} s CPU; ratio "
                f"to load {best['wall'] / load_s['wall']:.2f} wall, "
                f"{best['cpu'] / load_s['cpu']:.2f} CPU"
            )
        print(f"best of {repeat}; each run (wall s):")
        for name, found in runs.items():
            print(f"  {name}: " + ", ".join(f"{r['wall']:.2f}" for r in found))
        for file in sorted((Path(out) / "new").iterdir()):
            print(f"  {file.name}: {file.stat().st_size / 2**20:.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--nodes", type=int, default=50_000, help="synthetic graph size")
    source.add_argument("--model", type=Path, help="plan this model instead")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (3)")
    parser.add_argument("--baseline", type=Path, help="a checkout to time alternately")
    args = parser.parse_args()
    if args.model is not None:
        model = args.model.resolve()
        print(f"model: {model} (dims {LLM_DIMS}, relaxed cuts)")
        with _planned_model(model) as path:
            _measure(path, args.repeat, args.baseline)
    else:
        with _planned_synthetic(args.nodes) as path:
            _measure(path, args.repeat, args.baseline)


if __name__ == "__main__":
    main()
