"""The shape layer (analysis.shapes) and dim expressions, on hand-built graphs and the corpus."""

from __future__ import annotations

import json
import math
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice import omny, plan, split, verify
from onnx_ir_multidevice.analysis.cut_points import analyse_cut_points
from onnx_ir_multidevice.analysis.dim_expressions import parse_dim
from onnx_ir_multidevice.analysis.shapes import (
    ValueShapes,
    batch_symbols,
    example_dims,
    input_symbols,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.runtime.inputs import TensorSpec, generate_inputs
from onnx_ir_multidevice.testing import zoo

CORPUS = Path(__file__).parent / "corpus"
MANIFEST = {e["name"]: e for e in json.loads((CORPUS / "manifest.json").read_text())}


def corpus(name: str) -> ir.Model:
    return ir.load(CORPUS / MANIFEST[name]["file"])


# ---------------------------------------------------------------------------------------------
# Dim expressions: hypothesis against Python arithmetic on Fractions (the oracle)

NAMES = ("seq", "batch", "h32", "past_seq", "p2o.Dim.0")


def _python(tree: tuple) -> str:
    """The expression as Python source over Fractions (the oracle evaluates it)."""
    kind = tree[0]
    if kind == "int":
        return f"Fraction({tree[1]})"
    if kind == "name":
        return f"Fraction(env[{tree[1]!r}])"
    if kind == "neg":
        return f"(-{_python(tree[1])})"
    if kind == "call":
        args = ", ".join(_python(a) for a in tree[2])
        return {
            "floor": f"Fraction(math.floor({args}))",
            "ceil": f"Fraction(math.ceil({args}))",
            "min": f"min({args})",
            "max": f"max({args})",
        }[tree[1]]
    a, b = _python(tree[1]), _python(tree[2])
    if kind == "//":
        return f"Fraction(({a}) // ({b}))"
    return f"(({a}) {kind} ({b}))"


def _text(tree: tuple) -> str:
    """The expression as an exporter would write it (fully parenthesised)."""
    kind = tree[0]
    if kind == "int":
        return str(tree[1])
    if kind == "name":
        return tree[1]
    if kind == "neg":
        return f"-({_text(tree[1])})"
    if kind == "call":
        return f"{tree[1]}({', '.join(_text(a) for a in tree[2])})"
    return f"({_text(tree[1])}){kind}({_text(tree[2])})"


_leaves = st.one_of(
    st.integers(0, 50).map(lambda n: ("int", n)),
    st.sampled_from(NAMES).map(lambda n: ("name", n)),
)
_trees = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "/", "//", "%"]), inner, inner),
        st.tuples(st.just("neg"), inner),
        st.tuples(st.just("call"), st.sampled_from(["floor", "ceil"]), st.tuples(inner)),
        st.tuples(st.just("call"), st.sampled_from(["min", "max"]), st.tuples(inner, inner)),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_trees, st.fixed_dictionaries({n: st.integers(1, 700) for n in NAMES}))
def test_dim_expressions_evaluate_like_python_arithmetic(tree, env):
    parsed = parse_dim(_text(tree))
    assert parsed is not None
    try:
        expected = eval(_python(tree), {"Fraction": Fraction, "math": math, "env": env})  # noqa: S307
    except ZeroDivisionError:
        expected = None
    got = parsed.evaluate(env)
    if expected is None or expected.denominator != 1:
        assert got is None
    else:
        assert got == int(expected)
    names = {leaf[1] for leaf in _leaf_nodes(tree) if leaf[0] == "name"}
    assert parsed.names == names
    assert parsed.evaluate({}) is None or not names


def _leaf_nodes(tree: tuple):
    kind = tree[0]
    if kind in ("int", "name"):
        yield tree
    elif kind == "neg":
        yield from _leaf_nodes(tree[1])
    elif kind == "call":
        for arg in tree[2]:
            yield from _leaf_nodes(arg)
    else:
        yield from _leaf_nodes(tree[1])
        yield from _leaf_nodes(tree[2])


def test_dim_expressions_as_exporters_write_them():
    assert parse_dim("floor(height/2 - 1/2) + 1").evaluate({"height": 640}) == 320
    assert parse_dim("32*h32").evaluate({"h32": 20}) == 640
    assert (
        parse_dim("past_sequence_length + sequence_length").evaluate(
            {"past_sequence_length": 127, "sequence_length": 1}
        )
        == 128
    )
    assert parse_dim("Max(1, s0)").evaluate({"s0": 0}) == 1
    assert parse_dim("s0**2").evaluate({"s0": 7}) == 49
    assert parse_dim("CeilDiv") is not None and parse_dim("CeilDiv").is_symbol
    assert parse_dim("p2o.DynamicDimension.0").names == {"p2o.DynamicDimension.0"}
    assert parse_dim("seq/2").evaluate({"seq": 3}) is None  # not an integer
    assert parse_dim("seq//0").evaluate({"seq": 3}) is None
    for text in ("?", "", "a b", "floor(", "seq)", "2**-1**", "__import__('os')"):
        assert parse_dim(text) is None or parse_dim(text).evaluate({}) is None


# ---------------------------------------------------------------------------------------------
# Input symbols and example dims


def test_input_symbols_name_unnamed_and_negative_dims():
    model = corpus("rapidocr_cls_mobile_v2")  # x: [-1, 3, "?", "?"]
    assert list(input_symbols(model.graph)) == ["x[0]", "x[2]", "x[3]"]
    assert batch_symbols(model.graph) == ["x[0]"]
    assert example_dims(model.graph) == {"x[0]": 1, "x[2]": 224, "x[3]": 224}
    yolo = corpus("yolo_like_dynamo")  # images: [batch, 3, 32*h32, 32*w32]
    assert list(input_symbols(yolo.graph)) == ["batch", "h32", "w32"]
    assert example_dims(yolo.graph) == {"batch": 1, "h32": 7, "w32": 7}
    kv = corpus("gpt2_kv_dynamo")  # a decoding step: 1 new token, 127 cached, a mask of 128
    assert example_dims(kv.graph) == {"batch": 1, "seq": 1, "s53": 128, "past_seq": 127}
    optimum = corpus("gpt2_kv_optimum")
    dims = example_dims(optimum.graph, {"batch_size": 2})
    assert dims == {"batch_size": 2, "sequence_length": 1, "past_sequence_length": 127}


def test_generated_inputs_follow_expressions_and_never_go_negative():
    specs = [
        TensorSpec("x", (-1, 3, "?", "?"), np.dtype(np.float32)),
        TensorSpec("mask", ("batch", "past + seq"), np.dtype(np.int64)),
        TensorSpec("past", ("batch", 4, "past", 16), np.dtype(np.float32)),
        TensorSpec("ids", ("batch", "seq"), np.dtype(np.int64)),
    ]
    arrays = generate_inputs(specs)
    assert arrays["x"].shape == (1, 3, 224, 224)
    assert arrays["mask"].shape == (1, 128) and arrays["ids"].shape == (1, 1)
    assert arrays["past"].shape == (1, 4, 127, 16)
    arrays = generate_inputs(specs, {"x[2]": 48, "x[3]": 192, "seq": 5})
    assert arrays["x"].shape == (1, 3, 48, 192) and arrays["mask"].shape == (1, 132)


# ---------------------------------------------------------------------------------------------
# The shape layer


def _untyped_chain() -> ir.Model:
    """``x [batch, seq, 8]`` -> Reshape([0, -1, 2, 4]) -> Transpose -> Relu, no value_info."""
    x = ir.Value(
        name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", "seq", 8])
    )
    target = ir.Value(name="target", const_value=ir.tensor(np.array([0, -1, 2, 4], np.int64)))
    r, t, y = (ir.Value(name=n) for n in ("r", "t", "y"))
    nodes = [
        ir.Node("", "Reshape", [x, target], outputs=[r], name="reshape"),
        ir.Node("", "Transpose", [r], [ir.AttrInt64s("perm", [0, 2, 1, 3])], outputs=[t], name="t"),
        ir.Node("", "Relu", [t], outputs=[y], name="relu"),
    ]
    graph = ir.Graph([x], [y], nodes=nodes, initializers=[target], opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def test_shape_layer_infers_symbolic_shapes_without_value_info():
    model = _untyped_chain()
    before = ir.to_proto(model).SerializeToString()
    shapes = ValueShapes(model.graph)
    r = model.graph.node("reshape").outputs[0]
    y = model.graph.outputs[0]
    assert shapes.dtype(r) == ir.DataType.FLOAT and shapes.rank(r) == 4
    assert shapes.symbolic(r) == ("batch", "seq", 2, 4)
    assert shapes.symbolic(y) == ("batch", 2, "seq", 4)
    assert shapes.shape(y) is None  # seq is unbound: the size is unknown, never guessed
    assert shapes.estimate(y) == (1, 2, 128, 4)
    assert shapes.unbound == ("seq",)
    bound = ValueShapes(model.graph, {"seq": 10, "batch": 3})
    assert bound.shape(y) == (3, 2, 10, 4) and bound.unbound == ()
    assert ir.to_proto(model).SerializeToString() == before  # never modified
    sizes = ValueSizes(model.graph, {"seq": 10})
    assert sizes.nbytes(y) == 1 * 2 * 10 * 4 * 4 and sizes.static_shape(y) == (-1, 2, -1, 4)


def test_stated_expressions_are_evaluated_and_stale_dims_reinferred():
    model = _untyped_chain()
    r = model.graph.node("reshape").outputs[0]
    r.type = ir.TensorType(ir.DataType.FLOAT)
    r.shape = ir.Shape(["batch", "seq", 2, "4*1"])  # an expression of input symbols: stated
    t = model.graph.node("t").outputs[0]
    t.type = ir.TensorType(ir.DataType.FLOAT)
    t.shape = ir.Shape(["unk__3", -1, "s39", 4])  # stale / exporter-internal: re-inferred
    shapes = ValueShapes(model.graph, {"seq": 6})
    assert shapes.symbolic(r) == ("batch", "seq", 2, "4*1") and shapes.shape(r) == (1, 6, 2, 4)
    assert shapes.symbolic(t) == ("batch", 2, "seq", 4) and shapes.shape(t) == (1, 2, 6, 4)


def test_shape_arithmetic_is_computed_where_onnx_inference_stops():
    # TorchScript computes position ids as Range(0, Shape(ids)[1], 1): ONNX inference leaves
    # the Range (and everything it feeds) unknown; the layer computes it at the bindings.
    model = corpus("gpt2_torchscript")
    shapes = ValueShapes(model.graph, {"seq": 32})
    by_name = {v.name: v for node in model.graph for v in node.outputs}
    assert shapes.shape(by_name["/m/transformer/Range_output_0"]) == (32,)
    assert shapes.shape(by_name["/m/transformer/wpe/Gather_output_0"]) == (1, 32, 64)
    vit = corpus("vit_torchscript")  # the class token Expand: [batch, 65, 64] in truth
    shapes = ValueShapes(vit.graph)
    by_name = {v.name: v for node in vit.graph for v in node.outputs}
    assert shapes.symbolic(by_name["/m/vit/embeddings/Add_output_0"]) == ("batch", 65, 64)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_cut_tensor_of_every_corpus_model_has_a_dtype_and_rank(name):
    model = corpus(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyse_cut_points(model.graph, relaxed=True)
    shapes = analysis.sizes.shapes
    for cut in analysis.candidates:
        for value in (cut.value, *cut.side):
            assert shapes.dtype(value) is not None, value.name
            if _branches_disagree(value) or _unshaped_scan_output(value):
                continue  # only the dtype is fixed by the model
            if name in RANK_UNKNOWABLE:
                continue  # only the dtype is fixed (see RANK_UNKNOWABLE)
            assert shapes.rank(value) is not None, value.name
            symbolic = shapes.symbolic(value)
            assert symbolic is not None and len(symbolic) == shapes.rank(value)


RANK_UNKNOWABLE = {
    # Its decoder reads an If whose then branch gives rank 2 and else branch rank 3: the rank
    # of what follows depends on a runtime condition.
    "silero_vad_half",
    # A hand-written Loop whose body states no output shape: the loop state keeps its initial
    # shape, but what is computed from the scan output is beyond ONNX inference.
    "loop_scan_helper",
}


def _unshaped_scan_output(value: ir.Value) -> bool:
    """A Loop's scan output whose body output states no shape (rank depends on the body)."""
    node = value.producer()
    if node is None or node.op_type != "Loop" or value.index() < len(node.inputs) - 2:
        return False
    return node.attributes["body"].value.outputs[1 + value.index()].shape is None


def _branches_disagree(value: ir.Value) -> bool:
    node = value.producer()
    if node is None or node.op_type != "If":
        return False
    ranks = {
        None if o.shape is None else len(o.shape)
        for key in ("then_branch", "else_branch")
        for o in [node.attributes[key].value.outputs[value.index()]]
    }
    return len(ranks) > 1


def test_if_with_branches_of_different_ranks_gives_its_dtype():
    model = corpus("silero_vad_half")
    value = next(v for n in model.graph for v in n.outputs if v.name == "/decoder/If_output_0")
    assert _branches_disagree(value)
    shapes = ValueShapes(model.graph)
    assert shapes.dtype(value) == ir.DataType.FLOAT and shapes.rank(value) is None


def test_planning_dims_are_recorded_and_read_back(tmp_path):
    from onnx_ir_multidevice.planner.planning import plan_model

    model = zoo.synthetic_transformer(2)
    result = plan_model(model, shards=[2], dims={"seq": 16})
    assert dict(result.planning_dims) == {"seq": 16, "batch": 1}
    assert omny.read_planning_dims(model) == {"batch": 1, "seq": 16}


@pytest.mark.parametrize(
    "build",
    [
        lambda: zoo.synthetic_transformer(3),
        lambda: zoo.gpt(layers=2),
        lambda: zoo.bert(layers=2),
        lambda: corpus("bert_torchscript"),
        lambda: corpus("bert_fp16"),
        lambda: corpus("mlp_helper_novi"),
    ],
    ids=["synthetic_transformer", "zoo_gpt", "zoo_bert", "bert_torchscript", "bert_fp16", "mlp"],
)
def test_fast_propagation_agrees_with_onnx_inference(build):
    model = build()
    fast = ValueShapes(model.graph, {"batch": 2})
    assert fast._propagated() is not None  # these graphs take the fast path
    reference = ValueShapes(model.graph, {"batch": 2})
    reference._fast = None  # ONNX shape inference only
    for node in model.graph:
        for value in node.outputs:
            assert fast._info(value) == reference._info(value), value.name


def _repeated_ops_model() -> ir.Model:
    """The same ops on the same inputs, again and again, with attributes and targets that differ
    (the fast propagation reuses a node's result for a later node with the same op, attributes
    and input records: it must never reuse it across different ones)."""
    x = ir.Value(
        name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", "seq", 8])
    )
    tape = ir.tape.Tape()
    target_a = tape.initializer(ir.tensor(np.array([0, -1, 2, 4], np.int64), name="target_a"))
    target_b = tape.initializer(ir.tensor(np.array([0, -1, 4, 2], np.int64), name="target_b"))
    target_c = tape.initializer(ir.tensor(np.array([0, -1, 4, 2], np.int64), name="target_c"))
    outputs = [
        tape.op("Transpose", [x], attributes={"perm": [0, 2, 1]}, output=ir.Value(name="t1")),
        tape.op("Transpose", [x], attributes={"perm": [2, 0, 1]}, output=ir.Value(name="t2")),
        tape.op("Transpose", [x], attributes={"perm": [0, 2, 1]}, output=ir.Value(name="t3")),
        tape.op("Reshape", [x, target_a], output=ir.Value(name="r1")),
        tape.op("Reshape", [x, target_b], output=ir.Value(name="r2")),
        tape.op("Reshape", [x, target_c], output=ir.Value(name="r3")),
        tape.op("ReduceSum", [x], attributes={"keepdims": 1}, output=ir.Value(name="s1")),
        tape.op("ReduceSum", [x], attributes={"keepdims": 0}, output=ir.Value(name="s2")),
        tape.op("Shape", [x], attributes={"start": 1}, output=ir.Value(name="h1")),
        tape.op("Shape", [x], attributes={"start": 2}, output=ir.Value(name="h2")),
    ]
    graph = ir.Graph(
        [x],
        outputs,
        nodes=tape.nodes,
        initializers=tape.initializers,
        opset_imports={"": 18},
        name="repeated",
    )
    return ir.Model(graph, ir_version=10)


def test_fast_propagation_reuses_results_only_for_identical_nodes():
    model = _repeated_ops_model()
    fast = ValueShapes(model.graph, {"seq": 6})
    assert fast._propagated() is not None
    reference = ValueShapes(model.graph, {"seq": 6})
    reference._fast = None  # ONNX shape inference only
    for value in model.graph.outputs:
        assert fast._info(value) == reference._info(value), value.name
    shapes = {v.name: fast.shape(v) for v in model.graph.outputs}
    assert shapes["t1"] == shapes["t3"] == (1, 8, 6) and shapes["t2"] == (8, 1, 6)
    assert shapes["r1"] == (1, 6, 2, 4) and shapes["r2"] == shapes["r3"] == (1, 6, 4, 2)
    assert shapes["s1"] == (1, 1, 1) and shapes["s2"] == ()
    assert shapes["h1"] == (2,) and shapes["h2"] == (1,)


# ---------------------------------------------------------------------------------------------
# A dim equal at the probe and doubled bindings is not static when a third binding moves it


def _strided_audio_model() -> ir.Model:
    """Conv kernel 256, stride 256, pads 64: frames = floor((samples + 128 - 256) / 256) + 1,
    1 at 128 and 256 samples (the probe and doubled bindings), 2 at 384."""
    x = ir.Value(
        name="audio", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", 1, "samples"])
    )
    weight = ir.Value(name="w", const_value=ir.tensor(np.ones((4, 1, 256), np.float32)))
    tape = ir.tape.Tape()
    frames = tape.op(
        "Conv",
        [x, weight],
        attributes={"strides": [256], "pads": [64, 64]},
        output=ir.Value(name="frames"),
    )
    y = tape.op("Relu", [frames], output=ir.Value(name="y"))
    y.type, y.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(["batch", 4, "n"])
    graph = ir.Graph(
        [x], [y], nodes=tape.nodes, initializers=[weight], opset_imports={"": 17}, name="g"
    )
    return ir.Model(graph, ir_version=9)


def test_inferred_static_dim_is_checked_at_a_third_binding():
    model = _strided_audio_model()
    frames = model.graph.node(0).outputs[0]
    shapes = ValueShapes(model.graph)
    assert shapes.estimate(frames) == (1, 4, 1)  # at the probe dims (128 samples)
    # 1 frame at 128 and 256 samples, 2 at 384: dynamic, not a static 1.
    assert shapes.symbolic(frames) == ("batch", 4, None)
    assert shapes.onnx_shape(frames).dims[2] != 1
    # A stage that starts at the frames runs at a length the probes did not see.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # memory figures are lower bounds (samples unbound)
        meta = plan(model, shards=[2], assign_names=True)
    omny.write(model, meta)
    stages = split(model, 2)
    assert stages[1].graph.inputs[0].shape.dims[2] != 1
    audio = np.random.default_rng(0).standard_normal((1, 1, 1000)).astype(np.float32)
    assert verify(model, 2, {"audio": audio}).ok
