"""Exporters: the protocol, the registry, the ``split`` format and ``omny export``."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import onnx_ir as ir
import pytest

import onnx_ir_multidevice
from onnx_ir_multidevice import _cli, exporters
from onnx_ir_multidevice._errors import ExportError, OmnyIOError, SplitError
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice._split import build_manifest, save_split, split
from onnx_ir_multidevice.examples import GPT_TINY


class StageListExporter:
    """An exporter defined outside the package: the stages of a split as one JSON file.

    It takes its stages from the split machinery and writes its file atomically, as the
    protocol asks.
    """

    name = "stage-list"
    description = "the stages of a split (inputs, outputs, node count) as one JSON file"
    option_help: Mapping[str, str] = {"indent": "JSON indentation (default: none)"}

    def __init__(self) -> None:
        self.calls = 0

    def export(
        self,
        model: ir.Model,
        destination: Path,
        *,
        shards: int | None,
        options: Mapping[str, Any],
        force: bool,
    ) -> exporters.ExportResult:
        self.calls += 1
        if shards is None:
            raise ExportError("stage-list needs shards")
        if destination.exists() and not force:
            raise OmnyIOError(f"{destination}: exists; pass force")
        stages = split(model, shards)
        manifest = build_manifest(model, stages)
        # A key of its own on every stage: kept in `extra`, written after the known keys.
        manifest = dataclasses.replace(
            manifest,
            stages=[
                dataclasses.replace(entry, extra={"num_nodes": stage.graph.num_nodes()})
                for entry, stage in zip(manifest.stages, stages, strict=True)
            ],
        )
        indent = int(options["indent"]) if "indent" in options else None
        fd, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest.to_dict(), f, indent=indent)
        os.replace(temporary, destination)
        return exporters.ExportResult(
            self.name, destination, (destination,), manifest, {"indent": indent}
        )


@pytest.fixture
def stage_list() -> Iterator[StageListExporter]:
    exporter = StageListExporter()
    onnx_ir_multidevice.register_exporter("stage-list", exporter)
    try:
        yield exporter
    finally:
        exporters.unregister_exporter("stage-list")


@pytest.fixture(scope="module")
def gpt() -> ir.Model:
    return load(GPT_TINY)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = _cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# An exporter defined here registers and works from Python and from `omny export`


def test_an_exporter_defined_outside_registers_and_exports(stage_list, gpt, tmp_path):
    assert isinstance(stage_list, onnx_ir_multidevice.Exporter)
    assert exporters.exporters()["stage-list"] is stage_list
    assert exporters.get_exporter("stage-list") is stage_list
    out = tmp_path / "stages.json"
    result = onnx_ir_multidevice.export(gpt, out, "stage-list", shards=4, indent="2")
    assert result.format == "stage-list"
    assert result.destination == out.absolute()
    assert result.files == (out.absolute(),)
    written = json.loads(out.read_text())
    assert written == result.manifest.to_dict() == result.to_dict()["manifest"]
    assert [s["num_nodes"] for s in written["stages"]] == [
        s.graph.num_nodes() for s in split(gpt, 4)
    ]
    assert out.read_text().startswith("{\n  ")  # indent=2 came through the options
    assert [p.name for p in tmp_path.iterdir()] == ["stages.json"]  # no temporary left


def test_an_exporter_defined_outside_works_from_the_command_line(stage_list, tmp_path, capsys):
    out = tmp_path / "stages.json"
    code, stdout, err = _run(
        capsys, "export", "--format", "stage-list", str(GPT_TINY), str(out), "--shards", "2",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    document = json.loads(stdout)["result"]
    assert document["format"] == "stage-list"
    assert document["files"] == [str(out.absolute())]
    assert document["manifest"]["num_stages"] == 2
    assert json.loads(out.read_text())["num_stages"] == 2
    # listed in --help and --list-formats, with its option
    code, stdout, _ = _run(capsys, "export", "--list-formats")
    assert code == 0
    assert "stage-list" in stdout and "--option indent=" in stdout and "split" in stdout
    code, stdout, _ = _run(capsys, "export", "--list-formats", "--json")
    listed = {entry["name"]: entry for entry in json.loads(stdout)["result"]}
    assert listed["stage-list"]["options"] == {"indent": "JSON indentation (default: none)"}
    assert next(iter(listed)) == "split"
    code, stdout, _ = _run(capsys, "export", "--help")
    assert code == 0
    help_text = " ".join(stdout.split())
    assert "one of: split, mlf, ark, stage-list" in help_text
    # an existing output is refused (the exporter's own rule) unless --force
    code, _, err = _run(
        capsys, "export", "--format", "stage-list", str(GPT_TINY), str(out), "--shards", "2"
    )
    assert code == 2 and "exists" in err
    code, stdout, err = _run(
        capsys, "export", "--format", "stage-list", str(GPT_TINY), str(out), "--shards", "4",
        "--force",
    )  # fmt: skip
    assert code == 0, err
    assert "(stage-list, 1 file)" in stdout
    assert json.loads(out.read_text())["num_stages"] == 4


def test_after_unregistering_the_format_is_unknown(gpt, tmp_path):
    exporter = StageListExporter()
    exporters.register_exporter("stage-list", exporter)
    assert exporters.unregister_exporter("stage-list") is exporter
    assert "stage-list" not in exporters.exporters()
    with pytest.raises(ExportError, match="unknown export format 'stage-list'"):
        exporters.export(gpt, tmp_path / "x.json", "stage-list", shards=2)
    assert exporter.calls == 0


# ---------------------------------------------------------------------------------------------
# The registry refuses what would break it


def test_registering_a_taken_name_needs_replace(stage_list):
    other = StageListExporter()
    with pytest.raises(ValueError, match="already registered"):
        exporters.register_exporter("stage-list", other)
    assert exporters.get_exporter("stage-list") is stage_list
    assert exporters.register_exporter("stage-list", other, replace=True) is other
    assert exporters.get_exporter("stage-list") is other


def test_registering_something_that_is_not_an_exporter_is_a_type_error():
    class NoOptions:
        name = "x"
        description = "x"

        def export(self, *args: object, **kwargs: object) -> None: ...

    with pytest.raises(TypeError, match="option_help"):
        exporters.register_exporter("x", NoOptions())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not an Exporter"):
        exporters.register_exporter("x", object())  # type: ignore[arg-type]
    assert "x" not in exporters.exporters()


@pytest.mark.parametrize("name", ["", "two words", "a=b", "-leading", 3])
def test_a_format_name_must_be_a_command_line_word(name):
    with pytest.raises(ValueError, match="export format name"):
        exporters.register_exporter(name, StageListExporter())  # type: ignore[arg-type]


def test_the_registry_view_is_read_only():
    view = exporters.exporters()
    with pytest.raises(TypeError):
        view["split"] = None  # type: ignore[index]
    assert next(iter(view)) == "split"


def test_export_refuses_unknown_formats_options_and_bad_shards(stage_list, gpt, tmp_path):
    with pytest.raises(
        ExportError, match=r"'nope'; registered formats: split, mlf, ark, stage-list"
    ):
        exporters.export(gpt, tmp_path / "a", "nope", shards=2)
    with pytest.raises(ExportError, match=r"no option 'colour' \(its options: indent\)"):
        exporters.export(gpt, tmp_path / "a", "stage-list", shards=2, colour="red")
    for shards in (0, -1, 2.0, True, "2"):
        with pytest.raises(ExportError, match="shards must be a positive integer"):
            exporters.export(gpt, tmp_path / "a", "stage-list", shards=shards)
    with pytest.raises(TypeError, match=r"onnx_ir.Model"):
        exporters.export(str(GPT_TINY), tmp_path / "a", "stage-list", shards=2)  # type: ignore[arg-type]
    assert stage_list.calls == 0
    assert list(tmp_path.iterdir()) == []


def test_an_exporter_must_return_an_export_result(gpt, tmp_path):
    class Careless(StageListExporter):
        def export(self, *args: Any, **kwargs: Any) -> Any:
            return str(tmp_path)

    exporters.register_exporter("careless", Careless())
    try:
        with pytest.raises(TypeError, match="returned str, not an ExportResult"):
            exporters.export(gpt, tmp_path / "a", "careless")
    finally:
        exporters.unregister_exporter("careless")


# ---------------------------------------------------------------------------------------------
# The first format: the split directory


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_split_format_writes_what_save_split_writes(gpt, tmp_path):
    manifest = save_split(gpt, tmp_path / "by_save_split", 4)
    result = exporters.export(gpt, tmp_path / "by_export", "split", shards=4)
    assert _tree(tmp_path / "by_export") == _tree(tmp_path / "by_save_split")
    assert result.manifest == manifest
    assert result.details == {"num_stages": 4}
    assert sorted(p.name for p in result.files) == sorted(_tree(tmp_path / "by_export"))
    assert all(p.parent == result.destination for p in result.files)


def test_split_format_options(gpt, tmp_path):
    # configuration by index as a string (as from the command line), threshold in bytes
    result = exporters.export(
        gpt, tmp_path / "s", "split", shards=2, configuration="0", external_data_threshold="0"
    )
    assert result.manifest.num_stages == 2
    assert all(s.external_data for s in result.manifest.stages)
    embedded = exporters.export(
        gpt, tmp_path / "e", "split", shards=2, external_data_threshold=10**9
    )
    assert not any(s.external_data for s in embedded.manifest.stages)
    with pytest.raises(ExportError, match="external_data_threshold"):
        exporters.export(gpt, tmp_path / "x", "split", shards=2, external_data_threshold="-1")
    with pytest.raises(ExportError, match="shards=N"):
        exporters.export(gpt, tmp_path / "x", "split")
    with pytest.raises(SplitError):
        exporters.export(gpt, tmp_path / "x", "split", shards=3)  # no 3-shard configuration
    with pytest.raises(OmnyIOError, match="not empty"):
        exporters.export(gpt, tmp_path / "s", "split", shards=4)
    assert (
        exporters.export(gpt, tmp_path / "s", "split", shards=4, force=True).manifest.num_stages
        == 4
    )
    assert not (tmp_path / "x").exists()


def test_split_format_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "stages"
    code, stdout, err = _run(
        capsys, "export", "--format", "split", str(GPT_TINY), str(out), "--shards", "4",
        "--option", "configuration=1",
    )  # fmt: skip
    assert code == 0, err
    assert "(split, " in stdout and "manifest.json" in stdout and "stage_3.onnx" in stdout
    assert json.loads((out / "manifest.json").read_text())["num_stages"] == 4


def test_export_usage_errors_exit_2_and_findings_exit_1(tmp_path, capsys):
    out = str(tmp_path / "o")
    code, _, err = _run(capsys, "export", "--format", "nope", str(GPT_TINY), out)
    assert code == 2
    assert "unknown export format 'nope'; registered formats: split" in err
    code, _, err = _run(
        capsys, "export", "--format", "split", str(GPT_TINY), out, "--option", "x=1"
    )
    assert code == 2 and "has no option x" in err and "configuration" in err
    code, _, err = _run(capsys, "export", "--format", "split", str(GPT_TINY), out, "--option", "x")
    assert code == 2 and "NAME=VALUE" in err
    code, _, err = _run(
        capsys, "export", "--format", "split", str(GPT_TINY), out, "--option", "configuration=0",
        "--option", "configuration=1", "--shards", "2",
    )  # fmt: skip
    assert code == 2 and "twice" in err
    code, _, err = _run(capsys, "export", str(GPT_TINY), out)
    assert code == 2 and "--format" in err
    code, _, err = _run(capsys, "export", "--format", "split")
    assert code == 2 and "IN, OUT required" in err
    code, _, err = _run(capsys, "export", "--format", "split", str(GPT_TINY), out, "--shards", "3")
    assert code == 1 and "gpt_tiny.omny" in err
    assert not Path(out).exists()
