"""A full disk or a file-size limit gives a typed error naming the output, and leaves nothing.

Issue 18 item 18: ``split``, ``export mlf --per-stage`` and ``export ark`` printed a bare
``OSError`` traceback. The limit is set in the child process only (``RLIMIT_FSIZE`` through
``preexec_fn``; Python ignores ``SIGXFSZ``, so a write past it fails with ``EFBIG``), never by
filling the disk.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._proto.write_errors import typed_write_errors

CORPUS = Path(__file__).parent / "corpus"
LIMIT = 4000  # bytes: each command below writes more than this


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("planned")
    model = omd.load(CORPUS / "bert_dynamo.onnx")
    omny.write(model, omd.plan(model, shards=[2], dims={"seq": 8}, assign_names=True))
    omd.save(model, folder / "bert.omny")
    return folder / "bert.omny"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize(
    "command",
    [
        ["split", "{model}", "{out}", "--shards", "2"],
        ["export", "mlf", "{model}", "{out}", "--shards", "2", "--per-stage", "--dim", "seq=8"],
        ["export", "ark", "{model}", "{out}", "--shards", "2", "--dim", "seq=8"],
    ],
)
def test_a_file_size_limit_gives_a_typed_error_naming_the_output(tmp_path, planned, command):
    out = tmp_path / "out"
    args = [part.format(model=planned, out=out) for part in command]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "onnx_ir_multidevice._cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=_limited,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{out}: writing failed (File too large)" in done.stderr, done.stderr
    assert "file-size limit (ulimit -f)" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing partial, nothing staged


def test_write_errors_keep_the_cause_and_pass_typed_errors_through(tmp_path):
    target = tmp_path / "out"
    with (
        pytest.raises(omd.OmnyIOError, match="the disk is full") as info,
        typed_write_errors(target),
    ):
        raise OSError(errno.ENOSPC, "No space left on device", str(target / "a.data"))
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert f"{target}: writing failed (No space left on device at {target / 'a.data'})" in str(
        info.value
    )
    typed = omd.OmnyIOError("already typed")
    with pytest.raises(omd.OmnyIOError) as passed, typed_write_errors(target):
        raise typed
    assert passed.value is typed
