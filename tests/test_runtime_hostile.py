"""A hostile user of the in-process pipeline's Python API (backend="thread").

Requests with a wrong element type or shape, stages that fail at run time, misuse of
:meth:`Pipeline.map`: each error names what the user must fix (the stage, its file, the
input), and the pipeline stays usable afterwards. Real onnxruntime sessions on stage files.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx_ir as ir
import pytest
from test_pipeline import OUTPUTS, WIDTH, assert_outputs, mlp_stages, request

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime import Pipeline

F32 = ir.DataType.FLOAT


def _save_stages(tmp_path: pathlib.Path, models: list[ir.Model]) -> list[str]:
    paths = []
    for k, model in enumerate(models):
        path = tmp_path / f"stage{k}.onnx"
        ir.save(model, path)
        paths.append(str(path))
    return paths


def _relu_then_reshape(columns: int) -> list[ir.Model]:
    """Stage 0: h = Relu(x[b, 16]); stage 1: y = Reshape(h, [-1, columns])."""
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape(["b", WIDTH]))
    h0 = ir.Value(name="h", type=ir.TensorType(F32), shape=ir.Shape(["b", WIDTH]))
    relu = ir.Node("", "Relu", [x], outputs=[h0])
    first = ir.Graph([x], [h0], nodes=[relu], opset_imports={"": 18}, name="relu")
    h1 = ir.Value(name="h", type=ir.TensorType(F32), shape=ir.Shape(["b", WIDTH]))
    shape = ir.Value(name="shape", const_value=ir.tensor(np.array([-1, columns], np.int64)))
    shape.type, shape.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([2])
    y = ir.Value(name="y", type=ir.TensorType(F32))
    reshape = ir.Node("", "Reshape", [h1, shape], outputs=[y], name="the_reshape")
    second = ir.Graph(
        [h1], [y], nodes=[reshape], initializers=[shape], opset_imports={"": 18}, name="reshape"
    )
    return [ir.Model(first, ir_version=10), ir.Model(second, ir_version=10)]


# ---------------------------------------------------------------------------------------------
# A request that fails in a stage: the error names the stage, its file and what it was fed


@pytest.mark.parametrize(
    ("inputs", "stage", "named"),
    [
        ({"x": np.zeros((3, WIDTH), np.float64)}, 0, ["x: float64[3, 16]", "x: float[batch, 16]"]),
        ({"x": np.zeros((3, WIDTH + 1), np.float32)}, 0, ["x: float32[3, 17]"]),
        ({"x": np.zeros((2, 3, WIDTH), np.float32)}, 0, ["x: float32[2, 3, 16]"]),
        ({"scale": np.zeros(5, np.float32)}, 1, ["scale: float32[5]", "scale: float[16]"]),
    ],
)
def test_a_bad_request_names_the_stage_file_and_what_it_was_fed(tmp_path, inputs, stage, named):
    paths = _save_stages(tmp_path, mlp_stages([2]))
    with Pipeline(paths, outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        with pytest.raises(PipelineError) as info:
            pipe.run({**request(0), **inputs})
        message = str(info.value)
        assert info.value.stage == stage
        assert paths[stage] in message
        for text in named:
            assert text in message
        assert_outputs(pipe.run(request(1)), request(1))  # still usable


def test_a_reshape_that_cannot_hold_the_dims_names_the_stage_file_and_its_input(tmp_path):
    paths = _save_stages(tmp_path, _relu_then_reshape(columns=6))
    with Pipeline(paths, intra_op_num_threads=1) as pipe:
        with pytest.raises(PipelineError) as info:
            pipe.run({"x": np.ones((1, WIDTH), np.float32)})  # 16 values in rows of 6: no
        message = str(info.value)
        assert info.value.stage == 1 and info.value.request == 0
        assert paths[1] in message and "the_reshape" in message
        assert "h: float32[1, 16]" in message
        out = pipe.run({"x": np.ones((3, WIDTH), np.float32)})  # 48 values: 8 rows of 6
        assert out["y"].shape == (8, 6)


def test_a_stage_given_as_a_model_is_named_by_its_graph(tmp_path):
    with Pipeline(mlp_stages([2]), outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        with pytest.raises(PipelineError) as info:
            pipe.run({**request(0), "x": np.zeros((3, WIDTH), np.int32)})
        assert "graph 'stage0'" in str(info.value)
        assert "x: int32[3, 16]" in str(info.value)
        bad = {**request(2), "scale": np.zeros(3, np.float32)}
        with pytest.raises(PipelineError) as info:  # a worker thread runs it, not the caller
            list(pipe.map([request(1), bad]))
        assert "graph 'stage1'" in str(info.value) and "scale: float32[3]" in str(info.value)


# ---------------------------------------------------------------------------------------------
# map() given something that is not a stream of requests


def test_map_of_one_request_mapping_says_to_pass_a_list_or_use_run():
    with Pipeline(mlp_stages([2]), outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        with pytest.raises(PipelineError, match=r"map\(\) takes an iterable of requests.*run\("):
            pipe.map(request(0))
        with pytest.raises(PipelineError, match=r"map\(\) takes an iterable of requests.*int"):
            pipe.map(5)  # type: ignore[arg-type]  # the hostile call under test
        assert_outputs(next(pipe.map([request(0)])), request(0))


def test_map_names_the_item_of_the_iterable_that_is_not_a_request():
    def requests():
        yield request(0)
        yield request(1)
        yield 5

    with Pipeline(mlp_stages([2]), outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        got = []
        with pytest.raises(PipelineError, match=r"map\(\): item 2 of the iterable: inputs must"):
            got.extend(pipe.map(requests()))
        assert pipe.in_flight == 0
        assert_outputs(pipe.run(request(3)), request(3))


# ---------------------------------------------------------------------------------------------
# outputs= given as one string


@pytest.mark.parametrize("name", ["layer.0.out", "y"])
def test_outputs_given_as_one_string_is_one_output_name(name):
    with Pipeline(mlp_stages([2]), outputs=name, intra_op_num_threads=1) as pipe:
        assert pipe.output_names == (name,)
        out = pipe.run(request(0))
        assert list(out) == [name]


@pytest.mark.parametrize(
    ("outputs", "message"),
    [(["y", "y"], r"outputs names \['y'\] more than once"), ([["y"]], "must be tensor names")],
)
def test_outputs_repeated_or_not_names_are_refused(outputs, message):
    with pytest.raises(PipelineError, match=message):
        Pipeline(mlp_stages([2]), outputs=outputs)


# ---------------------------------------------------------------------------------------------
# Arrays numpy holds in another layout


@pytest.mark.parametrize("use_map", [False, True])
def test_big_endian_inputs_give_the_same_result(use_map):
    """onnxruntime reads an OrtValue's bytes as native: a '>f4' array gave wrong numbers."""
    r = request(0)
    swapped = {name: value.astype(value.dtype.newbyteorder(">")) for name, value in r.items()}
    with Pipeline(mlp_stages([2]), outputs=OUTPUTS, intra_op_num_threads=1) as pipe:
        out = list(pipe.map([swapped, swapped]))[1] if use_map else pipe.run(swapped)
        assert_outputs(out, r)
