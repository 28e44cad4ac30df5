"""A hostile user at the command line: outputs where they cannot go, inputs that are not models.

Each case runs the real ``omny`` entry function on real files in ``tmp_path`` and expects the
documented exit status (docs/cli.md, *Conventions*), one ``omny: error:`` line naming the file
and saying what to do, a valid ``--json`` document, no traceback, and the input unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from plain_text import assert_plain
from test_bad_input import _chain, _planned

from onnx_ir_multidevice import omny, save_split
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._proto.files import load, save

ROOT = Path(__file__).resolve().parent.parent


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


def test_save_without_overwrite_refuses_a_file_another_writer_made_meanwhile(
    tmp_path: Path,
) -> None:
    """``save(overwrite=False)`` checks the destination again when it commits: a file made
    after the first check (by another writer, here while a weight is read) is kept."""
    target = tmp_path / "out.omny"
    theirs = b"another writer's model"

    def weight() -> ir.TensorProtocol:
        target.write_bytes(theirs)  # another writer, between the check and the commit
        return ir.tensor(np.ones((8, 8), np.float32), name="w0")

    model = _planned()
    w0 = model.graph.initializers["w0"]
    w0.const_value = ir.LazyTensor(weight, dtype=ir.DataType.FLOAT, shape=ir.Shape([8, 8]))
    with pytest.raises(OmnyIOError, match=r"^[^(]*another writer created") as caught:
        save(model, target, overwrite=False, external_data=True, size_threshold_bytes=0)
    assert str(target) in str(caught.value)
    assert target.read_bytes() == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.omny"], "files left behind"


@pytest.mark.parametrize("command", ["plan", "annotate"])
def test_concurrent_writers_without_force_one_wins(tmp_path: Path, command: str) -> None:
    """Three `omny plan IN -o OUT` (or `annotate`) at once, no --force: one writes OUT, the
    others refuse it (exit 2), and OUT is one complete model; the input is unchanged."""
    source = tmp_path / "in.omny"
    save(_planned(), source)
    before = (_digest(source), source.stat().st_mtime_ns)
    out = tmp_path / "out.omny"
    argv = {
        "plan": ["plan", str(source), "-o", str(out), "--shards", "2"],
        "annotate": ["annotate", str(source), str(out)],
    }[command]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "onnx_ir_multidevice.cli", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [(p.wait(), p.communicate()[1]) for p in processes]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2, 2], results
    for code, err in results:
        assert "Traceback" not in err, err
        if code == 2:
            assert err.startswith(f"omny: error: {out}: "), err
    assert omny.read(load(out)) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.omny", "out.omny"]
    assert (_digest(source), source.stat().st_mtime_ns) == before


@pytest.mark.parametrize(
    ("command", "where"),
    [
        ("split", "its folder"),
        ("split", "an ancestor"),
        ("export-split", "its folder"),
        ("export-ark", "its folder"),
    ],
)
def test_force_never_replaces_the_folder_that_holds_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, where: str
) -> None:
    """`omny split work/m.omny work --force` would replace `work`, and so delete the input and
    whatever else the folder holds: refused (exit 2) before any work, the folder untouched."""
    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    source = work / "models" / "m.omny"
    save(_planned(), source)
    (work / "models" / "notes.txt").write_text("mine\n")
    out = work / "models" if where == "its folder" else work
    argv = {
        "split": ["split", str(source), str(out), "--shards", "2", "--force"],
        "export-split": ["export", "split", str(source), str(out), "--shards", "2", "--force"],
        "export-ark": ["export", "ark", str(source), str(out), "--shards", "2", "--force"],
    }[command]
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    code, document, err = _run_json(argv, capsys)
    assert code == 2, err
    assert err.startswith(f"omny: error: {out}: "), err
    assert str(source) in err and "--force" not in err.split(";")[-1], err
    assert document["result"] is None
    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == before


def test_oaax_convert_never_writes_its_artifact_over_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`omny oaax-convert m.omny .`: the artifact `<model>.omny` would be the input itself."""
    source = tmp_path / "m.omny"
    save(_chain(), source)  # no plan: the toolchain plans it
    before = (_digest(source), source.stat().st_mtime_ns)
    code = main(["oaax-convert", str(source), str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    assert "omny-oaax-toolchain: error: OAAX101" in err, err
    assert f"{source}: is the input" in err, err
    assert (_digest(source), source.stat().st_mtime_ns) == before


def test_convert_a_model_no_container_can_hold_is_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`omny convert m.omny out.omny --container v2` of a model with external data: the input
    was read and what it holds stops the job, so 1 (as `omny export` for content its format
    cannot hold), not the 2 of an unreadable input; OUT is not written."""
    source = tmp_path / "m.omny"
    save(_planned(), source, external_data=True, size_threshold_bytes=0)
    out = tmp_path / "out.omny"
    code, document, err = _run_json(["convert", str(source), str(out), "--container", "v2"], capsys)
    assert code == 1, err
    assert err.startswith(f"omny: error: {source}: ") and "external data" in err, err
    assert document["result"] is None
    assert not out.exists()


@pytest.mark.parametrize("manifest", ['{"format": ', ""])
def test_verify_split_folder_with_an_unreadable_manifest_is_unreadable_input(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: str
) -> None:
    """`omny verify m.omny --split DIR` whose manifest.json is cut or empty: exit 2, as
    `omny run DIR` and `omny view DIR` (and verify without a manifest) say; the error line
    names the manifest, and only once."""
    folder = tmp_path / "stages"
    assert main(["split", str(good), str(folder), "--shards", "2"]) == 0
    (folder / "manifest.json").write_text(manifest)
    capsys.readouterr()
    statuses = []
    for argv in (["verify", str(good), "--split", str(folder)], ["run", str(folder)]):
        code, document, err = _run_json(argv, capsys)
        statuses.append(code)
        assert err.startswith(f"omny: error: {folder / 'manifest.json'}: not valid JSON"), err
        assert document["result"] is None, document
    assert statuses == [2, 2]


@pytest.mark.parametrize("command", ["plan", "annotate", "convert"])
def test_output_that_is_a_dangling_link_is_refused_without_a_traceback(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """OUT is a symbolic link to a file that does not exist (yet): it exists as a link, so
    without --force it is refused as any existing output (exit 2), not a FileNotFoundError."""
    out = tmp_path / "out.omny"
    out.symlink_to(tmp_path / "nowhere" / "x.omny")
    argv = {
        "plan": ["plan", str(good), "-o", str(out), "--shards", "2"],
        "annotate": ["annotate", str(good), str(out)],
        "convert": ["convert", str(good), str(out), "--container", "v2"],
    }[command]
    code, document, err = _run_json(argv, capsys)
    assert code == 2, err
    assert err == f"omny: error: {out}: exists; choose another path or pass --force to replace it\n"
    assert document["result"] is None
    assert out.is_symlink() and not out.exists()


@pytest.mark.parametrize("command", ["plan", "annotate", "convert"])
def test_output_over_the_input_data_file_is_refused_even_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`omny plan m.omny -o m.omny.data --force`: OUT is the file the input's weights are read
    from; replacing it would leave the input a model without its weights. Refused (exit 2)."""
    source = tmp_path / "m.omny"
    save(_planned(), source, external_data=True, size_threshold_bytes=0)
    data = tmp_path / "m.omny.data"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    argv = {
        "plan": ["plan", str(source), "-o", str(data), "--shards", "2", "--force"],
        "annotate": ["annotate", str(source), str(data), "--force"],
        "convert": ["convert", str(source), str(data), "--container", "v1", "--force"],
    }[command]
    code, document, err = _run_json(argv, capsys)
    assert code == 2, err
    assert err.startswith(f"omny: error: {data}: ") and "data file" in err, err
    assert document["result"] is None
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert omny.read(load(source)) is not None


def test_demo_failed_step_says_so_on_stderr_and_in_the_json_envelope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 1 from a failed step (the bundled gpt_tiny.omny fails the strict check): one
    error line names the file and the step, so a script sees why without parsing the text."""
    from onnx_ir_multidevice.examples import GPT_TINY

    code, document, err = _run_json(["demo", "--model", str(GPT_TINY), "--only", "check"], capsys)
    assert code == 1, err
    assert err == f"omny: error: {GPT_TINY}: demo steps failed: check (see the step output)\n"
    assert document["error"] == err.strip().removeprefix("omny: error: ")


@pytest.mark.parametrize("command", ["run", "verify", "view"])
def test_split_folder_without_a_stage_data_file_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A split folder whose stage data file was deleted: exit 2 and an error that names the
    manifest entry and the file (not onnxruntime's message about a tensor), for every
    command that reads a split folder."""
    source = tmp_path / "m.omny"
    save(_planned(), source)
    folder = tmp_path / "stages"
    save_split(load(source), folder, 2, external_data_threshold=0)  # weights in data files
    stage = json.loads((folder / "manifest.json").read_text())["stages"][1]
    data = folder / stage["external_data"][0]
    data.unlink()
    argv = {
        "run": ["run", str(folder), "--requests", "1", "--warmup", "0"],
        "verify": ["verify", str(source), "--split", str(folder)],
        "view": ["view", str(folder), "--write", str(tmp_path / "view")],
    }[command]
    code, _, err = _run_json(argv, capsys)
    assert code == 2, err
    assert err.startswith(f"omny: error: {folder / 'manifest.json'}: stages[1].external_data[0]: ")
    assert f"{data} does not exist" in err and "omny split" in err, err


@pytest.mark.parametrize("command", ["run", "verify"])
def test_split_folder_with_a_truncated_stage_data_file_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A stage data file cut short: exit 2 (the folder cannot be read, as for a missing one)
    and an error naming the stage file, its data file and what to do."""
    source = tmp_path / "m.omny"
    save(_planned(), source)
    folder = tmp_path / "stages"
    save_split(load(source), folder, 2, external_data_threshold=0)
    stage = json.loads((folder / "manifest.json").read_text())["stages"][1]
    data = folder / stage["external_data"][0]
    data.write_bytes(data.read_bytes()[:100])
    argv = {
        "run": ["run", str(folder), "--requests", "1", "--warmup", "0"],
        "verify": ["verify", str(source), "--split", str(folder)],
    }[command]
    code, _, err = _run_json(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert str(folder / stage["file"]) in err and "reaches past the end" in err, err
    assert "omny split" in err, err
