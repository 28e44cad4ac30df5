"""The package's layers: downward imports only, no import cycle, no hidden function-level imports.

The layers contract itself is import-linter's (``[tool.importlinter]`` in ``pyproject.toml``,
run by ``scripts/test`` as ``lint-imports``); these tests add what a layers contract does not
see: cycles inside one layer, and imports hidden inside functions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

PACKAGE = "onnx_ir_multidevice"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def _strongly_connected(adjacency: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module (or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in adjacency:
        if start in index:
            continue
        work = [(start, iter(adjacency[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(adjacency[successor])))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in adjacency[node]:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_counting_imports_inside_functions():
    graph = grimp.build_graph(PACKAGE)
    adjacency = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _strongly_connected(adjacency) == []


def test_the_cycle_finder_finds_cycles():
    assert _strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [
        ["a", "b", "c"]
    ]
    assert _strongly_connected({"a": ["a"]}) == [["a"]]
    assert _strongly_connected({"a": ["b"], "b": []}) == []


def _function_level_imports(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, text, explained)`` for each import of the package inside a function.

    An import is explained when a comment says why it is there: on its own line, on the line
    before it, or on the first import of the run of consecutive imports it belongs to.
    """
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        explained_run = False
        previous_end = None
        for statement in function.body:
            is_import = isinstance(statement, (ast.Import, ast.ImportFrom))
            if not is_import:
                explained_run = False
                previous_end = None
                continue
            module = (
                statement.module
                if isinstance(statement, ast.ImportFrom)
                else statement.names[0].name
            )
            text = lines[statement.lineno - 1]
            before = lines[statement.lineno - 2].strip() if statement.lineno > 1 else ""
            starts_run = previous_end is None or statement.lineno > previous_end + 1
            own = "#" in text or before.startswith("#")
            explained_run = own or (explained_run and not starts_run)
            previous_end = statement.end_lineno
            if module and (module == PACKAGE or module.startswith(PACKAGE + ".")):
                found.append((statement.lineno, text.strip(), explained_run))
    return found


def test_imports_inside_functions_say_why():
    unexplained = [
        f"{path.relative_to(ROOT.parent)}:{line}: {text}"
        for path in sorted(ROOT.rglob("*.py"))
        for line, text, explained in _function_level_imports(path)
        if not explained
    ]
    assert unexplained == []


def test_omny_help_imports_no_implementation():
    # `omny --help` and `--version` import the CLI's argument parsers only.
    code = (
        "import sys; from onnx_ir_multidevice._cli import main; main(['--version']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('onnx_ir', 'onnx', 'numpy') or m.startswith('onnx_ir_multidevice.planner')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------------------------------------
# Direction: a module never imports a module of a higher layer, imports by string included


def _contract_layers() -> list[list[str]]:
    """The layers of the import-linter contract, top first; each a list of sibling packages."""
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (ROOT.parent / relative).with_suffix(".py").is_file() or (
        ROOT.parent / relative / "__init__.py"
    ).is_file()


_IMPORT_FUNCTIONS = {"import_module", "__import__"}


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` for every module of the package that ``source`` imports.

    Statements (``import``, ``from ... import``, relative ones resolved, at any depth) and
    strings: a string constant that names a module of the package, and the argument of
    ``importlib.import_module`` / ``__import__``, which must be such a string or an f-string
    that starts with ``{__name__}.`` (a submodule of the importer itself); anything else is
    returned as ``"<unresolved>"``.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            for alias in node.names:  # `from package import submodule`
                if _is_package_module(f"{base}.{alias.name}"):
                    found.append((node.lineno, f"{base}.{alias.name}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(f"{PACKAGE}.") and _is_package_module(node.value):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _IMPORT_FUNCTIONS:
                continue
            target = node.args[0]
            own = (
                isinstance(target, ast.JoinedStr)
                and len(target.values) > 1
                and isinstance(target.values[0], ast.FormattedValue)
                and isinstance(target.values[0].value, ast.Name)
                and target.values[0].value.id == "__name__"
            )
            if own:
                found.append((node.lineno, module))
            elif not isinstance(target, ast.Constant):
                found.append((node.lineno, "<unresolved>"))
    return [
        (line, name)
        for line, name in found
        if name in ("<unresolved>", PACKAGE) or name.startswith(f"{PACKAGE}.")
    ]


def _layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    for index, siblings in enumerate(layers):
        for sibling in siblings:
            if module == sibling or module.startswith(f"{sibling}."):
                return index, sibling
    return None


def test_every_module_belongs_to_a_layer():
    layers = _contract_layers()
    outside = [
        _module_name(path)
        for path in sorted(ROOT.rglob("*.py"))
        if _module_name(path) != PACKAGE and _layer_of(_module_name(path), layers) is None
    ]
    assert outside == []


def test_imports_point_down_the_layers_including_imports_by_string():
    layers = _contract_layers()
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        own = _layer_of(module, layers)
        if own is None:  # the package root: lazy re-exports of every layer
            continue
        source = path.read_text(encoding="utf-8")
        for line, target in imported_modules(source, module, path.name == "__init__.py"):
            where = f"{path.relative_to(ROOT.parent)}:{line}: {target}"
            if target == "<unresolved>":
                wrong.append(f"{where} (an import by a string the test cannot read)")
                continue
            theirs = _layer_of(target, layers)
            if theirs is None or theirs[1] == own[1]:
                continue
            if theirs[0] < own[0]:
                wrong.append(f"{where} (layer {theirs[1]} is above {own[1]})")
            elif theirs[0] == own[0]:
                wrong.append(f"{where} (siblings {own[1]} and {theirs[1]} are independent)")
    assert wrong == []


def test_the_direction_check_sees_every_kind_of_import():
    found = imported_modules(
        "import onnx_ir_multidevice.planner\n"
        "from onnx_ir_multidevice import passes\n"
        "from ..planner import memory\n"
        "import importlib\n"
        "importlib.import_module('onnx_ir_multidevice.runtime')\n"
        "importlib.import_module(f'{__name__}.x')\n"
        "importlib.import_module(name)\n"
        "KEY = 'onnx_ir_multidevice.stage'\n",
        "onnx_ir_multidevice.analysis.shapes",
        False,
    )
    assert sorted(name for _, name in found) == [
        "<unresolved>",
        "onnx_ir_multidevice",
        "onnx_ir_multidevice.analysis.shapes",
        "onnx_ir_multidevice.passes",
        "onnx_ir_multidevice.planner",
        "onnx_ir_multidevice.planner",
        "onnx_ir_multidevice.planner.memory",
        "onnx_ir_multidevice.runtime",
    ]
    layers = _contract_layers()
    assert (
        _layer_of("onnx_ir_multidevice.planner.memory", layers)[0]
        < _layer_of("onnx_ir_multidevice.analysis.shapes", layers)[0]
    )


ARCHITECTURE_LAYERS = {
    1: ("omny",),
    2: ("binding",),
    3: ("analysis",),
    4: ("passes",),
    5: ("planner",),
    6: ("_split", "runtime"),
    7: ("_cli", "cli", "exporters"),
}
"""The numbered layers of ARCHITECTURE.md ('Layers'), bottom (1) to top (7)."""


def test_the_contract_orders_the_layers_as_the_architecture_does():
    layers = _contract_layers()
    position = {
        number: [_layer_of(f"{PACKAGE}.{name}", layers)[0] for name in names]
        for number, names in ARCHITECTURE_LAYERS.items()
    }
    for lower, higher in zip(sorted(position), sorted(position)[1:], strict=False):
        # the contract lists the top first: a higher layer has a smaller index
        assert max(position[higher]) < min(position[lower]), (lower, higher)


#: Analysis results that once had typed slots on ``GraphIndex``; the graph layer sits below
#: the analyses and keeps their results under keys the analyses own (``ResultKey``).
_ANALYSIS_RESULT_NAMES = frozenset({
    "slot_flags",
    "slot_classes",
    "value_classes",
    "replicable_positions",
    "stage_cache",
    "boundary_cache",
    "TensorClass",
    "Boundary",
})  # fmt: skip


def _identifiers(tree: ast.AST) -> set[str]:
    """Every name a module binds or reads: names, attributes, arguments, defs and classes."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).rsplit(".", 1)[-1])
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "graph").glob("*.py")), ids=lambda path: path.name)
def test_the_graph_layer_names_no_analysis_result(path: Path) -> None:
    """graph/ (the index included) neither defines nor reads an analysis result by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    named = sorted(_identifiers(tree) & _ANALYSIS_RESULT_NAMES)
    assert not named, f"{path.relative_to(ROOT.parent)} names analysis results {named}"


def test_the_analysis_result_check_sees_a_typed_slot() -> None:
    """The check above finds a dataclass field like the ones the index used to have."""
    tree = ast.parse("class GraphIndex:\n    slot_flags: list[int] | None = None\n")
    assert "slot_flags" in _identifiers(tree)
