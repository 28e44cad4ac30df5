"""Tensor-parallel split folders: written by save_split, read by the runtime, verified, CLI."""

from __future__ import annotations

import json
import pathlib
import tracemalloc

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import OmnyFormatError, _cli, load, save_split
from onnx_ir_multidevice._split.manifest import SplitManifest
from onnx_ir_multidevice.omny import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    TensorParallelRecord,
    write_tensor_parallel,
)
from onnx_ir_multidevice.runtime import Pipeline, verify
from onnx_ir_multidevice.runtime.tensor_parallel import (
    TensorParallelStage,
    tensor_parallel_chain,
    verify_folder,
)
from onnx_ir_multidevice.testing.zoo import synthetic_transformer

CORPUS = pathlib.Path(__file__).parent / "corpus"


def _record(model: ir.Model, degrees: list[int], dims: dict[str, int] | None = None) -> None:
    name = f"omny/{len(degrees)}-shards"
    configuration = TensorParallelConfiguration.contiguous(name, degrees, dims)
    write_tensor_parallel(model, TensorParallelRecord((configuration,)))


def _planned_transformer(tmp_path: pathlib.Path, **kwargs) -> tuple[ir.Model, pathlib.Path]:
    """A synthetic transformer planned into 2 stages by the CLI, with a hand-written record."""
    source = tmp_path / "t.onnx"
    ir.save(synthetic_transformer(2, **kwargs), source)
    planned = tmp_path / "t.omny"
    assert _cli.main(["plan", str(source), "-o", str(planned), "--shards", "2"]) == 0
    model = load(planned)
    _record(model, [2, 2], {"seq": 16})
    ir.save(model, planned)
    return model, planned


def test_folder_runs_in_the_pipeline_and_verifies(tmp_path):
    model, _ = _planned_transformer(tmp_path)
    manifest = save_split(model, tmp_path / "out", 2)
    assert [s.tensor_parallel.degree for s in manifest.stages] == [2, 2]
    assert manifest.stages[1].tensor_parallel.devices == (2, 3)
    for stage in manifest.stages:
        parallel = stage.tensor_parallel
        assert stage.file == parallel.ranks[0].segments[0]
        assert parallel.num_segments == len(parallel.ranks[1].segments) >= 2
        assert any(step for step in parallel.steps) and not parallel.steps[-1]
        for rank in parallel.ranks:
            assert rank.external_data == (f"stage_{stage.index}.rank_{rank.rank}.onnx.data",)
    # each rank's file holds its slices: the two ranks' data files differ and are smaller
    # than a copy of the whole stage's weights
    data = [(tmp_path / "out" / f"stage_0.rank_{k}.onnx.data").read_bytes() for k in (0, 1)]
    assert data[0] != data[1] and len(data[0]) == len(data[1])
    read = SplitManifest.read(tmp_path / "out")
    assert read == manifest and read.to_json() == manifest.to_json()
    with Pipeline(tmp_path / "out") as pipe:
        assert all(isinstance(s, TensorParallelStage) for s in pipe.chain.stages)
        out = pipe.run(pipe.example_inputs())
    assert out["logits"].shape[-1] == 128
    report = verify_folder(model, tmp_path / "out")
    assert report.ok, report.outputs
    assert verify(model, 2).ok  # verify follows the record: the split save_split writes


def test_tensor_parallel_manifest_round_trip_and_unknown_keys(tmp_path):
    model, _ = _planned_transformer(tmp_path)
    manifest = save_split(model, tmp_path / "out", 2)
    document = manifest.to_dict()
    document["stages"][0]["tensor_parallel"]["future"] = {"x": 1}
    document["stages"][0]["tensor_parallel"]["ranks"][1]["note"] = "kept"
    document["stages"][0]["tensor_parallel"]["steps"][0][0]["algo"] = "ring"
    text = json.dumps(document, indent=1)
    parsed = SplitManifest.from_json(text)
    assert parsed.to_json() == text  # unchanged: byte for byte
    again = SplitManifest.from_dict(parsed.to_dict())
    assert again.to_dict() == document  # unknown keys kept at every level
    parallel = parsed.stages[0].tensor_parallel
    assert parallel.extra == {"future": {"x": 1}}
    assert parallel.ranks[1].extra == {"note": "kept"}
    assert parallel.steps[0][0].extra == {"algo": "ring"}


def test_pipeline_only_manifest_is_unchanged(tmp_path):
    model, _ = _planned_transformer(tmp_path)
    del model.metadata_props[TENSOR_PARALLEL_KEY]
    manifest = save_split(model, tmp_path / "out", 2)
    text = (tmp_path / "out" / "manifest.json").read_text()
    assert "tensor_parallel" not in text
    assert all(s.tensor_parallel is None for s in manifest.stages)
    assert SplitManifest.read(tmp_path / "out").to_json() == text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json",
        "stage_0.onnx",
        "stage_0.onnx.data",
        "stage_1.onnx",
        "stage_1.onnx.data",
    ]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda tp: tp.update(degree=1), "stages[0].tensor_parallel.degree"),
        (lambda tp: tp.update(devices=[0, 0]), "stages[0].tensor_parallel.devices"),
        (lambda tp: tp["ranks"][1].update(rank=0), "stages[0].tensor_parallel.ranks[1].rank"),
        (lambda tp: tp["ranks"][1].update(device=7), "stages[0].tensor_parallel.ranks[1].device"),
        (lambda tp: tp["steps"].pop(), "stages[0].tensor_parallel.ranks[0].segments"),
        (
            lambda tp: tp["steps"][0][0].update(kind="Broadcast"),
            "stages[0].tensor_parallel.steps[0][0].kind",
        ),
    ],
)
def test_malformed_tensor_parallel_entry_is_located(tmp_path, change, path):
    model, _ = _planned_transformer(tmp_path)
    document = save_split(model, tmp_path / "out", 2).to_dict()
    change(document["stages"][0]["tensor_parallel"])
    with pytest.raises(OmnyFormatError) as info:
        SplitManifest.from_dict(document)
    assert info.value.path == path


def test_missing_segment_file_is_refused(tmp_path):
    model, _ = _planned_transformer(tmp_path)
    save_split(model, tmp_path / "out", 2)
    (tmp_path / "out" / "stage_1.rank_1.segment_1.onnx").unlink()
    with pytest.raises(Exception, match=r"stages\[1\]\.tensor_parallel\.ranks\[1\]\.segments\[1\]"):
        SplitManifest.read(tmp_path / "out")


def test_broken_record_is_refused_with_its_located_error(tmp_path):
    model, _ = _planned_transformer(tmp_path)
    model.metadata_props[TENSOR_PARALLEL_KEY] = '{"format": 1, "configurations": [{"name": 3}]}'
    for attempt in (
        lambda: save_split(model, tmp_path / "out", 2),
        lambda: tensor_parallel_chain(model, 2),
        lambda: verify(model, 2),
    ):
        with pytest.raises(OmnyFormatError, match="OMNY225") as info:
            attempt()
        assert info.value.path.startswith(f"metadata_props[{TENSOR_PARALLEL_KEY}]")
    assert not (tmp_path / "out").exists()


def test_slices_are_written_from_the_memory_map(tmp_path):
    """A model whose weights are memory-mapped external data: no weight is copied whole."""
    model = synthetic_transformer(1, hidden=256, heads=4, vocab=8192, max_positions=64)
    _record(model, [2], {"seq": 16})
    ir.save(model, tmp_path / "big.onnx", external_data="big.onnx.data")
    loaded = ir.load(tmp_path / "big.onnx")  # weights: ExternalTensor, read through mmap
    largest = max(v.const_value.nbytes for v in loaded.graph.initializers.values())
    assert largest >= 8 << 20  # the token embedding, replicated on both ranks
    tracemalloc.start()
    try:
        save_split(loaded, tmp_path / "out", 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < largest // 2, (peak, largest)
    assert verify_folder(loaded, tmp_path / "out", dims={"batch": 1, "seq": 16}).ok


def _mapped_resident_bytes(path: pathlib.Path) -> int:
    """The resident bytes of this process's memory maps of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip("\n").endswith(str(path))
            elif inside and first == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not pathlib.Path("/proc/self/smaps").exists(), reason="needs Linux smaps")
def test_slices_leave_no_resident_pages_of_the_source(tmp_path):
    """The source's mapped pages are released once written: RSS does not grow by the weights."""
    model = synthetic_transformer(1, hidden=256, heads=4, vocab=8192, max_positions=64)
    _record(model, [2], {"seq": 16})
    ir.save(model, tmp_path / "big.onnx", external_data="big.onnx.data")
    data = (tmp_path / "big.onnx.data").resolve()
    loaded = ir.load(tmp_path / "big.onnx")
    save_split(loaded, tmp_path / "out", 1)
    mapped = [
        v.const_value
        for v in loaded.graph.initializers.values()
        if isinstance(v.const_value, ir.ExternalTensor) and v.const_value.raw is not None
    ]
    assert mapped  # the weights were read through memory maps, which are still open
    assert _mapped_resident_bytes(data) < 1 << 20, _mapped_resident_bytes(data)
    # the maps still work: the whole model reads its weights again through them
    assert verify_folder(loaded, tmp_path / "out", dims={"batch": 1, "seq": 16}).ok


def test_corpus_gpt2_with_a_hand_written_record(tmp_path):
    model = load(CORPUS / "gpt2_dynamo.onnx")
    _record(model, [2])
    manifest = save_split(model, tmp_path / "out", 1)
    parallel = manifest.stages[0].tensor_parallel
    assert parallel is not None and parallel.degree == 2
    assert sum(len(step) for step in parallel.steps) >= 2
    report = verify_folder(model, tmp_path / "out", dims={"batch": 1, "seq": 8})
    assert report.ok, report.outputs


def test_cli_end_to_end(tmp_path, capsys):
    _, planned = _planned_transformer(tmp_path)
    annotated = tmp_path / "t.annotated.onnx"
    out = tmp_path / "out"
    assert _cli.main(["annotate", str(planned), str(annotated), "--shards", "2"]) == 0
    assert _cli.main(["check", str(annotated)]) == 0
    assert _cli.main(["split", str(planned), str(out), "--shards", "2"]) == 0
    assert _cli.main(["run", str(out), "--requests", "4"]) == 0
    assert _cli.main(["verify", str(planned), "--split", str(out)]) == 0
    assert _cli.main(["verify", str(planned), "--shards", "2"]) == 0
    capsys.readouterr()
    assert _cli.main(["verify", str(planned), "--split", str(out), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] and document["command"] == "verify"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"][0]["tensor_parallel"]["degree"] == 2
    # the folder's weights hold rank slices: an attention QKV weight is cut in two
    weights = [np.fromfile(out / f"stage_0.rank_{k}.onnx.data", np.uint8) for k in (0, 1)]
    assert weights[0].size == weights[1].size
