"""Tests of the .omny metadata format layer (onnx_ir_multidevice.omny._schema)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice.omny import _schema as _format
from onnx_ir_multidevice.omny._schema import (
    MAX_DOCUMENT_SIZE,
    MAX_NESTING_DEPTH,
    OMNY_FORMAT_VERSION,
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)

SPEC_TEXT = (Path(__file__).parent / "data" / "spec_example.json").read_text(encoding="utf-8")

SPEC_KEYS = {
    "": ["version", "model", "inputs", "outputs", "cut_points", "sharding", "export_info"],
    "model": ["name", "architecture", "total_params", "total_size_mb", "inference_memory_mb"],
    "tensor": ["name", "shape", "dtype"],
    "cut_point": [
        "id",
        "after_node",
        "tensor_name",
        "shape",
        "dtype",
        "cumulative_memory_mb",
        "shard_memory_mb",
    ],
    "sharding": [
        "min_vram_mb",
        "max_shard_size_mb",
        "min_shards",
        "max_shards",
        "allowed_shards",
        "configurations",
    ],
    "configuration": ["num_shards", "memory_per_shard_mb", "cut_point_ids"],
    "export_info": [
        "exported_at",
        "exporter_version",
        "source_framework",
        "source_version",
        "onnx_opset",
        "validated",
    ],
}


def spec_dict() -> dict[str, Any]:
    return json.loads(SPEC_TEXT)


def rewritten(meta: OmnyMetadata) -> str:
    """Forces re-serialisation: ``replace`` drops the kept source text."""
    return dataclasses.replace(meta).to_json()


def tuples(value: Any) -> Any:
    """JSON value with arrays as tuples, to compare with ``extra``."""
    if isinstance(value, list):
        return tuple(tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: tuples(v) for k, v in value.items()}
    return value


def parse_error(text: str | bytes, **kwargs: Any) -> OmnyFormatError:
    with pytest.raises(OmnyFormatError) as info:
        OmnyMetadata.from_json(text, **kwargs)
    return info.value


# --------------------------------------------------------------------------------------
# The specification's example
# --------------------------------------------------------------------------------------


def test_spec_example_values():
    meta = OmnyMetadata.from_json(SPEC_TEXT)
    assert meta.version == "1.0"
    assert meta.model == ModelInfo("sam2-large", "vision_transformer", 312000000, 1200, 2400)
    assert meta.inputs == (TensorInfo("image", (1, 3, 1024, 1024), "float32"),)
    assert meta.outputs == (TensorInfo("masks", (1, 4, 256, 256)),)
    assert [c.id for c in meta.cut_points] == ["cut_1", "cut_2"]
    assert meta.cut_points[1] == CutPoint(
        "cut_2", "encoder.layer.24", "hidden_states_24", (1, 64, 64, 768), "float32", 1200, 600
    )
    assert meta.sharding.allowed_shards == (2, 3, 4, 6)
    assert meta.sharding.max_shards == 6
    assert meta.sharding.configurations[1] == ShardConfiguration(
        4, (600, 600, 600, 600), ("cut_1", "cut_2", "cut_3")
    )
    assert meta.export_info == ExportInfo("2026-01-06T12:00:00Z", "0.1.0", "pytorch", "2.1.0", 17)
    assert meta.export_info.validated is None
    assert all(not obj.extra for obj in (meta, meta.model, meta.sharding, meta.export_info))


def test_spec_example_round_trips_byte_for_byte():
    meta = OmnyMetadata.from_json(SPEC_TEXT)
    assert meta.to_json() == SPEC_TEXT
    assert OmnyMetadata.from_json(SPEC_TEXT.encode()).to_json() == SPEC_TEXT
    # Not json.dumps-shaped (arrays of numbers on one line, trailing newline): the writer
    # itself reproduces it from the detected style.
    assert json.dumps(spec_dict(), indent=2) != SPEC_TEXT
    assert rewritten(meta) == SPEC_TEXT


def test_spec_example_changed_keeps_layout():
    meta = OmnyMetadata.from_json(SPEC_TEXT)
    changed = dataclasses.replace(meta, model=dataclasses.replace(meta.model, name="sam2-xl"))
    assert changed != meta
    assert changed.to_json() == SPEC_TEXT.replace('"sam2-large"', '"sam2-xl"')
    configs = meta.sharding.configurations
    fixed = ShardConfiguration(4, (600, 600, 600, 600), ("cut_1", "cut_2", "cut_2"))
    changed = dataclasses.replace(
        meta,
        sharding=dataclasses.replace(meta.sharding, configurations=(configs[0], fixed)),
    )
    expected = SPEC_TEXT.replace('["cut_1", "cut_2", "cut_3"]', '["cut_1", "cut_2", "cut_2"]')
    assert changed.to_json() == expected


# --------------------------------------------------------------------------------------
# Byte-for-byte round trip and style of changed documents
# --------------------------------------------------------------------------------------

STYLES = [
    pytest.param(lambda d: json.dumps(d, indent=2), id="reference-writer"),
    pytest.param(json.dumps, id="one-line"),
    pytest.param(lambda d: json.dumps(d, separators=(",", ":")), id="compact"),
    pytest.param(lambda d: json.dumps(d, indent=4, separators=(", ", ": ")), id="old-indent"),
    pytest.param(lambda d: json.dumps(d, indent="\t", ensure_ascii=False), id="tabs"),
    pytest.param(lambda d: json.dumps(d, indent=0), id="indent-0"),
    pytest.param(lambda d: json.dumps(d, indent=2) + "\n", id="trailing-newline"),
    pytest.param(lambda d: "\n " + json.dumps(d, indent=2) + "\r\n\n", id="surrounding-ws"),
    pytest.param(lambda d: json.dumps(d, indent=2).replace("\n", "\r\n"), id="crlf"),
    pytest.param(lambda d: SPEC_TEXT.replace("\n", "\r\n"), id="spec-crlf"),
]


@pytest.mark.parametrize("dump", STYLES)
def test_styles_round_trip_and_rewrite_identically(dump):
    text = dump(spec_dict())
    meta = OmnyMetadata.from_json(text)
    assert meta == OmnyMetadata.from_json(SPEC_TEXT)
    assert meta.to_json() == text
    assert rewritten(meta) == text
    changed = dataclasses.replace(meta, version="1.1")
    assert changed.to_json() == text.replace('"1.0"', '"1.1"', 1)


def test_integral_float_accepted_as_int_and_spelling_kept():
    d = spec_dict()
    text = json.dumps(d, indent=2).replace('"total_size_mb": 1200', '"total_size_mb": 1200.0')
    text = text.replace('"onnx_opset": 17', '"onnx_opset": 1.7e1')
    meta = OmnyMetadata.from_json(text)
    assert meta.model.total_size_mb == 1200
    assert isinstance(meta.model.total_size_mb, int)
    assert repr(meta.model.total_size_mb) == "1200"
    assert meta.export_info.onnx_opset == 17
    assert meta.to_json() == text
    changed = dataclasses.replace(meta, version="2.0")
    assert changed.to_json() == text.replace('"1.0"', '"2.0"')
    # A value set by the caller is written canonically.
    model = dataclasses.replace(meta.model, total_size_mb=1300)
    out = dataclasses.replace(meta, model=model).to_json()
    assert '"total_size_mb": 1300,' in out
    assert '"onnx_opset": 1.7e1' in out


def test_number_spellings_of_extras_kept():
    text = '{"version": "1.0", "x": [1.50, 1E3, -0, 0.1, 2.5e-3, 7], "y": -0.0}'
    meta = OmnyMetadata.from_json(text)
    assert meta.extra == {"x": (1.5, 1000.0, 0, 0.1, 0.0025, 7), "y": 0.0}
    assert rewritten(meta) == text
    assert dataclasses.replace(meta, version="1.1").to_json() == text.replace("1.0", "1.1", 1)


def test_unicode_and_escapes():
    text = (
        '{"version": "1.0", "model": {"name": "caf\\u00e9 \\ud83d\\ude00 a\\/b \\"q\\" \\\\"}, '
        '"x\\u00e9": "\\t"}'
    )
    meta = OmnyMetadata.from_json(text)
    assert meta.model.name == 'café \U0001f600 a/b "q" \\'
    assert meta.extra == {"xé": "\t"}
    assert meta.to_json() == text
    out = rewritten(meta)  # ASCII-only source: escapes for non-ASCII, canonical otherwise
    assert out.isascii()
    assert OmnyMetadata.from_json(out) == meta
    delete = json.dumps({"version": "\x7f"}, ensure_ascii=False)  # ASCII, but raw DEL
    assert rewritten(OmnyMetadata.from_json(delete)) == delete
    raw = json.dumps(spec_dict() | {"model": {"name": "café 😀"}}, ensure_ascii=False)
    meta = OmnyMetadata.from_json(raw.encode())
    assert meta.to_json() == raw
    assert rewritten(meta) == raw


# --------------------------------------------------------------------------------------
# Unknown keys
# --------------------------------------------------------------------------------------

EXTRA_LOCATIONS = {
    "top": lambda d: d,
    "model": lambda d: d["model"],
    "inputs[0]": lambda d: d["inputs"][0],
    "outputs[0]": lambda d: d["outputs"][0],
    "cut_points[1]": lambda d: d["cut_points"][1],
    "sharding": lambda d: d["sharding"],
    "configurations[1]": lambda d: d["sharding"]["configurations"][1],
    "export_info": lambda d: d["export_info"],
}
EXTRA_OBJECTS = {
    "top": lambda m: m,
    "model": lambda m: m.model,
    "inputs[0]": lambda m: m.inputs[0],
    "outputs[0]": lambda m: m.outputs[0],
    "cut_points[1]": lambda m: m.cut_points[1],
    "sharding": lambda m: m.sharding,
    "configurations[1]": lambda m: m.sharding.configurations[1],
    "export_info": lambda m: m.export_info,
}


@pytest.mark.parametrize("where", list(EXTRA_LOCATIONS))
def test_unknown_keys_kept_in_place_at_every_level(where):
    d = spec_dict()
    target = EXTRA_LOCATIONS[where](d)
    items = list(target.items())
    items.insert(1, ("x_vendor", {"a": [1, 2.5, None, True], "b": {}}))
    items.append(("zz", "tail"))
    target.clear()
    target.update(items)
    text = json.dumps(d, indent=2)
    meta = OmnyMetadata.from_json(text)
    obj = EXTRA_OBJECTS[where](meta)
    assert obj.extra == {"x_vendor": {"a": (1, 2.5, None, True), "b": {}}, "zz": "tail"}
    assert list(obj.extra) == ["x_vendor", "zz"]
    assert meta.to_json() == text
    assert rewritten(meta) == text
    changed = dataclasses.replace(meta, version="9")
    assert changed.to_json() == text.replace('"version": "1.0"', '"version": "9"')


def test_extra_is_read_only_and_hashable():
    text = '{"x": {"a": [1, {"b": 2}]}, "model": {"name": "m", "y": 1}}'
    meta = OmnyMetadata.from_json(text)
    with pytest.raises(TypeError):
        meta.extra["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        meta.extra["x"]["a"] = 1
    with pytest.raises(TypeError):
        meta.extra.update({})  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.version = "2"  # type: ignore[misc]
    assert isinstance(meta.extra["x"]["a"], tuple)
    again = OmnyMetadata.from_json(text.replace(" ", ""))
    assert again == meta and hash(again) == hash(meta)
    assert len({meta, again}) == 1
    other = OmnyMetadata.from_json(text.replace('"y": 1', '"y": 2'))
    assert other != meta
    assert json.loads(json.dumps(meta.extra)) == {"x": {"a": [1, {"b": 2}]}}


def test_extra_from_constructor_is_frozen_and_checked():
    source = {"a": [1, {"b": [2]}]}
    info = TensorInfo("x", [1, 2], extra=source)  # type: ignore[arg-type]
    source["a"].append(3)  # the caller's dict is copied
    assert info.shape == (1, 2)
    assert info.extra == {"a": (1, {"b": (2,)})}
    assert hash(info) == hash(TensorInfo("x", (1, 2), extra={"a": [1, {"b": [2]}]}))
    with pytest.raises(ValueError, match="dtype"):
        TensorInfo("x", (), extra={"dtype": "int8"})
    with pytest.raises(TypeError):
        TensorInfo("x", (), extra={"a": object()})
    with pytest.raises(TypeError):
        TensorInfo("x", (), extra={1: 2})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="nan cannot be written as JSON"):
        TensorInfo("x", (), extra={"a": float("nan")})
    text = OmnyMetadata(inputs=(info,)).to_json()
    assert json.loads(text)["inputs"][0] == {
        "name": "x",
        "shape": [1, 2],
        "dtype": "float32",
        "a": [1, {"b": [2]}],
    }


# --------------------------------------------------------------------------------------
# Documents built from scratch
# --------------------------------------------------------------------------------------


def full_metadata() -> OmnyMetadata:
    return OmnyMetadata(
        model=ModelInfo("m", "cnn", 10, 1, 2),
        inputs=(TensorInfo("x", (-1, 3)),),
        outputs=(TensorInfo("y", (-1, 10), "float16"),),
        cut_points=(CutPoint("c1", "n1", "t1", (-1, 8), "float32", 1, 1),),
        sharding=Sharding(1500, 1200, 2, 2, (2,), (ShardConfiguration(2, (1, 1), ("c1",)),)),
        export_info=ExportInfo("2026-01-01T00:00:00Z", "0.2.0", "onnx", "1.0", 21),
    )


def check_spec_keys(document: dict[str, Any]) -> None:
    assert list(document) == SPEC_KEYS[""]
    assert list(document["model"]) == SPEC_KEYS["model"]
    for tensor in document["inputs"] + document["outputs"]:
        assert list(tensor) == SPEC_KEYS["tensor"]
    for cut in document["cut_points"]:
        assert list(cut) == SPEC_KEYS["cut_point"]
    assert list(document["sharding"]) == SPEC_KEYS["sharding"]
    for config in document["sharding"]["configurations"]:
        assert list(config) == SPEC_KEYS["configuration"]
    keys = SPEC_KEYS["export_info"]
    if "validated" not in document["export_info"]:
        keys = keys[:-1]
    assert list(document["export_info"]) == keys


def test_from_scratch_is_spec_shaped_in_reference_writer_style():
    for meta in (OmnyMetadata(), full_metadata()):
        text = meta.to_json()
        document = json.loads(text)
        check_spec_keys(document)
        assert "validated" not in document["export_info"]
        assert text == json.dumps(document, indent=2)
        assert OmnyMetadata.from_json(text) == meta
    document = json.loads(OmnyMetadata().to_json())
    assert document["sharding"] == {
        "min_vram_mb": 1500,
        "max_shard_size_mb": 1200,
        "min_shards": 2,
        "max_shards": 8,
        "allowed_shards": [2, 4],
        "configurations": [],
    }
    assert document["model"]["name"] == "unknown"
    assert document["version"] == OMNY_FORMAT_VERSION


@pytest.mark.parametrize("validated", [True, False])
def test_validated_written_only_when_set(validated):
    meta = dataclasses.replace(full_metadata(), export_info=ExportInfo(validated=validated))
    document = json.loads(meta.to_json())
    check_spec_keys(document)
    assert document["export_info"]["validated"] is validated
    parsed = OmnyMetadata.from_json(meta.to_json())
    assert parsed.export_info.validated is validated
    cleared = dataclasses.replace(parsed, export_info=ExportInfo())
    assert "validated" not in json.loads(cleared.to_json())["export_info"]


def test_validated_null_reads_as_none_and_stays_in_a_rewrite():
    text = '{"export_info": {"validated": null, "onnx_opset": 18}}'
    meta = OmnyMetadata.from_json(text)
    assert meta.export_info.validated is None
    assert meta.export_info == ExportInfo(onnx_opset=18)
    assert rewritten(meta) == text


def test_missing_optional_keys_take_defaults_and_stay_absent():
    meta = OmnyMetadata.from_json("{}")
    assert meta == OmnyMetadata()
    assert rewritten(meta) == "{}"
    assert dataclasses.replace(meta, version="1.1").to_json() == '{"version": "1.1"}'
    meta = OmnyMetadata.from_json('{"model": {"name": "m", "zz": 1}}')
    model = dataclasses.replace(meta.model, total_params=5)  # absent in source: inserted
    assert dataclasses.replace(meta, model=model).to_json() == (
        '{"model": {"name": "m", "total_params": 5, "zz": 1}}'
    )


def test_key_order_of_source_kept():
    text = '{"sharding": {"max_shards": 4, "min_shards": 2}, "version": "1.0"}'
    meta = OmnyMetadata.from_json(text)
    sharding = dataclasses.replace(meta.sharding, max_shards=3)
    assert dataclasses.replace(meta, sharding=sharding).to_json() == text.replace("4", "3")


def test_cut_point_lookup():
    meta = OmnyMetadata.from_json(SPEC_TEXT)
    assert meta.cut_point("cut_2") is meta.cut_points[1]
    assert meta.cut_point("cut_3") is None
    dup = dataclasses.replace(
        meta, cut_points=(*meta.cut_points, CutPoint("cut_1", "other", "t", ()))
    )
    assert dup.cut_point("cut_1") is meta.cut_points[0]
    assert dup.cut_point("cut_2") is meta.cut_points[1]
    assert dataclasses.replace(meta, cut_points=()).cut_point("cut_1") is None


def test_pickle_and_copy_keep_value_and_text():
    text = SPEC_TEXT.replace('"total_size_mb": 1200', '"total_size_mb": 1200.0')
    text = text.replace('"version": "1.0",', '"version": "1.0",\n  "x": [1E2, "a"],')
    meta = OmnyMetadata.from_json(text)
    for clone in (pickle.loads(pickle.dumps(meta)), copy.deepcopy(meta), copy.copy(meta)):
        assert clone == meta
        assert clone.to_json() == text
        assert rewritten(clone) == text


def test_constants():
    assert OMNY_VERSION_KEY == "omnynet_version"
    assert OMNY_METADATA_KEY == "omnynet_metadata"
    assert OMNY_FORMAT_VERSION == "1.0"
    assert MAX_DOCUMENT_SIZE == 64 * 1024 * 1024
    assert MAX_NESTING_DEPTH == 64
    assert set(_format.__all__) == {
        "MAX_DOCUMENT_SIZE",
        "MAX_NESTING_DEPTH",
        "OMNY_FORMAT_VERSION",
        "OMNY_METADATA_KEY",
        "OMNY_VERSION_KEY",
        "CutPoint",
        "ExportInfo",
        "ModelInfo",
        "OmnyMetadata",
        "ShardConfiguration",
        "Sharding",
        "TensorInfo",
    }
    for name in _format.__all__:
        assert hasattr(_format, name)


def test_field_names_and_defaults_follow_contract():
    def public(cls):
        return [
            (f.name, f.default)
            for f in dataclasses.fields(cls)
            if f.name != "extra" and not f.name.startswith("_")
        ]

    missing = dataclasses.MISSING
    assert public(TensorInfo) == [("name", missing), ("shape", missing), ("dtype", "float32")]
    assert public(ShardConfiguration) == [
        ("num_shards", missing),
        ("memory_per_shard_mb", missing),
        ("cut_point_ids", missing),
    ]
    assert public(ExportInfo)[-1] == ("validated", None)
    assert [n for n, _ in public(CutPoint)] == SPEC_KEYS["cut_point"]
    assert [n for n, _ in public(Sharding)] == SPEC_KEYS["sharding"]
    assert [n for n, _ in public(ModelInfo)] == SPEC_KEYS["model"]
    assert [f.name for f in dataclasses.fields(OmnyMetadata)][:7] == SPEC_KEYS[""]


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def set_at(d: dict[str, Any], path: list[Any], value: Any) -> None:
    for part in path[:-1]:
        d = d[part]
    if value is DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value


DELETE = object()
CONFIG = ["sharding", "configurations"]
ERROR_CASES = [
    ([*CONFIG, 1, "cut_point_ids", 2], 3, "expected a string, got 3"),
    (["model", "total_params"], True, "expected an integer, got true"),
    (["model", "total_size_mb"], 1200.5, "expected an integer, got 1200.5"),
    (["model", "total_size_mb"], 1e19, "outside the signed 64-bit range"),
    (["model", "total_params"], 2**63, "outside the signed 64-bit range"),
    (["model", "inference_memory_mb"], -1, "expected a non-negative integer, got -1"),
    (["model", "name"], None, "expected a string, got null"),
    (["model"], [], "expected an object, got an array"),
    (["model", "name"], DELETE, "required key is missing"),
    (["inputs"], {}, "expected an array, got an object"),
    (["inputs", 0], "image", 'expected an object, got "image"'),
    (["inputs", 0, "shape"], DELETE, "required key is missing"),
    (["inputs", 0, "name"], DELETE, "required key is missing"),
    (["inputs", 0, "shape", 1], -2, "expected a dimension >= 0 or -1 (dynamic), got -2"),
    (["outputs", 0, "shape", 0], 2.5, "expected an integer, got 2.5"),
    (["outputs", 0, "shape", 0], False, "expected an integer, got false"),
    (["outputs", 0, "shape"], "1x3", 'expected an array, got "1x3"'),
    (["cut_points", 1, "tensor_name"], DELETE, "required key is missing"),
    (["cut_points", 1, "id"], DELETE, "required key is missing"),
    (["cut_points", 1, "after_node"], DELETE, "required key is missing"),
    (["cut_points", 1, "shape"], DELETE, "required key is missing"),
    (["cut_points", 0, "shard_memory_mb"], -1, "expected a non-negative integer, got -1"),
    (["cut_points", 0, "shape", 3], -7, "expected a dimension >= 0 or -1 (dynamic), got -7"),
    (["sharding", "min_vram_mb"], -1, "expected a non-negative integer, got -1"),
    (["sharding", "max_shard_size_mb"], "1200", 'expected an integer, got "1200"'),
    (["sharding", "min_shards"], 0, "expected an integer >= 1, got 0"),
    (["sharding", "allowed_shards", 0], 0, "expected an integer >= 1, got 0"),
    (["sharding", "allowed_shards", 1], -1, "expected an integer >= 1, got -1"),
    ([*CONFIG, 0, "num_shards"], 0, "expected an integer >= 1, got 0"),
    ([*CONFIG, 0, "num_shards"], DELETE, "required key is missing"),
    ([*CONFIG, 1, "memory_per_shard_mb"], DELETE, "required key is missing"),
    ([*CONFIG, 1, "cut_point_ids"], DELETE, "required key is missing"),
    ([*CONFIG, 1, "cut_point_ids"], "cut_1", 'expected an array, got "cut_1"'),
    ([*CONFIG, 0, "memory_per_shard_mb", 1], -1, "expected a non-negative integer, got -1"),
    ([*CONFIG, 1], [], "expected an object, got an array"),
    (["export_info", "onnx_opset"], "17", 'expected an integer, got "17"'),
    (["export_info", "onnx_opset"], -1, "expected a non-negative integer, got -1"),
    (["export_info", "validated"], 1, "expected true, false or null, got 1"),
    (["version"], 1.0, "expected a string, got 1.0"),
]


def dotted(path: list[Any]) -> str:
    out = ""
    for part in path:
        out = f"{out}[{part}]" if isinstance(part, int) else (f"{out}.{part}" if out else part)
    return out


@pytest.mark.parametrize(("path", "value", "reason"), ERROR_CASES, ids=lambda x: str(x)[:30])
def test_schema_errors_name_the_json_path(path, value, reason):
    d = spec_dict()
    set_at(d, path, value)
    error = parse_error(json.dumps(d, indent=2))
    assert error.path == dotted(path)
    assert reason in error.reason
    assert str(error) == f"{dotted(path)}: {error.reason}"
    assert isinstance(error, ValueError)


def test_exact_message_of_the_style_guide_example():
    d = spec_dict()
    d["sharding"]["configurations"][1]["cut_point_ids"][2] = 3
    error = parse_error(json.dumps(d))
    assert str(error) == "sharding.configurations[1].cut_point_ids[2]: expected a string, got 3"


def test_dynamic_dims_allowed_in_shapes_only():
    d = spec_dict()
    d["inputs"][0]["shape"] = [-1, 3, -1, -1]
    d["outputs"][0]["shape"] = [-1]
    d["cut_points"][0]["shape"] = [-1, 64, 64, 768]
    meta = OmnyMetadata.from_json(json.dumps(d))
    assert meta.inputs[0].shape == (-1, 3, -1, -1)
    assert meta.cut_points[0].shape[0] == -1


def test_path_of_odd_keys_is_quoted():
    error = parse_error('{"model": {"name": "m", "a b": {"c": NaN}}}')
    assert error.path == 'model["a b"].c'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not valid JSON at line 1, column 1"),
        ('{"version": "1.0",\n  "model": }', "not valid JSON at line 2, column 12"),
        ('{"version": "1.0"} x', "not valid JSON at line 1, column 20"),
        (SPEC_TEXT[:500], "not valid JSON at line"),
        ("'single'", "not valid JSON"),
        ("[]", "expected a JSON object at the top level, got an array"),
        ('"x"', 'expected a JSON object at the top level, got "x"'),
        ("3", "expected a JSON object at the top level, got 3"),
        ("null", "expected a JSON object at the top level, got null"),
    ],
)
def test_not_a_json_object(text, reason):
    error = parse_error(text)
    assert error.path == ""
    assert str(error).startswith(reason)


def test_wrong_input_type():
    with pytest.raises(TypeError):
        OmnyMetadata.from_json(3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Hostile input
# --------------------------------------------------------------------------------------


def test_size_limit():
    assert "more than the limit" in parse_error("{}" + " " * 100, max_size=100).reason
    assert "bytes" in parse_error(b"{}" + b" " * 100, max_size=100).reason
    assert OmnyMetadata.from_json(" " * 98 + "{}", max_size=100) == OmnyMetadata()
    big = b" " * (MAX_DOCUMENT_SIZE + 1)
    assert "limit" in parse_error(big).reason


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"a":' * 100_000,
        '{"x": ' + "[" * 65 + "]" * 65 + "}",
        '{"x": "\\"", "y": ' + "[" * 70 + "]" * 70 + "}",
        '{"x": "\\\\", "y": ' + "[{" * 40 + '"a": 1' + "}]" * 40 + "}",
        "[" * 10_000 + "}",  # unbalanced and deep: still not a RecursionError
    ],
)
def test_nesting_limit(text):
    assert "deep, more than the limit of 64" in parse_error(text).reason


def test_nesting_inside_strings_does_not_count():
    text = '{"x": "' + "[" * 10_000 + '\\"[[[", "y": [[[1]]]}'
    assert OmnyMetadata.from_json(text).extra["y"] == (((1,),),)
    deep = '{"y": ' + "[" * 63 + "]" * 63 + "}"  # depth 64 with the top-level object
    assert OmnyMetadata.from_json(deep).extra["y"] is not None
    assert parse_error(deep, max_depth=63).reason.startswith("document nests")


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ('{"x": NaN}', "x", "NaN is not allowed"),
        ('{"model": {"name": "m", "total_params": Infinity}}', "model.total_params", "Infinity"),
        ('{"x": [-Infinity]}', "x[0]", "-Infinity is not allowed"),
        ('{"x": 1e400}', "x", "too large for a 64-bit float"),
        ('{"x": -1e400}', "x", "too large for a 64-bit float"),
        ('{"x": 9223372036854775808}', "x", "outside the signed 64-bit range"),
        ('{"x": -9223372036854775809}', "x", "outside the signed 64-bit range"),
        ('{"x": ' + "9" * 5000 + "}", "x", "outside the signed 64-bit range"),
        ('{"model": {"name": "m", "total_params": 1e19}}', "model.total_params", "outside"),
        ('{"model": {"name": "m", "total_params": 1e-400}}', "model.total_params", "integer"),
        ('{"version": "1", "version": "2"}', "version", "duplicate key"),
        ('{"model": {"name": "a", "name": "a"}}', "model.name", "duplicate key"),
        ('{"x": [{}, {"k": 1, "k": 1}]}', "x[1].k", "duplicate key"),
        ('{"inputs": [{"name": "a", "shape": [], "name": "b"}]}', "inputs[0].name", "dupl"),
        ('{"x": "\\ud800"}', "x", "unpaired UTF-16 surrogate"),
        ('{"x": "\\udc00\\ud800"}', "x", "unpaired UTF-16 surrogate"),
        ('{"model": {"name": "a\\uDBFFb"}}', "model.name", "unpaired UTF-16 surrogate"),
        ('{"\\ud800": 1}', '["\\ud800"]', "unpaired UTF-16 surrogate"),
        ('{"x": ["a", "\\ud800"]}', "x[1]", "unpaired UTF-16 surrogate"),
        ('{"x": "a\ud800"}', "", "unpaired UTF-16 surrogate U+D800 at line 1, column 9"),
    ],
)
def test_hostile_values(text, path, reason):
    error = parse_error(text)
    assert error.path == path
    assert reason in error.reason


def test_extreme_but_valid_numbers():
    text = '{"x": [9223372036854775807, -9223372036854775808, 1e308, 5e-324]}'
    assert OmnyMetadata.from_json(text).extra["x"][0] == 2**63 - 1
    long_float = '{"model": {"name": "m", "total_params": 1.' + "0" * 100_000 + "}}"
    assert OmnyMetadata.from_json(long_float).model.total_params == 1
    not_integral = '{"model": {"name": "m", "total_params": 1.' + "0" * 1000 + "1}}"
    assert "expected an integer" in parse_error(not_integral).reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"x": "\xff"}', "not valid UTF-8: invalid start byte at byte 7"),
        (b'{"x": "\xc3"}', "not valid UTF-8"),
        (b'{"x": "\xed\xa0\x80"}', "not valid UTF-8"),  # an encoded surrogate
        (b'{"x": "\xc0\xaf"}', "not valid UTF-8"),  # an overlong encoding
        (b"\xff\xfe{\x00}\x00", "not valid UTF-8"),  # UTF-16
    ],
)
def test_invalid_utf8(data, reason):
    error = parse_error(data)
    assert reason in error.reason


def test_valid_surrogate_pairs_and_bom():
    assert OmnyMetadata.from_json('{"x": "\\ud83d\\ude00"}').extra["x"] == "\U0001f600"
    assert OmnyMetadata.from_json('{"x": "\\\\ud800"}').extra["x"] == "\\ud800"
    assert "byte order mark" in parse_error(b"\xef\xbb\xbf{}").reason
    assert "byte order mark" in parse_error("\ufeff{}").reason


def test_escaped_quotes_do_not_make_the_prescan_quadratic():
    text = '{"a": "' + '\\"' * 300_000 + '"' + "[" * 100  # quadratic would hang here
    assert parse_error(text).path == ""
    text = '{"a": "' + '\\"' * 300_000  # unterminated
    assert "Unterminated string" in parse_error(text).reason


# --------------------------------------------------------------------------------------
# Writing fails closed
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "path", "reason"),
    [
        (
            OmnyMetadata(model=ModelInfo("m", total_size_mb=-5)),
            "model.total_size_mb",
            "expected a non-negative integer, got -5",
        ),
        (
            OmnyMetadata(model=ModelInfo("m", total_params=True)),
            "model.total_params",
            "expected an integer, got true",
        ),
        (
            OmnyMetadata(model=ModelInfo("m", total_params=2**64)),
            "model.total_params",
            "outside the signed 64-bit range",
        ),
        (
            OmnyMetadata(inputs=(TensorInfo("x", (1, -2)),)),
            "inputs[0].shape[1]",
            "expected a dimension >= 0 or -1 (dynamic), got -2",
        ),
        (
            OmnyMetadata(inputs=(TensorInfo(None, ()),)),  # type: ignore[arg-type]
            "inputs[0].name",
            "expected a string, got null",
        ),
        (
            OmnyMetadata(export_info=ExportInfo(validated="yes")),  # type: ignore[arg-type]
            "export_info.validated",
            'expected True, False or None, got "yes"',
        ),
        (
            OmnyMetadata(cut_points=("c1",)),  # type: ignore[arg-type]
            "cut_points[0]",
            'expected a CutPoint, got "c1"',
        ),
        (
            OmnyMetadata(sharding=Sharding(configurations=(ShardConfiguration(0, (), ()),))),
            "sharding.configurations[0].num_shards",
            "expected an integer >= 1, got 0",
        ),
        (
            OmnyMetadata(model=ModelInfo("bad \ud800")),
            "model.name",
            "unpaired UTF-16 surrogate",
        ),
    ],
)
def test_to_json_rejects_values_the_format_cannot_carry(meta, path, reason):
    with pytest.raises(OmnyFormatError) as info:
        meta.to_json()
    assert info.value.path == path
    assert info.value.reason == reason or reason in info.value.reason


def test_to_json_accepts_integer_like_values():
    class Index:
        def __index__(self) -> int:
            return 7

    meta = OmnyMetadata(model=ModelInfo("m", total_params=Index()))  # type: ignore[arg-type]
    assert json.loads(meta.to_json())["model"]["total_params"] == 7


# --------------------------------------------------------------------------------------
# Scale
# --------------------------------------------------------------------------------------


def test_large_document_is_handled_linearly():
    n = 10_000
    d = spec_dict()
    d["cut_points"] = [
        {
            "id": f"cut_{i}",
            "after_node": f"layer.{i}",
            "tensor_name": f"h_{i}",
            "shape": [1, 64, 64, 768],
            "dtype": "float32",
            "cumulative_memory_mb": i,
            "shard_memory_mb": 1,
        }
        for i in range(n)
    ]
    d["sharding"]["configurations"] = [
        {"num_shards": 3, "memory_per_shard_mb": [1, 2, 3], "cut_point_ids": [f"cut_{i}"] * 2}
        for i in range(n)
    ]
    text = json.dumps(d, indent=2)
    meta = OmnyMetadata.from_json(text)
    assert len(meta.cut_points) == n
    assert rewritten(meta) == text
    # One index for all lookups (a scan per lookup would be 10k x 20k comparisons).
    found = [meta.cut_point(i) for c in meta.sharding.configurations for i in c.cut_point_ids]
    assert found[-1] is meta.cut_points[-1]
    assert meta._cut_index is not None and len(meta._cut_index) == n
    # Key orders of the many identical objects are shared, not stored once per object.
    assert len({id(c._json_keys) for c in meta.cut_points}) == 1


# --------------------------------------------------------------------------------------
# Property tests
# --------------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(0, 5000)
NON_NEGATIVE = st.one_of(SMALL, st.integers(0, 2**63 - 1))
INTEGRAL_FLOAT = st.integers(0, 2**40).map(float)  # 1200.0-style spelling of an int
COUNT = st.one_of(st.integers(1, 16), st.integers(1, 2**63 - 1))
DIM = st.one_of(st.integers(-1, 4096), st.integers(-1, 2**63 - 1))
JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def json_object(draw, required: dict, optional: dict) -> dict[str, Any]:
    known = set(required) | set(optional)
    document = draw(st.fixed_dictionaries(required, optional=optional))
    extra = draw(st.dictionaries(TEXT.filter(lambda k: k not in known), JSON_VALUE, max_size=2))
    items = list(document.items()) + list(extra.items())
    if draw(st.booleans()):
        items = draw(st.permutations(items))
    return dict(items)


def maybe_float(ints: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.one_of(ints, ints, ints, INTEGRAL_FLOAT)


TENSOR = json_object({"name": TEXT, "shape": st.lists(DIM, max_size=4)}, {"dtype": TEXT})
CUT = json_object(
    {"id": TEXT, "after_node": TEXT, "tensor_name": TEXT, "shape": st.lists(DIM, max_size=4)},
    {
        "dtype": TEXT,
        "cumulative_memory_mb": maybe_float(NON_NEGATIVE),
        "shard_memory_mb": NON_NEGATIVE,
    },
)
CONFIGURATION = json_object(
    {
        "num_shards": COUNT,
        "memory_per_shard_mb": st.lists(maybe_float(NON_NEGATIVE), max_size=4),
        "cut_point_ids": st.lists(TEXT, max_size=3),
    },
    {},
)
DOCUMENT = json_object(
    {},
    {
        "version": TEXT,
        "model": json_object(
            {"name": TEXT},
            {
                "architecture": TEXT,
                "total_params": maybe_float(NON_NEGATIVE),
                "total_size_mb": NON_NEGATIVE,
                "inference_memory_mb": NON_NEGATIVE,
            },
        ),
        "inputs": st.lists(TENSOR, max_size=2),
        "outputs": st.lists(TENSOR, max_size=2),
        "cut_points": st.lists(CUT, max_size=3),
        "sharding": json_object(
            {},
            {
                "min_vram_mb": NON_NEGATIVE,
                "max_shard_size_mb": NON_NEGATIVE,
                "min_shards": COUNT,
                "max_shards": COUNT,
                "allowed_shards": st.lists(COUNT, max_size=4),
                "configurations": st.lists(CONFIGURATION, max_size=2),
            },
        ),
        "export_info": json_object(
            {},
            {
                "exported_at": TEXT,
                "exporter_version": TEXT,
                "source_framework": TEXT,
                "source_version": TEXT,
                "onnx_opset": SMALL,
                "validated": st.sampled_from([True, False, None]),
            },
        ),
    },
)
STYLE = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, None, 0, 2, 2, 4, "\t"]),
        "separators": st.sampled_from([None, (",", ":"), (", ", ": "), (",", ": ")]),
        "ensure_ascii": st.booleans(),
    }
)
TRAIL = st.sampled_from(["", "", "\n", "\r\n", " \n"])


def check_matches(obj: Any, document: dict[str, Any]) -> None:
    """The parsed object holds the document's values (known keys and extras)."""
    kinds = _format._SCHEMAS[type(obj)]
    for key, value in document.items():
        if key not in kinds:
            assert obj.extra[key] == tuples(value)
            continue
        field = getattr(obj, key)
        if isinstance(value, dict):
            check_matches(field, value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            assert len(field) == len(value)
            for item, item_document in zip(field, value, strict=True):
                check_matches(item, item_document)
        else:
            assert field == tuples(value)
            assert type(field) is not bool or type(value) is bool
    assert set(obj.extra) == set(document) - set(kinds)


PROPERTY = settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(document=DOCUMENT, style=STYLE, trail=TRAIL, as_bytes=st.booleans())
def test_any_valid_document_round_trips_byte_for_byte(document, style, trail, as_bytes):
    text = json.dumps(document, **style) + trail
    meta = OmnyMetadata.from_json(text.encode() if as_bytes else text)
    check_matches(meta, document)
    assert meta.to_json() == text
    # The writer alone (no kept source) reproduces every json.dumps style exactly.
    assert rewritten(meta) == text
    # A changed document differs only where it changed.
    if "version" in document:
        changed = dataclasses.replace(meta, version=document["version"] + "x")
        document["version"] += "x"
        assert changed.to_json() == json.dumps(document, **style) + trail


SCRATCH_EXTRA = st.one_of(
    st.just({}), st.dictionaries(st.sampled_from(["x_a", "x_b", "é"]), JSON_VALUE, max_size=2)
)
SCRATCH = st.builds(
    OmnyMetadata,
    version=TEXT,
    model=st.builds(ModelInfo, TEXT, TEXT, NON_NEGATIVE, NON_NEGATIVE, NON_NEGATIVE),
    inputs=st.lists(st.builds(TensorInfo, TEXT, st.tuples(DIM, DIM), TEXT), max_size=2),
    cut_points=st.lists(
        st.builds(CutPoint, TEXT, TEXT, TEXT, st.lists(DIM, max_size=3), TEXT, NON_NEGATIVE, SMALL),
        max_size=3,
    ),
    sharding=st.builds(
        Sharding,
        NON_NEGATIVE,
        NON_NEGATIVE,
        COUNT,
        COUNT,
        st.lists(COUNT, max_size=3),
        st.lists(
            st.builds(
                ShardConfiguration,
                COUNT,
                st.lists(NON_NEGATIVE, max_size=3),
                st.lists(TEXT, max_size=3),
                extra=SCRATCH_EXTRA,
            ),
            max_size=2,
        ),
    ),
    export_info=st.builds(
        ExportInfo, TEXT, TEXT, TEXT, TEXT, SMALL, st.sampled_from([True, False, None])
    ),
    extra=SCRATCH_EXTRA,
)


@PROPERTY
@given(meta=SCRATCH)
def test_from_scratch_round_trips_to_an_equal_object(meta):
    text = meta.to_json()
    parsed = OmnyMetadata.from_json(text)
    assert parsed == meta
    assert hash(parsed) == hash(meta)
    assert text == json.dumps(json.loads(text), indent=2)
    document = json.loads(text)
    assert list(document)[:7] == SPEC_KEYS[""]
    assert ("validated" in document["export_info"]) == (meta.export_info.validated is not None)


def assert_parses_or_format_error(text: str | bytes) -> None:
    try:
        meta = OmnyMetadata.from_json(text)
    except OmnyFormatError as error:
        assert isinstance(error.path, str) and error.reason
        return
    assert meta.to_json() == (text.decode() if isinstance(text, bytes) else text)
    assert OmnyMetadata.from_json(rewritten(meta)) == meta


@st.composite
def mutated_text(draw) -> str | bytes:
    text = json.dumps(draw(DOCUMENT), **draw(STYLE))
    if draw(st.booleans()):
        data: Any = text.encode()
        garbage = st.binary(min_size=1, max_size=4)
    else:
        data = text
        garbage = st.one_of(
            st.text(min_size=1, max_size=4),
            st.sampled_from(['"', "\\", "[", "{", "}", "]", ",", ":", "NaN", "-", "1e999"]),
        )
    op = draw(st.sampled_from(["delete", "insert", "swap", "truncate", "replace"]))
    i = draw(st.integers(0, len(data)))
    j = draw(st.integers(0, len(data)))
    i, j = min(i, j), max(i, j)
    if op == "delete":
        return data[:i] + data[j:]
    if op == "insert":
        return data[:i] + draw(garbage) + data[i:]
    if op == "truncate":
        return data[:i]
    if op == "swap" and j < len(data):
        return data[:i] + data[j : j + 1] + data[i + 1 : j] + data[i : i + 1] + data[j + 1 :]
    return data[:i] + draw(garbage) + data[i + 1 :]


@PROPERTY
@given(text=mutated_text())
def test_any_mutated_text_parses_or_raises_format_error(text):
    assert_parses_or_format_error(text)


def containers(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, dict):
        out.append(value)
        for item in value.values():
            containers(item, out)
    elif isinstance(value, list):
        out.append(value)
        for item in value:
            containers(item, out)
    return out


ANY_VALUE = st.one_of(
    JSON_VALUE,
    st.floats(),  # NaN and infinities: json.dumps writes NaN / Infinity
    st.integers(),  # beyond 64 bits
    st.sampled_from([[], {}, "", 0, -1, -2, 1.5, True, None]),
)


@PROPERTY
@given(document=DOCUMENT, data=st.data())
def test_any_structural_mutation_parses_or_raises_format_error(document, data):
    document = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(containers(document, [])))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        op = data.draw(st.sampled_from(["delete", "change", "add"]))
        if op == "add" or not keys:
            value = copy.deepcopy(data.draw(ANY_VALUE))
            if isinstance(target, dict):
                target[data.draw(TEXT)] = value
            else:
                target.append(value)
        elif op == "delete":
            del target[data.draw(st.sampled_from(keys))]
        else:
            target[data.draw(st.sampled_from(keys))] = copy.deepcopy(data.draw(ANY_VALUE))
    assert_parses_or_format_error(json.dumps(document))


NESTED_STRING = st.text(st.sampled_from('[]{}"\\ax'), max_size=4)


def nested(depth: int, strings: list[str]) -> Any:
    value: Any = strings[0] if strings else 1
    for level in range(depth):
        s = strings[level % len(strings)] if strings else "k"
        value = [s, value] if level % 2 else {s: value, "z": s}
    return value


@settings(deadline=None, max_examples=60)
@given(
    depth=st.integers(0, 12),
    limit=st.integers(1, 12),
    strings=st.lists(NESTED_STRING, max_size=4),
)
def test_nesting_limit_is_exact(depth, limit, strings):
    text = json.dumps({"x": nested(depth, strings)})
    total = depth + 1  # the top-level object counts
    if total > limit:
        assert parse_error(text, max_depth=limit).reason.startswith("document nests")
    else:
        assert OmnyMetadata.from_json(text, max_depth=limit).extra["x"] is not None
