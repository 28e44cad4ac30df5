"""A hostile user at the command line: outputs where they cannot go, inputs that are not models.

Each case runs the real ``omny`` entry function on real files in ``tmp_path`` and expects the
documented exit status (docs/cli.md, *Conventions*), one ``omny: error:`` line naming the file
and saying what to do, a valid ``--json`` document, no traceback, and the input unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from plain_text import assert_plain
from test_bad_input import _chain, _planned

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto.files import save


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A planned two-configuration model, ``good.omny``."""
    path = tmp_path / "good.omny"
    save(_planned(), path)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    """Run ``omny argv --json``; return the status, the JSON document and stderr."""
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    document = json.loads(out)
    assert document["status"] == code, document
    assert_plain(err)
    return code, document, err


def test_view_write_to_an_existing_file_is_a_usage_error(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`omny view m.omny --write m.omny`: the folder to write is the input file itself."""
    before = _digest(good)
    code, document, err = _run_json(["view", str(good), "--write", str(good)], capsys)
    assert code == 2, err
    assert err.startswith(f"omny: error: {good}: ") and len(err.strip().splitlines()) == 1, err
    assert "not a directory" in err, err
    assert document["error"] and document["result"] is None
    assert _digest(good) == before


def test_view_write_into_a_folder_that_cannot_be_created(
    good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`omny view --write /proc/x`: /proc takes no new folder (as root too)."""
    code, document, err = _run_json(["view", str(good), "--write", "/proc/omny-view"], capsys)
    assert code == 2, err
    assert err.startswith("omny: error: /proc/omny-view: "), err
    assert document["result"] is None


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_check_external_data_problem_is_not_called_an_unreadable_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A valid model whose data file is gone or cut: the error line says the data, not ONNX."""
    path = tmp_path / "m.omny"
    save(_planned(), path, external_data=True, size_threshold_bytes=0)
    data = tmp_path / "m.omny.data"
    if damage == "missing":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:100])
    code, document, err = _run_json(["check", str(path)], capsys)
    assert code == 2, err
    assert "cannot be read as an ONNX model" not in err, err
    assert f"{path}: its external data cannot be read" in err, err
    assert document["error"] == err.strip().removeprefix("omny: error: ")
    assert {d["code"] for d in document["result"]["diagnostics"]} <= {"OMNY108", "OMNY109"}


@pytest.mark.parametrize("command", ["view", "demo"])
def test_no_plan_error_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A plain ONNX model (no plan): exit 1 with one error line that names the file, as the
    other commands (`annotate`, `split`...) do; the --json envelope carries it."""
    path = tmp_path / "plain.onnx"
    save(_chain(), path)
    argv = {
        "view": ["view", str(path), "--write", str(tmp_path / "view")],
        "demo": ["demo", "--model", str(path), "--only", "load"],
    }[command]
    code, document, err = _run_json(argv, capsys)
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"omny: error: {path}: "), err
    assert "omny plan" in lines[0], err
    assert document["error"] == lines[0].removeprefix("omny: error: ")


def test_demo_model_that_is_a_directory_is_called_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "m.omny"
    folder.mkdir()
    code, _, err = _run_json(["demo", "--model", str(folder)], capsys)
    assert code == 2, err
    assert err.startswith(f"omny: error: {folder}: is a directory"), err
    assert "no such file" not in err, err
