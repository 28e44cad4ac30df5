"""The public API: public module paths in reprs, pickles and the docs."""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
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
            "testing.llama",
            "testing.real_models",
            "examples",
            "omny.container",
            "oaax",
            "oaax.runtime",
            "cli",
            "view",
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
    "view",
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
    assert next(t for t, _ in targets) == ROOT


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


# ---------------------------------------------------------------------------------------------
# docs pages, figure scripts, the README and the notebooks import public modules only

REPO = DOCS.parent


_FENCE = re.compile(r"^```(\{exec_code\}|python)[^\n]*\n(.*?)^```", re.M | re.S)


def _code_blocks(path: Path) -> list[str]:
    """The Python code a docs page, figure script, README or notebook runs or shows."""
    if path.suffix == ".py":
        return [path.read_text(encoding="utf-8")]
    if path.suffix == ".ipynb":
        import json  # only this helper reads notebooks

        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    else:
        sources = [m[2] for m in _FENCE.finditer(path.read_text(encoding="utf-8"))]
    # exec_code options (`:hide_code:`), IPython magics and shell escapes are not Python
    return [
        "\n".join(
            "" if line.lstrip().startswith(("%", "!")) or re.match(r"^:\w+:", line) else line
            for line in source.splitlines()
        )
        for source in sources
    ]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _module_problem(name: str) -> str | None:
    if name != ROOT and not name.startswith(f"{ROOT}."):
        return None
    if name not in PUBLIC_PATHS:
        return f"imports {name}, not a public module"
    return None


def _name_problem(module: str, name: str) -> str | None:
    """What is wrong with ``from module import name`` (a public module), or ``None``."""
    obj = getattr(importlib.import_module(module), name, None)
    if isinstance(obj, types.ModuleType):
        return _module_problem(obj.__name__)
    if name in getattr(importlib.import_module(module), "__all__", ()):
        return None
    if _is_module(f"{module}.{name}"):
        return _module_problem(f"{module}.{name}")
    return f"imports {name} from {module}, which does not declare it public"


def private_imports(source: str) -> list[str]:
    """The imports of private or undeclared modules and names in ``source``.

    ``import m`` and ``from m import n`` of a module that the API page does not declare public
    (``PUBLIC_PATHS``), ``from m import n`` of a name outside a public module's ``__all__``,
    ``import onnx_ir_multidevice as omd`` followed by ``omd.<private module>``, and module
    paths in strings (``importlib.import_module("onnx_ir_multidevice._cli")``).
    """
    problems: list[str | None] = []
    aliases: dict[str, str] = {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                problems.append(_module_problem(alias.name))
                if alias.name.split(".")[0] == ROOT:
                    aliases[alias.asname or ROOT] = alias.name if alias.asname else ROOT
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            problem = _module_problem(node.module)
            problems.append(problem)
            if problem is None and node.module.split(".")[0] == ROOT:
                for alias in node.names:
                    if alias.name != "*":
                        problems.append(_name_problem(node.module, alias.name))
                        obj = getattr(importlib.import_module(node.module), alias.name, None)
                        if isinstance(obj, types.ModuleType):
                            aliases[alias.asname or alias.name] = obj.__name__
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(rf"{ROOT}(\.\w+)+", node.value)
            and _is_module(node.value)
        ):
            problems.append(_module_problem(node.value))
    for node in ast.walk(tree):  # omd.<attribute> chains that reach a module
        if isinstance(node, ast.Attribute):
            chain = []
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                path = aliases[base.id]
                for attr in reversed(chain):
                    if not _is_module(f"{path}.{attr}"):
                        break
                    path = f"{path}.{attr}"
                    problems.append(_module_problem(path))
    return sorted({p for p in problems if p})


def _teaching_files() -> list:
    files = [
        *sorted(DOCS.glob("*.md")),
        *sorted(p for p in DOCS.glob("*.py") if p.name != "conf.py"),
        REPO / "README.md",
        *sorted((REPO / "notebooks").glob("*.ipynb")),
    ]
    params = []
    for path in files:
        params.append(pytest.param(path, id=str(path.relative_to(REPO))))
    return params


@pytest.mark.parametrize("path", _teaching_files())
def test_docs_readme_and_notebooks_import_public_modules_only(path):
    found = [p for source in _code_blocks(path) for p in private_imports(source)]
    assert found == []


def test_the_private_import_finder_finds_private_imports():
    assert private_imports("from onnx_ir_multidevice._cli import main") == [
        "imports onnx_ir_multidevice._cli, not a public module"
    ]
    assert private_imports("from onnx_ir_multidevice.planner.planning import plan") == [
        "imports onnx_ir_multidevice.planner.planning, not a public module"
    ]
    assert private_imports("from onnx_ir_multidevice import _split, zoo") == [
        "imports onnx_ir_multidevice._split, not a public module",
        "imports onnx_ir_multidevice.zoo, not a public module",
    ]
    assert private_imports("import onnx_ir_multidevice.checker.core as c") == [
        "imports onnx_ir_multidevice.checker.core, not a public module"
    ]
    assert private_imports("from onnx_ir_multidevice.planner import weights") == [
        "imports weights from onnx_ir_multidevice.planner, which does not declare it public"
    ]
    assert private_imports("import onnx_ir_multidevice as omd\nomd.planner.memory.MIB") == [
        "imports onnx_ir_multidevice.planner.memory, not a public module"
    ]
    assert private_imports("import importlib\nimportlib.import_module('onnx_ir_multidevice._cli')")
    public = (
        "import onnx_ir_multidevice as omd\nfrom onnx_ir_multidevice import load, omny\n"
        "from onnx_ir_multidevice.testing import zoo\nfrom onnx_ir_multidevice.planner import MIB"
        "\nomd.planner.plan\nomd.runtime.engines.get_engine\nimport numpy.linalg"
    )
    assert private_imports(public) == []
    assert _code_blocks(DOCS / "api.md")  # the page's exec_code block is found


# ---------------------------------------------------------------------------------------------
# names the docs need, the command line as functions, the deprecated zoo location


@pytest.mark.parametrize(
    ("public", "name", "home"),
    [
        (ROOT, "ManifestStage", f"{ROOT}._split.manifest"),
        (f"{ROOT}.planner", "describe", f"{ROOT}.planner.planning"),
        (f"{ROOT}.planner", "MIB", f"{ROOT}.analysis.memory_units"),
        (f"{ROOT}.runtime", "StatsRecorder", f"{ROOT}.runtime.stats"),
        (f"{ROOT}.analysis", "ValueSizes", f"{ROOT}.analysis.sizes"),
        (f"{ROOT}.analysis", "build_metadata", f"{ROOT}.analysis.omny_document"),
        (f"{ROOT}.passes", "stage_weight_bytes", f"{ROOT}.passes.reverse"),
    ],
)
def test_names_the_docs_need_have_a_public_path(public, name, home):
    module = importlib.import_module(public)
    assert name in module.__all__
    assert getattr(module, name) is getattr(importlib.import_module(home), name)


def test_the_command_lines_run_as_functions(capsys):
    from onnx_ir_multidevice import __version__, cli
    from onnx_ir_multidevice._cli import build_parser

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"omny {__version__}"
    assert cli.main(["check"]) == 2  # bad usage: a file is required
    assert cli.oaax_toolchain(["only-one-argument"]) == 2
    assert "exactly two arguments" in capsys.readouterr().err
    assert cli.oaax_toolchain(["--version"]) == 0
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert cli.subcommands() == list(choices)
    assert {"plan", "check", "split", "oaax-convert"} <= set(cli.subcommands())


def test_python_m_cli_runs_omny():
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", f"{ROOT}.cli", "--version"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("omny ")


def test_the_deprecated_zoo_location_warns_and_gives_the_same_builders():
    from onnx_ir_multidevice import zoo as old
    from onnx_ir_multidevice.testing import zoo

    with pytest.warns(DeprecationWarning, match=r"onnx_ir_multidevice\.testing\.zoo\.bert"):
        assert old.bert is zoo.bert
    assert old.__all__ == zoo.__all__
    with pytest.raises(AttributeError, match="no_such_model"):
        old.no_such_model  # noqa: B018
    for name in ("runtime.ray_backend", "analysis.uses"):  # gone, not shimmed
        assert importlib.util.find_spec(f"{ROOT}.{name}") is None
