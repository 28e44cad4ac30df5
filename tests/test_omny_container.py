"""Tests of omny.read / omny.write on model.metadata_props, and .omny files on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import onnx_ir_multidevice
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.omny._schema import (
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    CutPoint,
    ModelInfo,
    OmnyMetadata,
)

SPEC_EXAMPLE = (Path(__file__).parent / "data" / "spec_example.json").read_text()


def _model(props: dict[str, str] | None = None) -> ir.Model:
    x = ir.Value(name="x", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.FLOAT))
    y = ir.Value(name="y")
    node = ir.Node("", "Relu", [x], outputs=[y], name="encoder.layer.12")
    graph = ir.Graph([x], [y], nodes=[node], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10, producer_name="pytorch", metadata_props=props or {})


def test_read_plain_model_is_none():
    assert omny.read(_model()) is None
    assert omny.read(_model({"other": "1"})) is None


def test_write_then_read_spec_example():
    metadata = OmnyMetadata.from_json(SPEC_EXAMPLE)
    model = _model()
    omny.write(model, metadata)
    assert list(model.metadata_props) == [OMNY_VERSION_KEY, OMNY_METADATA_KEY]
    assert model.metadata_props[OMNY_VERSION_KEY] == "1.0"
    assert model.metadata_props[OMNY_METADATA_KEY] == SPEC_EXAMPLE  # byte-identical text
    back = omny.read(model)
    assert back == metadata
    assert back.cut_point("cut_2").tensor_name == "hidden_states_24"
    assert [c.num_shards for c in back.sharding.configurations] == [2, 4]


def test_write_built_metadata_reads_back_equal():
    metadata = OmnyMetadata(
        model=ModelInfo("tiny", total_params=12),
        cut_points=(CutPoint("c1", "encoder.layer.12", "y", (1, 2)),),
    )
    model = _model()
    omny.write(model, metadata)
    back = omny.read(model)
    assert back == metadata
    assert json.loads(model.metadata_props[OMNY_METADATA_KEY])["model"]["name"] == "tiny"


def test_write_keeps_other_props_and_positions():
    model = _model({"a": "1", OMNY_METADATA_KEY: "{}", "b": "2", OMNY_VERSION_KEY: "0.9", "c": "3"})
    omny.write(model, OmnyMetadata.from_json(SPEC_EXAMPLE))
    assert list(model.metadata_props.items()) == [
        ("a", "1"),
        (OMNY_METADATA_KEY, SPEC_EXAMPLE),
        ("b", "2"),
        (OMNY_VERSION_KEY, "1.0"),
        ("c", "3"),
    ]


def test_write_appends_after_existing_props():
    model = _model({"z": "last?", "a": "first?"})
    omny.write(model, OmnyMetadata())
    assert list(model.metadata_props) == ["z", "a", OMNY_VERSION_KEY, OMNY_METADATA_KEY]


def test_set_producer():
    model = _model()
    omny.write(model, OmnyMetadata())
    assert (model.producer_name, model.producer_version) == ("pytorch", None)
    omny.write(model, OmnyMetadata(), set_producer=True)
    assert model.producer_name == "onnx-ir-multidevice"  # not the exporter's "omnynet-export"
    assert model.producer_version == onnx_ir_multidevice.__version__


def test_read_json_without_version():
    model = _model({OMNY_METADATA_KEY: SPEC_EXAMPLE})
    with pytest.raises(OmnyFormatError) as info:
        omny.read(model)
    assert info.value.path == f"metadata_props[{OMNY_VERSION_KEY}]"
    assert OMNY_VERSION_KEY in str(info.value)


def test_read_version_without_json():
    model = _model({OMNY_VERSION_KEY: "1.0"})
    with pytest.raises(OmnyFormatError) as info:
        omny.read(model)
    assert info.value.path == f"metadata_props[{OMNY_METADATA_KEY}]"


def test_read_error_carries_json_path():
    document = json.loads(SPEC_EXAMPLE)
    document["sharding"]["configurations"][1]["cut_point_ids"][2] = 5
    model = _model({OMNY_VERSION_KEY: "1.0", OMNY_METADATA_KEY: json.dumps(document)})
    with pytest.raises(OmnyFormatError) as info:
        omny.read(model)
    assert info.value.path == "sharding.configurations[1].cut_point_ids[2]"


def test_read_malformed_json():
    model = _model({OMNY_VERSION_KEY: "1.0", OMNY_METADATA_KEY: '{"version": "1.0",'})
    with pytest.raises(OmnyFormatError):
        omny.read(model)


def test_read_version_mismatch():
    model = _model({OMNY_VERSION_KEY: "2.0", OMNY_METADATA_KEY: SPEC_EXAMPLE})
    with pytest.raises(OmnyFormatError, match=r"'1.0'.*'2.0'") as info:
        omny.read(model)
    assert info.value.path == "version"


def test_omny_file_round_trip(tmp_path):
    model = _model({"source": "test"})
    omny.write(model, OmnyMetadata.from_json(SPEC_EXAMPLE))
    save(model, tmp_path / "m.omny")
    loaded = load(tmp_path / "m.omny")
    assert omny.read(loaded) == omny.read(model)
    assert loaded.metadata_props[OMNY_METADATA_KEY] == SPEC_EXAMPLE
    # Changing the document and saving again keeps the other property.
    changed = dataclasses.replace(omny.read(loaded), model=ModelInfo("renamed"))
    omny.write(loaded, changed)
    save(loaded, tmp_path / "m.omny")
    again = load(tmp_path / "m.omny")
    assert omny.read(again).model.name == "renamed"
    assert list(again.metadata_props) == ["source", OMNY_VERSION_KEY, OMNY_METADATA_KEY]


def test_reference_exporter_file_is_kept_byte_for_byte(tmp_path):
    # What omnynet-export writes: other props first, then version and JSON appended.
    proto = ir.to_proto(_model())
    proto.producer_name, proto.producer_version = "omnynet-export", "0.1.0"
    props = [("torch", "2.1"), (OMNY_VERSION_KEY, "1.0"), (OMNY_METADATA_KEY, SPEC_EXAMPLE)]
    for key, value in props:
        proto.metadata_props.add(key=key, value=value)
    onnx.save(proto, tmp_path / "ref.omny")
    save(load(tmp_path / "ref.omny"), tmp_path / "out.omny")
    assert (tmp_path / "out.omny").read_bytes() == (tmp_path / "ref.omny").read_bytes()
