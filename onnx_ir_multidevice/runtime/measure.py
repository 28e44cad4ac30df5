"""What onnxruntime measurably uses: resident memory of a session and one run, on CPU.

The planner predicts each stage's memory (:class:`~onnx_ir_multidevice.planner.memory.
StageMemory`); :func:`measure_memory` measures it, so the prediction can be checked
(``docs/memory_accuracy.md``, ``benchmarks/memory_accuracy.py``).

How a measurement is made:

* in a **fresh child process** (one per measurement), which imports only NumPy and
  onnxruntime (``_memory_probe.py``), so nothing else grows or shrinks meanwhile;
* the **baseline** is the child's resident size (``VmRSS``) once onnxruntime is imported,
  with the peak (``VmHWM``) reset there through ``/proc/self/clear_refs``;
* then it creates a CPU session from the model file (external data read by onnxruntime
  itself, next to the file), loads the inputs from a ``.npz`` file, and runs once;
* the figures are growths over the baseline: :attr:`MemoryMeasurement.peak_bytes` (highest
  resident size: session creation and the run, inputs and outputs included),
  :attr:`~MemoryMeasurement.steady_bytes` (resident once the run returned),
  :attr:`~MemoryMeasurement.session_bytes` (resident once the session existed).

Session options: the package's defaults (:func:`~onnx_ir_multidevice.runtime.sessions.
session_options`: onnxruntime's default graph optimizations, memory pattern and thread
count), with onnxruntime's CPU arena (``enable_cpu_mem_arena``) on or off as asked. Linux
only (``/proc``).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["MemoryMeasurement", "measure_memory", "measure_sessions", "measure_stages"]

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from onnx_ir_multidevice._errors import VerifyError
from onnx_ir_multidevice._split.manifest import read_manifest

_PROBE = Path(__file__).with_name("_memory_probe.py")


@dataclasses.dataclass(frozen=True)
class MemoryMeasurement:
    """Resident memory an onnxruntime CPU session and one run added to a fresh process.

    .. versionadded:: 0.1
    """

    model: str
    """The model file measured."""

    arena: bool
    """Whether onnxruntime's CPU memory arena was on (``enable_cpu_mem_arena``)."""

    peak_bytes: int
    """Highest resident size over the baseline: session creation, inputs and the run."""

    steady_bytes: int
    """Resident size over the baseline once the run returned (outputs held)."""

    session_bytes: int
    """Resident size over the baseline once the session existed (before the inputs)."""

    session_peak_bytes: int
    """Highest resident size over the baseline while the session was created."""

    anon_bytes: int
    """Growth of anonymous memory (heap, arena) at the end."""

    file_bytes: int
    """Growth of file-backed resident memory at the end (onnxruntime's library pages)."""

    input_bytes: int
    """Bytes of the input arrays fed."""

    output_bytes: int
    """Bytes of the output arrays returned."""

    baseline_bytes: int
    """Resident size of the child with onnxruntime imported (what the growths start from)."""

    create_seconds: float
    """Seconds onnxruntime took to create the session."""

    run_seconds: float
    """Seconds the run took."""

    onnxruntime: str
    """onnxruntime version."""

    peak_reset: bool = True
    """Whether the kernel let the peak be reset at the baseline (else ``peak_bytes`` may
    include what importing onnxruntime used)."""


def measure_memory(
    model: str | os.PathLike,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None,
    *,
    arena: bool = True,
    threads: int | None = None,
    save_outputs: str | os.PathLike | None = None,
    timeout: float | None = 600,
) -> MemoryMeasurement:
    """Measure the resident memory of one onnxruntime CPU session and one run of ``model``.

    See the module docstring for the method.

    Args:
        model: Path of the ``.onnx`` file (its external data next to it).
        inputs: Arrays by input name, or the path of a ``.npz`` file holding them (the
            session's inputs are taken from it by name, extra arrays are ignored).
        arena: onnxruntime's ``enable_cpu_mem_arena``.
        threads: ``intra_op_num_threads`` (``None``: onnxruntime's default).
        save_outputs: Write the outputs to this ``.npz`` file (to feed a next stage).
        timeout: Seconds the child may take.

    Returns:
        The measurement.

    Raises:
        VerifyError: The child failed (onnxruntime cannot load or run the model, an input is
            missing); the message holds its error output.
    """
    return _probe({"model": os.fspath(model)}, inputs, arena, threads, save_outputs, timeout)


def measure_sessions(
    models: Sequence[str | os.PathLike],
    inputs: Mapping[str, np.ndarray] | str | os.PathLike,
    *,
    arena: bool = True,
    threads: int | None = None,
    timeout: float | None = 600,
) -> MemoryMeasurement:
    """Measure several sessions held at once in one process: a tensor-parallel rank's segments.

    Every session is created first, then each runs once in order on the arrays of ``inputs``
    its inputs name (the previous session's outputs are dropped before the next runs). The
    figures are as :func:`measure_memory`'s, over all the sessions together.

    Args:
        models: Paths of the ``.onnx`` files, in the order they run.
        inputs: Arrays by name, or a ``.npz`` file: every input of every session.
        arena: onnxruntime's ``enable_cpu_mem_arena``.
        threads: ``intra_op_num_threads`` (``None``: onnxruntime's default).
        timeout: Seconds the child may take.

    Raises:
        VerifyError: The child failed (see :func:`measure_memory`).

    .. versionadded:: 0.1
    """
    paths = [os.fspath(m) for m in models]
    found = _probe({"models": paths}, inputs, arena, threads, None, timeout)
    return dataclasses.replace(found, model=os.pathsep.join(paths))


def _probe(
    request: dict,
    inputs: Mapping[str, np.ndarray] | str | os.PathLike | None,
    arena: bool,
    threads: int | None,
    save_outputs: str | os.PathLike | None,
    timeout: float | None,
) -> MemoryMeasurement:
    what = request.get("model") or ", ".join(request["models"])
    with tempfile.TemporaryDirectory(prefix="omny-measure-") as folder:
        if inputs is None or isinstance(inputs, Mapping):
            archive = os.path.join(folder, "inputs.npz")
            np.savez(archive, **dict(inputs or {}))  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle
        else:
            archive = os.fspath(inputs)
        request = {
            **request,
            "inputs": archive,
            "arena": bool(arena),
            "threads": threads,
            "save_outputs": None if save_outputs is None else os.fspath(save_outputs),
        }
        done = subprocess.run(
            [sys.executable, str(_PROBE), json.dumps(request)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise VerifyError(f"measuring {what} failed (exit {done.returncode}): {tail}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return MemoryMeasurement(model=what, arena=bool(arena), **report)


def measure_stages(
    directory: str | os.PathLike,
    inputs: Mapping[str, np.ndarray],
    *,
    arena: bool = True,
    threads: int | None = None,
) -> list[MemoryMeasurement]:
    """Measure every stage of a split directory, one child process per stage, in order.

    Stage ``i`` is fed the graph inputs and the outputs of stages ``0..i-1`` (each child
    saves its outputs for the next), so every stage runs on the tensors the pipeline would
    give it, and only one stage is ever loaded at a time.

    Args:
        directory: A folder written by :func:`~onnx_ir_multidevice.save_split`.
        inputs: The graph inputs, by name.
        arena: onnxruntime's ``enable_cpu_mem_arena``.
        threads: ``intra_op_num_threads`` (``None``: onnxruntime's default).

    Returns:
        One measurement per stage, in pipeline order.

    Raises:
        ManifestError: The directory holds no valid manifest.
        VerifyError: A stage could not be measured.
    """
    manifest = read_manifest(directory)
    results = []
    with tempfile.TemporaryDirectory(prefix="omny-measure-") as folder:
        env = dict(inputs)
        for entry in manifest.stages:
            archive = os.path.join(folder, "env.npz")
            np.savez(archive, **env)  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle
            outputs = os.path.join(folder, "outputs.npz")
            results.append(
                measure_memory(
                    manifest.stage_path(entry.index),
                    archive,
                    arena=arena,
                    threads=threads,
                    save_outputs=outputs,
                )
            )
            with np.load(outputs) as produced:
                env.update({name: produced[name] for name in produced.files})
    return results
