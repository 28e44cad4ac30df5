"""Execute every notebook in notebooks/ top to bottom; fail on the first error in any of them.

Usage: ``python scripts/run_notebooks.py [--write] [NOTEBOOK ...]`` (default:
``notebooks/*.ipynb`` in name order). Each notebook runs in a fresh kernel of *this* Python
interpreter (a private kernelspec, so a ``python3`` kernel installed elsewhere on the machine is
not picked up), with its own folder as the working directory, as Jupyter does. One line per
notebook; exit status 1 if any notebook failed, 0 otherwise (also when there is no notebook
yet).

The notebooks are committed with their outputs, so that a reader browsing the repository sees
them. ``--write`` writes the outputs of a notebook that ran cleanly back into its file (its
metadata, kernelspec included, kept as it was; no execution timings); without it (as CI runs
it) nothing is written. Rerun with ``--write`` after changing a notebook or what it shows.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

ROOT = Path(__file__).resolve().parent.parent
KERNEL_NAME = "onnx-ir-multidevice-runner"


def _private_kernelspec(folder: Path) -> None:
    """Write a kernelspec that starts ipykernel with this interpreter, and put it first."""
    spec_dir = folder / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(folder), *filter(None, [os.environ.get("JUPYTER_PATH")])]
    )


def run_notebook(path: Path, timeout: int, *, write: bool = False) -> str | None:
    """Execute one notebook; return an error description, or ``None`` when it ran cleanly.

    With ``write``, a notebook that ran cleanly is written back with its outputs.
    """
    nb = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(nb.metadata)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=KERNEL_NAME,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as error:
        return str(error)
    if write:
        nb.metadata = metadata  # the private kernelspec is this script's, not the notebook's
        nbformat.validate(nb)
        text = nbformat.writes(nb) + "\n"
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the notebooks; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--write", action="store_true", help="write the outputs back into each notebook"
    )
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not paths:
        print("run_notebooks: no notebook found in notebooks/")
        return 0
    failures = 0
    with tempfile.TemporaryDirectory(prefix="omny-kernels-") as tmp:
        _private_kernelspec(Path(tmp))
        for path in paths:
            start = time.perf_counter()
            error = run_notebook(path.resolve(), args.timeout, write=args.write)
            took = time.perf_counter() - start
            name = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
            if error is None:
                print(f"ok      {name} ({took:.1f} s)", flush=True)
            else:
                failures += 1
                print(f"FAILED  {name} ({took:.1f} s)\n{error}", flush=True)
    print(f"run_notebooks: {len(paths) - failures} of {len(paths)} notebooks ran top to bottom")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
