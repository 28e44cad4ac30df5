"""Regenerate docs/_static/view_model_explorer.png with the browser test of tests/test_view.py.

Needs the ``view`` extra, playwright and Debian's ``chromium`` on PATH:

    PYTHONPATH=$PWD python scripts/view_screenshot.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    shot = ROOT / "docs" / "_static" / "view_model_explorer.png"
    env = {**os.environ, "OMNY_VIEW_SCREENSHOT": str(shot), "PYTHONPATH": str(ROOT)}
    test = "tests/test_view.py::test_viewer_shows_the_stages_in_headless_chromium"
    command = [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider", "-rs"]
    sys.exit(subprocess.run(command, cwd=ROOT, env=env, check=False).returncode)
