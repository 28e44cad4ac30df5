"""Real exports end to end (issue 9): symbolic dims, missing types, and the defects they hit.

Each test names the defect it reproduces; every one failed before the shape layer.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import _cli, omny
from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.planner.planning import plan, plan_model
from onnx_ir_multidevice.runtime.verification import make_inputs, verify
from onnx_ir_multidevice.testing import zoo

CORPUS = Path(__file__).parent / "corpus"


def _run(capsys, *argv: object) -> tuple[int, str, str]:
    code = _cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _errors(model: ir.Model, *, allow: tuple[str, ...] = ()) -> list[str]:
    """Error codes of ``check(model)``; ``allow`` lists codes another change makes warnings."""
    return [d.code for d in check(model) if d.severity.value == "error" and d.code not in allow]


# OMNY114 (a dynamic non-batch dim at a cut) becomes a warning with `check --strict` (another
# change of issue 9); until then it is the one error a dynamic-seq cut may give.
DYNAMIC_SEQ = ("OMNY114",)


def test_dynamo_export_plans_without_dims_with_one_warning(capsys, tmp_path):
    # Defect 1: "0 usable cut point(s)" on every export with a symbolic sequence dim.
    out = tmp_path / "gpt2.omny"
    code, _stdout, err = _run(capsys, "plan", CORPUS / "gpt2_dynamo.onnx", "-o", out, "--shards", 2)
    assert code == 0, err
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1, err  # once, in command-line words, no Python warning
    assert "--dim seq=N" in lines[0] and "input_ids" in lines[0]
    assert "UserWarning" not in err and "dims=" not in err and "dropout" not in err.lower()
    model = load(out)
    assert omny.read_planning_dims(model) == {"batch": 1}
    meta = omny.read(model)
    value = {v.name: v for n in model.graph for v in n.outputs}[meta.cut_points[0].tensor_name]
    assert meta.cut_points[0].shape == tuple(d if isinstance(d, int) else -1 for d in value.shape)
    assert _errors(model, allow=DYNAMIC_SEQ) == []


def test_python_plan_warns_once_in_python_words():
    model = ir.load(CORPUS / "gpt2_dynamo.onnx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = plan_model(model, shards=[2])
    assert len(caught) == 1 and 'dims={"seq": N}' in str(caught[0].message)
    assert dict(result.unbound_dims) == {"seq": ("input_ids", "attention_mask")}
    assert result.partitions[0].memory[0].unknown  # the figures are lower bounds
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bound = plan_model(ir.load(CORPUS / "gpt2_dynamo.onnx"), shards=[2], dims={"seq": 128})
    assert not bound.unbound_dims and not bound.partitions[0].memory[0].unknown


def test_dims_that_name_no_input_dim_are_refused_everywhere(capsys, tmp_path):
    # Defect (item 6): --dim seq=512 ignored by plan, refused by run: now refused alike.
    model_path = CORPUS / "resnet_torchscript.onnx"
    code, _, err = _run(capsys, "plan", model_path, "-o", tmp_path / "r.omny", "--dim", "seq=8")
    assert code == 2 and "'seq'" in err and "batch, height, width" in err
    assert not (tmp_path / "r.omny").exists()
    with pytest.raises(PlanError, match="its dimensions: batch, height, width"):
        plan(ir.load(model_path), dims={"seq": 8})
    code, _, _ = _run(capsys, "plan", model_path, "-o", tmp_path / "r.omny", "--shards", 2)
    assert code == 0
    for command in ("verify", "run"):
        extra = ("--shards", 2) if command == "run" else ()
        code, _, err = _run(capsys, command, tmp_path / "r.omny", *extra, "--dim", "seq=8")
        assert code == 2 and "'seq'" in err and "batch, height, width" in err, command


def test_models_without_value_info_split_verify_and_run(capsys, tmp_path):
    # Defect 3: "crosses a stage boundary but has no type; run shape inference".
    out = tmp_path / "vit.omny"
    assert _run(capsys, "plan", CORPUS / "vit_torchscript.onnx", "-o", out, "--shards", 2)[0] == 0
    for argv in (
        ("check", out),
        ("split", out, tmp_path / "split", "--shards", 2),
        ("verify", out),
        ("run", out, "--shards", 2, "--requests", 2),
        ("run", tmp_path / "split", "--requests", 2),
    ):
        code, stdout, err = _run(capsys, *argv)
        assert code == 0, (argv, err)
        assert "shape inference" not in stdout + err
    planned = load(out)  # the written file types its cut tensors as the metadata states
    cut_value = {v.name: v for n in planned.graph for v in n.outputs}[
        omny.read(planned).cut_points[0].tensor_name
    ]
    assert cut_value.dtype == ir.DataType.FLOAT and cut_value.shape is not None
    assert ir.load(CORPUS / "vit_torchscript.onnx").graph.node(cut_value.producer().name)
    stage = ir.load(tmp_path / "split" / "stage_1.onnx")
    cut = stage.graph.inputs[0]
    assert cut.dtype == ir.DataType.FLOAT and cut.shape is not None
    assert [d if isinstance(d, int) else d.value for d in cut.shape] == ["batch", 65, 64]
    # Defect 4: [batch, 65, 64] in truth, so no OMNY114 for the non-batch dims.
    assert _errors(load(out)) == []


def test_check_finds_no_unactionable_missing_shape_warning(tmp_path):
    # Defect 3: OMNY115 on every file omny plan wrote for a model without value_info.
    model = ir.load(CORPUS / "bert_torchscript.onnx")
    omny.write(model, plan(model, shards=[2, 3], dims={"seq": 64}, assign_names=True))
    codes = {d.code for d in check(model)}
    assert "OMNY115" not in codes and "OMNY116" not in codes


@pytest.mark.parametrize("name", ["if_torchscript", "loop_torchscript", "silero_vad_half"])
def test_constants_inside_bodies_are_weights(name):
    # Defect 6: KeyError in planner/memory.py whenever a Constant sits inside an If body.
    model = ir.load(CORPUS / f"{name}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_model(model, shards=[2], assign_names=True)
    assert result.partitions[0].memory[0].weights_bytes > 0


def test_dim_value_minus_one_is_symbolic_not_a_size():
    # Defect 6: negative GFLOP and bytes in the plan, AssertionError in partition.py with
    # dims, "negative dimensions are not allowed" in verify and run, for [-1, 3, ?, ?].
    path = CORPUS / "rapidocr_cls_mobile_v2.onnx"
    for dims in ({}, {"x[2]": 48, "x[3]": 192}):
        for relaxed in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = plan_model(
                    ir.load(path), shards=[2, 3], dims=dims, relaxed=relaxed, assign_names=True
                )
            for found in result.partitions:
                assert min(found.flops) >= 0
                for stage in found.memory:
                    assert min(stage.weights_bytes, stage.activations_bytes, stage.io_bytes) >= 0
    model = ir.load(path)
    omny.write(model, plan(model, shards=[2], dims={"x[2]": 48, "x[3]": 192}, assign_names=True))
    assert make_inputs(model)["x"].shape == (1, 3, 48, 192)  # at the recorded planning dims
    assert verify(model, 2).ok


def test_a_model_with_no_cut_says_why():
    # The merged decoder is one If node; silero_vad's only cut is after a 2-output If.
    with pytest.raises(PlanError, match=r"computes in 1 node \(If\)"):
        plan(ir.load(CORPUS / "gpt2_merged_optimum.onnx"), shards=[2])
    with pytest.raises(PlanError, match=r"several outputs.*'If_0'"):
        plan(ir.load(CORPUS / "silero_vad.onnx"), shards=[2])


def test_two_branches_to_the_end_name_what_crosses():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", 4]))
    w = ir.Value(name="w", const_value=ir.tensor(np.eye(4, dtype=np.float32), name="w"))
    a, b, c, d, y = (ir.Value(name=n) for n in "abcdy")
    nodes = [
        ir.Node("", "MatMul", [x, w], outputs=[a], name="A"),
        ir.Node("", "MatMul", [x, w], outputs=[b], name="B"),
        ir.Node("", "Exp", [a], outputs=[c], name="C"),
        ir.Node("", "Abs", [b], outputs=[d], name="D"),
        ir.Node("", "Add", [c, d], outputs=[y], name="Y"),
    ]
    graph = ir.Graph([x], [y], nodes=nodes, initializers=[w], opset_imports={"": 18})
    why = r"at least 2 activations cross together.*after node 'A' \(MatMul\): 'a', 'd'"
    with pytest.raises(PlanError, match=why):
        plan(ir.Model(graph, ir_version=10), shards=[2])
    x2, e = ir.Value(name="x2", type=x.type, shape=x.shape), ir.Value(name="e")
    exp = ir.Node("", "Exp", [x2], outputs=[e], name="E")
    cheap = ir.Model(ir.Graph([x2], [e], nodes=[exp], opset_imports={"": 18}), ir_version=10)
    with pytest.raises(PlanError, match="nothing to cut"):
        plan(cheap, shards=[2])


def test_static_pins_every_dim_and_keeps_the_numbers(capsys, tmp_path):
    out = tmp_path / "gpt2.omny"
    code, _, err = _run(
        capsys, "plan", CORPUS / "gpt2_dynamo.onnx", "-o", out, "--shards", 2, "--dim",
        "seq=16", "--static",
    )  # fmt: skip
    assert code == 0 and "warning" not in err
    model = load(out)
    assert omny.read_planning_dims(model) == {"batch": 1, "seq": 16}
    for value in (*model.graph.inputs, *model.graph.outputs):
        assert all(isinstance(d, int) for d in value.shape)
    for node in model.graph:
        for value in node.outputs:
            assert value.shape is None or all(isinstance(d, int) for d in value.shape)
    assert all(d >= 0 for cut in omny.read(model).cut_points for d in cut.shape)
    assert [d.code for d in check(model) if d.severity.value != "info"] == []
    code, stdout, _ = _run(capsys, "verify", out)
    assert code == 0 and "OK" in stdout


def test_verify_and_run_use_the_planning_dims(capsys, tmp_path):
    # Defect 9: verify and run fed every symbolic dim 1 (an OCR model "verified" on 64x1).
    out = tmp_path / "det.omny"
    argv = ("plan", CORPUS / "rapidocr_det_ppocrv4.onnx", "-o", out, "--shards", 2)
    code, _, err = _run(capsys, *argv, "--dim", "p2o.DynamicDimension.1=96", "--dim",
                        "p2o.DynamicDimension.2=128")  # fmt: skip
    assert code == 0, err
    code, stdout, _ = _run(capsys, "run", out, "--shards", 2, "--requests", 1, "--json")
    assert code == 0
    assert json.loads(stdout)["result"]["input_shapes"]["x"] == [1, 3, 96, 128]
    model = load(out)
    assert make_inputs(model)["x"].shape == (1, 3, 96, 128)
    omny.write_planning_dims(model, None)  # nothing recorded: images of 224 x 224
    assert make_inputs(model)["x"].shape == (1, 3, 224, 224)


def test_external_data_is_found_from_any_working_directory(capsys, tmp_path, monkeypatch):
    # Defect 8: run failed unless started in the model's own folder.
    from onnx_ir_multidevice.testing import llama

    (tmp_path / "models").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    llama.write_llama(tmp_path / "models" / "l.onnx", llama.LlamaConfig(), value_info=False)
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = _run(capsys, "plan", "../models/l.onnx", "-o", "../out/l.omny", "--shards", 2)
    assert code == 0, err
    monkeypatch.chdir(tmp_path / "models")
    omny_file = os.path.relpath(tmp_path / "out" / "l.omny")
    assert _run(capsys, "verify", omny_file)[0] == 0
    assert _run(capsys, "run", omny_file, "--shards", 2, "--requests", 1)[0] == 0


def test_synthetic_transformer_looks_like_a_dynamo_export():
    model = zoo.synthetic_transformer(3)
    assert [n for n in model.graph if n.outputs[0].shape is not None] == [model.graph[-1]]
    assert len(zoo.synthetic_transformer(380).graph) == pytest.approx(13_000, rel=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_model(model, shards=[2, 3])
    chain = [c.value.name for c in result.analysis.chain]
    assert "layer.0.out" in chain and "layer.1.attn.residual" in chain
    omny.write(model, result.metadata)
    assert verify(model, 3, dims={"seq": 7}).ok
