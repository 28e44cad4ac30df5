"""One onnxruntime hand-off (runtime/sessions.py): no leaked folders, paths with external data.

Before ModelSession, a pipeline stage over the protobuf limit was saved to a temporary folder
(``tempfile.mkdtemp``) that nothing ever removed: every pipeline of a large model left one
folder, with a copy of the stage's weights, per stage.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from test_inputs import planned_bert

from onnx_ir_multidevice._errors import PipelineError
from onnx_ir_multidevice.runtime import Pipeline, sessions, verify
from onnx_ir_multidevice.runtime.sessions import ModelSession, session_options, session_source
from onnx_ir_multidevice.runtime.verification import make_inputs
from onnx_ir_multidevice.testing import zoo


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """A private temp root, and a limit so small that every model goes through a file."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setattr(sessions, "PROTO_LIMIT_BYTES", 1)
    return root


def _whole(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString())
    return session.run(None, feeds)


def test_pipeline_removes_the_folders_of_large_stages(tmp_path, temp_root):
    model, _ = planned_bert(tmp_path)
    with Pipeline(model, 2, intra_op_num_threads=1) as pipe:
        assert all(isinstance(stage.source, ir.Model) for stage in pipe.chain.stages)
        assert len(os.listdir(temp_root)) == 2  # one folder per stage session
        inputs = pipe.example_inputs({"batch": 2})
        out = pipe.run(inputs)
    assert os.listdir(temp_root) == []
    np.testing.assert_allclose(out["last_hidden_state"], _whole(model, inputs)[0], atol=1e-5)


def test_pipeline_that_fails_to_start_removes_the_folders(tmp_path, temp_root):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("needs a device this onnxruntime lacks")
    model, _ = planned_bert(tmp_path)
    with pytest.raises(PipelineError, match="CUDAExecutionProvider"):
        Pipeline(model, 2, providers="cpu,cuda:0")  # stage 0 started, stage 1 cannot
    assert os.listdir(temp_root) == []


def test_verify_removes_its_folders(tmp_path, temp_root):
    model, _ = planned_bert(tmp_path)
    assert verify(model, 2, dims={"batch": 2}).ok
    assert os.listdir(temp_root) == []


def test_path_with_external_data_loads_from_any_working_directory(tmp_path, monkeypatch):
    model = zoo.resnet(depth_blocks=1)
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "resnet.onnx"
    ir.save(model, path, external_data="resnet.onnx.data", size_threshold_bytes=16)
    assert (folder / "resnet.onnx.data").stat().st_size > 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    feeds = make_inputs(model)
    expected = _whole(model, feeds)
    with ModelSession(path) as owner:  # the path itself: no copy
        assert owner.folder is None
        np.testing.assert_allclose(owner.session.run(None, feeds)[0], expected[0], atol=1e-5)
    loaded = ir.load(path)  # external tensors: saved once to a private folder
    assert isinstance(session_source(loaded), ir.Model)
    with ModelSession(loaded) as owner:
        folder_used = owner.folder
        assert folder_used is not None and os.path.isdir(folder_used)
        np.testing.assert_allclose(owner.session.run(None, feeds)[0], expected[0], atol=1e-5)
    assert not os.path.exists(folder_used)
    assert owner.session is None


def test_sources_small_models_go_as_bytes():
    model = zoo.resnet(depth_blocks=1)
    assert isinstance(session_source(model), bytes)
    proto = ir.to_proto(model)
    assert session_source(proto) == proto.SerializeToString()
    with ModelSession(proto, session_options(intra_op_num_threads=1)) as owner:
        assert owner.folder is None
        assert [i.name for i in owner.session.get_inputs()] == ["image"]
    with pytest.raises(TypeError, match=r"onnx_ir.Model"):
        session_source(42)  # type: ignore[arg-type]


def test_a_model_onnxruntime_refuses_leaves_no_folder(temp_root):
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1]))
    node = ir.node("NoSuchOp", [x], domain="no.such.domain")
    node.outputs[0].name = "y"
    graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 18, "no.such.domain": 1})
    with pytest.raises(Exception, match="NoSuchOp"):
        ModelSession(ir.Model(graph, ir_version=10))
    assert os.listdir(temp_root) == []
    with pytest.raises(Exception, match=r"(?i)protobuf"):
        ModelSession(b"not a model")
