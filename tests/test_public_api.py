"""The public API: public module paths in reprs, pickles and the docs."""

from __future__ import annotations

import copy
import importlib
import pickle
import re
import types
from pathlib import Path

import pytest

import onnx_ir_multidevice

ROOT = "onnx_ir_multidevice"
DOCS = Path(__file__).resolve().parent.parent / "docs"

PUBLIC_PATHS = (
    ROOT,
    *(
        f"{ROOT}.{name}"
        for name in (
            "omny",
            "binding",
            "checker",
            "passes",
            "planner",
            "runtime",
            "runtime.engines",
            "analysis",
            "graph",
            "exporters",
            "testing",
            "testing.zoo",
            "testing.real_models",
            "examples",
            "omny.container",
            "oaax",
            "oaax.runtime",
        )
    ),
)
"""Where the API page may document names (every other module is an implementation detail)."""

SET_MODULE = (
    "omny",
    "binding",
    "checker",
    "passes",
    "planner",
    "runtime",
    "analysis",
    "graph",
    "exporters",
    "oaax",
)
"""Public subpackages whose classes and functions show the public module path."""

PENDING: dict[str, str] = {}
"""Packages whose ``__init__`` does not call ``set_public_module`` yet (edited in parallel);
each needs ``set_public_module(globals(), root={<its root names>})`` at the end."""


def _is_code(obj: object) -> bool:
    return isinstance(obj, (type, types.FunctionType))


def _home(name: str) -> str:
    """The package a root name is imported from (``_HOMES``, up to the layer folder)."""
    return onnx_ir_multidevice._HOMES[name].removeprefix(f"{ROOT}.").split(".")[0]


ROOT_CODE = sorted(
    name for name in onnx_ir_multidevice.__all__ if _is_code(getattr(onnx_ir_multidevice, name))
)


def _pending(values: object, home: str):
    marks = ()
    if home in PENDING:
        marks = pytest.mark.xfail(
            strict=True, reason=f"{PENDING[home]} does not call set_public_module yet"
        )
    return pytest.param(*(values if isinstance(values, tuple) else (values,)), marks=marks)


@pytest.mark.parametrize("name", [_pending(n, _home(n)) for n in ROOT_CODE])
def test_root_names_show_the_root_module(name):
    obj = getattr(onnx_ir_multidevice, name)
    assert obj.__module__ == ROOT
    assert f"{ROOT}.{name}" in repr(obj) or obj.__qualname__ == name


def _subpackage_code() -> list:
    pairs = []
    for package in (*SET_MODULE, *(p for p in PENDING if not p.startswith("_"))):
        module = importlib.import_module(f"{ROOT}.{package}")
        for name in module.__all__:
            obj = getattr(module, name)
            if _is_code(obj) and name not in onnx_ir_multidevice.__all__:
                pairs.append(_pending((package, name), package))
    return pairs


@pytest.mark.parametrize(("package", "name"), _subpackage_code())
def test_subpackage_names_show_a_public_module(package, name):
    obj = getattr(importlib.import_module(f"{ROOT}.{package}"), name)
    # its own package, or the public package it is re-exported from (analysis <- graph)
    assert obj.__module__ in PUBLIC_PATHS, obj.__module__
    assert getattr(importlib.import_module(obj.__module__), name) is obj


def test_public_classes_still_pickle_and_copy():
    from onnx_ir_multidevice.checker import Diagnostic, Severity
    from onnx_ir_multidevice.examples import SPEC_EXAMPLE_JSON
    from onnx_ir_multidevice.exporters import ExportResult
    from onnx_ir_multidevice.omny import OmnyMetadata

    assert OmnyMetadata.__module__ == ROOT
    metadata = OmnyMetadata.from_json(SPEC_EXAMPLE_JSON.read_text())
    diagnostic = Diagnostic("OMNY132", Severity.ERROR, "m", "model")
    result = ExportResult("split", Path("/tmp/x"), (Path("/tmp/x/a"),), None, {"n": 1})
    for obj in (metadata, diagnostic, Severity.WARNING, result, metadata.cut_points[0]):
        for clone in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert clone == obj
            assert type(clone) is type(obj)
    assert pickle.loads(pickle.dumps(metadata)).to_json() == metadata.to_json()
    assert pickle.loads(pickle.dumps(onnx_ir_multidevice.check)) is onnx_ir_multidevice.check
    assert "onnx_ir_multidevice.OmnyMetadata" in repr(OmnyMetadata)


def test_set_public_module_refuses_a_root_name_outside_all():
    from onnx_ir_multidevice._util import set_public_module

    with pytest.raises(ValueError, match="not in __all__"):
        set_public_module({"__name__": "pkg", "__all__": ["a"], "a": len}, root={"b"})


# ---------------------------------------------------------------------------------------------
# docs/api.md documents public paths only, and every documented name imports from there


def _automodule_targets() -> list[tuple[str, set[str]]]:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    targets = []
    for match in re.finditer(r"\.\. automodule:: (\S+)\n((?:   :.*\n)*)", page):
        options = match[2]
        excluded = re.search(r":exclude-members: (.*)", options)
        names = {n.strip() for n in excluded[1].split(",")} if excluded else set()
        targets.append((match[1], names))
    return targets


def test_api_page_documents_public_paths_only():
    targets = _automodule_targets()
    assert [t for t, _ in targets if t not in PUBLIC_PATHS] == []
    assert {t for t, _ in targets} == set(PUBLIC_PATHS) - {f"{ROOT}.testing"}
    assert [t for t, _ in targets][0] == ROOT


def _documented() -> dict[str, list[str]]:
    """The names each automodule section of the API page documents."""
    documented = {}
    for target, excluded in _automodule_targets():
        module = importlib.import_module(target)
        documented[target] = [n for n in getattr(module, "__all__", ()) if n not in excluded]
    return documented


@pytest.mark.parametrize(("target", "excluded"), _automodule_targets())
def test_every_documented_name_imports_from_its_documented_path(target, excluded):
    module = importlib.import_module(target)
    names = list(getattr(module, "__all__", ()))
    assert names, f"{target} has no __all__: the page would document what it imports"
    for name in names:
        assert hasattr(module, name), f"{target}.{name}"
    # a name left out of a section is documented in another one, as the same object
    assert excluded <= set(names)
    elsewhere = {
        id(getattr(importlib.import_module(other), name))
        for other, others in _documented().items()
        if other != target
        for name in others
    }
    for name in excluded:
        assert id(getattr(module, name)) in elsewhere, f"{target}.{name} is documented nowhere"


def test_every_class_and_function_is_documented_once():
    where: dict[int, list[str]] = {}
    for target, names in _documented().items():
        module = importlib.import_module(target)
        for name in names:
            obj = getattr(module, name)
            if _is_code(obj):
                where.setdefault(id(obj), []).append(f"{target}.{name}")
    assert [paths for paths in where.values() if len(paths) > 1] == []


_ROLE = re.compile(r"\{(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj)\}`~?([^`<]+?)`")


def test_docs_pages_cross_reference_public_paths():
    private = []
    for page in sorted(DOCS.glob("*.md")):
        for target in _ROLE.findall(page.read_text(encoding="utf-8")):
            if target.startswith(ROOT) and any(p.startswith("_") for p in target.split(".")):
                private.append(f"{page.name}: {target}")
    assert private == []


def test_docs_cross_references_point_at_documented_names():
    sections = set(_documented())
    names = {f"{target}.{name}" for target, names in _documented().items() for name in names}
    wrong = []
    for page in sorted(DOCS.glob("*.md")):
        for target in _ROLE.findall(page.read_text(encoding="utf-8")):
            if not target.startswith(ROOT) or target in sections or target in names:
                continue
            parts = target.split(".")
            owners = {".".join(parts[:i]) for i in range(1, len(parts))}
            if not owners & names:  # not a method or attribute of a documented class either
                wrong.append(f"{page.name}: {target}")
    assert wrong == []
