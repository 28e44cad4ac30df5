"""Tests of onnx_ir_multidevice._split: stage models, manifest, writing a split to disk."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice._errors import OmnyIOError, SplitError
from onnx_ir_multidevice._split import (
    MANIFEST_FORMAT,
    NUM_STAGES_KEY,
    STAGE_INDEX_KEY,
    build_manifest,
    resolve_stages,
    save_split,
    split,
    split_at,
    split_by_stages,
)
from onnx_ir_multidevice.analysis import assign_stages
from onnx_ir_multidevice.omny._schema import CutPoint, OmnyMetadata, ShardConfiguration, Sharding
from onnx_ir_multidevice.runtime.sessions import ModelSession
from onnx_ir_multidevice.testing import zoo

FLOAT = ir.DataType.FLOAT


def _proto_bytes(model: ir.Model) -> bytes:
    return ir.to_proto(model).SerializeToString()


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # the package's hand-off: an annotated (IR 11) whole model runs on onnxruntime 1.20 too
    with ModelSession(model) as owner:
        session = owner.session
        names = [i.name for i in session.get_inputs()]
        results = session.run(None, {n: feeds[n] for n in names})
        return dict(zip([o.name for o in session.get_outputs()], results, strict=True))


def _run_chain(stages: list[ir.Model], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The runtime contract: env = graph inputs; each stage reads names from env by name."""
    env = dict(feeds)
    for stage in stages:
        env.update(_run(stage, env))
    return env


def _nodes(model: ir.Model) -> list[str]:
    return [n.name for n in model.graph]


def _annotate(model: ir.Model, cuts: list[str], name: str = "pipeline") -> ir.ModelConfiguration:
    by_name = {v.name: v for n in model.graph for v in n.outputs}
    configuration = model.add_device_configuration(name, num_devices=len(cuts) + 1)
    stages = assign_stages(model.graph, [by_name[c] for c in cuts])
    for node, stage in stages.items():
        node.set_pipeline_stage(configuration, stage)
    model.ir_version = 11
    return configuration


GPT_IDS = {"input_ids": np.random.default_rng(1).integers(0, 100, size=(2, 16))}


# ---------------------------------------------------------------------------------------------
# Stage models


def test_split_at_chains_to_the_same_result_and_keeps_names():
    model = zoo.gpt(layers=3)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    assert len(stages) == 3
    expected = _run(model, GPT_IDS)
    got = _run_chain(stages, GPT_IDS)
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-5, atol=1e-5)
    assert [v.name for v in stages[0].graph.outputs][-1] == "layer.0.out"
    assert "layer.0.out" in [v.name for v in stages[1].graph.inputs]
    assert [v.name for v in stages[2].graph.outputs] == ["logits"]


def test_input_model_is_not_modified():
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    before = _proto_bytes(model)
    nodes_before = list(model.graph)
    stages = split(model, 2)
    assert _proto_bytes(model) == before
    assert list(model.graph) == nodes_before
    for stage in stages:
        for node in stage.graph:
            assert node.graph is stage.graph


def test_stage_models_are_self_contained_and_valid():
    model = zoo.bert(layers=3)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    for i, stage in enumerate(stages):
        proto = ir.to_proto(stage)
        onnx.checker.check_model(proto, full_check=True)
        assert stage.metadata_props[STAGE_INDEX_KEY] == str(i)
        assert stage.metadata_props[NUM_STAGES_KEY] == "3"
        assert stage.opset_imports == model.opset_imports
        assert stage.ir_version == model.ir_version
        names = [v.name for v in stage.graph.inputs]
        assert len(names) == len(set(names))


def test_weights_are_shared_not_copied_and_tied_weight_in_each_stage_using_it():
    # vocab * hidden * 4 > 1 MiB: the embedding is a large constant, so it is not replicable.
    model = zoo.gpt(layers=3, vocab=4100)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    wte = model.graph.initializers["wte.weight"].const_value
    holders = [i for i, s in enumerate(stages) if "wte.weight" in s.graph.initializers]
    assert holders == [0, 2]  # token embedding (first) and tied LM head (last)
    for i in holders:
        assert stages[i].graph.initializers["wte.weight"].const_value is wte
    # The transposed head is recomputed in the last stage, not shipped.
    assert "lm_head.tied_weight" in _nodes(stages[2])
    assert "lm_head.tied_weight" not in [v.name for v in stages[2].graph.inputs]
    # Each layer's weights live only in its stage.
    assert "layer.1.attn.q_proj.weight" in stages[1].graph.initializers
    assert "layer.1.attn.q_proj.weight" not in stages[0].graph.initializers


def test_side_activations_cross_and_shape_reads_are_recomputed_in_every_stage():
    model = zoo.gpt(layers=3, vocab=4100)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    manifest = build_manifest(model, stages)
    last_inputs = {i.name: i.source for i in manifest.stages[2].inputs}
    # The causal mask is sliced once in stage 0 from the attn.bias buffer (a large constant)
    # to the sequence length: an activation, sent to every later stage.
    assert last_inputs["causal.future"] == 0
    assert last_inputs["layer.1.out"] == 1
    out0 = {o.name: o.to for o in manifest.stages[0].outputs}
    assert out0["causal.future"] == (1, 2)
    # hidden_shape = Shape(embeddings) is proven equal to input_ids' dims (and the static
    # hidden size): each stage recomputes it, and the split_heads_shape built from it.
    for name in ("hidden_shape", "split_heads_shape"):
        assert name not in last_inputs and name not in out0
        assert all(name in {v.name for n in stage.graph for v in n.outputs} for stage in stages)
    assert "input_ids" in last_inputs
    got = _run_chain(stages, GPT_IDS)
    np.testing.assert_allclose(got["logits"], _run(model, GPT_IDS)["logits"], atol=1e-5)


def test_replicable_nodes_are_duplicated_into_each_stage_that_needs_them():
    model = zoo.bert(layers=3)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    for stage in stages:
        assert "mask.additive" in _nodes(stage)
        assert "attention_mask" in [v.name for v in stage.graph.inputs]
        assert "mask.one" in stage.graph.initializers
        assert "mask.additive" not in [v.name for v in stage.graph.inputs]
    # A node of the model appears at most once per stage.
    for stage in stages:
        assert len(_nodes(stage)) == len(set(_nodes(stage)))


def test_if_and_loop_stay_whole_in_one_stage():
    model = zoo.control_flow()
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    for cuts in (["proj"], ["branch"], ["proj", "branch", "loop"]):
        stages = split_at(model, cuts)
        holders = {
            op: [i for i, s in enumerate(stages) if op in [n.op_type for n in s.graph]]
            for op in ("If", "Loop")
        }
        assert len(holders["If"]) == 1 and len(holders["Loop"]) == 1
        loop_stage = stages[holders["Loop"][0]]
        loop = next(n for n in loop_stage.graph if n.op_type == "Loop")
        body = loop.attributes["body"].as_graph()
        assert [n.name for n in body] == [n.name for n in model.graph.node(-2).attributes[
            "body"].as_graph()]  # fmt: skip
        # Outer-scope values read by the body are provided to the stage holding the loop.
        assert "loop.weight" in loop_stage.graph.initializers
        for stage in stages:
            onnx.checker.check_model(ir.to_proto(stage), full_check=True)
        np.testing.assert_allclose(
            _run_chain(stages, feeds)["output"], _run(model, feeds)["output"], atol=1e-5
        )


def test_graph_input_read_by_a_late_stage_is_forwarded():
    model = zoo.control_flow()
    stages = split_at(model, ["proj", "branch", "loop"])
    manifest = build_manifest(model, stages).to_dict()
    assert manifest["stages"][3]["inputs"] == [
        {"name": "x", "from": "input"},
        {"name": "loop", "from": 2},
    ]
    # "proj" is read by stages 1 (If branches) and 2 (Loop body): output once, sent to both.
    assert manifest["stages"][0]["outputs"] == [{"name": "proj", "to": [1, 2]}]


def test_manifest_schema():
    model = zoo.resnet(depth_blocks=3)
    stages = split_at(model, ["layer.0.out", "layer.1.out"])
    manifest = build_manifest(model, stages).to_dict()
    assert manifest["format"] == MANIFEST_FORMAT
    assert manifest["version"] == 1
    assert manifest["num_stages"] == 3
    assert manifest["graph_inputs"] == ["image"]
    assert manifest["graph_outputs"] == ["logits"]
    assert [s["file"] for s in manifest["stages"]] == [f"stage_{i}.onnx" for i in range(3)]
    assert manifest["stages"][0]["inputs"] == [{"name": "image", "from": "input"}]
    assert manifest["stages"][1]["inputs"] == [{"name": "layer.0.out", "from": 0}]
    assert manifest["stages"][2]["outputs"] == [{"name": "logits", "to": ["output"]}]
    json.dumps(manifest)


def test_split_by_annotation_strips_the_pipeline_configuration():
    model = zoo.bert(layers=2)
    model.metadata_props["keep.me"] = "yes"
    _annotate(model, ["layer.0.out"])
    stages = split(model, 2)
    for stage in stages:
        assert stage.device_configurations == ()
        assert all(not n.device_configurations for n in stage.graph)
        assert stage.metadata_props["keep.me"] == "yes"
        # no multi-device field left: the lowest version opset 18 needs, not the annotation's 11
        assert stage.ir_version == 8
    feeds = {
        "input_ids": np.arange(32).reshape(2, 16) % 100,
        "attention_mask": np.ones((2, 16), dtype=np.int64),
    }
    np.testing.assert_allclose(
        _run_chain(stages, feeds)["last_hidden_state"],
        _run(model, feeds)["last_hidden_state"],
        atol=1e-5,
    )


def test_configuration_selection_by_name_and_object():
    model = zoo.resnet(depth_blocks=4)
    a = _annotate(model, ["layer.0.out"], name="early")
    by_name = {v.name: v for n in model.graph for v in n.outputs}
    b = model.add_device_configuration("late", num_devices=2)
    for node, stage in assign_stages(model.graph, [by_name["layer.2.out"]]).items():
        node.set_pipeline_stage(b, stage)
    early = split(model, 2, configuration="early")
    late = split(model, 2, configuration=b)
    assert "layer.1.out" in _nodes(early[1])
    assert "layer.1.out" in _nodes(late[0])
    assert resolve_stages(model, 2, configuration=a) == resolve_stages(model, 2)
    with pytest.raises(SplitError, match="no device configuration named 'nope'"):
        split(model, 2, configuration="nope")
    with pytest.raises(SplitError, match="has 2 devices, not 3"):
        split(model, 3, configuration="early")


def test_function_library_is_kept():
    model = zoo.resnet(depth_blocks=2)
    function = ir.Function(
        "custom",
        "Twice",
        graph=ir.Graph(
            [x := ir.Value(name="x")],
            [y := ir.Value(name="y")],
            nodes=[ir.Node("", "Add", [x, x], outputs=[y])],
            opset_imports={"": 18},
        ),
        attributes=[],
    )
    model.functions[function.identifier()] = function
    stages = split_at(model, ["layer.0.out"])
    for stage in stages:
        assert list(stage.functions) == [function.identifier()]
        assert stage.functions[function.identifier()] is not function


def test_shards_one_gives_the_whole_model():
    model = zoo.resnet(depth_blocks=2)
    (stage,) = split(model, 1)
    assert _nodes(stage) == _nodes(model)


# ---------------------------------------------------------------------------------------------
# Errors


def test_error_no_configuration():
    with pytest.raises(SplitError, match="No configuration for 3 shards"):
        split(zoo.resnet(depth_blocks=2), 3)


def test_error_unknown_cut_name():
    with pytest.raises(SplitError, match="'nope' is not a value of the main graph"):
        split_at(zoo.resnet(depth_blocks=2), ["nope"])


def test_error_stage_reads_later_stage():
    model = zoo.resnet(depth_blocks=2)
    stages = dict.fromkeys(model.graph, 1)
    stages[model.graph.node(-1)] = 0  # the classifier before its inputs
    with pytest.raises(SplitError, match="later stage 1"):
        split_by_stages(model, stages)


def test_error_empty_stage():
    model = zoo.resnet(depth_blocks=2)
    with pytest.raises(SplitError, match="Stage 1 of 3 would have no node"):
        split_by_stages(model, dict.fromkeys(model.graph, 0) | {model.graph.node(-1): 2}, 3)


def test_error_missing_stage_and_bad_shards():
    model = zoo.resnet(depth_blocks=2)
    with pytest.raises(SplitError, match="has no stage"):
        split_by_stages(model, {model.graph.node(0): 0}, 1)
    with pytest.raises(SplitError, match="positive integer"):
        split(model, 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: split(
            onnx.load(m) if isinstance(m, (str, os.PathLike)) else m, 2
        ),  # a path: loaded
        lambda m: split_at(m, []),
        lambda m: split_by_stages(m, {}),
        lambda m: resolve_stages(m, 2),
    ],
    ids=["split", "split_at", "split_by_stages", "resolve_stages"],
)
@pytest.mark.parametrize("kind", ["str", "path", "proto"])
def test_error_model_not_loaded_says_how_to_load(tmp_path, call, kind):
    path = tmp_path / "m.onnx"
    ir.save(zoo.resnet(depth_blocks=2), path)
    model = {"str": str(path), "path": path, "proto": onnx.load(path)}[kind]
    with pytest.raises(TypeError, match=r"takes an onnx_ir\.Model.*onnx_ir_multidevice\.load"):
        call(model)


def test_gc_is_restored_after_a_split_even_when_it_fails():
    import gc

    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    assert gc.isenabled()
    assert len(split(model, 2)) == 2
    assert gc.isenabled()
    with pytest.raises(SplitError):
        split(model, 3)
    assert gc.isenabled()
    gc.disable()
    try:
        split(model, 2)
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()


def test_error_partial_annotation_names_the_node():
    model = zoo.resnet(depth_blocks=2)
    configuration = _annotate(model, ["layer.0.out"])
    last = model.graph.node(-1)
    last.device_configurations = ()
    with pytest.raises(SplitError, match=f"Node '{last.name}' has no pipeline stage"):
        split(model, 2, configuration=configuration)


def test_error_unnamed_crossing_value():
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([2, 2]))
    a = ir.node("MatMul", [x, x])  # an activation (heavy op on the input)
    b = ir.node("Neg", [a.outputs[0]])
    b.outputs[0].name = "y"
    b.outputs[0].type = ir.TensorType(FLOAT)
    graph = ir.Graph([x], [b.outputs[0]], nodes=[a, b], opset_imports={"": 18})
    a.outputs[0].name = None
    model = ir.Model(graph, ir_version=10)
    with pytest.raises(SplitError, match="has no name"):
        split_by_stages(model, {a: 0, b: 1})


# ---------------------------------------------------------------------------------------------
# Writing a split to a directory


def test_save_split_writes_stages_and_manifest(tmp_path):
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    outdir = tmp_path / "out"
    manifest = save_split(model, outdir, 2)
    assert sorted(os.listdir(outdir)) == [
        "manifest.json",
        "stage_0.onnx",
        "stage_0.onnx.data",
        "stage_1.onnx",
        "stage_1.onnx.data",
    ]
    assert json.loads((outdir / "manifest.json").read_text()) == manifest.to_dict()
    assert manifest.stages[0].external_data == ("stage_0.onnx.data",)
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary directory left behind
    loaded = [ir.load(outdir / s.file) for s in manifest.stages]
    for path in ("stage_0.onnx", "stage_1.onnx"):
        onnx.checker.check_model(str(outdir / path), full_check=True)
    # Tied weight written once per stage that uses it.
    assert "wte.weight" in loaded[0].graph.initializers
    assert "wte.weight" in loaded[1].graph.initializers
    sessions = [
        ort.InferenceSession(str(outdir / s.file), providers=["CPUExecutionProvider"])
        for s in manifest.stages
    ]
    env = dict(GPT_IDS)
    for session in sessions:
        names = [i.name for i in session.get_inputs()]
        out = session.run(None, {n: env[n] for n in names})
        env.update(zip([o.name for o in session.get_outputs()], out, strict=True))
    np.testing.assert_allclose(env["logits"], _run(model, GPT_IDS)["logits"], atol=1e-5)


def test_save_split_refuses_non_empty_directory_unless_forced(tmp_path):
    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    outdir = tmp_path / "out"
    outdir.mkdir()
    (outdir / "other.txt").write_text("x")
    with pytest.raises(OmnyIOError, match="not empty"):
        save_split(model, outdir, 2)
    assert os.listdir(outdir) == ["other.txt"]
    save_split(model, outdir, 2, force=True)
    assert "other.txt" not in os.listdir(outdir)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    # An existing empty directory is fine.
    (tmp_path / "empty").mkdir()
    save_split(model, tmp_path / "empty", 2)


def test_save_split_refuses_a_missing_parent_folder_and_a_file(tmp_path):
    """Like ``save`` (and ``omny annotate`` / ``omny plan``): no folder is made but OUTDIR."""
    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    with pytest.raises(OmnyIOError, match=r"folder .*a[/\\]b does not exist; create it first"):
        save_split(model, tmp_path / "a" / "b" / "c", 2)
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        OmnyIOError, match=r"file: exists and is not a directory; .* e\.g\. .*file_split"
    ):
        save_split(model, tmp_path / "file", 2)
    with pytest.raises(OmnyIOError, match="is not a directory; create it first"):
        save_split(model, tmp_path / "file" / "out", 2)
    assert sorted(os.listdir(tmp_path)) == ["file"]
    assert (tmp_path / "file").read_text() == "x"
    # An existing parent folder is enough; OUTDIR itself is created.
    (tmp_path / "a").mkdir()
    manifest = save_split(model, tmp_path / "a" / "b", 2)
    written = set(os.listdir(tmp_path / "a" / "b"))
    assert {"manifest.json", "stage_0.onnx", "stage_1.onnx"} <= written
    assert written == {"manifest.json"} | {
        name for s in manifest.stages for name in (s.file, *s.external_data)
    }
    assert os.listdir(tmp_path / "a") == ["b"]  # no temporary directory left


def test_cli_split_output_paths(tmp_path, capsys):
    from onnx_ir_multidevice._cli import main

    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    path = tmp_path / "m.onnx"
    ir.save(model, path)
    before = path.read_bytes()
    assert main(["split", str(path), str(path), "--shards", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("omny: error: ") and err.count("\n") == 1
    assert "m.onnx: exists and is not a directory" in err and "m_split" in err
    assert main(["split", str(path), str(tmp_path / "x" / "y"), "--shards", "2"]) == 2
    err = capsys.readouterr().err
    assert "does not exist; create it first" in err and err.count("\n") == 1
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    (tmp_path / "x").mkdir()
    assert main(["split", str(path), str(tmp_path / "x" / "y"), "--shards", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["num_stages"] == 2


def test_save_split_failure_leaves_nothing(tmp_path):
    model = zoo.resnet(depth_blocks=2)
    with pytest.raises(SplitError):
        save_split(model, tmp_path / "out", 2)
    assert os.listdir(tmp_path) == []


def test_save_split_from_external_data_model(tmp_path):
    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    src = tmp_path / "src"
    src.mkdir()
    ir.save(model, src / "model.onnx", external_data="model.onnx.data", size_threshold_bytes=0)
    loaded = ir.load(src / "model.onnx")
    manifest = save_split(loaded, tmp_path / "out", 2)
    out = tmp_path / "out"
    assert manifest.stages[1].external_data == ("stage_1.onnx.data",)
    # The stages do not point at the source file; the source still loads (not linked).
    stage0 = onnx.load(str(out / "stage_0.onnx"), load_external_data=False)
    locations = {
        entry.value
        for init in stage0.graph.initializer
        for entry in init.external_data
        if entry.key == "location"
    }
    assert locations == {"stage_0.onnx.data"}
    assert os.stat(src / "model.onnx.data").st_nlink == 1
    feeds = {"image": np.ones((1, 3, 32, 32), dtype=np.float32)}
    env = dict(feeds)
    for s in manifest.stages:
        session = ort.InferenceSession(str(out / s.file), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        env.update(zip([o.name for o in session.get_outputs()], session.run(None, {
            n: env[n] for n in names}), strict=True))  # fmt: skip
    np.testing.assert_allclose(env["logits"], _run(model, feeds)["logits"], atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Random graphs against a NumPy oracle

_OPS = ("Add", "Mul", "Sub", "Tanh", "Relu", "MatMul")


@st.composite
def _random_pipeline(draw):
    """A random DAG of float ops over [3, 3] values and a random valid stage assignment."""
    num_nodes = draw(st.integers(2, 14))
    num_weights = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    weights = [rng.standard_normal((3, 3)).astype(np.float32) * 0.5 for _ in range(num_weights)]
    specs = []  # (op, input indices); index < 0: weight -1-i; 0: graph input; j>0: node j-1
    for j in range(num_nodes):
        op = draw(st.sampled_from(_OPS))
        arity = 1 if op in ("Tanh", "Relu") else 2
        pool = list(range(-num_weights, j + 1))
        specs.append((op, [draw(st.sampled_from(pool)) for _ in range(arity)]))
    num_stages = draw(st.integers(1, min(4, num_nodes)))
    boundaries = sorted(draw(st.sets(st.integers(1, num_nodes - 1), min_size=num_stages - 1,
                                     max_size=num_stages - 1)))  # fmt: skip
    return weights, specs, boundaries


def _oracle(weights, specs, x):
    def get(i):
        return weights[-1 - i] if i < 0 else (x if i == 0 else values[i - 1])

    values = []
    for op, inputs in specs:
        args = [get(i) for i in inputs]
        values.append(
            {
                "Add": lambda a, b: a + b,
                "Mul": lambda a, b: a * b,
                "Sub": lambda a, b: a - b,
                "MatMul": lambda a, b: a @ b,
                "Tanh": np.tanh,
                "Relu": lambda a: np.maximum(a, 0),
            }[op](*args)
        )
    return values


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_random_pipeline())
def test_random_graphs_split_compute_what_the_oracle_computes(case):
    weights, specs, boundaries = case
    x = ir.Value(name="x", type=ir.TensorType(FLOAT), shape=ir.Shape([3, 3]))
    inits = [
        ir.Value(name=f"w{i}", type=ir.TensorType(FLOAT), shape=ir.Shape([3, 3]),
                 const_value=ir.tensor(w, name=f"w{i}"))
        for i, w in enumerate(weights)
    ]  # fmt: skip
    values: list[ir.Value] = []
    nodes = []
    for j, (op, inputs) in enumerate(specs):
        args = [inits[-1 - i] if i < 0 else (x if i == 0 else values[i - 1]) for i in inputs]
        node = ir.node(op, args, name=f"n{j}")
        node.outputs[0].name = f"v{j}"
        node.outputs[0].type = ir.TensorType(FLOAT)
        node.outputs[0].shape = ir.Shape([3, 3])
        nodes.append(node)
        values.append(node.outputs[0])
    used = {v for n in nodes for v in n.inputs}
    outputs = [v for v in values if v not in used]
    graph = ir.Graph([x], outputs, nodes=nodes, initializers=inits, opset_imports={"": 18})
    model = ir.Model(graph, ir_version=10)
    # Positional stages (monotone along the topological order: always valid).
    stage_of = {n: sum(j >= b for b in boundaries) for j, n in enumerate(nodes)}
    num_stages = len(boundaries) + 1
    # Brute-force oracle of the tensor classes: with tiny weights, a value is an activation
    # exactly when its cone holds both the graph input and a MatMul (a heavy op).
    has_x, has_matmul = [], []
    for op, inputs in specs:
        has_x.append(any(i == 0 or (i > 0 and has_x[i - 1]) for i in inputs))
        has_matmul.append(op == "MatMul" or any(i > 0 and has_matmul[i - 1] for i in inputs))
    activation = [a and b for a, b in zip(has_x, has_matmul, strict=True)]
    expected_inputs: list[set[str]] = [set() for _ in range(num_stages)]
    produces = [False] * num_stages
    for j, (_, inputs) in enumerate(specs):
        for i in inputs:
            if i > 0 and activation[i - 1] and stage_of[nodes[i - 1]] < stage_of[nodes[j]]:
                expected_inputs[stage_of[nodes[j]]].add(f"v{i - 1}")
                produces[stage_of[nodes[i - 1]]] = True
    for v in outputs:
        produces[stage_of[v.producer()]] = True

    if not all(produces):
        with pytest.raises(SplitError, match="produces nothing"):
            split_by_stages(model, stage_of, num_stages)
        return
    stages = split_by_stages(model, stage_of, num_stages)
    for s, stage in enumerate(stages):
        assert {v.name for v in stage.graph.inputs} - {"x"} == expected_inputs[s]
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)}
    expected = _oracle(weights, specs, feeds["x"])
    got = _run_chain(stages, feeds)
    for v in outputs:
        np.testing.assert_allclose(got[v.name], expected[int(v.name[1:])], rtol=1e-4, atol=1e-4)
    build_manifest(model, stages)  # every stage input resolves


# ---------------------------------------------------------------------------------------------
# .omny configurations


def _omny_metadata(cuts: dict[str, str], configurations: list[tuple[str, ...]]):
    from onnx_ir_multidevice.omny._schema import (
        CutPoint,
        OmnyMetadata,
        ShardConfiguration,
        Sharding,
    )

    return OmnyMetadata(
        cut_points=tuple(CutPoint(cid, name, name, (1, 64)) for cid, name in cuts.items()),
        sharding=Sharding(
            configurations=tuple(
                ShardConfiguration(len(ids) + 1, (1,) * (len(ids) + 1), ids)
                for ids in configurations
            )
        ),
    )


def test_split_by_omny_configuration():
    from onnx_ir_multidevice import omny

    model = zoo.resnet(depth_blocks=4)
    metadata = _omny_metadata(
        {"c0": "layer.0.out", "c1": "layer.1.out", "c2": "layer.2.out"},
        [("c1",), ("c0", "c2"), ("c0",)],
    )
    omny.write(model, metadata)
    model.metadata_props["other"] = "kept"
    two = split(model, 2)  # the first configuration with 2 shards
    assert "layer.1.out" in _nodes(two[0]) and "layer.2.out" in _nodes(two[1])
    assert [v.name for v in two[1].graph.inputs] == ["layer.1.out"]
    for stage in two:
        assert "omnynet_metadata" not in stage.metadata_props
        assert "omnynet_version" not in stage.metadata_props
        assert stage.metadata_props["other"] == "kept"
    three = split(model, 3)
    assert [[v.name for v in s.graph.inputs] for s in three] == [
        ["image"],
        ["layer.0.out"],
        ["layer.2.out"],
    ]
    by_index = split(model, 2, configuration=2)
    assert [v.name for v in by_index[1].graph.inputs] == ["layer.0.out"]
    # metadata= overrides the model's own metadata.
    other = _omny_metadata({"c": "layer.2.out"}, [("c",)])
    assert [v.name for v in split(model, 2, metadata=other)[1].graph.inputs] == ["layer.2.out"]


def test_omny_errors_name_the_json_path():
    model = zoo.resnet(depth_blocks=2)
    bad_id = _omny_metadata({"c0": "layer.0.out"}, [("zz",)])
    with pytest.raises(SplitError, match=r"sharding.configurations\[0\].cut_point_ids\[0\]"):
        split(model, 2, metadata=bad_id)
    bad_tensor = _omny_metadata({"c0": "gone"}, [("c0",)])
    # The message of the one cut resolver (bind), which the checker reports too.
    with pytest.raises(SplitError, match="value 'gone' is not a tensor of the main graph"):
        split(model, 2, metadata=bad_tensor)
    with pytest.raises(SplitError, match=r"offers \[2\]"):
        split(model, 4, metadata=bad_tensor)
    with pytest.raises(SplitError, match=r"configurations\[3\] does not exist"):
        split(model, 2, metadata=bad_tensor, configuration=3)


def test_fast_node_clone_matches_the_onnx_ir_cloner():
    """_clone_node's direct path gives what onnx_ir's Cloner gives, proto for proto."""
    from onnx_ir import _cloner

    from onnx_ir_multidevice._split.build import _clone_node

    model = zoo.gpt(layers=2)
    for i, node in enumerate(model.graph):
        node.metadata_props["origin"] = f"n{i}"
        for output in node.outputs:
            output.metadata_props["kind"] = "act"
    graph_inputs = list(model.graph.inputs) + list(model.graph.initializers.values())

    def clone_all(fast: bool) -> ir.Model:
        value_map = {v: ir.Value(name=v.name, type=v.type, shape=v.shape) for v in graph_inputs}
        cloner = _cloner.Cloner(attr_map={}, value_map=value_map, metadata_props={})
        nodes = [
            _clone_node(n, value_map, cloner) if fast else cloner.clone_node(n) for n in model.graph
        ]
        assert all(n.graph is None for n in nodes)
        inputs = [value_map[v] for v in graph_inputs]
        outputs = [value_map[v] for v in model.graph.outputs]
        graph = ir.Graph(inputs, outputs, nodes=nodes, opset_imports=model.opset_imports)
        return ir.Model(graph, ir_version=model.ir_version)

    before = _proto_bytes(model)
    fast, reference = clone_all(True), clone_all(False)
    assert _proto_bytes(fast) == _proto_bytes(reference)
    assert _proto_bytes(model) == before
    for new, old in zip(fast.graph, model.graph, strict=True):
        assert new is not old
        assert new.metadata_props == old.metadata_props
        assert new.metadata_props is not old.metadata_props
        for a, b in zip(new.outputs, old.outputs, strict=True):
            assert a is not b and a.name == b.name and a.metadata_props == b.metadata_props


def test_split_keeps_node_and_value_metadata_and_annotated_nodes_use_the_cloner():
    model = zoo.gpt(layers=2)
    _annotate(model, ["layer.0.out"])
    first = next(iter(model.graph))
    first.metadata_props["origin"] = "first"
    first.outputs[0].metadata_props["kind"] = "act"
    stages = split(model, 2)
    cloned = next(n for n in stages[0].graph if n.name == first.name)
    assert cloned.metadata_props["origin"] == "first"
    assert cloned.outputs[0].metadata_props["kind"] == "act"
    assert all(not n.device_configurations for s in stages for n in s.graph)
    expected = _run(model, GPT_IDS)
    got = _run_chain(stages, GPT_IDS)
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-5, atol=1e-5)


def test_save_split_pauses_and_restores_the_gc(tmp_path):
    import gc

    model = zoo.resnet(depth_blocks=2)
    _annotate(model, ["layer.0.out"])
    assert gc.isenabled()
    save_split(model, tmp_path / "out", 2)
    assert gc.isenabled()
    with pytest.raises(SplitError):
        save_split(model, tmp_path / "bad", 3)
    assert gc.isenabled()
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------------------------------------
# save_split writes the stage protos straight from the input nodes


def _omny_cuts(cuts: list[str]) -> OmnyMetadata:
    shards = len(cuts) + 1
    return OmnyMetadata(
        cut_points=tuple(CutPoint(c, c, c, (1,)) for c in cuts),
        sharding=Sharding(configurations=(ShardConfiguration(shards, (1,) * shards, tuple(cuts)),)),
    )


def _with_extras(model: ir.Model) -> ir.Model:
    """``model`` with a function library, model/graph/node/value metadata and a doc string."""
    function = ir.Function(
        "custom",
        "Twice",
        graph=ir.Graph(
            [x := ir.Value(name="x")],
            [y := ir.Value(name="y", type=ir.TensorType(FLOAT))],
            nodes=[ir.Node("", "Add", [x, x], outputs=[y])],
            opset_imports={"": 18},
        ),
        attributes=[],
    )
    model.functions[function.identifier()] = function
    model.graph.opset_imports["custom"] = 1
    model.metadata_props["author"] = "test"
    model.graph.metadata_props["graph_key"] = "graph_value"
    model.doc_string = "a model"
    first = next(iter(model.graph))
    first.metadata_props["origin"] = "first"
    first.outputs[0].metadata_props["kind"] = "act"
    first.outputs[0].doc_string = "first output"
    return model


def _annotated_with_kept_configuration() -> ir.Model:
    model = _with_extras(zoo.gpt(layers=2))
    _annotate(model, ["layer.0.out"])
    other = model.add_device_configuration("other", num_devices=2)
    for node in list(model.graph)[:5]:
        node.set_pipeline_stage(other, 1)  # a second pipeline: stripped as well
    return model


_DIRECT_CASES = {
    "resnet": (lambda: zoo.resnet(depth_blocks=2), _omny_cuts(["layer.0.out"]), 2),
    "bert": (lambda: zoo.bert(layers=2), _omny_cuts(["layer.0.out"]), 2),
    "gpt_tied": (lambda: _with_extras(zoo.gpt(layers=2)), _omny_cuts(["layer.0.out"]), 2),
    "control_flow": (zoo.control_flow, _omny_cuts(["proj", "branch", "loop"]), 4),
    "ir11_annotated": (_annotated_with_kept_configuration, None, 2),
}


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for body in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _graphs(body)


def _loaded_protos(outdir, manifest) -> list[onnx.ModelProto]:
    """The stage files with their external data loaded, as ``ir.to_proto`` writes tensors."""
    protos = [onnx.load(str(outdir / s.file)) for s in manifest.stages]
    for proto in protos:
        for graph in _graphs(proto.graph):
            for tensor in graph.initializer:
                if tensor.data_location == onnx.TensorProto.DEFAULT:
                    tensor.ClearField("data_location")  # onnx.load sets it explicitly
    return protos


@pytest.mark.parametrize("case", sorted(_DIRECT_CASES))
def test_save_split_direct_writer_equals_the_split_models(tmp_path, case, monkeypatch):
    from onnx_ir_multidevice._proto import convert as _roundtrip
    from onnx_ir_multidevice._split import write as split_module

    build, metadata, shards = _DIRECT_CASES[case]
    model = build()
    assert split_module._direct_writable(model)
    before = _proto_bytes(model)
    manifest = save_split(model, tmp_path / "direct", shards, metadata=metadata)
    assert _proto_bytes(model) == before  # the input model is not modified
    expected = [ir.to_proto(s) for s in split(model, shards, metadata=metadata)]
    written = _loaded_protos(tmp_path / "direct", manifest)
    assert len(written) == len(expected) == shards
    for i, (got, want) in enumerate(zip(written, expected, strict=True)):
        assert _roundtrip.diff(got, want) == [], (case, i)
        assert got == want, (case, i)
        assert all(e.key != "location" or e.value == f"stage_{i}.onnx.data"
                   for t in onnx.load(str(tmp_path / "direct" / f"stage_{i}.onnx"),
                                      load_external_data=False).graph.initializer
                   for e in t.external_data)  # fmt: skip
    # Byte for byte what the stage-model path (ir.save of split()[i]) writes.
    monkeypatch.setattr(split_module, "_direct_writable", lambda m: False)
    reference = save_split(model, tmp_path / "models", shards, metadata=metadata)
    assert reference == manifest
    for entry in manifest.stages:
        for name in (entry.file, *entry.external_data):
            assert (tmp_path / "direct" / name).read_bytes() == (
                tmp_path / "models" / name
            ).read_bytes(), (case, name)


def _quantized_gpt() -> ir.Model:
    model = zoo.gpt(layers=2)
    next(iter(model.graph)).outputs[0].meta["quant_parameter_tensor_names"] = {"scale": "s"}
    return model


def _control_flow_with_body_weight() -> ir.Model:
    model = zoo.control_flow()
    loop = next(n for n in model.graph if n.op_type == "Loop")
    body = loop.attributes["body"].as_graph()
    weight = ir.Value(
        name="body.big", type=ir.TensorType(FLOAT), shape=ir.Shape([64]),
        const_value=ir.tensor(np.ones(64, dtype=np.float32), name="body.big"),
    )  # fmt: skip
    body.register_initializer(weight)
    return model


def _functions_below_ir10() -> ir.Model:
    model = _with_extras(zoo.resnet(depth_blocks=2))
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    ("build", "cuts"),
    [
        (_quantized_gpt, ["layer.0.out"]),
        (_control_flow_with_body_weight, ["proj", "branch"]),
        (_functions_below_ir10, ["layer.0.out"]),
    ],
    ids=["quantization_annotation", "body_initializer", "functions_ir9"],
)
def test_save_split_falls_back_to_the_stage_models_where_direct_differs(tmp_path, build, cuts):
    model = build()
    metadata = _omny_cuts(cuts)
    manifest = save_split(model, tmp_path / "out", len(cuts) + 1, metadata=metadata)
    expected = [ir.to_proto(s) for s in split(model, len(cuts) + 1, metadata=metadata)]
    for i, (got, want) in enumerate(
        zip(_loaded_protos(tmp_path / "out", manifest), expected, strict=True)
    ):
        assert got == want, i
