"""Tests of load/save: errors, external data across folders, atomic writes, .omny props."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from test_roundtrip import make_annotated_model

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError
from onnx_ir_multidevice._proto.convert import diff, multi_device_messages, to_proto
from onnx_ir_multidevice._proto.files import load, save

FLOAT = ir.TensorType(ir.DataType.FLOAT)


def _weights_model(seed: int = 0) -> ir.Model:
    """x @ W1 + b, Relu, @ W2: three initializers of different sizes."""
    rng = np.random.default_rng(seed)
    x = ir.Value(name="x", shape=ir.Shape([2, 32]), type=FLOAT)
    inits = []
    for name, shape in (("W1", (32, 64)), ("b", (64,)), ("W2", (64, 8))):
        value = ir.Value(
            name=name,
            const_value=ir.tensor(rng.standard_normal(shape).astype(np.float32), name=name),
        )
        value.shape, value.type = ir.Shape(shape), FLOAT
        inits.append(value)
    w1, b, w2 = inits
    h, a, r, y = (ir.Value(name=n) for n in ("h", "a", "r", "y"))
    nodes = [
        ir.Node("", "MatMul", [x, w1], outputs=[h], name="mm1"),
        ir.Node("", "Add", [h, b], outputs=[a], name="add"),
        ir.Node("", "Relu", [a], outputs=[r], name="relu"),
        ir.Node("", "MatMul", [r, w2], outputs=[y], name="mm2"),
    ]
    graph = ir.Graph([x], [y], nodes=nodes, initializers=inits, opset_imports={"": 18})
    model = ir.Model(graph, ir_version=11, metadata_props={"k": "v"})
    conf = model.add_device_configuration("pipe", device_names=("cpu", "gpu"))
    for i, node in enumerate(nodes):
        node.set_pipeline_stage(conf, 0 if i < 2 else 1)
    return model


def _arrays(model: ir.Model) -> dict[str, np.ndarray]:
    return {name: v.const_value.numpy().copy() for name, v in model.graph.initializers.items()}


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def external_model(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    """A model saved by onnx-ir in folder A with its weights in A/weights.bin."""
    model = _weights_model()
    expected = _arrays(model)
    folder = tmp_path / "A"
    folder.mkdir()
    ir.save(model, folder / "model.onnx", external_data="weights.bin", size_threshold_bytes=0)
    return folder / "model.onnx", expected


# ---------------------------------------------------------------------------------------------
# load errors


def test_load_missing_file(tmp_path):
    with pytest.raises(OmnyIOError, match="no such file") as info:
        load(tmp_path / "nope.onnx")
    assert "nope.onnx" in str(info.value)


def test_load_directory(tmp_path):
    with pytest.raises(OmnyIOError, match="is a directory"):
        load(tmp_path)


@pytest.mark.parametrize("content", [b"\xff\xff\xff\xff", b"", b"just text, not protobuf\n"])
def test_load_not_protobuf(tmp_path, content):
    path = tmp_path / "bad.omny"
    path.write_bytes(content)
    with pytest.raises(OmnyIOError, match="not an ONNX model") as info:
        load(path)
    assert "bad.omny" in str(info.value)


def test_load_missing_external_data(external_model):
    path, _ = external_model
    os.remove(path.parent / "weights.bin")
    with pytest.raises(OmnyIOError, match=r"weights.bin") as info:
        load(path)
    assert "does not exist" in str(info.value)


# ---------------------------------------------------------------------------------------------
# lossless save/load


@pytest.mark.parametrize("suffix", [".onnx", ".omny"])
def test_save_load_annotated_model_is_lossless(tmp_path, suffix):
    model = make_annotated_model()
    original = ir.to_proto(model)
    save(model, tmp_path / f"m{suffix}")
    back = onnx.load(tmp_path / f"m{suffix}")
    assert diff(original, back) == []
    again = load(tmp_path / f"m{suffix}")
    save(again, tmp_path / f"n{suffix}")
    assert (tmp_path / f"n{suffix}").read_bytes() == (tmp_path / f"m{suffix}").read_bytes()


def test_omny_metadata_props_preserved(tmp_path):
    model = _weights_model()
    model.metadata_props.clear()
    model.metadata_props.update(
        {"first": "1", "omnynet_version": "1.0", "omnynet_metadata": '{"version": "1.0"}', "z": "9"}
    )
    save(model, tmp_path / "m.omny")
    loaded = load(tmp_path / "m.omny")
    assert list(loaded.metadata_props.items()) == list(model.metadata_props.items())
    save(loaded, tmp_path / "n.omny")
    a, b = onnx.load(tmp_path / "m.omny"), onnx.load(tmp_path / "n.omny")
    assert [p.SerializeToString() for p in a.metadata_props] == [
        p.SerializeToString() for p in b.metadata_props
    ]


def test_unset_presence_survives_file_round_trip(tmp_path):
    proto = ir.to_proto(make_annotated_model())
    proto.configuration[0].ClearField("num_devices")
    proto.graph.node[1].device_configurations[0].sharding_spec[0].sharded_dim[0].ClearField("axis")
    onnx.save(proto, tmp_path / "in.onnx")
    save(load(tmp_path / "in.onnx"), tmp_path / "out.onnx")
    back = onnx.load(tmp_path / "out.onnx")
    assert diff(proto, back) == []
    assert dict(multi_device_messages(back)).keys() == dict(multi_device_messages(proto)).keys()


# ---------------------------------------------------------------------------------------------
# external data


def test_trap_raw_ir_save_keeps_old_relative_path(external_model, tmp_path):
    path, _ = external_model
    other = tmp_path / "B"
    other.mkdir()
    ir.save(ir.load(path), other / "model.onnx")
    # onnx-ir writes the old relative location: B/model.onnx points at B/weights.bin,
    # which does not exist.
    assert "weights.bin" in str(onnx.load(other / "model.onnx", load_external_data=False))
    assert not (other / "weights.bin").exists()


def test_external_data_to_another_folder(external_model, tmp_path):
    path, expected = external_model
    other = tmp_path / "B"
    other.mkdir()
    save(load(path), other / "model.omny")
    assert _listing(other) == ["model.omny", "model.omny.data"]
    shutil.rmtree(path.parent)  # the source folder is gone: B must be self-contained
    loaded = load(other / "model.omny")
    assert isinstance(loaded.graph.initializers["W1"].const_value, ir.ExternalTensor)
    for name, array in _arrays(loaded).items():
        np.testing.assert_array_equal(array, expected[name])


def test_external_data_embedded_on_request(external_model, tmp_path):
    path, expected = external_model
    model = load(path)
    save(model, tmp_path / "embedded.onnx", external_data=False)
    assert _listing(tmp_path) == ["A", "embedded.onnx"]
    for name, array in _arrays(load(tmp_path / "embedded.onnx")).items():
        np.testing.assert_array_equal(array, expected[name])
    # The model still reads lazily from A.
    assert isinstance(model.graph.initializers["W1"].const_value, ir.ExternalTensor)


def test_explicit_external_data_name(tmp_path):
    model = _weights_model()
    expected = _arrays(model)
    save(model, tmp_path / "m.onnx", external_data="w/m.bin", size_threshold_bytes=0)
    assert (tmp_path / "w" / "m.bin").stat().st_size == sum(a.nbytes for a in expected.values())
    for name, array in _arrays(load(tmp_path / "m.onnx")).items():
        np.testing.assert_array_equal(array, expected[name])
    with pytest.raises(OmnyIOError, match="relative"):
        save(model, tmp_path / "x.onnx", external_data=str(tmp_path / "abs.bin"))


def test_small_model_without_external_data_is_embedded(tmp_path):
    save(_weights_model(), tmp_path / "m.onnx")
    assert _listing(tmp_path) == ["m.onnx"]


def test_save_onto_own_files_keeps_data_valid(external_model):
    path, expected = external_model
    model = load(path)  # weights read lazily from A/weights.bin
    save(model, path, external_data="weights.bin", size_threshold_bytes=0)
    # Its own data file was replaced; the in-memory model must still hold the right values.
    for name, array in _arrays(model).items():
        np.testing.assert_array_equal(array, expected[name])
    for name, array in _arrays(load(path)).items():
        np.testing.assert_array_equal(array, expected[name])
    # Save again in place (default naming) and reload once more.
    model = load(path)
    save(model, path)
    for name, array in _arrays(load(path)).items():
        np.testing.assert_array_equal(array, expected[name])


# ---------------------------------------------------------------------------------------------
# overwrite and atomicity


def test_refuse_overwrite(tmp_path):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"precious")
    with pytest.raises(OmnyIOError, match="overwrite=False"):
        save(_weights_model(), target, overwrite=False)
    assert target.read_bytes() == b"precious"
    save(_weights_model(), target)  # default overwrite=True
    assert load(target).graph.node(0).name == "mm1"


def test_refuse_overwrite_of_data_file(external_model, tmp_path):
    path, _ = external_model
    (tmp_path / "m.onnx.data").write_bytes(b"precious")
    with pytest.raises(OmnyIOError, match=r"m\.onnx\.data"):
        save(load(path), tmp_path / "m.onnx", overwrite=False)
    assert not (tmp_path / "m.onnx").exists()
    assert (tmp_path / "m.onnx.data").read_bytes() == b"precious"


def test_failed_save_leaves_nothing_and_keeps_destination(external_model, tmp_path):
    path, _ = external_model
    out = tmp_path / "out"
    out.mkdir()
    save(_weights_model(seed=1), out / "m.onnx", external_data=True, size_threshold_bytes=0)
    before = {p: p.read_bytes() for p in out.iterdir()}
    model = load(path)
    node = model.graph.node(0)
    node.set_pipeline_stage(model.device_configurations[0], 2**31)  # fails after staging data
    with pytest.raises(OmnyFormatError, match="pipeline_stage"):
        save(model, out / "m.onnx", size_threshold_bytes=0)
    assert {p: p.read_bytes() for p in out.iterdir()} == before  # no temp files, untouched


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs an unwritable /proc")
def test_unwritable_destination():
    with pytest.raises(OmnyIOError, match="cannot write into /proc"):
        save(_weights_model(), "/proc/model.onnx")


def test_missing_destination_folder(tmp_path):
    with pytest.raises(OmnyIOError, match="does not exist; create it first"):
        save(_weights_model(), tmp_path / "no" / "m.onnx")
    assert _listing(tmp_path) == []


def test_save_to_directory_path(tmp_path):
    with pytest.raises(OmnyIOError, match="is a directory"):
        save(_weights_model(), tmp_path)


def test_old_ir_version_with_annotations_is_refused_on_save(tmp_path):
    model = _weights_model()
    model.ir_version = 10
    with pytest.raises(OmnyFormatError, match="ir_version"):
        save(model, tmp_path / "m.onnx")
    assert _listing(tmp_path) == []


def test_load_runs_with_gc_state_restored(tmp_path):
    import gc

    save(_weights_model(), tmp_path / "m.onnx")
    assert gc.isenabled()
    load(tmp_path / "m.onnx")
    assert gc.isenabled()
    gc.disable()
    try:
        load(tmp_path / "m.onnx")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_loaded_model_serialises_like_file(tmp_path):
    model = _weights_model()
    save(model, tmp_path / "m.onnx")
    assert diff(onnx.load(tmp_path / "m.onnx"), to_proto(load(tmp_path / "m.onnx"))) == []


def test_external_constant_attribute_is_embedded(tmp_path):
    # A Constant whose value lives in A/const.bin: saved into B, it must not point at A.
    value = np.arange(300, dtype=np.float32)
    const = ir.Node(
        "", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(value, name="c"))],
        outputs=[ir.Value(name="c")], name="const",
    )  # fmt: skip
    graph = ir.Graph([], const.outputs, nodes=[const], opset_imports={"": 18})
    proto = ir.to_proto(ir.Model(graph, ir_version=10))
    onnx.external_data_helper.convert_model_to_external_data(
        proto, location="const.bin", size_threshold=0, convert_attribute=True
    )
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    onnx.save(proto, tmp_path / "A" / "m.onnx")
    model = load(tmp_path / "A" / "m.onnx")
    assert isinstance(model.graph.node(0).attributes["value"].value, ir.ExternalTensor)
    save(model, tmp_path / "B" / "m.onnx")
    shutil.rmtree(tmp_path / "A")
    back = load(tmp_path / "B" / "m.onnx").graph.node(0).attributes["value"].value
    np.testing.assert_array_equal(back.numpy(), value)
    assert isinstance(model.graph.node(0).attributes["value"].value, ir.ExternalTensor)


def test_unsupported_fields_are_refused(tmp_path):
    proto = ir.to_proto(_weights_model())
    proto.training_info.add()
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(OmnyFormatError) as info:
        load(tmp_path / "m.onnx")
    assert info.value.path == "training_info"
