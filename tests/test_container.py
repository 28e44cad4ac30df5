"""Tests of the .omny v2 container layer (_container): fixtures, hostile headers, fuzzing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import struct
from pathlib import Path

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError
from onnx_ir_multidevice.omny import OmnyMetadata
from onnx_ir_multidevice.omny import container as c
from onnx_ir_multidevice.omny.container import OmnyContainerError

DATA = Path(__file__).parent / "data" / "omny-v2"
V1 = (DATA / "tiny_v1.omny").read_bytes()
UPGRADED = (DATA / "tiny_v2_upgrade.omny").read_bytes()
EXPORTED = (DATA / "tiny_v2_export.omny").read_bytes()
PLAIN = (DATA / "tiny_plain.onnx").read_bytes()

# Header field byte offsets.
FIELD_AT = {
    "magic": 0,
    "version": 4,
    "flags": 8,
    "model_offset": 16,
    "model_size": 24,
    "reserved_offset": 32,
    "reserved_size": 40,
    "manifest_offset": 48,
    "manifest_size": 56,
}
U64 = 2**64 - 1


def _set(data: bytes, **fields: int) -> bytes:
    out = bytearray(data)
    for name, value in fields.items():
        fmt = "<I" if name == "version" else "<Q"
        struct.pack_into(fmt, out, FIELD_AT[name], value)
    return bytes(out)


def _container_bytes(
    model: bytes = PLAIN,
    manifest: bytes = b'{"version": "2.0"}',
    *,
    reserved: bytes = b"",
    **fields: int,
) -> bytes:
    """Upstream's layout, built by hand (no check: the parts may be hostile)."""
    reserved_offset = 256 + len(model) if reserved else 0
    manifest_offset = 256 + len(model) + len(reserved)
    header = struct.pack(
        "<4sIQQQQQQQ",
        b"OMNY",
        2,
        0,
        256,
        len(model),
        reserved_offset,
        len(reserved),
        manifest_offset,
        len(manifest),
    )
    data = header + bytes(256 - len(header)) + model + reserved + manifest
    return _set(data, **fields)


# --------------------------------------------------------------------------- fixtures


def test_upgrade_of_the_v1_fixture_is_byte_identical_to_upstream():
    out = c.upgrade(V1)
    assert out == UPGRADED
    assert hashlib.sha256(out).hexdigest().startswith("0a8f001f")


@pytest.mark.parametrize("data", [UPGRADED, EXPORTED], ids=["upgrade", "export"])
def test_v2_fixtures_read_then_written_are_byte_identical(data):
    container = c.parse_container(data)
    assert c.serialize_container(container) == data
    assert container.version == 2 and container.flags == 0
    assert container.header == data[:256]
    assert container.padding == bytes(192)
    assert container.unreferenced == ()
    assert (container.reserved_offset, container.reserved_size, container.reserved) == (0, 0, b"")
    assert container.model_offset == 256
    assert container.manifest_offset == 256 + container.model_size
    assert container.end == len(data)


def test_read_container_from_a_file_keeps_the_path_as_source(tmp_path):
    path = tmp_path / "tiny.omny"
    path.write_bytes(UPGRADED)
    container = c.read_container(path)
    assert container.source == str(path)
    assert c.serialize_container(container) == UPGRADED
    assert container == c.parse_container(UPGRADED)


def test_export_fixture_keeps_its_full_manifest_and_has_no_plan():
    container = c.parse_container(EXPORTED)
    start = container.manifest_offset
    assert container.manifest_bytes == EXPORTED[start : start + container.manifest_size]
    assert container.manifest == json.loads(container.manifest_bytes)
    assert list(container.manifest) == [
        "version",
        "model",
        "processor",
        "input",
        "output",
        "preprocess",
        "postprocess",
        "sharding",
    ]
    assert container.manifest["processor"] == {
        "processor_type": "native",
        "processor_id": "semantic",
        "processor_version": None,
    }
    assert container.manifest["preprocess"]["normalize_std"] == [0.5, 0.5, 0.5]
    assert container.manifest["postprocess"]["labels"] == ["a", "b"]
    assert container.model_bytes == PLAIN
    assert not container.model_proto().metadata_props


def test_upgrade_fixture_keeps_the_plan_in_the_embedded_model():
    container = c.parse_container(UPGRADED)
    assert container.model_bytes == V1
    embedded = {p.key: p.value for p in container.model_proto().metadata_props}
    original = {p.key: p.value for p in onnx.load_from_string(V1).metadata_props}
    assert embedded == original
    plan = json.loads(embedded["omnynet_metadata"])
    assert plan["sharding"]["configurations"][0]["cut_point_ids"] == ["cut_1"]
    # The manifest summarises it: no cut points, no configurations, export_info trimmed.
    assert "configurations" not in container.manifest["sharding"]
    assert container.manifest["export_info"] == {
        "exporter_version": "0.1.0",
        "source_framework": "onnx",
        "onnx_opset": 18,
    }
    assert container.manifest_bytes.isascii()
    assert container.manifest_bytes == json.dumps(container.manifest, indent=2).encode()


def test_upgrade_manifest_values_come_from_the_v1_metadata_not_the_graph():
    proto = onnx.load_from_string(V1)
    for prop in proto.metadata_props:
        if prop.key == "omnynet_metadata":
            plan = json.loads(prop.value)
            plan["model"]["total_params"] = 1234.0  # kept as written, not recomputed
            plan["inputs"] = [{"name": "only_this"}]
            plan["sharding"]["allowed_shards"] = [2, 3]
            del plan["export_info"]["onnx_opset"]  # takes the reference default
            prop.value = json.dumps(plan, indent=2)
    out = c.parse_container(
        c.upgrade(proto.SerializeToString(), task="embedding", processor_id="clip")
    )
    manifest = out.manifest
    assert manifest["model"]["task"] == "embedding"
    assert manifest["model"]["total_params"] == 1234.0
    assert manifest["processor"]["processor_id"] == "clip"
    assert manifest["input"]["tensor_names"] == ["only_this"]
    assert manifest["sharding"]["allowed_shards"] == [2, 3]
    assert manifest["export_info"]["onnx_opset"] == 17
    assert out.model_bytes == proto.SerializeToString()


def test_upgrade_re_serializes_the_model_like_upstream():
    # Upstream embeds onnx.load(v1).SerializeToString(): a v1 file whose fields are stored
    # out of the canonical order (valid protobuf) upgrades to the same bytes.
    proto = onnx.load_from_string(V1)
    props = onnx.ModelProto()
    props.metadata_props.extend(proto.metadata_props)
    del proto.metadata_props[:]
    reordered = props.SerializeToString() + proto.SerializeToString()
    assert reordered != V1
    assert c.upgrade(reordered) == UPGRADED


def test_downgrade_of_the_upgrade_gives_the_v1_file_back_with_nothing_dropped():
    v1, dropped = c.downgrade(c.parse_container(UPGRADED))
    assert v1 == V1
    assert dropped == []
    model = onnx.load_from_string(v1)
    assert {p.key for p in model.metadata_props} == {"omnynet_version", "omnynet_metadata"}
    _, all_keys = c.downgrade(c.parse_container(UPGRADED), include_defaults=True)
    assert all_keys == [
        "model.task",
        "processor.processor_type",
        "processor.processor_id",
        "processor.processor_version",
        "input.input_type",
        "input.input_format",
        "output.output_type",
        "output.output_format",
    ]


def test_downgrade_of_the_export_lists_what_v1_cannot_hold():
    v1, dropped = c.downgrade(c.parse_container(EXPORTED))
    assert onnx.load_from_string(v1).graph.node
    assert v1 == PLAIN
    assert "processor.processor_type" in dropped and "processor.processor_id" in dropped
    assert "processor.processor_version" not in dropped  # null, the default
    assert "preprocess" in dropped and "postprocess" in dropped
    assert "input.input_type" in dropped  # "tensor", not upstream's default
    assert "output.output_type" not in dropped
    # No plan in the embedded model: even keys with a v1 counterpart have nowhere to go.
    assert "model.name" in dropped and "sharding.max_shards" in dropped
    assert "version" not in dropped


def test_downgrade_reports_unknown_manifest_keys():
    manifest = json.loads(c.parse_container(UPGRADED).manifest_bytes)
    manifest["model"]["license"] = "MIT"
    manifest["bundle"] = {"x": 1}
    built = c.build_container(V1, manifest)
    assert c.downgrade(built)[1] == ["model.license", "bundle"]


# --------------------------------------------------------------------------- detection


def test_detect_by_magic_only(tmp_path):
    assert c.detect(UPGRADED) == "v2"
    assert c.detect(V1) == "v1"
    assert c.detect(b"") == "v1"
    assert c.detect(b"OMN") == "v1"
    assert c.detect(b"OMNYgarbage") == "v2"
    assert c.detect(bytearray(EXPORTED[:4])) == "v2"
    path = tmp_path / "m.omny"
    path.write_bytes(EXPORTED)
    assert c.detect(path) == "v2"
    assert c.detect(str(DATA / "tiny_v1.omny")) == "v1"
    with pytest.raises(OmnyIOError):
        c.detect(tmp_path / "missing.omny")
    with pytest.raises(TypeError):
        c.detect(3)


# --------------------------------------------------------------------------- hostile headers

_GOOD = _container_bytes()
_MODEL_END = 256 + len(PLAIN)

HOSTILE = [
    ("empty", b"", "header", "0 bytes"),
    ("three-bytes-of-magic", b"OMN", "header", "3 bytes"),
    ("header-cut", _GOOD[:100], "header", "100 bytes"),
    ("header-one-short", _GOOD[:255], "header", "255 bytes"),
    ("wrong-magic", b"ONNX" + _GOOD[4:], "header.magic", "b'ONNX'"),
    ("v1-protobuf", V1, "header.magic", "not b'OMNY'"),
    ("version-3", _set(_GOOD, version=3), "header.version", "version 3"),
    ("version-0", _set(_GOOD, version=0), "header.version", "version 0"),
    ("version-max", _set(_GOOD, version=2**32 - 1), "header.version", "4294967295"),
    ("model-offset-0", _set(_GOOD, model_offset=0), "header.model_offset", "offset 0"),
    ("model-offset-255", _set(_GOOD, model_offset=255), "header.model_offset", "offset 255"),
    ("model-offset-max", _set(_GOOD, model_offset=U64), "header.model_offset", str(U64)),
    (
        "model-size-max",
        _set(_GOOD, model_size=U64),
        "header.model_size",
        f"offset 256 + size {U64} runs past the end of the file ({len(_GOOD)} bytes)",
    ),
    ("model-size-2gib", _set(_GOOD, model_size=2**31), "header.model_size", str(2**31)),
    (
        "manifest-offset-max",
        _set(_GOOD, manifest_offset=U64),
        "header.manifest_offset",
        str(U64),
    ),
    ("manifest-size-max", _set(_GOOD, manifest_size=U64), "header.manifest_size", str(U64)),
    ("manifest-size-2**63", _set(_GOOD, manifest_size=2**63), "header.manifest_size", "2**63"),
    (
        "manifest-offset-in-header",
        _set(_GOOD, manifest_offset=64),
        "header.manifest_offset",
        "offset 64",
    ),
    ("cut-inside-manifest", _GOOD[:-5], "header.manifest_size", f"({len(_GOOD) - 5} bytes)"),
    ("cut-inside-model", _GOOD[:1000], "header.model_size", "(1000 bytes)"),
    ("cut-after-header", _GOOD[:256], "header.model_size", "(256 bytes)"),
    (
        "reserved-in-header",
        _set(_GOOD, reserved_offset=100, reserved_size=10),
        "header.reserved_offset",
        "offset 100",
    ),
    (
        "reserved-size-max",
        _set(_GOOD, reserved_offset=300, reserved_size=U64),
        "header.reserved_size",
        str(U64),
    ),
    (
        "reserved-overlaps-model",
        _set(_GOOD, reserved_offset=1000, reserved_size=10),
        "header.reserved_offset",
        "overlaps the model section",
    ),
    (
        "manifest-overlaps-model",
        _set(_GOOD, manifest_offset=_MODEL_END - 1),
        "header.manifest_offset",
        "overlaps the model section",
    ),
    (
        "model-overlaps-manifest",
        _set(_GOOD, model_offset=_MODEL_END, model_size=5),
        "header.manifest_offset",
        "overlaps the model section",
    ),
    ("manifest-empty", _set(_GOOD, manifest_size=0), "manifest", "not JSON"),
    ("manifest-not-utf8", _container_bytes(manifest=b'{"a": "\xff"}'), "manifest", "UTF-8"),
    ("manifest-not-json", _container_bytes(manifest=b"{version: 2}"), "manifest", "not JSON"),
    ("manifest-array", _container_bytes(manifest=b"[1, 2]"), "manifest", "an array"),
    ("manifest-null", _container_bytes(manifest=b"null"), "manifest", "null"),
    (
        "manifest-too-deep",
        _container_bytes(manifest=b"[" * 100_000 + b"]" * 100_000),
        "manifest",
        "not JSON",
    ),
    (
        "manifest-huge-int",
        _container_bytes(manifest=b'{"a": ' + b"9" * 5000 + b"}"),
        "manifest",
        "not JSON",
    ),
    ("model-not-protobuf", _container_bytes(model=b"\xff" * 40), "model", "protobuf parse failed"),
    ("model-without-graph", _container_bytes(model=b"\x08\x07"), "model", "no graph"),
    ("model-empty", _container_bytes(model=b""), "model", "no graph"),
]


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [case[1:] for case in HOSTILE],
    ids=[case[0] for case in HOSTILE],
)
def test_hostile_container_raises_a_typed_error_naming_the_field(data, path, fragment):
    fragment = fragment.replace("2**63", str(2**63))
    with pytest.raises(OmnyContainerError) as caught:
        c.parse_container(data, source="tiny.omny")
    error = caught.value
    assert type(error) is OmnyContainerError
    assert isinstance(error, OmnyFormatError) and isinstance(error, ValueError)
    assert error.path == path
    assert error.source == "tiny.omny"
    assert str(error).startswith(f"tiny.omny: {path}: ")
    assert fragment in str(error)


def test_hostile_table_is_large_enough():
    assert len(HOSTILE) >= 12
    assert len({case[2] for case in HOSTILE}) >= 10  # distinct fields


def test_oversized_model_is_refused_from_the_header_before_reading(tmp_path):
    # A sparse file whose header claims a 2 GiB model that the file does hold: refused from
    # the header alone (the 2 GiB are never read).
    path = tmp_path / "big.omny"
    with open(path, "wb") as file:
        file.write(_set(_GOOD[:256], model_size=2**31, manifest_offset=256 + 2**31))
        file.truncate(256 + 2**31 + 100)
    with pytest.raises(OmnyContainerError) as caught:
        c.read_container(path)
    assert caught.value.path == "header.model_size"
    assert "2 GiB" in str(caught.value) and str(path) in str(caught.value)


def test_oversized_manifest_is_refused_from_the_header(tmp_path):
    path = tmp_path / "big.omny"
    size = c.MAX_MANIFEST_SIZE + 1
    with open(path, "wb") as file:
        file.write(_set(_GOOD[:256], manifest_offset=_MODEL_END, manifest_size=size))
        file.write(PLAIN)
        file.truncate(_MODEL_END + size)
    with pytest.raises(OmnyContainerError) as caught:
        c.read_container(path)
    assert caught.value.path == "header.manifest_size"


def test_read_container_io_errors(tmp_path):
    with pytest.raises(OmnyIOError, match="no such file"):
        c.read_container(tmp_path / "missing.omny")
    with pytest.raises(OmnyIOError, match="directory"):
        c.read_container(tmp_path)
    (tmp_path / "short.omny").write_bytes(b"OMNY")
    with pytest.raises(OmnyContainerError, match=r"short.omny: header: the file is 4 bytes"):
        c.read_container(tmp_path / "short.omny")


def test_error_pickles_with_its_fields():
    error = OmnyContainerError("header.flags", "bad", source="a.omny")
    back = pickle.loads(pickle.dumps(error))
    assert (back.path, back.reason, back.source, str(back)) == (
        "header.flags",
        "bad",
        "a.omny",
        "a.omny: header.flags: bad",
    )
    assert str(OmnyContainerError("manifest", "bad")) == "manifest: bad"


# --------------------------------------------------------------------------- lossless


def test_unknown_bytes_are_kept_and_reported():
    data = bytearray(_set(EXPORTED, flags=0x8000_0000_0000_0001))
    data[100] = 7  # padding
    data += b"trailing"
    data = bytes(data)
    container = c.parse_container(data)
    assert container.flags == 0x8000_0000_0000_0001
    assert container.padding[100 - 64] == 7
    assert container.unreferenced == ((len(EXPORTED), b"trailing"),)
    assert c.serialize_container(container) == data
    codes = [f.code for f in c.container_findings(container)]
    assert codes == ["flags-nonzero", "padding-nonzero", "unreferenced-bytes"]
    finding = c.container_findings(container)[1]
    assert finding.location == "header.padding" and "offset 100" in finding.message


def test_reserved_section_and_gap_are_kept():
    base = c.build_container(PLAIN, b'{"version": "2.0"}', reserved=b"PROCESSOR")
    data = c.serialize_container(base)
    assert base.reserved_offset == _MODEL_END and base.manifest_offset == _MODEL_END + 9
    # Move the manifest 4 bytes further: a gap of 4 unreferenced bytes.
    manifest = data[base.manifest_offset :]
    gapped = _set(data[: base.manifest_offset], manifest_offset=base.manifest_offset + 4)
    gapped += b"\x00gap" + manifest
    container = c.parse_container(gapped)
    assert container.reserved == b"PROCESSOR"
    assert container.unreferenced == ((base.manifest_offset, b"\x00gap"),)
    assert c.serialize_container(container) == gapped
    assert [f.code for f in c.container_findings(container)] == [
        "reserved-section",
        "unreferenced-bytes",
        "manifest-inputs",  # this small manifest has no tensor names
        "manifest-outputs",
    ]


def test_sections_in_any_order_round_trip():
    manifest = b'{"version": "2.0"}'
    data = bytearray(256) + manifest + PLAIN
    data[:256] = _set(
        _GOOD[:256],
        manifest_offset=256,
        manifest_size=len(manifest),
        model_offset=256 + len(manifest),
        model_size=len(PLAIN),
    )
    container = c.parse_container(bytes(data))
    assert container.model_bytes == PLAIN
    assert c.serialize_container(container) == bytes(data)


def test_a_deeply_nested_manifest_round_trips_or_is_refused_cleanly():
    for depth in (500, 990, 5000):
        data = _container_bytes(manifest=b'{"a": ' + b"[" * depth + b"]" * depth + b"}")
        try:
            container = c.parse_container(data)
        except OmnyContainerError as error:
            assert error.path == "manifest"
            continue
        assert c.serialize_container(container) == data
        assert c.downgrade(container)[1] == ["a"]
        assert next(f.code for f in c.container_findings(container)) == "manifest-version"


def test_serialize_rebuilds_the_header_from_the_fields():
    container = c.parse_container(EXPORTED)
    flagged = dataclasses.replace(container, flags=5)
    out = c.serialize_container(flagged)
    assert struct.unpack_from("<Q", out, 8)[0] == 5
    assert out[16:] == EXPORTED[16:]


def test_serialize_refuses_inconsistent_fields():
    container = c.parse_container(EXPORTED)
    with pytest.raises(OmnyContainerError) as caught:
        c.serialize_container(dataclasses.replace(container, manifest={"version": "3"}))
    assert caught.value.path == "manifest"
    with pytest.raises(OmnyContainerError) as caught:
        c.serialize_container(dataclasses.replace(container, model_bytes=b"x"))
    assert caught.value.path == "header.model_size"
    with pytest.raises(OmnyContainerError) as caught:
        c.serialize_container(dataclasses.replace(container, flags=-1))
    assert caught.value.path == "header.flags"
    with pytest.raises(OmnyContainerError) as caught:
        c.serialize_container(dataclasses.replace(container, manifest_offset=300))
    assert caught.value.path == "header.manifest_offset"
    assert "overlaps" in str(caught.value)
    with pytest.raises(OmnyContainerError) as caught:  # refused before allocating 2**40 bytes
        c.serialize_container(dataclasses.replace(container, reserved_offset=2**40))
    assert caught.value.path == "header"
    with pytest.raises(OmnyContainerError) as caught:
        c.serialize_container(dataclasses.replace(container, unreferenced=((300, b"x"),)))
    assert caught.value.path == "unreferenced"


def test_build_container_lays_sections_out_like_upstream():
    manifest = {"version": "2.0", "model": {"name": "é"}}
    built = c.build_container(PLAIN, manifest)
    assert built.manifest_bytes == json.dumps(manifest, indent=2).encode("ascii")
    out = c.serialize_container(built)
    assert c.parse_container(out) == built
    assert out[:64] == struct.pack(
        "<4sIQQQQQQQ",
        b"OMNY",
        2,
        0,
        256,
        len(PLAIN),
        0,
        0,
        256 + len(PLAIN),
        len(built.manifest_bytes),
    )
    with pytest.raises(OmnyContainerError):
        c.build_container(PLAIN, b"[]")
    with pytest.raises(OmnyContainerError):
        c.build_container(PLAIN, manifest, padding=b"\x00")


# --------------------------------------------------------------------------- findings


def _with_manifest(**changes) -> c.Container:
    manifest = json.loads(c.parse_container(UPGRADED).manifest_bytes)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        target = manifest
        for parent in parents:
            target = target[parent]
        if value is None:
            del target[key]
        else:
            target[key] = value
    return c.build_container(V1, manifest)


def test_fixtures_have_no_findings():
    assert c.container_findings(c.parse_container(UPGRADED)) == []
    assert c.container_findings(c.parse_container(EXPORTED)) == []


def test_findings_for_a_manifest_that_disagrees_with_the_model_and_plan():
    container = _with_manifest(
        version="2.1",
        input__tensor_names=["attention_mask", "input_ids"],
        output__tensor_names=["logits"],
        sharding__allowed_shards=[4],
    )
    findings = c.container_findings(container)
    assert [f.code for f in findings] == [
        "manifest-version",
        "manifest-inputs",
        "manifest-outputs",
        "manifest-allowed-shards",
        "manifest-configurations",
    ]
    by_code = {f.code: f for f in findings}
    assert "another order" in by_code["manifest-inputs"].message
    assert by_code["manifest-outputs"].location == "manifest.output.tensor_names"
    assert "'logits'" in by_code["manifest-outputs"].message
    assert "[2]" in by_code["manifest-configurations"].message
    assert all(f.severity == "warning" for f in findings)


def test_findings_take_an_explicit_plan_dict_or_object():
    container = c.parse_container(UPGRADED)
    plan_text = next(
        p.value for p in container.model_proto().metadata_props if p.key == "omnynet_metadata"
    )
    plan = json.loads(plan_text)
    plan["sharding"]["allowed_shards"] = [2, 3]
    plan["sharding"]["configurations"][0]["num_shards"] = 3
    for given_plan in (plan, OmnyMetadata.from_json(json.dumps(plan))):
        codes = [f.code for f in c.container_findings(container, given_plan)]
        assert codes == ["manifest-allowed-shards", "manifest-configurations"]


def test_findings_for_missing_manifest_entries():
    container = _with_manifest(version=None, input__tensor_names=None, sharding=None)
    codes = [f.code for f in c.container_findings(container)]
    assert codes == ["manifest-version", "manifest-inputs", "manifest-allowed-shards"]


# --------------------------------------------------------------------------- upgrade errors


def test_upgrade_refusals():
    with pytest.raises(OmnyContainerError) as caught:
        c.upgrade(UPGRADED)
    assert caught.value.path == "header.magic"
    with pytest.raises(OmnyContainerError) as caught:
        c.upgrade(PLAIN, source="plain.onnx")
    assert caught.value.path == "metadata_props[omnynet_metadata]"
    assert str(caught.value).startswith("plain.onnx: ")
    with pytest.raises(OmnyContainerError) as caught:
        c.upgrade(b"\xff\xff\xff")
    assert caught.value.path == "model"


def _v1_with_plan(mutate) -> bytes:
    proto = onnx.load_from_string(V1)
    for prop in proto.metadata_props:
        if prop.key == "omnynet_metadata":
            prop.value = mutate(json.loads(prop.value))
    return proto.SerializeToString()


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda p: json.dumps({k: v for k, v in p.items() if k != "model"}), ".model.name"),
        (lambda p: json.dumps({**p, "inputs": [{"shape": [1]}]}), ".inputs[0].name"),
        (lambda p: json.dumps({**p, "outputs": 3}), ".outputs"),
        (lambda p: json.dumps({**p, "sharding": []}), ".sharding"),
        (lambda p: json.dumps({**p, "inputs": ["x"]}), ".inputs[0]"),
        (lambda p: "[1]", ""),
        (lambda p: "{not json", ""),
    ],
)
def test_upgrade_names_what_is_wrong_in_the_v1_metadata(mutate, path):
    with pytest.raises(OmnyContainerError) as caught:
        c.upgrade(_v1_with_plan(mutate))
    assert caught.value.path == f"metadata_props[omnynet_metadata]{path}"


def test_upgrade_refuses_external_data():
    proto = onnx.load_from_string(V1)
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    assert c.uses_external_data(proto)
    with pytest.raises(OmnyContainerError, match="external data") as caught:
        c.upgrade(proto.SerializeToString())
    assert caught.value.path == "model"


# --------------------------------------------------------------------------- size guard


def test_size_guard():
    assert c.model_fits_container(0)
    assert c.model_fits_container(2**31 - 1)
    assert not c.model_fits_container(2**31)
    assert not c.model_fits_container(-1)
    assert c.unfit_model_reason(n_bytes=100) is None
    assert "2 GiB" in c.unfit_model_reason(n_bytes=2**31)
    assert "external data" in c.unfit_model_reason(external_data=True)
    assert not c.uses_external_data(onnx.load_from_string(PLAIN))


def test_uses_external_data_on_an_ir_model(tmp_path):
    import onnx_ir as ir

    model = ir.serde.deserialize_model(onnx.load_from_string(PLAIN))
    assert not c.uses_external_data(model)
    value = next(iter(model.graph.initializers.values()))
    array = value.const_value.numpy()
    (tmp_path / "w.bin").write_bytes(array.tobytes())
    value.const_value = ir.ExternalTensor(
        "w.bin",
        offset=0,
        length=array.nbytes,
        dtype=value.const_value.dtype,
        shape=value.const_value.shape,
        name=value.name,
        base_dir=tmp_path,
    )
    assert c.uses_external_data(model)


# --------------------------------------------------------------------------- signature


def test_signature_companion(tmp_path):
    path = tmp_path / "m.omny"
    path.write_bytes(UPGRADED)
    assert c.signature_path(path) is None
    sig = tmp_path / "m.omny.sig"
    sig.write_bytes(c.SIGNATURE_MAGIC + bytes(c.SIGNATURE_SIZE - 4))
    assert c.signature_path(path) == sig
    assert c.signature_path(str(path)) == sig
    message = c.stale_signature_message(path, sig)
    assert str(path) in message and str(sig) in message and "no longer verifies" in message


# --------------------------------------------------------------------------- fuzzing

_EDGES = [0, 1, 4, 63, 64, 255, 256, 257, 1000, 2**31 - 1, 2**31, 2**32, 2**63, U64]
_BASES = (UPGRADED, EXPORTED, _GOOD)
_FIELDS = list(FIELD_AT)[1:]  # version, flags, the six offsets and sizes


def _mutate(base: bytes, program: bytes) -> bytes:
    """Apply a byte-coded list of mutations to a valid container.

    One draw of ``st.binary`` per example keeps each example cheap (hypothesis' cost grows
    with the number of draws) while hypothesis still shrinks the program. Each instruction is
    an opcode byte and three operand bytes: set a header field to an edge value (or to a
    literal u64), flip a header byte, flip a manifest byte, or truncate the file.
    """
    data = bytearray(base)
    size = len(base)
    manifest_start = struct.unpack_from("<Q", base, 48)[0]
    edges = [*_EDGES, size - 1, size, size + 1, size - 256, manifest_start]
    end = size  # truncations apply last, so that the other mutations stay in bounds
    ops = iter(program)
    for opcode in ops:
        operands = [next(ops, 0) for _ in range(3)]
        kind = opcode % 4
        if kind == 0:  # set a header field
            name = _FIELDS[operands[0] % len(_FIELDS)]
            if operands[1] < len(edges):
                value = edges[operands[1]]
            else:
                value = int.from_bytes(bytes([operands[1], operands[2], opcode] * 3)[:8], "little")
            if name == "version":
                struct.pack_into("<I", data, 4, value % 2**32)
            else:
                struct.pack_into("<Q", data, FIELD_AT[name], value)
        elif kind == 1:  # flip a header byte
            data[operands[0]] ^= operands[1] or 1
        elif kind == 2:  # flip a manifest byte
            position = manifest_start + (operands[0] * 256 + operands[1]) % (size - manifest_start)
            data[position] ^= operands[2] or 1
        else:  # truncate
            cut = edges[operands[0]] if operands[0] < len(edges) else operands[1] * operands[2]
            end = min(end, max(0, cut))
    return bytes(data[:end])


@settings(max_examples=10_000, deadline=None)
@given(st.integers(0, len(_BASES) - 1), st.binary(max_size=48))
def test_fuzzed_containers_only_ever_raise_the_container_error(base, program):
    data = _mutate(_BASES[base], program)
    try:
        container = c.parse_container(data, source="fuzz.omny")
    except OmnyContainerError as error:
        assert str(error).startswith("fuzz.omny: ")
        return
    # Whatever is accepted is kept losslessly.
    assert c.serialize_container(container) == data


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(V1) - 1), st.integers(1, 255)), max_size=3))
def test_fuzzed_v1_files_only_ever_raise_the_container_error_on_upgrade(flips):
    data = bytearray(V1)
    for position, mask in flips:
        data[position] ^= mask
    try:
        out = c.upgrade(bytes(data))
    except OmnyContainerError:
        return
    assert c.serialize_container(c.parse_container(out)) == out
