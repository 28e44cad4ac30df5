"""Hostile values inside a model give typed errors or diagnostics, never a traceback.

Issue 18: an initializer of element type UNDEFINED (item 16), a graph input dim of 2**62
(item 17), external-data locations with a NUL byte or a ``..`` component (item 19), and a
producer name that is not valid UTF-8 (item 21). Each reproduction runs the command line the
reviewers ran, on a real file written with onnx.helper.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import check, omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice.analysis.sizes import MAX_TENSOR_BYTES, ValueSizes


def _chain_proto(batch: int | str = "batch") -> onnx.ModelProto:
    """x[batch, 8] -> 3 x (MatMul, Relu) -> r2: cuttable, with real weights."""
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], [], "x"
    for i in range(3):
        weights.append(nh.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}"))
        nodes += [
            oh.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
            oh.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        prev = f"r{i}"
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 8])],
        [oh.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, [batch, 8])],
        weights,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _planned(folder: Path) -> Path:
    (folder / "chain.onnx").write_bytes(_chain_proto().SerializeToString())
    model = omd.load(folder / "chain.onnx")
    omny.write(model, omd.plan(model, shards=[2]))
    omd.save(model, folder / "chain.omny")
    return folder / "chain.omny"


def _cli(capsys, *args: str) -> tuple[int, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return status, text


# --------------------------------------------------------------------------- item 16


def _with_undefined_initializer(folder: Path) -> Path:
    """The planned chain plus y2 = Add(r2, u), ``u`` an initializer of element type UNDEFINED."""
    proto = onnx.load(_planned(folder))
    undefined = onnx.TensorProto(name="u", data_type=onnx.TensorProto.UNDEFINED, dims=[8])
    undefined.raw_data = bytes(32)
    proto.graph.initializer.append(undefined)
    proto.graph.node.append(oh.make_node("Add", ["r2", "u"], ["y2"], name="add_u"))
    proto.graph.output.append(oh.make_tensor_value_info("y2", onnx.TensorProto.FLOAT, ["b", 8]))
    path = folder / "undefined.omny"
    path.write_bytes(proto.SerializeToString())
    return path


def test_an_undefined_initializer_is_reported_by_name(tmp_path, capsys):
    path = _with_undefined_initializer(tmp_path)
    status, text = _cli(capsys, "inspect", str(path))
    assert status == 0 and "configurations (1)" in text  # described, not crashed
    for args in (["split", str(path), str(tmp_path / "out"), "--shards", "2"],
                 ["run", str(path), "--shards", "2"]):  # fmt: skip
        status, text = _cli(capsys, *args)
        assert status != 0
        assert "graph.initializer 'u': element type UNDEFINED" in text, text
    assert not (tmp_path / "out").exists()
    with pytest.raises(omd.SplitError, match="'u': element type UNDEFINED"):
        omd.split(omd.load(path), 2)
    assert "OMNY101" in {d.code for d in check(str(path))}


# --------------------------------------------------------------------------- item 17


def test_a_graph_input_dim_of_2_62_is_refused_by_plan_and_export_and_checked(tmp_path, capsys):
    huge = tmp_path / "huge.onnx"
    huge.write_bytes(_chain_proto(batch=2**62).SerializeToString())
    status, text = _cli(capsys, "plan", str(huge), "-o", str(tmp_path / "h.omny"), "--shards", "2")
    assert status == 1 and not (tmp_path / "h.omny").exists()
    assert "graph input 'x' states dim 0 = 4611686018427387904" in text, text
    found = [d for d in check(str(huge)) if d.code == "OMNY123"]
    assert {d.location for d in found} == {"value:x", "value:r2"}
    assert "dim 0 is 4611686018427387904" in found[0].message
    # A planned file whose input was edited afterwards: export mlf refuses it by name.
    proto = onnx.load(_planned(tmp_path))
    for value in (proto.graph.input[0], proto.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 2**62
    edited = tmp_path / "edited.omny"
    edited.write_bytes(proto.SerializeToString())
    status, text = _cli(
        capsys, "export", "mlf", str(edited), str(tmp_path / "m.tar"), "--shards", "2"
    )
    assert status != 0 and "more than any device holds" in text and "'x'" in text, text
    assert "OMNY123" in {d.code for d in check(str(edited))}


def test_planning_dims_no_device_holds_are_named():
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"], name="relu")],
        "wide",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 2**20])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 2**20])],
    )
    model = omd.from_proto(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]))
    sizes = ValueSizes(model.graph, {"batch": 2**40})  # 2**62 bytes: refused, not overflowed
    with pytest.raises(omd.PlanError, match=r"at the planning dims \(batch=1099511627776\)"):
        sizes.nbytes(model.graph.outputs[0])
    fits = ValueSizes(model.graph, {"batch": 2**28})  # 2**50 bytes: the largest size
    assert fits.nbytes(model.graph.outputs[0]) == MAX_TENSOR_BYTES


# --------------------------------------------------------------------------- item 19


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("w\x00.data", "has a NUL byte"),
        ("sub/..", "has a '..' component"),
        ("sub/../w.data", "has a '..' component"),  # normalises inside: still refused
        (".", "names a folder"),
    ],
)
def test_hostile_external_data_locations_are_typed_and_checked(tmp_path, capsys, location, reason):
    (tmp_path / "sub").mkdir()
    (tmp_path / "w.data").write_bytes(np.ones(64, np.float32).tobytes())
    proto = _chain_proto()
    weight = proto.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "256")):
        weight.external_data.add(key=key, value=value)
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(omd.ExternalDataError, match=reason) as info:
        omd.load(path)
    assert [p.code for p in info.value.problems] == ["OMNY108"]
    found = [d for d in check(str(path)) if d.code == "OMNY108"]
    assert found and reason in found[0].message
    for command in ("inspect", "check"):
        status, text = _cli(capsys, command, str(path))
        assert status == 2 and reason in text, text


def test_a_nul_byte_in_a_data_file_name_to_save_is_refused(tmp_path):
    model = omd.from_proto(_chain_proto())
    with pytest.raises(omd.OmnyIOError, match="NUL byte"):
        omd.save(model, tmp_path / "m.onnx", external_data="w\x00.data")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- item 21


def test_a_producer_name_that_is_not_utf8_is_shown_escaped(tmp_path, capsys):
    proto = _chain_proto()
    proto.producer_name = "PRODUCERX"
    data = proto.SerializeToString().replace(b"PRODUCERX", b"PRO\xff\xfeCERX")  # same length
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    status, text = _cli(capsys, "inspect", str(path))
    assert status == 0 and "producer  PRO\\xff\\xfeCERX" in text, text
    status, text = _cli(capsys, "inspect", "--json", str(path))
    assert (
        status == 0 and json.loads(text)["result"]["model"]["producer_name"] == "PRO\\xff\\xfeCERX"
    )
