"""What a write promises: atomic under SIGKILL, modes and links kept, leftovers cleaned.

Issue 10, items 4 (a kill between the two renames of ``save()`` left the old model with the
new weights), 9 (in-place rewrites turned 0600 into 0644, replaced a symlink by a file, and
``omny split`` made its folder 0700) and 10 (temporary folders of killed writers stayed
forever). The kills are real: ``scripts/kill_saves.py`` forks a writer and SIGKILLs it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_io import _arrays, _weights_model
from test_split import _annotate

from onnx_ir_multidevice import omny, plan
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto.atomic import staged_file, write_bytes_atomic
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice.testing import zoo

ROOT = Path(__file__).resolve().parent.parent


def planned_chain():
    """A 2-layer GPT annotated for two stages."""
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    return model


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test, and restore it."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield os.umask
    os.umask(previous)


# ---------------------------------------------------------------------------------------------
# SIGKILL during save (item 4)


def test_sigkill_during_save_leaves_the_old_or_the_new_model_whole(tmp_path):
    """Eight kills at random moments of a loop of 48 MiB saves, and one kill before each
    file-system call of one save: ``load`` gives A or B, whole, every time."""
    script = ROOT / "scripts" / "kill_saves.py"
    result = subprocess.run(
        [sys.executable, str(script), "--kills", "8", "--steps", "--json", "--seed", "1",
         "--folder", str(tmp_path / "work")],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["bad"] == [], report["bad"]
    # One kill per random trial and per file-system call of one save (a save that finds
    # leftovers to remove makes more calls than the one counted, so a step may not be reached).
    assert report["kills"] >= 16
    assert result.returncode == 0, result.stderr
    # After the next save, the folder holds the model and its data file, nothing else.
    assert len(report["folder_after_next_save"]) == 1


# ---------------------------------------------------------------------------------------------
# Modes and links (item 9)


def test_save_keeps_the_mode_of_the_file_it_replaces(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "m.onnx"
    save(_weights_model(), path, external_data=True, size_threshold_bytes=0)
    assert _mode(path) == 0o644
    os.chmod(path, 0o600)
    save(_weights_model(1), path, external_data=True, size_threshold_bytes=0)
    assert _mode(path) == 0o600
    data = [p for p in tmp_path.iterdir() if p.name != "m.onnx"]
    assert len(data) == 1 and _mode(data[0]) == 0o600  # the data file as private as its model
    os.chmod(path, 0o640)
    save(_weights_model(2), path)  # embedded now
    assert _mode(path) == 0o640


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_new_files_and_folders_get_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    save(_weights_model(), tmp_path / "m.onnx", external_data=True, size_threshold_bytes=0)
    assert _mode(tmp_path / "m.onnx") == 0o666 & ~mask
    assert _mode(tmp_path / "m.onnx.data") == 0o666 & ~mask
    model = planned_chain()
    save_split(model, tmp_path / "split", 2)
    assert _mode(tmp_path / "split") == 0o777 & ~mask
    for file in (tmp_path / "split").iterdir():
        assert _mode(file) == 0o666 & ~mask, file.name


def test_forced_split_keeps_the_mode_of_the_folder_it_replaces(tmp_path, umask):
    umask(0o022)
    model = planned_chain()
    save_split(model, tmp_path / "split", 2)
    os.chmod(tmp_path / "split", 0o750)
    save_split(model, tmp_path / "split", 2, force=True)
    assert _mode(tmp_path / "split") == 0o750


def test_save_onto_a_symlink_writes_through_to_its_target(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    save(_weights_model(0), real / "m.onnx", external_data=True, size_threshold_bytes=0)
    os.chmod(real / "m.onnx", 0o600)
    links = tmp_path / "links"
    links.mkdir()
    (links / "m.onnx").symlink_to(real / "m.onnx")
    save(_weights_model(1), links / "m.onnx", external_data=True, size_threshold_bytes=0)
    assert (links / "m.onnx").is_symlink()
    assert os.readlink(links / "m.onnx") == str(real / "m.onnx")
    assert _mode(real / "m.onnx") == 0o600
    assert sorted(p.name for p in links.iterdir()) == ["m.onnx"]  # data next to the target
    for name, array in _arrays(load(links / "m.onnx")).items():
        np.testing.assert_array_equal(array, _arrays(_weights_model(1))[name])
    for name, array in _arrays(load(real / "m.onnx")).items():
        np.testing.assert_array_equal(array, _arrays(_weights_model(1))[name])


def test_cli_annotate_in_place_keeps_mode_and_link(tmp_path, capsys):
    model = zoo.resnet(depth_blocks=1)
    omny.write(model, plan(model, shards=[2]))
    real = tmp_path / "real.omny"
    save(model, real)
    os.chmod(real, 0o600)
    link = tmp_path / "link.omny"
    link.symlink_to(real.name)
    assert main(["annotate", str(link), str(link)]) == 0
    assert link.is_symlink() and _mode(real) == 0o600
    proto = onnx.load(real)
    assert proto.configuration  # annotated in place, through the link
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------
# Leftovers of killed writers (item 10)


def _dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _leftover(folder: Path, name: str, *, age: float = 0.0) -> Path:
    path = folder / name
    path.mkdir()
    (path / "m.onnx.data").write_bytes(b"\0" * 4096)
    if age:
        past = time.time() - age
        os.utime(path, (past, past))
    return path


def test_next_save_removes_the_leftovers_of_dead_writers_only(tmp_path):
    from test_file_ownership import held_by_another_process

    dead = _dead_pid()
    stale = _leftover(tmp_path, f".m.onnx.omny-{dead}-0123abcd.tmp")
    stale_split = _leftover(tmp_path, f".out.omny-{dead}-89abcdef.tmp")
    running = _leftover(tmp_path, f".m.onnx.omny-{dead}-0123abce.tmp")
    foreign = _leftover(tmp_path, ".m.onnx.abcdefgh.tmp")  # not ours: never touched
    other = _leftover(tmp_path, f".m.onnx.omny-{dead}-nothex00.tmp")
    with held_by_another_process(running):  # a live writer (its pid says nothing here)
        save(_weights_model(), tmp_path / "m.onnx")
    assert not stale.exists() and not stale_split.exists()
    assert running.exists() and foreign.exists() and other.exists()


def test_a_leftover_older_than_the_live_process_with_its_pid_is_stale(tmp_path):
    """A pid can be reused: a folder older than the process now holding the pid is stale."""
    reused = _leftover(tmp_path, f".m.onnx.omny-{os.getpid()}-0123abcd.tmp", age=10 * 86400)
    save(_weights_model(), tmp_path / "m.onnx")
    assert not reused.exists()


def test_next_split_removes_the_leftovers_of_dead_writers(tmp_path):
    dead = _dead_pid()
    stale = _leftover(tmp_path, f".split.omny-{dead}-0123abcd.tmp")
    # A set-aside directory whose destination exists is a leftover (one whose destination
    # is missing is restored: tests/test_file_ownership.py).
    (tmp_path / "split").mkdir()
    old = _leftover(tmp_path, f".split.omny-{dead}-0123abcd.old")
    save_split(planned_chain(), tmp_path / "split", 2)
    assert not stale.exists() and not old.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split"]


def test_temporary_names_carry_the_writer_pid(tmp_path, monkeypatch):
    """While a save runs, its staging folder is named with the writer's pid."""
    seen: list[str] = []
    original = os.replace

    def spy(src, dst, *args, **kwargs):
        seen.append(Path(src).relative_to(tmp_path).parts[0])  # the folder it is staged in
        return original(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", spy)
    save(_weights_model(), tmp_path / "m.onnx", external_data=True, size_threshold_bytes=0)
    assert seen and all(name.startswith(f".m.onnx.omny-{os.getpid()}-") for name in seen)


def test_every_writer_keeps_modes_and_links_and_cleans_stale_files(tmp_path):
    """The helpers the containers and exporters write with follow the same rules."""
    real = tmp_path / "real.bin"
    real.write_bytes(b"old")
    os.chmod(real, 0o600)
    link = tmp_path / "link.bin"
    link.symlink_to(real.name)
    stale_file = tmp_path / f".real.bin.omny-{_dead_pid()}-0123abcd.tmp"
    stale_file.write_bytes(b"half")
    write_bytes_atomic(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new" and _mode(real) == 0o600
    assert not stale_file.exists()
    with staged_file(link, True) as temporary:
        assert temporary.name.startswith(f".real.bin.omny-{os.getpid()}-")
        temporary.write_bytes(b"streamed")
    assert link.is_symlink() and real.read_bytes() == b"streamed" and _mode(real) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "real.bin"]


def test_concurrent_saves_of_one_model_end_consistent(tmp_path):
    """Writers saving one path at once: each commit (renames and removal of what it replaced)
    holds the folder's lock, and a claimed data name is never removed while its writer runs."""
    import threading

    path = tmp_path / "m.onnx"
    models = [_weights_model(seed) for seed in range(3)]
    expected = [_arrays(m) for m in models]
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for _ in range(6):
                save(models[k], path, external_data=True, size_threshold_bytes=0)
                loaded = _arrays(load(path))  # whichever writer committed last: whole
                assert any(all(np.array_equal(loaded[n], e[n]) for n in e) for e in expected)
        except BaseException as error:  # reported by the main thread
            import traceback

            traceback.print_exc()
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    save(models[0], path, external_data=True, size_threshold_bytes=0)
    assert len(list(tmp_path.iterdir())) == 2  # the model and its data file
