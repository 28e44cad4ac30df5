"""manifest.json is built and parsed in one module (_split/manifest.py)."""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
import re

import pytest

import onnx_ir_multidevice
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError, PipelineError
from onnx_ir_multidevice._split import save_split, split_at
from onnx_ir_multidevice._split.manifest import (
    GRAPH_INPUT,
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestInput,
    ManifestOutput,
    ManifestStage,
    SplitManifest,
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
    assert first.input_names == ("image",)
    assert first.inputs == (ManifestInput("image", "input"),) and first.inputs[0].is_graph_input
    second = written["stages"][1]
    assert manifest.stages[1].input_names == tuple(i["name"] for i in second["inputs"])
    assert [i.source for i in manifest.stages[1].inputs] == [i["from"] for i in second["inputs"]]
    assert first.output_names == tuple(o["name"] for o in written["stages"][0]["outputs"])
    assert [list(o.to) for o in first.outputs] == [o["to"] for o in written["stages"][0]["outputs"]]
    assert first.external_data == tuple(written["stages"][0]["external_data"])
    assert manifest.to_dict() == written
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
    with pytest.raises(OmnyIOError, match=r"without manifest.json"):
        read_manifest(tmp_path)
    (split_dir / "stage_1.onnx").unlink()
    with pytest.raises(OmnyIOError, match=r"stages\[1\]\.file: .*stage_1.onnx does not exist"):
        read_manifest(split_dir)


# ---------------------------------------------------------------------------------------------
# The typed manifest: round trip, compatibility, validation, consumers

# manifest.json exactly as `omny split` wrote it before the manifest was typed (version 1,
# json.dump(indent=2) and a newline): a zoo.control_flow() model cut after "proj" and "branch".
PREVIOUS_VERSION_TEXT = """{
  "format": "onnx-ir-multidevice/split",
  "version": 1,
  "num_stages": 3,
  "graph_inputs": [
    "x"
  ],
  "graph_outputs": [
    "output"
  ],
  "stages": [
    {
      "index": 0,
      "file": "stage_0.onnx",
      "inputs": [
        {
          "name": "x",
          "from": "input"
        }
      ],
      "outputs": [
        {
          "name": "proj",
          "to": [
            1,
            2
          ]
        }
      ],
      "external_data": [
        "stage_0.onnx.data"
      ]
    },
    {
      "index": 1,
      "file": "stage_1.onnx",
      "inputs": [
        {
          "name": "proj",
          "from": 0
        }
      ],
      "outputs": [
        {
          "name": "branch",
          "to": [
            2
          ]
        }
      ],
      "external_data": []
    },
    {
      "index": 2,
      "file": "stage_2.onnx",
      "inputs": [
        {
          "name": "x",
          "from": "input"
        },
        {
          "name": "proj",
          "from": 0
        },
        {
          "name": "branch",
          "from": 1
        }
      ],
      "outputs": [
        {
          "name": "output",
          "to": [
            "output"
          ]
        }
      ],
      "external_data": []
    }
  ]
}
"""


def _previous_folder(folder: pathlib.Path, text: str = PREVIOUS_VERSION_TEXT) -> pathlib.Path:
    """A split folder with ``text`` as its manifest (stage files are placeholders)."""
    folder.mkdir(exist_ok=True)
    for name in ("stage_0.onnx", "stage_0.onnx.data", "stage_1.onnx", "stage_2.onnx"):
        (folder / name).write_bytes(b"")
    (folder / MANIFEST_NAME).write_text(text, encoding="utf-8")
    return folder


def test_a_manifest_of_the_previous_version_reads_and_writes_back_byte_for_byte(tmp_path):
    folder = _previous_folder(tmp_path / "old")
    manifest = SplitManifest.read(folder)
    assert manifest is not None and read_manifest(folder) == manifest
    assert manifest.num_stages == 3 and manifest.folder == folder
    assert manifest.graph_inputs == ("x",) and manifest.graph_outputs == ("output",)
    assert manifest.stages[0].outputs == (ManifestOutput("proj", (1, 2)),)
    assert manifest.stages[0].outputs[0].destinations == (1, 2)
    assert manifest.stages[2].inputs == (
        ManifestInput("x", GRAPH_INPUT),
        ManifestInput("proj", 0),
        ManifestInput("branch", 1),
    )
    last = manifest.stages[2].outputs[0]
    assert last.is_graph_output and last.destinations == ()
    assert manifest.stages[0].external_data == ("stage_0.onnx.data",)
    assert [s.path for s in manifest.stages] == [folder / f"stage_{i}.onnx" for i in range(3)]
    assert manifest.stage_path(2) == folder / "stage_2.onnx"
    # Unchanged: the same bytes, through to_json, write and a rebuilt equal object alike.
    assert manifest.to_json() == PREVIOUS_VERSION_TEXT
    out = tmp_path / "new"
    out.mkdir()
    assert manifest.write(out).read_bytes() == (folder / MANIFEST_NAME).read_bytes()
    rebuilt = SplitManifest.from_dict(json.loads(PREVIOUS_VERSION_TEXT))
    assert rebuilt == manifest and rebuilt.to_json() == PREVIOUS_VERSION_TEXT
    # The model it came from builds the same document (no files: no external data).
    model = zoo.control_flow()
    built = SplitManifest.build(model, split_at(model, ["proj", "branch"]))
    assert built == dataclasses.replace(
        manifest, stages=[dataclasses.replace(s, external_data=()) for s in manifest.stages]
    )


def test_what_save_split_writes_round_trips(split_dir, tmp_path):
    text = (split_dir / MANIFEST_NAME).read_bytes()
    manifest = SplitManifest.read(split_dir)
    # The writer's style is json.dumps(indent=2) and a newline, as before the typed manifest.
    assert text.decode() == json.dumps(json.loads(text), indent=2) + "\n"
    assert SplitManifest.from_json(text) == manifest
    assert SplitManifest.from_json(manifest.to_json()).to_json() == text.decode()
    assert SplitManifest.from_dict(manifest.to_dict()).to_json() == text.decode()
    copy = tmp_path / "copy"
    copy.mkdir()
    manifest.write(copy)
    assert (copy / MANIFEST_NAME).read_bytes() == text
    # A changed manifest is written anew, in the same style.
    changed = dataclasses.replace(manifest, graph_outputs=("logits", "image"))
    assert changed != manifest and changed.folder == split_dir
    assert json.loads(changed.to_json())["graph_outputs"] == ["logits", "image"]
    assert changed.to_json() == json.dumps(changed.to_dict(), indent=2) + "\n"
    assert hash(manifest) == hash(SplitManifest.from_json(text))


def test_unknown_keys_are_kept_where_they_were(tmp_path):
    document = json.loads(PREVIOUS_VERSION_TEXT)
    document["producer"] = {"name": "elsewhere", "tags": [1, 2]}
    document["stages"][1]["device"] = "cuda:1"
    document["stages"][2]["inputs"][1]["bytes"] = 1024
    document["stages"][0]["outputs"][0]["dtype"] = "float32"
    text = json.dumps(document, indent=1, sort_keys=True)  # another writer's style
    manifest = SplitManifest.read(_previous_folder(tmp_path / "f", text))
    assert manifest.extra == {"producer": {"name": "elsewhere", "tags": (1, 2)}}
    assert manifest.stages[1].extra == {"device": "cuda:1"}
    assert manifest.stages[2].inputs[1].extra == {"bytes": 1024}
    assert manifest.stages[0].outputs[0].extra == {"dtype": "float32"}
    assert manifest.to_json() == text  # unchanged: byte for byte, whatever the style
    crlf = tmp_path / "crlf"
    SplitManifest.read(_previous_folder(crlf, text.replace("\n", "\r\n"))).write(crlf)
    assert (crlf / MANIFEST_NAME).read_bytes() == text.replace("\n", "\r\n").encode()
    assert manifest.to_dict() == document
    with pytest.raises(TypeError, match="read-only"):
        manifest.extra["producer"] = None  # type: ignore[index]
    changed = dataclasses.replace(manifest, graph_inputs=("x",))
    assert json.loads(changed.to_json()) == document  # extras written back after known keys
    assert list(json.loads(changed.to_json()))[-1] == "producer"


def test_a_manifest_built_in_memory_is_public_and_typed():
    import onnx_ir_multidevice as omd

    assert omd.SplitManifest is SplitManifest and omd.Manifest is SplitManifest
    assert omd.ManifestStage is ManifestStage
    assert (omd.ManifestInput, omd.ManifestOutput) == (ManifestInput, ManifestOutput)
    assert SplitManifest.__module__ == "onnx_ir_multidevice"
    model = zoo.control_flow()
    stages = split_at(model, ["proj", "branch"])
    manifest = omd.build_manifest(model, stages)
    assert isinstance(manifest, SplitManifest) and manifest.folder is None
    assert manifest == SplitManifest.build(model, stages)
    assert [s.path for s in manifest.stages] == [None, None, None]
    with pytest.raises(ValueError, match=r"SplitManifest\.read\(folder\)"):
        manifest.stage_path(0)
    files = SplitManifest.build(model, stages, files=["a.onnx", "b.onnx", "c.onnx"])
    assert [s.file for s in files.stages] == ["a.onnx", "b.onnx", "c.onnx"]
    assert files != manifest


def _set(document: dict, path: str, value: object) -> None:
    """Set (or, with ``...``, delete) the element at a JSON path like ``stages[1].inputs[0]``."""
    *parents, last = [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", path) if p]
    target = document
    for part in parents:
        target = target[part]
    if value is ...:
        del target[last]
    else:
        target[last] = value


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        # a missing key
        ("num_stages", ..., "missing: expected the number of stages"),
        ("graph_inputs", ..., "missing: expected the input names"),
        ("stages[1].index", ..., "missing: expected the stage index 1"),
        ("stages[2].outputs", ..., "missing: expected the list of outputs"),
        ("stages[2].inputs[0].from", ..., "missing: expected 'input' or a stage index"),
        ("stages[0].outputs[0].name", ..., "missing: expected a tensor name"),
        # a wrong type
        ("version", True, "knows version 1, got True"),
        ("num_stages", "3", "says '3' but 3 stages"),
        ("stages[0].index", "0", "expected 0 (stages are listed in order), got '0'"),
        ("stages[2].inputs[1]", "proj", "expected an object, got a string"),
        ("stages[0].outputs[0].to", 1, "expected a list, got the number 1"),
        ("stages[0].outputs[0].to[0]", "1", "expected 'output' or the index of a later stage"),
        ("stages[1].inputs[0].name", "", "expected a tensor name, got a string"),
        ("graph_outputs", "output", "expected a list, got a string"),
        # an index out of range: negative, a later stage, past the end
        ("stages[2].inputs[1].from", -1, "(0 to 1), got the number -1"),
        ("stages[1].inputs[0].from", 1, "earlier stage (0 to 0), got the number 1"),
        ("stages[0].inputs[0].from", 0, "expected 'input', got the number 0"),
        ("stages[0].outputs[0].to[1]", 3, "later stage (1 to 2), got the number 3"),
        ("stages[1].outputs[0].to[0]", -2, "later stage (2 to 2), got the number -2"),
        ("stages[2].outputs[0].to[0]", 2, "expected 'output', got the number 2"),
        ("stages[1].index", -1, "expected 1 (stages are listed in order), got -1"),
        # entries that disagree: an input its producer does not send
        ("stages[2].inputs[1].from", 1, "stage 1 sends no 'proj' to stage 2"),
    ],
)
def test_a_bad_manifest_names_the_json_path_and_what_to_do(tmp_path, path, value, reason):
    document = json.loads(PREVIOUS_VERSION_TEXT)
    _set(document, path, value)
    folder = _previous_folder(tmp_path / "f", json.dumps(document, indent=2))
    with pytest.raises(ManifestError) as info:
        SplitManifest.read(folder)
    error = info.value
    assert error.path == path and reason in error.reason, error.reason
    assert "omny split" in error.reason  # what to do
    assert str(error) == f"{folder / MANIFEST_NAME}: {path}: {error.reason}"
    # The same document from text: the same error, with no file.
    with pytest.raises(ManifestError) as info:
        SplitManifest.from_dict(document)
    assert info.value.file is None and str(info.value) == f"{path}: {error.reason}"


@pytest.mark.parametrize(
    ("path", "name", "reason"),
    [
        ("stages[1].file", "../stage_1.onnx", "outside the split folder"),
        ("stages[1].file", "/etc/passwd", "is an absolute path"),
        ("stages[0].external_data[0]", "../../weights.data", "outside the split folder"),
        ("stages[0].external_data[0]", "C:\\weights.data", "is an absolute path"),
    ],
)
def test_a_file_outside_the_folder_is_refused_with_its_path(tmp_path, path, name, reason):
    document = json.loads(PREVIOUS_VERSION_TEXT)
    _set(document, path, name)
    folder = _previous_folder(tmp_path / "f", json.dumps(document, indent=2))
    (tmp_path / "stage_1.onnx").write_bytes(b"")  # it exists, outside
    with pytest.raises(ManifestError) as info:
        SplitManifest.read(folder)
    assert info.value.path == path and reason in info.value.reason
    assert "split the model again" in info.value.reason
    SplitManifest.from_dict(document)  # the document alone names no folder: no check


def test_a_link_leading_out_of_the_folder_is_refused(tmp_path):
    folder = _previous_folder(tmp_path / "f")
    (tmp_path / "elsewhere.onnx").write_bytes(b"")
    (folder / "stage_2.onnx").unlink()
    (folder / "stage_2.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    with pytest.raises(ManifestError) as info:
        SplitManifest.read(folder)
    assert info.value.path == "stages[2].file" and "leads to" in info.value.reason


# Keys only the split manifest has: a consumer reads them as attributes of SplitManifest.
_MANIFEST_KEYS = frozenset(
    {"stages", "num_stages", "graph_inputs", "graph_outputs", "external_data", "from", "to"}
)
# Other documents of the package that have a key of the same name (not the split manifest).
_OTHER_DOCUMENTS = {
    "runtime/stats.py": {"stages"},  # StatsRecorder.to_dict writes its own "stages"
    "omny/tensor_parallel_record.py": {"stages"},  # the tensor-parallel record's own "stages"
}


def _key_reads(source: str) -> list[tuple[int, str]]:
    """``x["key"]`` loads and ``x.get("key")`` calls of a manifest key, with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
            # an ONNX node's attributes (Cast's "to") are no manifest
            and not (
                isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "attributes"
            )
        ):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in _MANIFEST_KEYS:
            found.append((node.lineno, key.value))
    return found


def test_no_module_reads_a_manifest_dict_by_key():
    package = pathlib.Path(onnx_ir_multidevice.__file__).parent
    offenders = []
    for file in sorted(package.rglob("*.py")):
        relative = file.relative_to(package).as_posix()
        if relative == "_split/manifest.py":  # the one place that reads the JSON
            continue
        allowed = _OTHER_DOCUMENTS.get(relative, set())
        offenders += [
            f"{relative}:{line}: [{key!r}]"
            for line, key in _key_reads(file.read_text(encoding="utf-8"))
            if key not in allowed
        ]
    assert offenders == [], "read the manifest through SplitManifest's attributes"
    # The check sees what it is meant to see.
    reads = 'm["stages"][0]["external_data"]; e.get("from"); d["x"]; n.attributes.get("to")'
    assert sorted(_key_reads(reads)) == [(1, "external_data"), (1, "from"), (1, "stages")]


def test_the_pipeline_refuses_a_manifest_that_disagrees_with_its_stage_files(split_dir):
    text = (split_dir / MANIFEST_NAME).read_text()
    assert load_stages(split_dir).stages[1].inputs == read_manifest(split_dir).stages[1].input_names
    # The stage files of another split under this manifest: stage 1 reads an unlisted name.
    document = json.loads(text)
    document["stages"][1]["inputs"] = [{"name": "image", "from": "input"}]
    (split_dir / MANIFEST_NAME).write_text(json.dumps(document, indent=2))
    with pytest.raises(PipelineError, match=r"stages\[1\]\.inputs: stage_1\.onnx reads") as info:
        load_stages(split_dir)
    assert "omny split" in str(info.value)
    document = json.loads(text)
    document["stages"][1]["outputs"][0]["name"] = "probabilities"
    document["graph_outputs"] = ["probabilities"]
    (split_dir / MANIFEST_NAME).write_text(json.dumps(document, indent=2))
    with pytest.raises(PipelineError, match=r"stages\[1\]\.outputs: stage_1\.onnx writes"):
        load_stages(split_dir)
