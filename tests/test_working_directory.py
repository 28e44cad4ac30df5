"""Models with external data run from any working directory (issue 10, item 2).

onnxruntime resolves the external data of a model it gets as *bytes* against the working
directory, and refuses ("External data path ... escapes working directory") when the data is
elsewhere. Every test here runs from a folder that is not the model's (``monkeypatch.chdir``),
with relative paths where a user would type them, over a planned model whose weights *and*
a ``Constant`` value live in external data.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from test_inputs import planned_bert

from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._proto import files
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.runtime import Pipeline, sessions, verify


def _constant_from_initializer(proto: onnx.ModelProto, name: str) -> None:
    """Turn initializer ``name`` into a ``Constant`` node producing the same value."""
    graph = proto.graph
    (index,) = [i for i, t in enumerate(graph.initializer) if t.name == name]
    tensor = onnx.TensorProto()
    tensor.CopyFrom(graph.initializer[index])
    del graph.initializer[index]
    node = onnx.helper.make_node("Constant", [], [name], name=f"const_{name}", value=tensor)
    graph.node.insert(0, node)


@pytest.fixture
def external_bert(tmp_path) -> tuple[Path, ir.Model]:
    """A planned 2-shard BERT in ``tmp_path/model`` whose weights and one Constant value live
    in ``bert.data``; the in-memory model it came from; and a sibling working directory."""
    model, _ = planned_bert(tmp_path)
    proto = ir.to_proto(model)
    bias = next(t.name for t in proto.graph.initializer if t.name.endswith("bias"))
    _constant_from_initializer(proto, bias)
    onnx.external_data_helper.convert_model_to_external_data(
        proto, location="bert.data", size_threshold=0, convert_attribute=True
    )
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(proto, folder / "bert.omny")
    constant = next(n for n in onnx.load(folder / "bert.omny", load_external_data=False).graph.node)
    assert constant.attribute[0].t.data_location == onnx.TensorProto.EXTERNAL
    (tmp_path / "elsewhere").mkdir()
    return folder / "bert.omny", model


def _expected(model: ir.Model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort  # only for the reference result

    session = ort.InferenceSession(ir.to_proto(model).SerializeToString())
    return session.run(["last_hidden_state"], inputs)[0]


def test_pipeline_of_a_path_with_external_constant_from_another_folder(
    external_bert, tmp_path, monkeypatch
):
    path, model = external_bert
    monkeypatch.chdir(tmp_path / "elsewhere")
    relative = Path("..") / "model" / path.name
    for shards in (1, 2):
        with Pipeline(relative, shards, intra_op_num_threads=1) as pipe:
            inputs = pipe.example_inputs({"batch": 2})
            got = pipe.run(inputs)["last_hidden_state"]
        np.testing.assert_allclose(got, _expected(model, inputs), atol=1e-5)


def test_loaded_model_stays_valid_after_a_change_of_directory(external_bert, tmp_path, monkeypatch):
    path, model = external_bert
    monkeypatch.chdir(path.parent.parent)
    loaded = load(Path("model") / path.name)  # a relative path...
    monkeypatch.chdir(tmp_path / "elsewhere")  # ...then the working directory changes
    with Pipeline(loaded, 2, intra_op_num_threads=1) as pipe:
        inputs = pipe.example_inputs({"batch": 2})
        got = pipe.run(inputs)["last_hidden_state"]
    np.testing.assert_allclose(got, _expected(model, inputs), atol=1e-5)
    assert verify(loaded, 2, dims={"batch": 2}).ok


def test_cli_run_verify_split_from_another_folder(external_bert, tmp_path, monkeypatch, capsys):
    path, _ = external_bert
    monkeypatch.chdir(tmp_path / "elsewhere")
    relative = str(Path("..") / "model" / path.name)
    common = ["--shards", "2", "--dim", "batch=2"]
    assert main(["run", relative, *common, "--requests", "2", "--json"]) == 0
    assert main(["verify", relative, *common]) == 0
    assert main(["split", relative, "../split", "--shards", "2"]) == 0
    assert main(["run", "../split", "--dim", "batch=2", "--requests", "2"]) == 0
    capsys.readouterr()
    # The split is self-contained: it runs with the model's folder gone.
    shutil.rmtree(path.parent)
    assert main(["run", "../split", "--dim", "batch=2", "--requests", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]


def test_over_the_proto_limit_from_another_folder(external_bert, tmp_path, monkeypatch):
    """A model too large for one protobuf message (the limits made tiny) goes through files."""
    _path, model = external_bert
    monkeypatch.setattr(sessions, "PROTO_LIMIT_BYTES", 1)
    monkeypatch.setattr(files, "EXTERNAL_DATA_TOTAL_BYTES", 1)
    big = tmp_path / "big"
    big.mkdir()
    save(model, big / "bert.omny")  # over the (tiny) limit: weights go to external data
    assert (big / "bert.omny.data").stat().st_size > 0
    monkeypatch.chdir(tmp_path / "elsewhere")
    with Pipeline(Path("..") / "big" / "bert.omny", 2, intra_op_num_threads=1) as pipe:
        inputs = pipe.example_inputs({"batch": 2})
        got = pipe.run(inputs)["last_hidden_state"]
    np.testing.assert_allclose(got, _expected(model, inputs), atol=1e-5)
    assert main(["verify", "../big/bert.omny", "--shards", "2", "--dim", "batch=2"]) == 0
