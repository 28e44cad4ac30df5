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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
