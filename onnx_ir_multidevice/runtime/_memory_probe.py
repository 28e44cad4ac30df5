"""Child process of :func:`onnx_ir_multidevice.runtime.measure.measure_memory` (run by path).

Imports only the standard library, NumPy and onnxruntime, so that what the measurement sees
grow is the session and its run, nothing of the package. Reads one JSON argument::

    {"model": PATH, "inputs": NPZ or null, "arena": bool, "threads": int or null,
     "save_outputs": NPZ or null}

or, for the sessions of one tensor-parallel rank, ``"models": [PATH, ...]`` instead of
``"model"``: every session is created first (all held at once, as the rank holds them), then
each runs once in order, its inputs read by name from ``inputs`` and its outputs dropped
before the next runs (no ``save_outputs``).

and prints one JSON object on stdout (see :class:`~onnx_ir_multidevice.runtime.measure.
MemoryMeasurement` for the fields). Memory figures come from ``/proc/self/status``
(``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile``); the peak is reset with
``/proc/self/clear_refs`` (``5``) before the baseline is read, so ``VmHWM`` afterwards is the
peak since the baseline.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnxruntime as ort

_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")


def _status() -> dict[str, int]:
    """The memory fields of ``/proc/self/status``, in bytes."""
    found = {}
    with open("/proc/self/status", encoding="ascii") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in _FIELDS:
                found[key] = int(value.split()[0]) * 1024
    return found


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident size; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as file:
            file.write("5")
    except OSError:
        return False
    return True


def main(argument: str) -> None:
    request = json.loads(argument)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = bool(request["arena"])
    if request.get("threads"):
        options.intra_op_num_threads = int(request["threads"])
    reset = _reset_peak()
    base = _status()
    paths = request["models"] if request.get("models") else [request["model"]]
    start = time.perf_counter()
    sessions = [
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]) for path in paths
    ]
    created_seconds = time.perf_counter() - start
    created = _status()
    input_bytes = output_bytes = 0
    run_seconds = 0.0
    outputs: list = []
    archive = np.load(request["inputs"]) if request.get("inputs") else None
    try:
        for path, session in zip(paths, sessions, strict=True):
            names = set(archive.files) if archive is not None else set()
            feeds: dict[str, np.ndarray] = {
                meta.name: archive[meta.name]  # type: ignore[index]
                for meta in session.get_inputs()
                if meta.name in names
            }
            missing = [i.name for i in session.get_inputs() if i.name not in feeds]
            if missing:
                raise SystemExit(f"no array for the input(s) {missing} of {path}")
            input_bytes += sum(int(a.nbytes) for a in feeds.values())
            outputs = []  # the previous session's outputs are dropped first
            start = time.perf_counter()
            outputs = session.run(None, feeds)
            run_seconds += time.perf_counter() - start
            output_bytes += sum(int(np.asarray(o).nbytes) for o in outputs)
    finally:
        if archive is not None:
            archive.close()
    after = _status()
    output_names = [o.name for o in sessions[-1].get_outputs()]
    if request.get("save_outputs"):
        np.savez(request["save_outputs"], **dict(zip(output_names, outputs, strict=True)))
    report = {
        "baseline_bytes": base["VmRSS"],
        "peak_bytes": after["VmHWM"] - base["VmRSS"],
        "session_bytes": created["VmRSS"] - base["VmRSS"],
        "session_peak_bytes": created["VmHWM"] - base["VmRSS"],
        "steady_bytes": after["VmRSS"] - base["VmRSS"],
        "anon_bytes": after["RssAnon"] - base["RssAnon"],
        "file_bytes": after["RssFile"] - base["RssFile"],
        "input_bytes": input_bytes,
        "output_bytes": output_bytes,
        "peak_reset": reset,
        "create_seconds": created_seconds,
        "run_seconds": run_seconds,
        "onnxruntime": ort.__version__,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
