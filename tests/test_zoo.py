"""The zoo models run in onnxruntime, have the declared shapes and the expected structure."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.testing import zoo

BATCH = 3


def _feeds(model: ir.Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.inputs:
        shape = tuple(BATCH if isinstance(d, ir.SymbolicDim) else d for d in value.shape)
        if value.dtype == ir.DataType.INT64:
            feeds[value.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    if "attention_mask" in feeds:
        mask = np.ones(feeds["attention_mask"].shape, dtype=np.int64)
        mask[0, -4:] = 0  # padding on the first sequence
        feeds["attention_mask"] = mask
    return feeds


def _session(model: ir.Model, *, all_values: bool = False) -> ort.InferenceSession:
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    if all_values:
        known = {o.name for o in proto.graph.output}
        for node in model.graph:
            for value in node.outputs:
                if value.name not in known:
                    info = onnx.helper.make_empty_tensor_value_info(value.name)
                    proto.graph.output.append(info)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _expected(value: ir.Value) -> tuple[int, ...]:
    return tuple(BATCH if isinstance(d, ir.SymbolicDim) else d for d in value.shape)


BUILDERS: dict[str, Callable[[], ir.Model]] = {
    "resnet": zoo.resnet,
    "mlp": zoo.mlp,
    "bert": zoo.bert,
    "gpt": zoo.gpt,
    "gpt_untied": lambda: zoo.gpt(tie_embeddings=False),
    "vit": zoo.vit,
    "control_flow": zoo.control_flow,
    "synthetic_chain": lambda: zoo.synthetic_chain(32),
}

OUTPUTS = {
    "resnet": {"logits": (BATCH, 10)},
    "mlp": {"logits": (BATCH, 10)},
    "bert": {"last_hidden_state": (BATCH, 16, 64)},
    "gpt": {"logits": (BATCH, 16, 100)},
    "gpt_untied": {"logits": (BATCH, 16, 100)},
    "vit": {"logits": (BATCH, 10)},
    "control_flow": {"output": (BATCH, 8)},
    "synthetic_chain": {"block.7.out": (BATCH, 8)},
}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def built(request) -> tuple[str, ir.Model]:
    return request.param, BUILDERS[request.param]()


def test_runs_with_declared_output_shapes(built):
    name, model = built
    results = _session(model).run(None, _feeds(model))
    got = {o.name: r.shape for o, r in zip(model.graph.outputs, results, strict=True)}
    assert got == OUTPUTS[name]
    for r in results:
        assert np.isfinite(r).all()


def test_every_value_is_typed_and_its_shape_matches_onnxruntime(built):
    _, model = built
    session = _session(model, all_values=True)
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, _feeds(model)), strict=True))
    declared = {v.name: v for node in model.graph for v in node.outputs}
    assert set(declared) <= set(values)
    for value_name, value in declared.items():
        assert value.dtype is not None, value_name
        assert value.shape is not None, value_name
        assert values[value_name].shape == _expected(value), value_name
        assert values[value_name].dtype == value.dtype.numpy(), value_name


def test_batch_is_symbolic_and_other_dims_fixed(built):
    _, model = built
    for value in (*model.graph.inputs, *model.graph.outputs):
        dims = list(value.shape)
        assert isinstance(dims[0], ir.SymbolicDim) and dims[0].value == "batch"
        assert all(isinstance(d, int) for d in dims[1:])


def test_names_unique_and_small_deterministic_weights(built):
    name, model = built
    nodes = [n.name for n in model.graph]
    assert all(nodes) and len(set(nodes)) == len(nodes)
    total = sum(v.const_value.nbytes for v in model.graph.initializers.values())
    assert 0 < total < 2 * 1024 * 1024
    again = BUILDERS[name]()
    assert ir.to_proto(again).SerializeToString() == ir.to_proto(model).SerializeToString()


def test_seed_changes_weights():
    a = ir.to_proto(zoo.gpt(seed=1)).SerializeToString()
    b = ir.to_proto(zoo.gpt(seed=2)).SerializeToString()
    assert a != b


def test_batch_size_one_and_different_batches_agree():
    model = zoo.resnet(depth_blocks=2)
    session = _session(model)
    x = np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)
    (all4,) = session.run(None, {"image": x})
    (one,) = session.run(None, {"image": x[2:3]})
    np.testing.assert_allclose(all4[2:3], one, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("builder", "layers"),
    [(zoo.resnet, 5), (zoo.bert, 3), (zoo.gpt, 3), (zoo.vit, 3)],
)
def test_layer_outputs_named_per_block(builder, layers):
    kwargs = {"depth_blocks": layers} if builder is zoo.resnet else {"layers": layers}
    model = builder(**kwargs)
    produced = {v.name: n for n in model.graph for v in n.outputs}
    for i in range(layers):
        assert produced[f"layer.{i}.out"].name == f"layer.{i}.out"
    assert f"layer.{layers}.out" not in produced


def test_resnet_structure():
    model = zoo.resnet(depth_blocks=4, channels=8)
    ops = [n.op_type for n in model.graph]
    assert ops.count("Conv") == 1 + 4 * 2 + 1  # stem, two per block, one projection
    assert "BatchNormalization" not in ops
    assert model.graph.node("layer.2.downsample").op_type == "Conv"
    assert list(model.graph.node("layer.3.out").outputs[0].shape)[1:] == [16, 16, 16]


def test_bert_structure_and_mask_matters():
    model = zoo.bert(layers=2)
    ops = [n.op_type for n in model.graph]
    assert ops.count("LayerNormalization") == 1 + 2 * 2
    assert ops.count("Softmax") == 2
    assert ops.count("Erf") == 2
    gather = model.graph.node("embeddings.word")
    assert gather.op_type == "Gather"
    assert gather.inputs[0].name == "embeddings.word.weight"
    assert gather.inputs[1].name == "input_ids"
    session = _session(model)
    feeds = _feeds(model)
    (masked,) = session.run(None, feeds)
    feeds["attention_mask"] = np.ones_like(feeds["attention_mask"])
    (unmasked,) = session.run(None, feeds)
    assert not np.allclose(masked[0], unmasked[0])  # padded sequence changes
    np.testing.assert_allclose(masked[1:], unmasked[1:], rtol=1e-5, atol=1e-6)


def test_gpt_side_activations_cross_layers_and_head_is_tied():
    model = zoo.gpt(layers=3)
    graph = model.graph
    hidden_shape = graph.node("hidden_shape")
    assert hidden_shape.op_type == "Shape"
    assert hidden_shape.inputs[0].name == "embeddings"  # shape of an activation
    future = graph.node("causal.future").outputs[0]
    assert future.dtype == ir.DataType.BOOL
    layers_using_mask = {u.node.name.split(".")[1] for u in future.uses()}
    assert layers_using_mask == {"0", "1", "2"}
    layers_using_shape = {
        u.node.name.split(".")[1]
        for u in hidden_shape.outputs[0].uses()
        if u.node.name.startswith("layer.")
    }
    assert layers_using_shape == {"0", "1", "2"}
    wte = graph.initializers["wte.weight"]
    assert {u.node.name for u in wte.uses()} == {"wte", "lm_head.tied_weight"}
    untied = zoo.gpt(layers=3, tie_embeddings=False).graph
    assert {u.node.name for u in untied.initializers["wte.weight"].uses()} == {"wte"}
    assert "lm_head.weight" in untied.initializers


def test_gpt_is_causal():
    model = zoo.gpt(layers=2)
    session = _session(model)
    ids = np.random.default_rng(3).integers(0, 100, (1, 16)).astype(np.int64)
    (a,) = session.run(None, {"input_ids": ids})
    ids2 = ids.copy()
    ids2[0, 10:] = (ids2[0, 10:] + 1) % 100
    (b,) = session.run(None, {"input_ids": ids2})
    np.testing.assert_allclose(a[0, :10], b[0, :10], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[0, 10:], b[0, 10:])


def test_vit_structure():
    model = zoo.vit(layers=2, patch=8, image=32)
    assert list(model.graph.node("tokens").outputs[0].shape)[1:] == [17, 64]
    assert model.graph.node("patch_embed").op_type == "Conv"


def test_control_flow_bodies_read_outer_scope():
    model = zoo.control_flow()
    graph = model.graph
    if_node, loop_node = graph.node("branch"), graph.node("loop")
    assert (if_node.op_type, loop_node.op_type) == ("If", "Loop")
    proj = graph.node("proj").outputs[0]
    outer_users = {u.node.name for u in proj.uses()}
    assert {"branch.then", "branch.else", "loop.body.add_proj"} <= outer_users
    for user in proj.uses():
        if user.node.name != "cond.sum":
            assert user.node.graph is not graph  # a subgraph node reads a main-graph value
    for sub in (
        if_node.attributes["then_branch"].as_graph(),
        loop_node.attributes["body"].as_graph(),
    ):
        assert any(inp.graph is graph for node in sub for inp in node.inputs if inp is not None)

    session = _session(model)
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    (out,) = session.run(None, {"x": x})
    # Reference in numpy.
    init = {k: v.const_value.numpy() for k, v in graph.initializers.items()}
    h = x @ init["proj.weight"]
    acc = h + init["branch.bias"] if h.sum() > 0 else h - init["branch.bias"]
    for _ in range(int(init["loop.trip_count"])):
        acc = np.tanh(acc @ init["loop.weight"] + h)
    np.testing.assert_allclose(out, acc + x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("num_nodes", "block"), [(1, 4), (7, 4), (12, 3), (9, 2)])
def test_synthetic_chain_exact_node_count_and_runs(num_nodes, block):
    model = zoo.synthetic_chain(num_nodes, block=block)
    assert len(model.graph) == num_nodes
    (out,) = _session(model).run(None, _feeds(model))
    assert out.shape == (BATCH, 8)


def _chain_cpu_seconds(num_nodes: int) -> float:
    # This thread's CPU time: neither other processes nor other threads of this one count (late
    # in the suite, threads that earlier tests left to wind down made process_time read 13x for
    # 4x the nodes). The collector is paused: its full scans of everything the suite's process
    # holds are not the builder's cost.
    gc.collect()
    with gc_paused():
        start = time.thread_time()
        model = zoo.synthetic_chain(num_nodes)
        elapsed = time.thread_time() - start
    assert len(model.graph) == num_nodes
    return elapsed


def test_synthetic_chain_is_linear():
    assert zoo.synthetic_chain(20_000).graph.node("block.4999.out").op_type == "Add"
    small = min(_chain_cpu_seconds(5_000) for _ in range(2))
    large = min(_chain_cpu_seconds(20_000) for _ in range(2))
    # 4x the nodes: about 4x the CPU time when linear, 16x when quadratic.
    assert large < 8 * small + 0.05, (small, large)


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of heads"):
        zoo.gpt(hidden=30, heads=4)
    with pytest.raises(ValueError, match="multiple of patch"):
        zoo.vit(image=30, patch=8)
    with pytest.raises(ValueError, match="num_nodes"):
        zoo.synthetic_chain(0)
