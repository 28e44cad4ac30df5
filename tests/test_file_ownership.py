"""What a writer may delete, what a reader may open: files in a folder (issue 18, items 1-8).

Issue 18: a save deleted the data of another model of the folder and could delete its own
model file (1); a forced split killed between its two renames lost both splits (2); a split
without ``--force`` replaced output another writer made meanwhile (3); a live writer's
staging folder was removed when its pid meant nothing here (another PID namespace) (4);
``external_data`` through a symbolic link wrote outside the folder (5); a manifest could
name stage files outside the split folder (6); a data file truncated after ``load()`` killed
the process with SIGBUS (7); a killed ``oaax-convert`` left its extracted archive behind (8).
Issue 17 §9: ``load()`` read every data file to check it (now a ``stat``, the CRC-32 on
demand), and ``omny plan model.onnx -o model.omny`` wrote a second copy of the weights (now
referred to in place when no other model owns them).
The live writers here are real processes holding real locks; they are synchronised by
pipes, never by sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_io import _arrays, _weights_model
from test_split import _annotate

from onnx_ir_multidevice import OmnyError, OmnyIOError, Pipeline, read_manifest
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto import atomic
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice.testing import zoo

ROOT = Path(__file__).resolve().parent.parent

_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes the pipe
    """
)


@contextlib.contextmanager
def held_by_another_process(path: Path):
    """A second process holds the lock of ``path`` (a live writer's) for the block.

    A temporary file is locked itself, a temporary folder through its lock file.
    """
    if path.is_dir():
        path = atomic.lock_file_of(path)
        path.touch()
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline() == "locked\n"
        yield process
    finally:
        process.stdin.close()
        process.wait(timeout=120)


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def planned_chain():
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    return model


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------------------------
# 1. A save removes only what it wrote or what the model it replaces referenced


def test_a_save_keeps_the_data_of_another_model_with_the_same_data_name(tmp_path):
    first, second = _weights_model(1), _weights_model(2)
    save(first, tmp_path / "a.onnx", external_data="weights.data", size_threshold_bytes=0)
    save(second, tmp_path / "b.onnx", external_data="weights.data", size_threshold_bytes=0)
    loaded_a, loaded_b = _arrays(load(tmp_path / "a.onnx")), _arrays(load(tmp_path / "b.onnx"))
    for name, array in _arrays(first).items():
        np.testing.assert_array_equal(loaded_a[name], array)
    for name, array in _arrays(second).items():
        np.testing.assert_array_equal(loaded_b[name], array)
    # Saving b again removes b's old data only.
    save(second, tmp_path / "b.onnx", external_data="weights.data", size_threshold_bytes=0)
    assert len([n for n in _files(tmp_path) if n.endswith(".data")]) == 2
    load(tmp_path / "a.onnx")


def test_a_data_name_equal_to_the_model_file_is_refused_and_the_model_kept(tmp_path):
    path = tmp_path / "m.onnx"
    save(_weights_model(), path)
    before = path.read_bytes()
    with pytest.raises(OmnyIOError, match="name of the model file itself"):
        save(_weights_model(3), path, external_data="m.onnx")
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["m.onnx"]


def test_saving_in_place_removes_the_data_the_replaced_model_used(tmp_path):
    path = tmp_path / "m.onnx"
    save(_weights_model(), path, external_data=True, size_threshold_bytes=0)
    unrelated = tmp_path / "m.onnx.0123abcd.data"  # a family name no model of ours uses
    unrelated.write_bytes(b"someone's file")
    for _ in range(3):
        save(load(path), path, external_data=True, size_threshold_bytes=0)
    data = [n for n in _files(tmp_path) if n.endswith(".data") and n != unrelated.name]
    assert len(data) == 1 and unrelated.read_bytes() == b"someone's file"


# ---------------------------------------------------------------------------------------------
# 2, 3. Replacing a split directory


def test_a_split_set_aside_by_a_killed_writer_is_restored_not_deleted(tmp_path):
    """The state a kill between the two renames of the fallback leaves: no ``out``, the old
    split at ``.out.omny-<pid>-<hex>.old``, the new one at ``...tmp``."""
    out = tmp_path / "out"
    save_split(planned_chain(), out, 2)
    manifest = (out / "manifest.json").read_bytes()
    dead = _dead_pid()
    os.rename(out, tmp_path / f".out.omny-{dead}-0123abcd.old")
    (tmp_path / f".out.omny-{dead}-89abcdef.tmp").mkdir()
    save(_weights_model(), tmp_path / "m.onnx")  # the next write of anything in the folder
    assert (out / "manifest.json").read_bytes() == manifest
    assert read_manifest(out).num_stages == 2
    assert _files(tmp_path) == ["m.onnx", "out"]


_KILL_SPLIT = textwrap.dedent(
    """
    import json, os, shutil, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from test_file_ownership import planned_chain
    from onnx_ir_multidevice._proto import atomic
    from onnx_ir_multidevice._split import save_split, read_manifest
    folder = Path(sys.argv[1])
    atomic._USE_EXCHANGE = sys.argv[3] == "exchange"
    model = planned_chain()
    out = folder / "out"
    save_split(model, out, 2)
    calls = (("os", "rename"), ("os", "replace"), ("shutil", "rmtree"), ("os", "rmdir"),
             ("os", "unlink"), ("os", "mkdir"), ("os", "chmod"))
    results = []
    k = 0
    while True:
        pid = os.fork()
        if pid == 0:
            count = [0]
            for module_name, name in calls:
                module = {"os": os, "shutil": shutil}[module_name]
                original = getattr(module, name)
                def wrapper(*a, _original=original, **kw):
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    count[0] += 1
                    return _original(*a, **kw)
                setattr(module, name, wrapper)
            try:
                save_split(model, out, 2, force=True)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status)
        save_split(model, folder / "other", 2, force=True)  # the next write in the folder
        state = {"k": k, "killed": killed, "out": out.is_dir()}
        if out.is_dir():
            state["stages"] = read_manifest(out).num_stages
        state["left"] = sorted(p.name for p in folder.iterdir())
        results.append(state)
        if not killed:
            break
        k += 1
    print(json.dumps(results))
    """
)


def _python_path() -> str:
    """This checkout first, for the child process."""
    return os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))


@pytest.mark.parametrize("how", ["exchange", "two renames"])
def test_a_forced_split_killed_at_any_step_leaves_a_whole_split(tmp_path, how):
    """SIGKILL before each file-system call of ``save_split(force=True)`` over an existing
    split; after each, the next write in the folder: the folder holds one whole split."""
    result = subprocess.run(
        [sys.executable, "-c", _KILL_SPLIT, str(tmp_path), str(ROOT / "tests"), how],
        check=False, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": _python_path()},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    states = json.loads(result.stdout)
    assert sum(s["killed"] for s in states) >= 3
    for state in states:
        assert state["out"] and state["stages"] == 2, state
        assert state["left"] == ["other", "out"], state


def test_a_split_without_force_keeps_a_directory_filled_meanwhile(tmp_path, monkeypatch):
    """Another writer fills ``out`` after the check and before the rename: it stays."""
    out = tmp_path / "out"
    original = atomic.replace_directory

    def other_writer_first(source, target, **kwargs):
        target.mkdir()
        (target / "theirs.txt").write_text("another writer's output")
        return original(source, target, **kwargs)

    monkeypatch.setattr(atomic, "replace_directory", other_writer_first)
    with pytest.raises(OmnyIOError, match="another writer filled this directory"):
        save_split(planned_chain(), out, 2)
    assert _files(out) == ["theirs.txt"]
    assert _files(tmp_path) == ["out"]


# ---------------------------------------------------------------------------------------------
# 4. Liveness by lock, not by pid


def test_a_live_writer_whose_pid_means_nothing_here_keeps_its_staging_folder(tmp_path):
    """Two containers on one volume: the writer's pid is dead in this PID namespace."""
    staging = tmp_path / f".m.onnx.omny-{_dead_pid()}-0123abcd.tmp"
    staging.mkdir()
    (staging / "m.onnx").write_bytes(b"half written")
    with held_by_another_process(staging):
        save(_weights_model(), tmp_path / "m.onnx")
        save_split(planned_chain(), tmp_path / "split", 2)
        assert staging.is_dir() and (staging / "m.onnx").read_bytes() == b"half written"
    save(_weights_model(), tmp_path / "m.onnx")  # its writer is gone now
    assert not staging.exists()


# ---------------------------------------------------------------------------------------------
# 5. external_data through a symbolic link


def test_external_data_through_a_linked_subfolder_leading_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "sub").symlink_to(outside)
    with pytest.raises(OmnyIOError, match="symbolic link leading to"):
        save(_weights_model(), folder / "m.onnx", external_data="sub/w.data")
    assert _files(outside) == [] and _files(folder) == ["sub"]


def test_external_data_in_a_real_subfolder_is_accepted(tmp_path):
    (tmp_path / "sub").mkdir()
    model = _weights_model()
    save(model, tmp_path / "m.onnx", external_data="sub/w.data", size_threshold_bytes=0)
    assert _files(tmp_path / "sub") == ["w.data"]
    loaded = _arrays(load(tmp_path / "m.onnx"))
    for name, array in _arrays(model).items():
        np.testing.assert_array_equal(loaded[name], array)


# ---------------------------------------------------------------------------------------------
# 6. Manifests naming files outside the split folder


@pytest.mark.parametrize("where", ["../x.onnx", "ABSOLUTE", "link/stage_0.onnx"])
def test_a_manifest_naming_a_stage_file_outside_the_folder_is_refused(tmp_path, where, capsys):
    out = tmp_path / "split"
    save_split(planned_chain(), out, 2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "stage_0.onnx").write_bytes((out / "stage_0.onnx").read_bytes())
    (tmp_path / "x.onnx").write_bytes((out / "stage_0.onnx").read_bytes())
    (out / "link").symlink_to(outside)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["stages"][0]["file"] = str(outside / "stage_0.onnx") if where == "ABSOLUTE" else where
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OmnyError, match=r"stages\[0\]\.file.*outside the split folder"):
        read_manifest(out)
    with pytest.raises(OmnyError, match="outside the split folder"):
        Pipeline(out)
    assert main(["run", str(out)]) != 0
    assert "outside the split folder" in capsys.readouterr().err


def test_a_manifest_naming_external_data_outside_the_folder_is_refused(tmp_path):
    out = tmp_path / "split"
    save_split(planned_chain(), out, 2)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["stages"][0]["external_data"] = ["../secret.data"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(OmnyError, match=r"stages\[0\]\.external_data\[0\].*outside"):
        read_manifest(out)


def test_the_oaax_runtime_refuses_a_manifest_leading_out(tmp_path):
    from onnx_ir_multidevice.oaax.runtime import OaaxRuntime

    out = tmp_path / "split"
    save_split(planned_chain(), out, 2)
    manifest = json.loads((out / "manifest.json").read_text())
    (tmp_path / "x.onnx").write_bytes((out / "stage_0.onnx").read_bytes())
    manifest["stages"][0]["file"] = "../x.onnx"
    (out / "manifest.json").write_text(json.dumps(manifest))
    runtime = OaaxRuntime()
    assert runtime.runtime_initialization() == 0
    try:
        assert runtime.runtime_model_loading(str(out)) != 0
        assert "outside the split folder" in runtime.runtime_error_message()
    finally:
        runtime.runtime_destruction()


# ---------------------------------------------------------------------------------------------
# 7. A data file truncated after load()

_TRUNCATE = textwrap.dedent(
    """
    import os, sys
    from onnx_ir_multidevice import ExternalDataError
    from onnx_ir_multidevice._proto.files import load
    model = load(sys.argv[1])
    os.truncate(sys.argv[2], 0)
    try:
        for value in model.graph.initializers.values():
            value.const_value.numpy().sum()
    except ExternalDataError as error:
        print("typed:", error)
        sys.exit(0)
    print("read without error")
    sys.exit(1)
    """
)


def test_a_data_file_truncated_after_load_gives_a_typed_error_not_sigbus(tmp_path):
    save(_weights_model(), tmp_path / "m.onnx", external_data=True, size_threshold_bytes=0)
    result = subprocess.run(
        [sys.executable, "-c", _TRUNCATE, str(tmp_path / "m.onnx"), str(tmp_path / "m.onnx.data")],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != -signal.SIGBUS, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert "truncated after the model was loaded" in result.stdout


def test_weights_read_after_a_save_over_are_those_checked_at_load(tmp_path):
    """The data file opened at load stays the one read (the file name now holds others)."""
    path = tmp_path / "m.onnx"
    first = _weights_model(1)
    save(first, path, external_data=True, size_threshold_bytes=0)
    loaded = load(path)
    save(_weights_model(2), path, external_data=True, size_threshold_bytes=0)
    for name, array in _arrays(first).items():
        np.testing.assert_array_equal(loaded.graph.initializers[name].const_value.numpy(), array)


# ---------------------------------------------------------------------------------------------
# 17 §9: the load-time check costs a stat; the full check on demand


def test_load_does_not_read_an_unchanged_data_file_but_verify_data_does(tmp_path, monkeypatch):
    from onnx_ir_multidevice._proto import external

    path = tmp_path / "m.onnx"
    save(_weights_model(), path, external_data=True, size_threshold_bytes=0)
    read: list[str] = []
    original = external.crc32_of
    monkeypatch.setattr(external, "crc32_of", lambda p: read.append(str(p)) or original(p))
    load(path)
    assert read == []
    load(path, verify_data=True)
    assert len(read) == 1


def test_a_same_size_replacement_is_still_detected(tmp_path):
    """Same size, other bytes, written in place (new mtime): the CRC-32 is compared."""
    from onnx_ir_multidevice import ExternalDataError

    path = tmp_path / "m.onnx"
    save(_weights_model(), path, external_data=True, size_threshold_bytes=0)
    data = tmp_path / "m.onnx.data"
    info = data.stat()
    content = bytearray(data.read_bytes())
    content[0] ^= 0xFF
    data.write_bytes(bytes(content))
    os.utime(data, ns=(info.st_atime_ns, info.st_mtime_ns))  # even with the old mtime...
    with pytest.raises(ExternalDataError, match="CRC-32"):
        load(path, verify_data=True)  # ...the full check finds it
    os.utime(data, ns=(info.st_atime_ns, info.st_mtime_ns + 1000))
    with pytest.raises(ExternalDataError, match="CRC-32"):
        load(path)


def test_a_copied_folder_loads(tmp_path):
    """A copy has other inodes and times: the CRC-32 decides, and it matches."""
    import shutil

    (tmp_path / "a").mkdir()
    save(_weights_model(), tmp_path / "a" / "m.onnx", external_data=True, size_threshold_bytes=0)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    load(tmp_path / "b" / "m.onnx")


# ---------------------------------------------------------------------------------------------
# 8. A killed oaax-convert's extracted archive

_CONVERT_AND_WAIT = textwrap.dedent(
    """
    import sys
    from onnx_ir_multidevice.oaax import toolchain
    original = toolchain._Conversion.step_read

    def step_read(self, path, workdir):
        result = original(self, path, workdir)
        print(workdir, flush=True)
        sys.stdin.read()  # until killed
        return result

    toolchain._Conversion.step_read = step_read
    toolchain.convert(sys.argv[1], sys.argv[2], echo=lambda line: None)
    """
)


def test_a_killed_conversion_leaves_an_extraction_the_next_run_removes(tmp_path):
    import zipfile

    from test_oaax_toolchain import _chain

    from onnx_ir_multidevice.oaax import convert

    archive = tmp_path / "chain.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(_chain(tmp_path / "chain.onnx"), "model/chain.onnx")
    outdir = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-c", _CONVERT_AND_WAIT, str(archive), str(outdir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": _python_path()},
    )  # fmt: skip
    try:
        workdir = Path(child.stdout.readline().strip())
        assert workdir.parent == outdir and (workdir / "model" / "chain.onnx").is_file()
        # A second run while the first is alive: the first's extraction stays.
        assert convert(archive, outdir, echo=lambda line: None).ok
        assert (workdir / "model" / "chain.onnx").is_file()
    finally:
        child.kill()
        child.wait(timeout=120)
    assert workdir.is_dir()  # what the kill left
    assert convert(archive, outdir, echo=lambda line: None).ok
    assert not workdir.exists()
    assert [p.name for p in outdir.iterdir() if p.name.startswith(".")] == []


# ---------------------------------------------------------------------------------------------
# 17 §9: a model saved next to its data file refers to it in place (no second copy)


def _exported(folder: Path) -> Path:
    """A model as an exporter writes it: external data, no record of ours."""
    import onnx_ir as ir

    folder.mkdir(exist_ok=True)
    model = zoo.gpt(layers=2)
    path = folder / "model.onnx"
    ir.save(model, path, external_data="model.onnx.data", size_threshold_bytes=0)
    return path


def test_plan_next_to_the_data_refers_to_it_in_place(tmp_path, capsys):
    source = _exported(tmp_path)
    data = tmp_path / "model.onnx.data"
    before = data.stat()
    assert main(["plan", str(source), "-o", str(tmp_path / "model.omny"), "--shards", "2"]) == 0
    assert _files(tmp_path) == ["model.omny", "model.onnx", "model.onnx.data"]
    assert data.stat().st_ino == before.st_ino and data.stat().st_mtime_ns == before.st_mtime_ns
    planned, original = load(tmp_path / "model.omny"), load(source)
    for name, value in original.graph.initializers.items():
        np.testing.assert_array_equal(
            planned.graph.initializers[name].const_value.numpy(), value.const_value.numpy()
        )
    # The data file is the exporter's: saving the .omny over itself with other weights writes
    # the .omny's own data file and leaves model.onnx.data (and model.onnx) as they were.
    for value in planned.graph.initializers.values():
        array = value.const_value.numpy()
        if array.dtype == np.float32:
            value.const_value = ir_tensor(array + 1, value.name)
    save(planned, tmp_path / "model.omny", external_data=True)
    assert _files(tmp_path) == ["model.omny", "model.omny.data", "model.onnx", "model.onnx.data"]
    load(source)
    changed = load(tmp_path / "model.omny")
    for name, value in original.graph.initializers.items():
        array = value.const_value.numpy()
        if array.dtype == np.float32:
            np.testing.assert_array_equal(
                changed.graph.initializers[name].const_value.numpy(), array + 1
            )
    # And the .omny's own data is removed when it is replaced by one referring in place again.
    save(load(source), tmp_path / "model.omny")
    assert _files(tmp_path) == ["model.omny", "model.onnx", "model.onnx.data"]


def ir_tensor(array: np.ndarray, name: str):
    import onnx_ir as ir

    return ir.tensor(array, name=name)


def test_a_save_into_another_folder_writes_the_data(tmp_path):
    source = _exported(tmp_path / "a")
    (tmp_path / "b").mkdir()
    save(load(source), tmp_path / "b" / "model.omny")
    assert _files(tmp_path / "b") == ["model.omny", "model.omny.data"]


def test_a_shared_data_file_changed_later_is_detected(tmp_path):
    from onnx_ir_multidevice import ExternalDataError

    source = _exported(tmp_path)
    save(load(source), tmp_path / "model.omny")
    data = tmp_path / "model.onnx.data"
    content = bytearray(data.read_bytes())
    content[-1] ^= 0xFF
    data.write_bytes(bytes(content))  # e.g. the model re-exported in place
    with pytest.raises(ExternalDataError, match="CRC-32"):
        load(tmp_path / "model.omny")


def test_saving_in_place_unchanged_keeps_the_data_and_its_ownership(tmp_path):
    path = tmp_path / "m.onnx"
    model = _weights_model(1)
    save(model, path, external_data=True, size_threshold_bytes=0)
    data = tmp_path / "m.onnx.data"
    inode = data.stat().st_ino
    save(load(path), path, size_threshold_bytes=0)  # metadata only: no data written
    assert _files(tmp_path) == ["m.onnx", "m.onnx.data"] and data.stat().st_ino == inode
    changed = load(path)
    changed.graph.initializers["W1"].const_value = ir_tensor(
        changed.graph.initializers["W1"].const_value.numpy() * 2, "W1"
    )
    save(changed, path, size_threshold_bytes=0)
    # The model still owned its data file: replaced, it is removed (no copy left behind).
    files = _files(tmp_path)
    assert len(files) == 2 and "m.onnx.data" not in files
    np.testing.assert_array_equal(
        load(path).graph.initializers["W1"].const_value.numpy(),
        _arrays(model)["W1"] * 2,
    )


def test_a_data_file_another_model_owns_is_copied_not_borrowed(tmp_path):
    """b.onnx borrowing a.onnx's data would lose it at a.onnx's next save."""
    first = _weights_model(1)
    save(first, tmp_path / "a.onnx", external_data=True, size_threshold_bytes=0)
    save(load(tmp_path / "a.onnx"), tmp_path / "b.onnx", size_threshold_bytes=0)
    assert _files(tmp_path) == ["a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data"]
    save(_weights_model(2), tmp_path / "a.onnx", external_data=True, size_threshold_bytes=0)
    for name, array in _arrays(first).items():
        np.testing.assert_array_equal(_arrays(load(tmp_path / "b.onnx"))[name], array)
