"""Tests of `omny check` and `omny annotate`."""

from __future__ import annotations

import json
from pathlib import Path

import onnx_ir as ir
import pytest
from test_check import DATA, chain, plan, planned

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.checker.diagnostics import CODES


@pytest.fixture
def planned_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.omny"
    save(planned(), path)
    return path


def test_check_ok_file(planned_file: Path, capsys):
    """Issue 18 item 27: a clean file printed 28 to 35 info lines; a count by default now."""
    assert main(["check", str(planned_file)]) == 0
    out = capsys.readouterr().out
    assert "info OMNY312" not in out and out.count("\n") == 1, out
    assert "0 errors, 0 warnings," in out and "infos (--verbose lists them)" in out
    assert main(["check", str(planned_file), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "info OMNY312" in out and "0 errors" in out and "--verbose" not in out


def test_check_json_schema(planned_file: Path, capsys):
    assert main(["check", str(planned_file), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["format"] == "onnx-ir-multidevice/check"
    assert document["version"] == 1
    assert document["file"] == str(planned_file)
    assert document["ok"] is True
    assert set(document["counts"]) == {"error", "warning", "info"}
    for item in document["diagnostics"]:
        assert set(item) == {"code", "severity", "message", "location"}
        assert item["code"] in CODES


def test_check_errors_exit_1(tmp_path: Path, capsys):
    model = chain(2)
    model.metadata_props["omnynet_version"] = "1.0"
    model.metadata_props["omnynet_metadata"] = (DATA / "spec_example.json").read_text()
    path = tmp_path / "spec.omny"
    save(model, path)
    assert main(["check", str(path), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["ok"] is False
    undefined = [d for d in document["diagnostics"] if d["code"] == "OMNY132"]
    assert "cut_3" in undefined[0]["message"]
    assert main(["check", "-q", str(path)]) == 1
    out = capsys.readouterr().out
    assert "error OMNY132 at sharding.configurations[1].cut_point_ids[2]" in out
    assert "info " not in out


def test_check_relaxed(tmp_path: Path, capsys):
    model = chain(side=True)
    plan(model, [["h3"]])
    path = tmp_path / "side.omny"
    save(model, path)
    assert main(["check", str(path)]) == 1
    assert main(["check", str(path), "--relaxed"]) == 0
    capsys.readouterr()


def test_check_unreadable_and_usage(tmp_path: Path, capsys):
    assert main(["check", str(tmp_path / "missing.onnx")]) == 2
    assert "omny: error:" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["check", str(bad)]) == 2
    capsys.readouterr()
    assert main(["check", str(bad), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["result"]["ok"] is False
    assert main(["check"]) == 2


def test_annotate_writes_output_and_keeps_input(planned_file: Path, tmp_path: Path, capsys):
    before = planned_file.read_bytes()
    out = tmp_path / "annotated.omny"
    code = main(
        ["annotate", str(planned_file), str(out), "--shards", "3", "--device-names", "a,b,c,d"]
    )
    assert code == 0
    assert planned_file.read_bytes() == before
    model = load(out)
    (conf,) = model.device_configurations
    assert conf.name == "omny/3-shards" and conf.device_names == ("a", "b", "c")
    assert "wrote" in capsys.readouterr().out
    assert main(["check", str(out)]) == 0
    capsys.readouterr()


def test_annotate_json_and_in_place(planned_file: Path, capsys):
    assert main(["annotate", str(planned_file), str(planned_file), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert [c["name"] for c in document["configurations"]] == ["omny/2-shards", "omny/3-shards"]
    assert document["configurations"][1]["nodes_per_stage"] == [2, 2, 2]
    assert len(load(planned_file).device_configurations) == 2


def test_annotate_refuses_bad_plan(tmp_path: Path, capsys):
    model = chain(side=True)
    plan(model, [["h3"]])
    src, out = tmp_path / "side.omny", tmp_path / "out.omny"
    save(model, src)
    assert main(["annotate", str(src), str(out)]) == 1
    assert "OMNY320" in capsys.readouterr().err
    assert not out.exists()
    assert main(["annotate", str(src), str(out), "--relaxed"]) == 0
    assert main(["annotate", str(src), str(out), "--shards", "7", "--force"]) == 1
    assert main(["annotate", str(tmp_path / "missing.omny"), str(out)]) == 2
    assert main(["annotate", str(src), str(out), "--device-names", "a,,b"]) == 2
    plain = tmp_path / "plain.onnx"
    ir.save(chain(2), plain)
    assert main(["annotate", str(plain), str(out), "--no-check", "--force"]) == 1
    capsys.readouterr()


def test_check_and_inspect_verify_data_read_every_data_file(tmp_path: Path, capsys):
    """`--verify-data` runs `load(path, verify_data=True)`: a data file rewritten with other
    bytes and its old time passes the fast check (a `stat`), not the full one (OMNY109)."""
    import os

    from onnx_ir_multidevice import check

    path = tmp_path / "m.omny"
    save(planned(), path, external_data=True, size_threshold_bytes=0)
    data = tmp_path / "m.omny.data"
    info = data.stat()
    content = bytearray(data.read_bytes())
    content[0] ^= 0xFF
    data.write_bytes(bytes(content))
    os.utime(data, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert main(["check", str(path)]) == 0
    assert main(["inspect", str(path)]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--verify-data"]) == 2
    out = capsys.readouterr().out
    assert "OMNY109" in out and "CRC-32" in out, out
    assert main(["check", str(path), "--verify-data", "--json"]) == 2
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["ok"] is False
    assert [d["code"] for d in document["diagnostics"]] == ["OMNY109"]
    assert main(["inspect", str(path), "--verify-data"]) == 2
    assert "CRC-32" in capsys.readouterr().err
    assert "OMNY109" not in {d.code for d in check(path)}
    assert "OMNY109" in {d.code for d in check(path, verify_data=True)}
