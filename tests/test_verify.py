"""Tests of runtime.verification and the `omny split` / `omny verify` commands."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import SplitError, VerifyError
from onnx_ir_multidevice._proto.files import save
from onnx_ir_multidevice._split import split_at
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.runtime.verification import (
    compare_outputs,
    make_inputs,
    verify,
    verify_stages,
)
from onnx_ir_multidevice.testing import zoo

FLOAT = ir.DataType.FLOAT


def _with_plan(model: ir.Model, *cut_lists: tuple[str, ...]) -> ir.Model:
    names = sorted({c for cuts in cut_lists for c in cuts})
    omny.write(
        model,
        OmnyMetadata(
            cut_points=tuple(CutPoint(n, n, n, (1,)) for n in names),
            sharding=Sharding(
                configurations=tuple(
                    ShardConfiguration(len(c) + 1, (1,) * (len(c) + 1), c) for c in cut_lists
                )
            ),
        ),
    )
    return model


# ---------------------------------------------------------------------------------------------
# Inputs


def test_make_inputs_bounds_token_ids_by_the_embedding_and_fills_masks():
    model = zoo.bert(layers=1, vocab=7)
    inputs = make_inputs(model, dims={"batch": 3}, seed=1)
    assert inputs["input_ids"].shape == (3, 16)
    assert inputs["input_ids"].dtype == np.int64
    assert inputs["input_ids"].max() < 7 and inputs["input_ids"].min() >= 0
    assert len(np.unique(inputs["input_ids"])) > 1
    assert (inputs["attention_mask"] == 1).all()
    image = make_inputs(zoo.resnet(depth_blocks=1))["image"]
    assert image.shape == (1, 3, 32, 32) and image.dtype == np.float32
    assert image.std() > 0.5  # standard normal, not a constant
    assert not np.array_equal(image, make_inputs(zoo.resnet(depth_blocks=1), seed=2)["image"])


def test_make_inputs_follows_casts_to_the_gather_and_types():
    ids = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT32), shape=ir.Shape(["n"]))
    flag = ir.Value(name="flag", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([4]))
    table = ir.Value(
        name="table",
        type=ir.TensorType(FLOAT),
        shape=ir.Shape([5, 2]),
        const_value=ir.tensor(np.zeros((5, 2), np.float32), name="table"),
    )
    cast = ir.node("Cast", [ids], attributes={"to": ir.DataType.INT64})
    gather = ir.node("Gather", [table, cast.outputs[0]])
    gather.outputs[0].name = "out"
    graph = ir.Graph(
        [ids, flag],
        [gather.outputs[0]],
        nodes=[cast, gather],
        initializers=[table],
        opset_imports={"": 18},
    )
    inputs = make_inputs(ir.Model(graph, ir_version=10), dims={"n": 50})
    assert inputs["ids"].dtype == np.int32 and inputs["ids"].shape == (50,)
    assert inputs["ids"].max() < 5
    assert inputs["flag"].dtype == np.bool_


def test_make_inputs_rejects_what_it_cannot_generate():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.STRING), shape=ir.Shape([1]))
    y = ir.node("Identity", [x])
    y.outputs[0].name = "y"
    model = ir.Model(ir.Graph([x], y.outputs, nodes=[y], opset_imports={"": 18}), ir_version=10)
    with pytest.raises(VerifyError, match="Cannot generate input 'x'"):
        make_inputs(model)


# ---------------------------------------------------------------------------------------------
# verify


def test_verify_reports_each_output():
    model = _with_plan(zoo.gpt(layers=2), ("layer.0.out",))
    report = verify(model, 2, dims={"batch": 2})
    assert report.ok
    assert report.num_stages == 2 and len(report.stage_seconds) == 2
    (out,) = report.outputs
    assert out.name == "logits" and out.shape == (2, 16, 100) and out.dtype == "float32"
    assert out.max_abs_diff <= 1e-5 and out.mismatches == 0
    assert report.inputs == (("input_ids", (2, 16), "int64"),)
    document = report.to_dict()
    assert json.loads(json.dumps(document))["outputs"][0]["name"] == "logits"
    assert "OK" in str(report) and "logits" in str(report)


def test_verify_uses_given_inputs():
    model = _with_plan(zoo.resnet(depth_blocks=2), ("layer.0.out",))
    image = np.full((4, 3, 32, 32), 0.5, dtype=np.float32)
    report = verify(model, 2, {"image": image})
    assert report.inputs == (("image", (4, 3, 32, 32), "float32"),)
    assert report.outputs[0].shape == (4, 10)


def _tamper(stage: ir.Model, name: str, delta: float) -> None:
    value = stage.graph.initializers[name]
    array = value.const_value.numpy() + np.float32(delta)
    value.const_value = ir.tensor(array, name=name)


def test_verify_detects_a_wrong_stage_and_measures_the_difference():
    model = zoo.resnet(depth_blocks=2)
    stages = split_at(model, ["layer.0.out"])
    _tamper(stages[1], "fc.bias", 0.01)  # shifts every logit by 0.01
    report = verify_stages(model, stages)
    assert not report.ok
    (out,) = report.outputs
    assert out.mismatches == out.shape[0] * out.shape[1]
    assert out.max_abs_diff == pytest.approx(0.01, rel=1e-3)
    assert out.max_rel_diff > 0
    assert "MISMATCH" in str(report)
    # Within a looser tolerance it passes.
    assert verify_stages(model, stages, atol=0.02).ok
    # The original model is untouched by tampering with a stage.
    assert not np.any(model.graph.initializers["fc.bias"].const_value.numpy())


def test_verify_error_names_the_failing_stage():
    model = zoo.resnet(depth_blocks=2)
    stages = split_at(model, ["layer.0.out"])
    node = next(n for n in stages[1].graph if n.op_type == "Flatten")
    node.attributes["axis"] = ir.AttrInt64("axis", 7)  # out of range at run time
    with pytest.raises(VerifyError, match="stage 1"):
        verify_stages(model, stages)


def test_verify_error_when_a_stage_reads_nothing_provided():
    model = zoo.resnet(depth_blocks=2)
    stages = split_at(model, ["layer.0.out"])
    stages[1].graph.inputs[0].name = "renamed"
    with pytest.raises(VerifyError, match=r"Stage 1 reads \['renamed'\]"):
        verify_stages(model, stages)


def test_verify_without_configuration_is_a_split_error():
    with pytest.raises(SplitError):
        verify(zoo.resnet(depth_blocks=2), 2)


def test_verify_nan_and_integer_outputs_compare_exactly():
    nan = np.array([np.nan, 1.0], np.float32)
    assert compare_outputs("a", nan, nan.copy(), 1e-4, 1e-4).ok
    assert not compare_outputs("a", nan, np.array([0.0, 1.0], np.float32), 1e-4, 1e-4).ok
    ints = np.array([1, 2, 3])
    assert compare_outputs("i", ints, ints.copy(), 0, 0).ok
    assert compare_outputs("i", ints, ints + np.array([0, 0, 1]), 0, 0).mismatches == 1
    shape = compare_outputs("s", ints, ints[:2], 1, 1)
    assert not shape.ok and shape.max_abs_diff == float("inf")


# ---------------------------------------------------------------------------------------------
# Command line


def test_cli_split_and_verify(tmp_path, capsys):
    model = _with_plan(zoo.bert(layers=3), ("layer.1.out",), ("layer.0.out", "layer.1.out"))
    path = tmp_path / "bert.omny"
    save(model, path)
    outdir = tmp_path / "split"
    assert main(["split", str(path), str(outdir), "--shards", "3", "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)["result"]
    assert manifest["num_stages"] == 3
    assert sorted(f for f in os.listdir(outdir) if f.endswith(".onnx")) == [
        "stage_0.onnx",
        "stage_1.onnx",
        "stage_2.onnx",
    ]
    # Refuses a non-empty directory (usage error), then --force replaces it.
    assert main(["split", str(path), str(outdir), "--shards", "2"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["split", str(path), str(outdir), "--shards", "2", "--force"]) == 0
    assert "stage_1.onnx" in capsys.readouterr().out
    assert json.loads((outdir / "manifest.json").read_text())["num_stages"] == 2
    # No such configuration: a content error.
    assert main(["split", str(path), str(tmp_path / "x"), "--shards", "4"]) == 1
    assert "omny: error:" in capsys.readouterr().err

    assert main(["verify", str(path), "--json", "--dim", "batch=2"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["ok"] is True
    assert [r["shards"] for r in document["results"]] == [2, 3]
    assert document["results"][1]["inputs"][0]["shape"] == [2, 16]
    assert main(["verify", str(path), "--shards", "2"]) == 0
    assert "last_hidden_state" in capsys.readouterr().out


def test_cli_verify_mismatch_exits_1(tmp_path, capsys):
    # Seedless random ops: onnxruntime seeds each session's generator the same way, so the
    # second random op of the whole model draws other numbers than the first op of stage 1.
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([2, 2]))
    first = ir.node("RandomNormalLike", [x])
    y = ir.node("MatMul", [first.outputs[0], x])
    second = ir.node("RandomNormalLike", [y.outputs[0]])
    z = ir.node("Add", [y.outputs[0], second.outputs[0]])
    for node, name in ((first, "first"), (y, "y"), (second, "second"), (z, "z")):
        node.name = name  # the plan's after_node (the one cut resolver checks it)
        node.outputs[0].name = name
        node.outputs[0].type = ir.TensorType(FLOAT)
    graph = ir.Graph([x], [z.outputs[0]], nodes=[first, y, second, z], opset_imports={"": 18})
    model = _with_plan(ir.Model(graph, ir_version=10), ("y",))
    path = tmp_path / "noise.omny"
    save(model, path)
    assert main(["verify", str(path), "--shards", "2"]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    assert main(["verify", str(path), "--shards", "5"]) == 1
    err = capsys.readouterr().err
    assert "5 stages" in err and len(err.splitlines()) == 1  # one summary line


def test_cli_verify_without_any_configuration_is_a_content_problem(tmp_path, capsys):
    # Exit 1 (no plan), as for split, run and annotate; 2 is for unreadable input and usage.
    path = tmp_path / "plain.onnx"
    save(zoo.resnet(depth_blocks=1), path)
    assert main(["verify", str(path)]) == 1
    assert "no shard configuration" in capsys.readouterr().err


def test_default_tolerance_follows_the_models_arithmetic(tmp_path):
    corpus = os.path.join(os.path.dirname(__file__), "corpus")
    model = ir.load(os.path.join(corpus, "yolo_like_fp16_dynamo.onnx"))
    with pytest.warns(UserWarning, match="lower bounds"):
        omny.write(model, plan(model, shards=[2]))
    report = verify(model, 2)
    assert (report.rtol, report.atol) == (1e-2, 1e-2) and report.ok
    strict = verify(model, 2, rtol=1e-4, atol=1e-4)  # fp16 rounding across a cut shows
    assert (strict.rtol, strict.atol) == (1e-4, 1e-4) and not strict.ok
    assert verify(model, 2, rtol=0.5).atol == 1e-2  # one given, the other defaulted
    fp32 = zoo.gpt(layers=2)
    omny.write(fp32, plan(fp32, shards=[2], relaxed=True))
    assert (verify(fp32, 2).rtol, verify(fp32, 2).atol) == (1e-4, 1e-4)
    path = tmp_path / "fp16.omny"
    save(model, path)
    assert main(["verify", str(path), "--shards", "2"]) == 0
    assert main(["verify", str(path), "--shards", "2", "--rtol", "1e-4", "--atol", "1e-4"]) == 1


def _tiny_model(factor: float) -> ir.Model:
    """x @ w1, scaled by ``factor``, then @ w2: every output value is about ``factor``."""
    rng = np.random.default_rng(0)
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape(["batch", 8]))
    w1 = ir.Value(name="w1", const_value=ir.tensor(rng.standard_normal((8, 8), np.float32)))
    w2 = ir.Value(name="w2", const_value=ir.tensor(rng.standard_normal((8, 4), np.float32)))
    k = ir.Value(name="k", const_value=ir.tensor(np.array(factor, np.float32)))
    h = ir.node("MatMul", [x, w1], name="h")
    t = ir.node("Mul", [h.outputs[0], k], name="t")
    y = ir.node("MatMul", [t.outputs[0], w2], name="y")
    for node in (h, t, y):
        node.outputs[0].name = node.name
    graph = ir.Graph(
        [x], [y.outputs[0]], nodes=[h, t, y], initializers=[w1, w2, k], opset_imports={"": 18}
    )
    return _with_plan(ir.Model(graph, ir_version=10), ("t",))


@pytest.mark.parametrize("factor", [1e-9, 1e-29])
def test_verify_compares_tiny_outputs_at_their_scale(factor):
    model = _tiny_model(factor)
    stages = split_at(model, ["t"])
    report = verify_stages(model, stages)
    assert report.ok and report.near_zero_outputs == ("y",)
    (out,) = report.outputs
    assert 0 < out.scale < 100 * factor and out.near_zero
    assert "within atol=0.0001 of zero" in str(report) and "pass real inputs" in str(report)
    assert report.to_dict()["outputs"][0]["near_zero"] is True
    # A stage computing twice the right values: every element 100 % off, yet within atol
    value = stages[1].graph.initializers["w2"]
    value.const_value = ir.tensor(value.const_value.numpy() * 2, name="w2")
    wrong = verify_stages(model, stages)
    assert not wrong.ok and wrong.outputs[0].mismatches == wrong.outputs[0].shape[0] * 4


def test_outputs_of_ordinary_scale_are_not_flagged_and_keep_the_absolute_tolerance():
    whole = np.array([0.0, 2.0, -3.0], np.float32)
    ok = compare_outputs("o", whole, whole + np.float32(5e-5))
    assert ok.ok and ok.scale == 3.0 and not ok.near_zero
    assert not compare_outputs("o", whole, whole + np.float32(5e-4)).ok
    # an all-zero output is near zero and must match exactly; integer outputs are never flagged
    zeros = np.zeros(3, np.float32)
    assert compare_outputs("z", zeros, zeros).near_zero
    assert not compare_outputs("z", zeros, zeros + np.float32(1e-12)).ok
    assert not compare_outputs("i", np.zeros(3, np.int64), np.zeros(3, np.int64)).near_zero


def test_cli_verify_says_when_outputs_are_all_near_zero(tmp_path, capsys):
    path = tmp_path / "tiny.omny"
    save(_tiny_model(1e-9), path)
    assert main(["verify", str(path), "--shards", "2"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "note: every value of y (largest |value|" in out
    assert main(["verify", str(path), "--shards", "2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["results"][0]["outputs"][0]["near_zero"] is True
