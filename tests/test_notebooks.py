"""The notebooks are committed executed, so that a reader browsing the repository sees them.

``scripts/run_notebooks.py`` executes them in CI (``scripts/test``) without writing; its
``--write`` refreshes the committed outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_its_outputs(path: Path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    counts = [cell.get("execution_count") for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), "run scripts/run_notebooks.py --write"
    assert any(cell.get("outputs") for cell in cells)
    kernel = notebook["metadata"].get("kernelspec", {}).get("name")
    assert kernel == "python3", "the runner's private kernelspec leaked into the notebook"
    text = path.read_text(encoding="utf-8")
    assert "/tmp/" not in text and str(Path.home()) + "/" not in text, "a local path leaked"
