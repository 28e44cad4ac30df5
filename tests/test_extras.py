"""The ``test`` extra installs everything the tests import (issue 19)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"

NOT_INSTALLED_HERE = {"tvm": "apache-tvm"}
"""Distributions of modules that some test environments lack (the tests skip without them)."""

SKIPPING_EXTRAS = ("browser",)
"""Extras kept out of ``test`` (CI time) whose tests skip with a reason without them: the
browser test of ``omny view`` also needs a Chromium, which CI machines lack."""


def _requirement_names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def _declared() -> set[str]:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return _requirement_names(
        project["dependencies"] + extras["test"] + [r for e in SKIPPING_EXTRAS for r in extras[e]]
    )


def imported_top_level_modules(source: str) -> set[str]:
    """Top-level names of the modules ``source`` imports, ``pytest.importorskip`` included."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value).split(".")[0])
    return found


def _third_party(module: str) -> bool:
    local = (TESTS / f"{module}.py").is_file() or module == "onnx_ir_multidevice"
    return not local and module not in sys.stdlib_module_names and module != "__future__"


def test_the_test_extra_installs_every_module_the_tests_import():
    declared = _declared()
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for path in sorted(TESTS.rglob("*.py")):
        for module in sorted(imported_top_level_modules(path.read_text(encoding="utf-8"))):
            if not _third_party(module):
                continue
            names = distributions.get(module) or [NOT_INSTALLED_HERE.get(module, module)]
            if not {n.lower().replace("_", "-") for n in names} & declared:
                missing.append(f"{path.name}: {module} ({', '.join(names)})")
    assert missing == []


def test_the_import_finder_sees_every_kind_of_import():
    source = (
        "import numpy.linalg\nfrom onnx import helper\nfrom . import x\n"
        "def f():\n    import grimp\n    tvm = pytest.importorskip('tvm.relay')\n"
    )
    assert imported_top_level_modules(source) == {"numpy", "onnx", "grimp", "tvm"}
    assert _requirement_names(["onnx-ir>=1.1", "ray[default]>=2", "apache_tvm"]) == {
        "onnx-ir",
        "ray",
        "apache-tvm",
    }
