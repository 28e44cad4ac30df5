"""manifest.json is built and parsed in one module (_split/manifest.py)."""

from __future__ import annotations

import json
import pathlib

import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError, PipelineError
from onnx_ir_multidevice._split import save_split
from onnx_ir_multidevice._split.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestStage,
    read_manifest,
)
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.runtime import load_stages
from onnx_ir_multidevice.testing import zoo


@pytest.fixture
def split_dir(tmp_path) -> pathlib.Path:
    model = zoo.resnet(depth_blocks=2)
    outdir = tmp_path / "split"
    omny.write(
        model,
        OmnyMetadata(
            cut_points=(CutPoint("layer.0.out", "layer.0.out", "layer.0.out", (1,)),),
            sharding=Sharding(configurations=(ShardConfiguration(2, (1, 1), ("layer.0.out",)),)),
        ),
    )
    save_split(model, outdir, 2)
    return outdir


def test_read_manifest_gives_typed_stages(split_dir):
    manifest = read_manifest(split_dir)
    written = json.loads((split_dir / MANIFEST_NAME).read_text())
    assert isinstance(manifest, Manifest) and manifest.num_stages == 2
    assert manifest.folder == split_dir
    assert manifest.graph_inputs == ("image",) and manifest.graph_outputs == ("logits",)
    first = manifest.stages[0]
    assert isinstance(first, ManifestStage)
    assert (first.index, first.file, first.path) == (0, "stage_0.onnx", split_dir / "stage_0.onnx")
    assert first.inputs == ("image",)
    assert manifest.stages[1].inputs == tuple(i["name"] for i in written["stages"][1]["inputs"])
    assert first.outputs == tuple(o["name"] for o in written["stages"][0]["outputs"])
    assert first.external_data == tuple(written["stages"][0]["external_data"])
    chain = load_stages(split_dir)
    assert [s.source for s in chain.stages] == [str(s.path) for s in manifest.stages]


def _broken(document: dict, change: str) -> object:
    if change == "not json":
        return "{not json"
    if change == "list":
        return []
    if change == "format":
        document["format"] = "other"
    elif change == "version":
        document["version"] = 99
    elif change == "no stages":
        document["stages"] = []
    elif change == "index":
        document["stages"][1]["index"] = 5
    elif change == "file":
        del document["stages"][0]["file"]
    elif change == "entry":
        document["stages"][1] = "stage_1.onnx"
    elif change == "num_stages":
        document["num_stages"] = 3
    elif change == "graph_outputs":
        document["graph_outputs"] = [7]
    elif change == "stage inputs":
        document["stages"][1]["inputs"] = {"name": "x"}
    elif change == "external_data":
        document["stages"][0]["external_data"] = [1]
    return document


@pytest.mark.parametrize(
    ("change", "path", "reason"),
    [
        ("not json", "", "not valid JSON"),
        ("list", "", "expected a JSON object"),
        ("format", "format", "expected 'onnx-ir-multidevice/split', got 'other'"),
        ("version", "version", "knows version 1, got 99"),
        ("no stages", "stages", "non-empty list"),
        ("index", "stages[1].index", "expected 1"),
        ("file", "stages[0].file", "file name"),
        ("entry", "stages[1]", "expected an object"),
        ("num_stages", "num_stages", "says 3 but 2 stages"),
        ("graph_outputs", "graph_outputs[0]", "tensor name"),
        ("stage inputs", "stages[1].inputs", "expected a list"),
        ("external_data", "stages[0].external_data", "list of file names"),
    ],
)
def test_malformed_manifests_are_located(split_dir, change, path, reason):
    file = split_dir / MANIFEST_NAME
    broken = _broken(json.loads(file.read_text()), change)
    file.write_text(broken if isinstance(broken, str) else json.dumps(broken))
    with pytest.raises(ManifestError) as info:
        read_manifest(split_dir)
    error = info.value
    assert isinstance(error, OmnyFormatError)
    assert error.path == path and reason in error.reason and error.file == str(file)
    assert str(error).startswith(f"{file}: ")
    # the pipeline reports it as before: a PipelineError naming the same place
    with pytest.raises(PipelineError) as info:
        load_stages(split_dir)
    assert str(info.value).endswith(str(error))


def test_missing_manifest_or_stage_file_is_an_io_error(split_dir, tmp_path):
    with pytest.raises(OmnyIOError, match="without manifest.json"):
        read_manifest(tmp_path)
    (split_dir / "stage_1.onnx").unlink()
    with pytest.raises(OmnyIOError, match=r"stages\[1\]\.file: .*stage_1.onnx does not exist"):
        read_manifest(split_dir)
