"""One dtype spelling: planner, reverse pass, checker and ``omny inspect`` agree on every type.

The regression behind it: ``plan()`` spelled a float8 cut tensor ``float8e4m3fn``, the checker
``float8_e4m3fn``, so ``check`` refused (OMNY116) and ``annotate()`` raised on a file that
``plan()`` had written.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli._inspect_report import collect
from onnx_ir_multidevice._proto.files import save
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.graph.dtypes import dtype_bits, dtype_from_name, dtype_name, tensor_nbytes
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.passes.reverse import StagesToOmnyPass
from onnx_ir_multidevice.planner.planning import plan

WIDTH = 64


def _value(name: str, dtype: ir.DataType) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(["batch", WIDTH]))


def _weight(name: str) -> ir.Value:
    array = np.ones((WIDTH, WIDTH), np.float32)
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape = ir.Shape([WIDTH, WIDTH])
    value.type = ir.TensorType(ir.DataType.FLOAT)
    return value


def float8_chain(dtype: ir.DataType = ir.DataType.FLOAT8E4M3FN) -> ir.Model:
    """``x -> MatMul -> Cast(dtype) -> Cast(float) -> MatMul``; the planner cuts the cast value."""
    x = _value("x", ir.DataType.FLOAT)
    w1, w2 = _weight("w1"), _weight("w2")
    h, y = _value("h", ir.DataType.FLOAT), _value("y", dtype)
    c, o = _value("c", ir.DataType.FLOAT), _value("o", ir.DataType.FLOAT)
    nodes = [
        ir.Node("", "MatMul", [x, w1], outputs=[h], name="mm1"),
        ir.Node("", "Cast", [h], attributes=[ir.AttrInt64("to", dtype)], outputs=[y], name="to"),
        ir.Node(
            "",
            "Cast",
            [y],
            attributes=[ir.AttrInt64("to", ir.DataType.FLOAT)],
            outputs=[c],
            name="back",
        ),
        ir.Node("", "MatMul", [c, w2], outputs=[o], name="mm2"),
    ]
    graph = ir.Graph(
        [x], [o], nodes=nodes, initializers=[w1, w2], opset_imports={"": 21}, name="f8"
    )
    return ir.Model(graph, ir_version=11)


def typed_chain(dtype: ir.DataType, cut_dtype: ir.DataType | None = None) -> ir.Model:
    """``x -> Embed(w1) -> y -> Project(w2) -> o``: custom ops; ``o`` of ``dtype``.

    ``y`` (of ``cut_dtype``, default ``dtype``) is the only value between the two heavy
    steps, so it is the only cut point.
    """
    x = _value("x", ir.DataType.FLOAT)
    w1, w2 = _weight("w1"), _weight("w2")
    y, o = _value("y", dtype if cut_dtype is None else cut_dtype), _value("o", dtype)
    nodes = [
        ir.Node("test.custom", "Embed", [x, w1], outputs=[y], name="embed"),
        ir.Node("test.custom", "Project", [y, w2], outputs=[o], name="project"),
    ]
    graph = ir.Graph(
        [x],
        [o],
        nodes=nodes,
        initializers=[w1, w2],
        opset_imports={"": 21, "test.custom": 1},
        name="typed",
    )
    return ir.Model(graph, ir_version=11)


def _hand_staged(model: ir.Model) -> ir.Model:
    configuration = model.add_device_configuration("hand", num_devices=2)
    for stage, node in enumerate(model.graph):
        node.set_pipeline_stage(configuration, stage)
    return model


def test_float8_cut_planned_by_plan_checks_clean_and_annotates():
    model = float8_chain()
    metadata = plan(model, shards=[2])
    assert [c.tensor_name for c in metadata.cut_points] == ["y"]
    assert metadata.cut_points[0].dtype == "float8_e4m3fn"
    omny.write(model, metadata)
    assert [d for d in check(model) if d.is_error] == []
    annotated = annotate(model)
    assert [c.name for c in annotated.device_configurations] == ["omny/2-shards"]


def test_reverse_pass_and_plan_write_the_same_float8_cut_point():
    planned = float8_chain()
    metadata = plan(planned, shards=[2])
    reversed_model = _hand_staged_at(float8_chain(), "to")
    StagesToOmnyPass()(reversed_model)
    derived = omny.read(reversed_model)
    assert derived is not None
    (ours,), (theirs,) = metadata.cut_points, derived.cut_points
    assert (ours.tensor_name, ours.after_node, ours.shape, ours.dtype) == (
        theirs.tensor_name,
        theirs.after_node,
        theirs.shape,
        theirs.dtype,
    )


def _hand_staged_at(model: ir.Model, last_of_stage_0: str) -> ir.Model:
    configuration = model.add_device_configuration("hand", num_devices=2)
    stage = 0
    for node in model.graph:
        node.set_pipeline_stage(configuration, stage)
        if node.name == last_of_stage_0:
            stage = 1
    return model


UNSIZED = (ir.DataType.STRING, ir.DataType.UNDEFINED)
"""Types without a fixed size: the planner never cuts a tensor of unknown size."""


@pytest.mark.parametrize("dtype", list(ir.DataType), ids=lambda d: d.name)
def test_planner_reverse_pass_checker_and_inspect_agree_on_every_dtype(dtype, tmp_path):
    spelling = dtype_name(dtype)
    assert dtype_from_name(spelling) == (None if dtype == ir.DataType.UNDEFINED else dtype)

    # Planner: the cut tensor (when it has a size) and the output.
    cut_dtype = ir.DataType.FLOAT if dtype in UNSIZED else dtype
    model = typed_chain(dtype, cut_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sizes of string/undefined outputs are unknown
        planned = plan(model, shards=[2])
    assert [(c.tensor_name, c.dtype) for c in planned.cut_points] == [("y", dtype_name(cut_dtype))]
    assert [t.dtype for t in planned.outputs] == [spelling]
    omny.write(model, planned)
    assert "OMNY116" not in {d.code for d in check(model)}

    # Reverse pass: the cut point of hand-set stages; the checker agrees with it.
    staged = _hand_staged(typed_chain(dtype))
    StagesToOmnyPass()(staged)
    derived = omny.read(staged)
    assert derived is not None
    assert [(c.tensor_name, c.dtype) for c in derived.cut_points] == [("y", spelling)]
    assert [t.dtype for t in derived.outputs] == [spelling]
    assert "OMNY116" not in {d.code for d in check(staged)}

    # omny inspect: the graph's output, described from the file.
    path = tmp_path / "typed.omny"
    save(model, path)
    assert [t["dtype"] for t in collect(path)["outputs"]] == [spelling]


def test_the_table_names_every_member_once_and_reads_older_spellings():
    names = [dtype_name(d) for d in ir.DataType]
    assert len(set(names)) == len(names)
    assert dtype_name(None) == "undefined"
    assert dtype_name(ir.DataType.STRING) == "string"
    for old, dtype in {
        "float8e4m3fn": ir.DataType.FLOAT8E4M3FN,
        "float8e5m2fnuz": ir.DataType.FLOAT8E5M2FNUZ,
        "float4e2m1": ir.DataType.FLOAT4E2M1,
        "float8e8m0": ir.DataType.FLOAT8E8M0,
        "float6e3m2": ir.DataType.FLOAT6E3M2,
        "unknown": None,
    }.items():
        assert dtype_from_name(old) == dtype
    with pytest.raises(ValueError, match="'float' is not an ONNX data type name"):
        dtype_from_name("float")


def test_a_cut_spelled_the_old_way_still_checks():
    model = float8_chain()
    metadata = plan(model, shards=[2])
    cut = dataclasses.replace(metadata.cut_points[0], dtype="float8e4m3fn")
    omny.write(model, dataclasses.replace(metadata, cut_points=(cut,)))
    assert "OMNY116" not in {d.code for d in check(model)}
    wrong = dataclasses.replace(cut, dtype="float8_e5m2")
    omny.write(model, dataclasses.replace(metadata, cut_points=(wrong,)))
    assert "OMNY116" in {d.code for d in check(model)}


@pytest.mark.parametrize("dtype", list(ir.DataType), ids=lambda d: d.name)
def test_tensor_bytes_round_up_whole_elements(dtype):
    if dtype in UNSIZED:
        assert tensor_nbytes((3, 5), dtype) is None
        with pytest.raises(ValueError, match="no fixed size"):
            dtype_bits(dtype)
        return
    bits = dtype_bits(dtype)
    assert bits == dtype.bitwidth
    assert tensor_nbytes((3, 5), dtype) == math.ceil(15 * bits / 8)
    assert tensor_nbytes((), dtype) == math.ceil(bits / 8)
    assert tensor_nbytes((0, 7), dtype) == 0
    assert tensor_nbytes(None, dtype) is None and tensor_nbytes((2,), None) is None


def test_integer_dtype_sets_have_one_home_and_differ_only_on_bool():
    from onnx_ir_multidevice.analysis import shape_propagation, shapes
    from onnx_ir_multidevice.graph import dtypes

    # The shape layer keeps small integer and boolean tensors (masks) as data; the fast
    # propagation carries integer values only, since Cast to BOOL maps non-zero values to 1.
    assert shapes._INTEGER_TYPES is dtypes.INTEGER_OR_BOOL_DTYPES
    assert shape_propagation._INTEGERS is dtypes.INTEGER_DTYPES
    for dtype in ir.DataType:
        integer = dtype in dtypes.INTEGER_DTYPES
        assert (dtype in dtypes.INTEGER_OR_BOOL_DTYPES) == (integer or dtype == ir.DataType.BOOL)
        if integer:
            assert np.dtype(dtype.numpy()).kind in "iu" and dtype.bitwidth % 8 == 0, dtype


@pytest.mark.parametrize("dims", [(), (0,), (3, 5), (7,), (2, 3, 1001)])
def test_external_data_sizes_use_the_dtype_table(dims):
    import onnx

    from onnx_ir_multidevice import _dtype_sizes
    from onnx_ir_multidevice._proto.external import _proto_nbytes
    from onnx_ir_multidevice.graph import dtypes

    assert dtypes.tensor_nbytes is _dtype_sizes.tensor_nbytes
    assert dtypes.dtype_bits is _dtype_sizes.dtype_bits
    for dtype in ir.DataType:
        proto = onnx.TensorProto(data_type=int(dtype), dims=dims)
        assert _proto_nbytes(proto) == tensor_nbytes(dims, dtype), dtype
    assert _proto_nbytes(onnx.TensorProto(data_type=1, dims=(-1, 2))) is None
    assert _proto_nbytes(onnx.TensorProto(data_type=999, dims=(2,))) is None
