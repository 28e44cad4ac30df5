"""Stages, stripped models and onnxruntime hand-offs carry the lowest IR version they need.

An annotated model is IR 11; onnxruntime 1.20 to 1.22 refuse anything above IR 10. What is
handed on without multi-device fields must say the version its content needs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_ir_multidevice as omd
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._split import save_split, split
from onnx_ir_multidevice.graph.ir_versions import lowest_ir_version, required_ir_version
from onnx_ir_multidevice.passes import StripAnnotationsPass
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.runtime.sessions import ModelSession, session_source
from onnx_ir_multidevice.testing import zoo

_D = ir.DataType


def _annotated(model: ir.Model | None = None) -> ir.Model:
    """A GPT-like zoo model (opset 18, IR 10) planned for 2 shards and annotated (IR 11)."""
    model = model or zoo.gpt(layers=2)
    omny.write(model, plan(model, shards=[2], relaxed=True))
    annotated = omd.annotate(model, relaxed_cuts=True)
    assert annotated.ir_version == 11 and annotated.device_configurations
    return annotated


def _tiny(opset: int = 18, ir_version: int = 11, dtype: ir.DataType = _D.FLOAT) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(_D.FLOAT), shape=ir.Shape([2]))
    w = ir.Value(name="w", const_value=ir.Tensor(np.zeros(2, dtype.numpy()), dtype=dtype))
    cast = ir.node("Cast", [w], attributes={"to": _D.FLOAT})
    add = ir.node("Add", [x, cast.outputs[0]])
    add.outputs[0].name = "y"
    graph = ir.Graph(
        [x], [add.outputs[0]], nodes=[cast, add], initializers=[w], opset_imports={"": opset}
    )
    return ir.Model(graph, ir_version=ir_version)


@pytest.mark.parametrize(
    ("opset", "dtype", "needed"),
    [
        (18, _D.FLOAT, 8),  # onnx.helper.VERSION_TABLE: opset 18 came with IR 8
        (21, _D.FLOAT, 10),
        (18, _D.FLOAT8E4M3FN, 9),
        (18, _D.INT4, 10),
        (11, _D.FLOAT, 6),
    ],
)
def test_required_version_follows_opsets_and_element_types(opset, dtype, needed):
    model = _tiny(opset, dtype=dtype)
    assert required_ir_version(model) == needed
    assert lowest_ir_version(model) == max(7, needed)  # never below IR 7
    assert lowest_ir_version(_tiny(opset, ir_version=10, dtype=dtype)) == 10  # kept below 11


def test_required_version_follows_metadata_functions_and_configurations():
    model = _tiny()
    next(iter(model.graph)).metadata_props["origin"] = "exporter"  # what dynamo writes
    assert required_ir_version(model) == 10
    model = _tiny()
    model.graph.outputs[0].type = ir.OptionalType(ir.TensorType(_D.FLOAT))
    assert required_ir_version(model) == 8
    model = _tiny()
    configuration = model.add_device_configuration("c", num_devices=2)
    assert required_ir_version(model) == 11
    assert required_ir_version(model, configurations=()) == 8
    node = next(iter(model.graph))
    node.set_pipeline_stage(configuration, 1)
    assert required_ir_version(model, configurations=()) == 11  # a node entry is kept
    assert required_ir_version(model, configurations=(), kept=lambda e: False) == 8


def test_split_stages_of_an_annotated_model_leave_ir_11(tmp_path):
    model = _annotated()
    stages = split(model, 2)
    assert [s.ir_version for s in stages] == [8, 8]
    assert model.ir_version == 11  # the input is not changed
    manifest = save_split(model, tmp_path / "split", 2)
    for entry in manifest.stages:
        proto = onnx.load(str(tmp_path / "split" / entry.file))
        assert proto.ir_version == 8 and not proto.configuration
        onnx.checker.check_model(proto, full_check=True)
    # the CLI writes the same files
    path = tmp_path / "annotated.omny"
    omd.save(model, path)
    assert main(["split", str(path), str(tmp_path / "cli"), "--shards", "2", "--json"]) == 0
    files = json.loads((tmp_path / "cli" / "manifest.json").read_text())["stages"]
    assert [onnx.load(str(tmp_path / "cli" / f["file"])).ir_version for f in files] == [8, 8]


def test_stages_keep_the_version_of_an_unannotated_model_and_11_when_annotations_stay():
    model = zoo.gpt(layers=2)
    omny.write(model, plan(model, shards=[2], relaxed=True))
    assert model.ir_version == 10
    assert [s.ir_version for s in split(model, 2)] == [10, 10]
    annotated = _annotated()
    annotated.add_device_configuration("other-tool", num_devices=4)  # not a pipeline: kept
    stages = split(annotated, 2)
    assert [[c.name for c in s.device_configurations] for s in stages] == [["other-tool"]] * 2
    assert [s.ir_version for s in stages] == [11, 11]


def test_strip_pass_lowers_the_version_once_no_multi_device_field_is_left():
    model = _annotated()
    result = StripAnnotationsPass()(model)
    assert result.modified and not model.device_configurations
    assert model.ir_version == 8
    assert not StripAnnotationsPass()(model).modified
    kept = _annotated()
    other = kept.add_device_configuration("other-tool", num_devices=1)
    next(iter(kept.graph)).set_pipeline_stage(other, 0)
    StripAnnotationsPass()(kept)
    assert [c.name for c in kept.device_configurations] == ["other-tool"]
    assert kept.ir_version == 11


def test_onnxruntime_gets_an_annotated_model_without_its_multi_device_fields(tmp_path):
    model = _annotated()
    source = session_source(model)
    assert isinstance(source, bytes)
    proto = onnx.load_from_string(source)
    assert proto.ir_version == 8 and not proto.configuration
    assert not any(n.device_configurations for n in proto.graph.node)
    assert model.ir_version == 11 and model.device_configurations  # unchanged
    # through a temporary file (external weights): the same
    path = tmp_path / "ext.omny"
    omd.save(model, path, external_data="ext.data", size_threshold_bytes=0)
    loaded = omd.load(path)
    with ModelSession(loaded) as owner:
        assert owner.folder is not None
        written = onnx.load(f"{owner.folder}/model.onnx", load_external_data=False)
        assert written.ir_version == 8 and not written.configuration
        feeds = {"input_ids": np.zeros((1, 16), np.int64)}
        assert owner.session.run(None, feeds)[0].shape == (1, 16, 100)


def test_subgraph_content_counts_at_any_depth():
    def branch(cond: ir.Value, dtype: ir.DataType, depth: int) -> ir.Graph:
        if depth == 0:
            value = ir.tensor(np.zeros(2, dtype.numpy()), dtype=dtype)
            inner = ir.node("Constant", [], attributes={"value": value})
        else:  # an If reading the main graph's condition, two levels further down
            then_branch, else_branch = (branch(cond, dtype, depth - 1) for _ in range(2))
            inner = ir.node("If", [cond], attributes={"then_branch": then_branch,
                                                      "else_branch": else_branch})  # fmt: skip
        return ir.Graph([], inner.outputs, nodes=[inner], name=f"b{depth}")

    for dtype, needed in ((_D.FLOAT, 8), (_D.FLOAT8E5M2, 9), (_D.UINT4, 10)):
        model = _tiny()
        cond = ir.Value(name="cond", type=ir.TensorType(_D.BOOL), shape=ir.Shape([]))
        model.graph.inputs.append(cond)
        branches = {k: branch(cond, dtype, 2) for k in ("then_branch", "else_branch")}
        model.graph.append(ir.node("If", [cond], attributes=branches))
        assert required_ir_version(model) == needed, dtype
