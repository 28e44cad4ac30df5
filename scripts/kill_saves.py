"""SIGKILL a process while it saves a model, again and again, and check what ``load()`` finds.

Not a test by itself: ``tests/test_save_atomicity.py`` runs it with a few kills; run it here
with many. Two models of the same layout, *A* (every weight 1.0) and *B* (every weight 2.0),
each recording its name in ``metadata_props["generation"]``, are saved with external data
(``~--mib`` MiB) over one another in ``FOLDER/m.onnx``:

* ``--kills N`` random kills: a forked child saves A, B, A, B... in a loop and is killed with
  SIGKILL after a random delay (up to 2.5 saves);
* ``--steps``: one kill before *every* file-system call of one save (``os.replace``,
  ``os.rename``, ``os.unlink``, ``os.rmdir``, ``os.fsync``, ``os.chmod``, ``os.mkdir``,
  ``shutil.rmtree``...): the child counts them in a dry run, then a fresh child kills itself
  (SIGKILL, from inside the call) right before call ``k`` for each ``k``.

After each kill ``load()`` must give A or B, whole: every weight equal to the value of the
generation its model records (never the old model with the new weights). After the last kill,
one more save must leave the folder with the model, its data file and nothing else (stale
temporary folders of the killed writers are removed by the next write).

The children are forked from this process, which is single-threaded (BLAS threads are turned
off before numpy loads), so each trial costs a fork and a save, not an interpreter start.

Usage::

    python scripts/kill_saves.py --kills 200 --steps            # a report on stdout
    python scripts/kill_saves.py --kills 8 --steps --json       # what the test suite runs

Exit status: 0 when every trial found A or B whole and the folder was clean at the end, 1
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402  (after the thread settings)
import onnx_ir as ir  # noqa: E402

from onnx_ir_multidevice._errors import OmnyError  # noqa: E402
from onnx_ir_multidevice._proto.files import load, save  # noqa: E402

VALUES = {"A": 1.0, "B": 2.0}
_STEP_CALLS = (
    ("os", "replace"),
    ("os", "rename"),
    ("os", "unlink"),
    ("os", "remove"),
    ("os", "rmdir"),
    ("os", "fsync"),
    ("os", "chmod"),
    ("os", "mkdir"),
    ("shutil", "rmtree"),
)


def make_model(generation: str, mib: int) -> ir.Model:
    """A chain of Adds over ``mib`` MiB of float32 weights, all equal to the generation's value."""
    count = max(1, mib // 4)
    elems = (mib << 20) // 4 // count
    value = VALUES[generation]
    float_type = ir.TensorType(ir.DataType.FLOAT)
    x = ir.Value(name="x", type=float_type, shape=ir.Shape([elems]))
    initializers, nodes, h = [], [], x
    for i in range(count):
        array = np.full((elems,), value, np.float32)
        weight = ir.Value(name=f"w{i}", const_value=ir.tensor(array, name=f"w{i}"))
        weight.type, weight.shape = float_type, ir.Shape([elems])
        initializers.append(weight)
        out = ir.Value(name=f"h{i}")
        nodes.append(ir.Node("", "Add", [h, weight], outputs=[out], name=f"add{i}"))
        h = out
    graph = ir.Graph([x], [h], nodes=nodes, initializers=initializers, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10, metadata_props={"generation": generation})


def inspect(path: Path) -> dict[str, Any]:
    """What ``load(path)`` gives: the generation, and whether every weight matches it."""
    try:
        model = load(path)
    except OmnyError as error:
        return {"loaded": False, "error": f"{type(error).__name__}: {error}"}
    generation = model.metadata_props.get("generation")
    expected = VALUES.get(generation or "")
    mixed = [
        name
        for name, value in model.graph.initializers.items()
        if expected is None or not np.all(value.const_value.numpy() == expected)
    ]
    return {"loaded": True, "generation": generation, "mixed": mixed}


def _fork(target: Any) -> int:
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            target()
        except BaseException:  # a child must not return into the parent's code
            code = 3
        os._exit(code)
    return pid


def _save_forever(path: Path, models: dict[str, ir.Model], first: str) -> None:
    generation = first
    while True:
        save(models[generation], path, external_data=True)
        generation = "B" if generation == "A" else "A"


def _kill_before_call(k: int, count: list[int]) -> None:
    """Wrap the file-system calls so that call ``k`` (0-based) SIGKILLs this process first."""
    import shutil

    modules = {"os": os, "shutil": shutil}
    for module_name, name in _STEP_CALLS:
        module = modules[module_name]
        original = getattr(module, name)

        def wrapper(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if count[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            count[0] += 1
            return _original(*args, **kwargs)

        setattr(module, name, wrapper)


def _count_calls(path: Path, model: ir.Model) -> int:
    """How many wrapped calls one save makes (in a child, so nothing here is patched)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        count = [0]
        _kill_before_call(-1, count)
        code = 0
        try:
            save(model, path, external_data=True)
            os.write(write, str(count[0]).encode())
        except BaseException:
            code = 3
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return int(text)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "m.onnx")


def _is_data_file(name: str) -> bool:
    return name.startswith("m.onnx.") and name.endswith(".data")


def _trial(path: Path, how: str, pid: int, delay: float | None) -> dict[str, Any]:
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    result = {"how": how, "killed": killed, **inspect(path)}
    result["folder"] = _leftovers(path.parent)
    return result


def run(folder: Path, kills: int, steps: bool, mib: int, seed: int) -> dict[str, Any]:
    """Run the trials in ``folder``; the report (see the module docstring)."""
    rng = random.Random(seed)
    models = {g: make_model(g, mib) for g in VALUES}
    path = folder / "m.onnx"
    start = time.perf_counter()
    save(models["A"], path, external_data=True)
    save_seconds = time.perf_counter() - start
    trials: list[dict[str, Any]] = []
    for i in range(kills):
        first = "B" if inspect(path).get("generation") == "A" else "A"
        pid = _fork(lambda first=first: _save_forever(path, models, first))
        delay = rng.uniform(0.0, 2.5 * save_seconds)
        trials.append(_trial(path, f"random #{i} after {delay * 1000:.0f} ms", pid, delay))
    if steps:
        calls = _count_calls(path, models["B"])
        for k in range(calls):
            current = inspect(path).get("generation")
            other = models["B" if current == "A" else "A"]

            def one_save(k: int = k, other: ir.Model = other) -> None:
                _kill_before_call(k, [0])
                save(other, path, external_data=True)

            pid = _fork(one_save)
            trials.append(_trial(path, f"before call {k} of {calls}", pid, None))
    final = inspect(path).get("generation")
    save(models["B" if final == "A" else "A"], path, external_data=True)
    after = _leftovers(folder)
    bad = [t for t in trials if not t.get("loaded") or t.get("mixed")]
    return {
        "mib": mib,
        "save_seconds": round(save_seconds, 4),
        "kills": sum(1 for t in trials if t["killed"]),
        "trials": trials,
        "generations": {g: sum(1 for t in trials if t.get("generation") == g) for g in VALUES},
        "bad": bad,
        "folder_after_next_save": after,
        "ok": not bad and len(after) == 1 and _is_data_file(after[0]),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the report; 0 when every trial was good."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="random kills (default 50)")
    parser.add_argument("--steps", action="store_true", help="also kill before every step")
    parser.add_argument("--mib", type=int, default=48, help="weights in MiB (default 48)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kill-saves-") as temporary:
        folder = args.folder or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        report = run(folder, args.kills, args.steps, args.mib, args.seed)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(
            f"{report['kills']} kills of {len(report['trials'])} trials ({report['mib']} MiB, "
            f"one save {report['save_seconds']} s): found {report['generations']}, "
            f"{len(report['bad'])} bad; folder after the next save: "
            f"{report['folder_after_next_save']}"
        )
        for trial in report["bad"]:
            print("  BAD:", trial)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
