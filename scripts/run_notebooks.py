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

A committed output can go stale while the notebook still runs (a label printed from data the
code now computes differently). For code cells tagged ``check-text`` (cell metadata
``"tags": ["check-text"]``), the text a fresh run prints must say what the committed output
says, numbers aside (timings and measured figures vary between runs): every number is compared
as ``#``, the digits of a name (``fp16``, ``int8``) as they are. A difference fails the
notebook, naming the cell and the first line that differs; ``--write`` refreshes it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
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


CHECK_TEXT_TAG = "check-text"
"""Tag of the code cells whose printed text a fresh run must repeat (numbers aside)."""

_NUMBER = re.compile(r"(?<![A-Za-z_0-9])[0-9]+(?:[.,][0-9]+)*(?:e[+-]?[0-9]+)?")
"""A number, not the digits of a name (``fp16``, ``int8``, ``stage_0``: labels, compared)."""


def masked_text(cell: dict) -> list[str]:
    """The lines a code cell printed (stream and plain-text outputs), every number as ``#``."""
    text = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text.append("".join(output.get("text", "")))
        elif "text/plain" in output.get("data", {}):
            text.append("".join(output["data"]["text/plain"]))
    return [_NUMBER.sub("#", line.rstrip()) for line in "".join(text).splitlines()]


def stale_outputs(committed: list[dict], fresh: list[dict]) -> str | None:
    """Compare the ``check-text`` cells of a notebook as committed and as run again.

    Returns:
        What differs first (cell number and the two lines), or ``None``.
    """
    for number, (old, new) in enumerate(zip(committed, fresh, strict=False), 1):
        if CHECK_TEXT_TAG not in old.get("metadata", {}).get("tags", []):
            continue
        before, after = masked_text(old), masked_text(new)
        if before != after:
            pairs = zip(before + [""] * len(after), after + [""] * len(before), strict=True)
            first = next((pair for pair in pairs if pair[0] != pair[1]), ("", ""))
            return (
                f"cell {number} (tagged {CHECK_TEXT_TAG}) prints other text than its "
                f"committed output (numbers aside): committed {first[0]!r}, now {first[1]!r}; "
                "rerun with --write"
            )
    return None


def run_notebook(path: Path, timeout: int, *, write: bool = False) -> str | None:
    """Execute one notebook; return an error description, or ``None`` when it ran cleanly.

    With ``write``, a notebook that ran cleanly is written back with its outputs; without
    it, the text of its ``check-text`` cells must repeat the committed one (numbers aside).
    """
    nb = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(nb.metadata)
    committed = copy.deepcopy(nb.cells)
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
    if not write:
        return stale_outputs(committed, nb.cells)
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
