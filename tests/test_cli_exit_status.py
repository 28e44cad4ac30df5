"""The exit status table of docs/cli.md, cell by cell: the same situation, the same status.

Every row of the table is a situation this module can stage (a file, an option) or one tested
elsewhere (:data:`TESTED_ELSEWHERE`); every column is a subcommand. A new row or column in the
docs fails here until it is staged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from plain_text import assert_plain
from test_bad_input import _chain, _planned
from test_check import chain, plan

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto.files import save

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

#: How each subcommand is run on an input file ``F`` (``OUT`` is a fresh folder).
COMMANDS: dict[str, list[str]] = {
    "inspect": ["inspect", "F"],
    "check": ["check", "F"],
    "annotate": ["annotate", "F", "OUT/a.onnx"],
    "plan": ["plan", "F", "-o", "OUT/p.omny", "--shards", "2"],
    "split": ["split", "F", "OUT/stages", "--shards", "2"],
    "export": ["export", "--format", "split", "F", "OUT/exported", "--shards", "2"],
    "convert": ["convert", "F", "OUT/converted.omny", "--container", "v2"],
    "oaax-convert": ["oaax-convert", "F", "OUT/oaax"],
    "verify": ["verify", "F"],
    "run": ["run", "F", "--shards", "2", "--requests", "1", "--warmup", "0"],
    "view": ["view", "F", "--write", "OUT/view"],
    "demo": ["demo", "--model", "F", "--only", "load"],
}

#: The input file of each situation, and how the arguments change (``None``: none).
SITUATIONS: dict[str, tuple[str, Callable[[list[str]], list[str]] | None]] = {
    "it works": ("good.omny", None),
    "the input file is missing": ("missing.omny", None),
    "the input is a directory": ("folder", None),
    "the input is not an ONNX model": ("text.onnx", None),
    "its `.omny` plan cannot be read": ("broken_json.omny", None),
    "the model has no plan": ("plain.onnx", None),
    "no configuration has the shard count asked": ("good.omny", lambda argv: _shards(argv, "99")),
    "the checker finds errors in the plan": ("side.omny", None),
    "bad usage (an unknown option, a bad value)": ("good.omny", lambda argv: [*argv, "--nope"]),
}

#: Where a subcommand needs another file for a situation: ``oaax-convert`` makes an artifact of
#: one configuration, so it "works" on a model it plans itself (``OAAX106`` for an ``.omny``
#: with several configurations).
FILE_FOR = {("it works", "oaax-convert"): "plain.onnx"}
#: The start of a subcommand's error line (the OAAX toolchain names itself).
ERROR_LINE = {"oaax-convert": ("omny-oaax-toolchain: error: ", "omny: error: ")}

#: Rows staged by other tests.
TESTED_ELSEWHERE = {
    "the stages do not compute what the model does": "test_verify.py: verify mismatch exits 1",
    "interrupted (Ctrl-C)": "test_interrupted_is_130 below",
}


def _shards(argv: list[str], count: str) -> list[str]:
    if "--shards" in argv:
        argv = list(argv)
        argv[argv.index("--shards") + 1] = count
        return argv
    return [*argv, "--shards", count]


def _table() -> tuple[list[str], dict[str, dict[str, str]]]:
    """The exit status table of docs/cli.md: its columns and, by situation, each cell."""
    lines = [line for line in DOCS.read_text().splitlines() if line.startswith("| ")]
    start = next(i for i, line in enumerate(lines) if line.startswith("| Situation "))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return header[1:], rows


COLUMNS, ROWS = _table()


def test_the_table_covers_every_subcommand_and_situation():
    from onnx_ir_multidevice._cli import _SUBCOMMANDS

    assert COLUMNS == list(_SUBCOMMANDS) == list(COMMANDS)
    assert set(ROWS) == set(SITUATIONS) | set(TESTED_ELSEWHERE)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exit_status")
    save(_planned(), root / "good.omny")
    save(_chain(), root / "plain.onnx")
    (root / "text.onnx").write_text("not an ONNX model\n")
    (root / "folder").mkdir()
    proto = onnx.load(root / "good.omny")
    for entry in proto.metadata_props:
        if entry.key == "omnynet_metadata":
            entry.value = entry.value[:40]
    onnx.save(proto, root / "broken_json.omny")
    side = chain(side=True)  # two activations cross the cut: OMNY320
    plan(side, [["h3"]])
    save(side, root / "side.omny")
    return root


CELLS = [
    pytest.param(situation, command, int(status), id=f"{command}-{situation[:40]}")
    for situation, cells in ROWS.items()
    if situation in SITUATIONS
    for command, status in cells.items()
    if status != "-"
]


@pytest.mark.parametrize(("situation", "command", "status"), CELLS)
def test_exit_status(files, tmp_path, monkeypatch, capsys, situation, command, status):
    pytest.importorskip("onnxruntime")
    monkeypatch.chdir(files)
    name, change = SITUATIONS[situation]
    name = FILE_FOR.get((situation, command), name)
    argv = [
        name if part == "F" else part.replace("OUT", str(tmp_path)) for part in COMMANDS[command]
    ]
    if change is not None:
        argv = change(argv)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == status, (argv, out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    assert_plain(out + err)
    if status == 2:
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith(ERROR_LINE.get(command, "omny: error: ")), err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_interrupted_is_130(files, tmp_path, monkeypatch, capsys, command):
    """Ctrl-C while a subcommand runs: one line, status 130 (the table's last row)."""
    import importlib

    assert ROWS["interrupted (Ctrl-C)"][command] == "130"
    monkeypatch.chdir(files)
    module = importlib.import_module(f"onnx_ir_multidevice._cli.{command.replace('-', '_')}")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run", interrupted)  # what register() hands to the parser
    argv = [
        "good.omny" if part == "F" else part.replace("OUT", str(tmp_path))
        for part in COMMANDS[command]
    ]
    assert main(argv) == 130
    assert capsys.readouterr().err == "omny: interrupted\n"


def test_no_two_rows_of_the_table_say_the_same_thing():
    assert len({re.sub(r"\W", "", s.lower()) for s in ROWS}) == len(ROWS)
