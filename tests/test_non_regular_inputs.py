"""Inputs that are not regular files (a FIFO, /dev/zero, a directory) are refused before reading.

Issue 18 item 10: ``omny inspect /dev/zero`` read until memory was gone, and a FIFO hung
``inspect``, ``oaax-convert`` and the OAAX runtime's model loading. Every reader goes through
one helper (:mod:`onnx_ir_multidevice._regular_files`). The reproductions run in child
processes with a timeout (a regression hangs or eats memory there, not in the test run) and a
bounded data segment.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._regular_files import open_regular, read_regular, require_regular

CORPUS = Path(__file__).parent / "corpus"
OMNY = [sys.executable, "-m", "onnx_ir_multidevice._cli"]
DATA_LIMIT = 3 * 2**30  # a regression reading /dev/zero fails with MemoryError, not the machine


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


def _child(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=120,  # a FIFO that hangs fails the test instead of the run
        cwd=cwd,
        env=env,
        preexec_fn=_bounded,
        check=False,
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (["inspect", "{fifo}"], "a FIFO"),
        (["inspect", "/dev/zero"], "a character device"),
        (["check", "{fifo}"], "a FIFO"),
        (["check", "/dev/zero"], "a character device"),
        (["run", "{fifo}", "--shards", "2"], "a FIFO"),
        (["oaax-convert", "{fifo}", "{out}"], "a FIFO"),
        (["oaax-convert", "/dev/zero", "{out}"], "a character device"),
    ],
)
def test_cli_refuses_a_fifo_or_a_device_before_reading(tmp_path, fifo, command, kind):
    args = [part.format(fifo=fifo, out=tmp_path / "out") for part in command]
    done = _child([*OMNY, *args], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"is {kind}" in done.stderr and "not a regular file" in done.stderr, done.stderr
    path = "/dev/zero" if "/dev/zero" in args else str(fifo)
    assert path in done.stderr


def test_api_readers_refuse_a_fifo_before_reading(tmp_path, fifo):
    """load, Pipeline over a split folder, and the OAAX runtime: each refuses, none blocks."""
    split = tmp_path / "split"
    model = omd.load(CORPUS / "mlp_helper_novi.onnx")
    omny.write(model, omd.plan(model, shards=[2]))
    omd.save_split(model, split, 2)
    manifest = json.loads((split / "manifest.json").read_text())
    stage_file = split / manifest["stages"][1]["file"]
    stage_file.unlink()
    os.mkfifo(stage_file)
    second = tmp_path / "split-fifo-manifest"
    second.mkdir()
    os.mkfifo(second / "manifest.json")
    script = textwrap.dedent(
        f"""
        import onnx_ir_multidevice as omd
        from onnx_ir_multidevice.oaax import OaaxRuntime
        from onnx_ir_multidevice.omny import container
        for call in (lambda: omd.load({str(fifo)!r}),
                     lambda: omd.load("/dev/zero"),
                     lambda: container.read_container({str(fifo)!r}),
                     lambda: omd.Pipeline({str(split)!r}),
                     lambda: omd.Pipeline({str(second)!r})):
            try:
                call()
            except omd.OmnyError as error:  # a stage file: the manifest check comes first
                assert "not a regular file" in str(error) or "does not exist" in str(error)
                print("refused:", error)
            else:
                raise AssertionError("read a FIFO")
        runtime = OaaxRuntime()
        assert runtime.runtime_initialization() == 0
        for path in ({str(fifo)!r}, {str(split)!r}, {str(second)!r}, "/dev/zero"):
            assert runtime.runtime_model_loading(path) != 0
            print("refused:", runtime.runtime_error_message())
        print("ok")
        """
    )
    done = _child([sys.executable, "-c", script], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 9 and done.stdout.endswith("ok\n"), done.stdout
    assert done.stdout.count("not a regular file") == 7, done.stdout
    assert "a FIFO (named pipe)" in done.stdout and "a character device" in done.stdout


def test_the_helper_reads_regular_files_and_names_every_other_kind(tmp_path, fifo):
    model = tmp_path / "m.bin"
    model.write_bytes(b"abc")
    assert read_regular(model) == b"abc"
    assert require_regular(model).st_size == 3
    link = tmp_path / "link"
    link.symlink_to(model)
    with open_regular(link) as file:  # a link to a regular file is followed
        assert file.read() == b"abc"
    for path, words in (
        (fifo, "a FIFO"),
        (Path("/dev/null"), "a character device"),
        (tmp_path, "a directory"),
    ):
        for call in (read_regular, require_regular):
            with pytest.raises(omd.OmnyIOError, match=f"is {words}"):
                call(path)
    with pytest.raises(omd.OmnyIOError, match="no such file"):
        read_regular(tmp_path / "missing")
    with pytest.raises(omd.OmnyIOError, match="not a valid path"):
        require_regular("a\x00b")


def _relu_model():
    import onnx_ir as ir

    x = ir.Value(name="x", shape=ir.Shape([2, 8]), type=ir.TensorType(ir.DataType.FLOAT))
    relu = ir.Node("", "Relu", [x], outputs=[ir.Value(name="h")], name="relu")
    neg = ir.Node("", "Neg", relu.outputs, outputs=[ir.Value(name="y")], name="neg")
    graph = ir.Graph([x], neg.outputs, nodes=[relu, neg], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def test_an_output_that_is_a_special_file_is_refused_not_replaced(tmp_path, capsys):
    """Renaming a new file over /dev/null replaced it (as root): outputs must be regular files."""
    from onnx_ir_multidevice._cli import main
    from onnx_ir_multidevice._proto.atomic import write_bytes_atomic

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(omd.OmnyIOError, match="FIFO"):
        omd.save(_relu_model(), fifo)
    with pytest.raises(omd.OmnyIOError, match="FIFO"):
        write_bytes_atomic(fifo, b"data")
    corpus_model = Path(__file__).parent / "corpus" / "mlp_helper_novi.onnx"
    assert main(["plan", str(corpus_model), "-o", str(fifo), "--force"]) == 2
    assert "FIFO" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
