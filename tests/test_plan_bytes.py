"""``omny plan`` is a shell over ``plan()``: one model, one file, byte for byte (issue 17)."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest

from onnx_ir_multidevice import load, omny, save
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice.planner.planning import plan

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(
    "corpus_model", ["yolo_like_fp16_dynamo.onnx", "gpt2_torchscript.onnx", "bert_fp16.onnx"]
)
def test_cli_plan_writes_the_bytes_the_api_writes(tmp_path, capsys, monkeypatch, corpus_model):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1714564800")  # one export_info.exported_at
    source = CORPUS / corpus_model
    by_cli = tmp_path / "cli.omny"
    assert main(["plan", str(source), "-o", str(by_cli), "--shards", "2,3"]) == 0
    capsys.readouterr()
    model = load(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lower bounds of the memory figures: said by the CLI
        metadata = plan(model, shards=[2, 3], name=source.stem, assign_names=True)
    omny.write(model, metadata)
    by_api = tmp_path / "api.omny"
    save(model, by_api)
    assert by_api.read_bytes() == by_cli.read_bytes()
    onnx.checker.check_model(str(by_api))  # typed outputs, nodes in order
    assert omny.read(model).export_info.exported_at == "2024-05-01T12:00:00Z"
