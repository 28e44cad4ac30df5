"""Sphinx configuration of the onnx-ir-multidevice documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``scripts/test`` does).
Pages are Markdown (MyST). Every ``{exec_code}`` block runs during the build, in a fresh Python
process whose working directory is the repository root; a failing example fails the build.
No network access is needed (intersphinx is off).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # autodoc imports the package from the source tree

project = "onnx-ir-multidevice"
author = "onnx-ir-multidevice developers"
copyright = "onnx-ir-multidevice developers"  # noqa: A001
try:
    from onnx_ir_multidevice import __version__ as release
except Exception:  # the package must import for autodoc anyway; keep conf.py loadable
    release = "0.1.0"
version = release

extensions = [
    "myst_parser",
    "sphinx_exec_code",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
nitpicky = False

# MyST
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# sphinx-exec-code: run examples from the repository root, importing the source tree.
exec_code_working_dir = str(ROOT)
exec_code_source_folders = [str(ROOT)]

# autodoc / napoleon (Google-style docstrings)
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# HTML
html_theme = "furo"
html_title = f"onnx-ir-multidevice {release}"
html_static_path: list[str] = []
