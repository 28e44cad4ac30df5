"""Shape reads of activations proven equal to graph-input dims: replicable, recomputed by the split.

TorchScript GPT-2 reads the sequence length from ``Shape`` of the token embedding (an
activation) and builds from it the causal mask and a shape vector every layer reads. The
shape layer proves that read equal to ``input_ids``'s dims, so it no longer blocks cuts,
and a stage that needs it recomputes it from ``input_ids`` (issue 17, section 3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice import plan, save_split, split_at
from onnx_ir_multidevice.analysis import TensorClass, classify_values, find_cut_points
from onnx_ir_multidevice.analysis.boundaries import boundary_crossings
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.runtime import verify_stages

CORPUS = Path(__file__).parent / "corpus"
F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64
# The end of the first of GPT-2's two layers, and the embedding whose Shape every layer reads.
BETWEEN_LAYERS = "/m/transformer/h.0/Add_1_output_0"
EMBEDDING = "/m/transformer/wte/Gather_output_0"


def _gpt2(exporter: str) -> ir.Model:
    return ir.load(CORPUS / f"gpt2_{exporter}.onnx")


def _strict_names(graph: ir.Graph) -> list[str]:
    return [c.value.name for c in find_cut_points(graph) if c.strict]


def test_gpt2_torchscript_has_as_many_strict_cuts_as_its_dynamo_twin():
    torchscript = _strict_names(_gpt2("torchscript").graph)
    # Before shape reads were proven: 2 (the final LayerNorm and the logits reshape).
    assert len(torchscript) == len(_strict_names(_gpt2("dynamo").graph)) == 7
    assert BETWEEN_LAYERS in torchscript
    assert "/m/transformer/h.1/Add_output_0" in torchscript  # inside the second layer


def test_gpt2_shape_of_the_embedding_is_replicable():
    graph = _gpt2("torchscript").graph
    classes = classify_values(graph)
    by_name = {v.name: c for v, c in classes.items()}
    assert by_name[EMBEDDING] is TensorClass.ACTIVATION
    # Shape(embedding) and the causal mask and shape vector computed from it.
    for name in (
        "/m/transformer/Shape_2_output_0",
        "/m/transformer/Where_1_output_0",
        "/m/transformer/Concat_4_output_0",
    ):
        assert by_name[name] is TensorClass.REPLICABLE, name


def _feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq)
    return {
        "input_ids": rng.integers(0, 1000, size=(batch, seq)).astype(np.int64),
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
    }


def test_split_between_gpt2_layers_recomputes_the_shape_read_from_input_ids():
    model = _gpt2("torchscript")
    stages = split_at(model, [BETWEEN_LAYERS])
    second = stages[1].graph
    # Stage 1 receives the one activation and reads the graph inputs itself: neither the
    # embedding nor the mask or shape vector made from it crosses.
    assert {v.name for v in second.inputs} == {BETWEEN_LAYERS, "input_ids", "attention_mask"}
    assert [v.name for v in stages[0].graph.outputs] == [BETWEEN_LAYERS]
    shape_of_ids = [n for n in second if n.op_type == "Shape" and n.inputs[0].name == "input_ids"]
    recomputed = [n for n in shape_of_ids if "/from_inputs/" in (n.name or "")]
    assert recomputed, [n.name for n in shape_of_ids]
    assert {n.attributes["end"].as_int() - n.attributes["start"].as_int() for n in recomputed} <= {
        1,
        2,
    }
    # Symbolic, not baked: sequence lengths other than the planning dims' 128 (and batch 3).
    for seq in (1, 5, 37, 128):
        report = verify_stages(model, stages, _feeds(3, seq))
        assert report.ok, (seq, report)


def test_planned_gpt2_split_written_to_files_runs_at_other_lengths(tmp_path):
    model = _gpt2("torchscript")
    metadata = plan(model, shards=[3])
    manifest = save_split(model, tmp_path / "split", 3, metadata=metadata)
    sessions = [
        ort.InferenceSession(str(tmp_path / "split" / s.file), providers=["CPUExecutionProvider"])
        for s in manifest.stages
    ]
    whole = ort.InferenceSession(str(CORPUS / "gpt2_torchscript.onnx"))
    later_inputs = {i.name for s in sessions[1:] for i in s.get_inputs()}
    assert EMBEDDING not in later_inputs
    for seq in (2, 19):
        env = dict(_feeds(2, seq))
        expected = whole.run(None, env)
        for session in sessions:
            names = [o.name for o in session.get_outputs()]
            env.update(
                zip(
                    names,
                    session.run(None, {i.name: env[i.name] for i in session.get_inputs()}),
                    strict=True,
                )
            )
        got = [env[o.name] for o in whole.get_outputs()]
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Not proven: the old rules


def _nonzero_graph() -> ir.Graph:
    """``Shape`` of an activation of data-dependent size (``NonZero``), and of one of
    input-dim size, both feeding a value read after a heavy op."""
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape(["batch", 8]))
    w = ir.Value(name="w", type=ir.TensorType(F32), shape=ir.Shape([8, 8]))
    w.const_value = ir.tensor(np.ones((8, 8), np.float32))
    h = ir.node("MatMul", [x, w], name="mm")
    h.outputs[0].name = "h"
    nz = ir.node("NonZero", [h.outputs[0]], name="nonzero")
    nz.outputs[0].name = "nz"
    shape_nz = ir.node("Shape", [nz.outputs[0]], name="shape_nz")
    shape_nz.outputs[0].name = "shape_nz"
    shape_h = ir.node("Shape", [h.outputs[0]], name="shape_h")
    shape_h.outputs[0].name = "shape_h"
    nodes = [h, nz, shape_nz, shape_h]
    return ir.Graph(
        [x],
        [shape_nz.outputs[0], shape_h.outputs[0]],
        nodes=nodes,
        initializers=[w],
        opset_imports={"": 18},
    )


def test_shape_of_a_data_dependent_size_stays_an_activation():
    classes = {v.name: c for v, c in classify_values(_nonzero_graph()).items()}
    assert classes["nz"] is TensorClass.ACTIVATION
    assert classes["shape_nz"] is TensorClass.ACTIVATION  # NonZero's count: no input dim
    assert classes["shape_h"] is TensorClass.REPLICABLE  # [batch, 8]: input_ids-like


def test_shape_of_a_data_dependent_reshape_stays_an_activation():
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape(["batch", 8]))
    w = ir.Value(name="w", type=ir.TensorType(F32), shape=ir.Shape([8, 8]))
    w.const_value = ir.tensor(np.ones((8, 8), np.float32))
    h = ir.node("MatMul", [x, w], name="mm")
    target = ir.node("Cast", [h.outputs[0]], attributes={"to": int(I64)}, name="target")
    flat = ir.node("ReduceMax", [target.outputs[0]], attributes={"keepdims": 0}, name="flat")
    shape1 = ir.node("Unsqueeze", [flat.outputs[0], ir.Value(name="axes")], name="as_shape")
    reshaped = ir.node("Reshape", [h.outputs[0], shape1.outputs[0]], name="reshape")
    shape_r = ir.node("Shape", [reshaped.outputs[0]], name="shape_r")
    for node in (h, target, flat, shape1, reshaped, shape_r):
        node.outputs[0].name = node.name
    axes = shape1.inputs[1]
    axes.const_value = ir.tensor(np.asarray([0], np.int64))
    axes.type, axes.shape = ir.TensorType(I64), ir.Shape([1])
    graph = ir.Graph(
        [x],
        [shape_r.outputs[0]],
        nodes=[h, target, flat, shape1, reshaped, shape_r],
        initializers=[w, axes],
        opset_imports={"": 18},
    )
    classes = {v.name: c for v, c in classify_values(graph).items()}
    assert classes["reshape"] is TensorClass.ACTIVATION
    assert classes["shape_r"] is TensorClass.ACTIVATION


# ---------------------------------------------------------------------------------------------
# Random graphs with a symbolic batch: the cut finder agrees with the brute-force oracle,
# and every strict cut splits into stages that compute what the whole model computes.


@st.composite
def _graphs(draw) -> ir.Model:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape(["batch", 8]))
    floats: list[ir.Value] = [x]
    ints: list[ir.Value] = []
    nodes: list[ir.Node] = []
    inits: list[ir.Value] = []

    def emit(op, inputs, **attrs) -> ir.Value:
        node = ir.node(op, inputs, attributes=attrs, name=f"n{len(nodes)}")
        node.outputs[0].name = f"v{len(nodes)}"
        nodes.append(node)
        return node.outputs[0]

    def weight() -> ir.Value:
        value = ir.Value(name=f"w{len(inits)}", type=ir.TensorType(F32), shape=ir.Shape([8, 8]))
        value.const_value = ir.tensor(rng.standard_normal((8, 8)).astype(np.float32))
        inits.append(value)
        return value

    def pick(pool):
        return pool[-1 - draw(st.integers(0, min(3, len(pool) - 1)))]

    floats.append(emit("MatMul", [x, weight()]))
    for _ in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["matmul", "relu", "add", "shape", "size", "reshape"]))
        if op == "matmul":
            floats.append(emit("MatMul", [pick(floats), weight()]))
        elif op == "relu":
            floats.append(emit("Relu", [pick(floats)]))
        elif op == "add":
            floats.append(emit("Add", [pick(floats), pick(floats)]))
        elif op == "shape":
            ints.append(emit("Shape", [pick(floats)]))
        elif op == "size":  # a scalar read into the float computation
            size = emit("Cast", [emit("Size", [pick(floats)])], to=int(F32))
            floats.append(emit("Mul", [pick(floats), size]))
        elif ints:
            floats.append(emit("Reshape", [pick(floats), pick(ints)]))
    # Every value nothing reads is an output (no dead code: each stage produces something).
    read = {v for node in nodes for v in node.inputs}
    outputs = [v for node in nodes for v in node.outputs if v not in read]
    graph = ir.Graph([x], outputs, nodes=nodes, initializers=inits, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


def _oracle(graph: ir.Graph) -> set[str]:
    classes = classify_values(graph)
    found = set()
    for node in graph:
        value = node.outputs[0]
        if classes[value] is not TensorClass.ACTIVATION:
            continue
        stages = assign_stages(graph, [value], classes=classes)
        if 1 not in stages.values():
            continue
        (boundary,) = boundary_crossings(graph, stages, classes=classes, num_stages=2)
        if boundary.activations == (value,):
            found.add(value.name)
    return found


def _run(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    results = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    return dict(zip(names, results, strict=True))


@settings(max_examples=40, deadline=None)
@given(_graphs())
def test_strict_cuts_match_the_oracle_and_split_exactly(model):
    graph = model.graph
    cuts = find_cut_points(graph)
    assert {c.value.name for c in cuts} == _oracle(graph)
    for batch in (1, 3):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)}
        expected = _run(model, feeds)
        for cut in cuts:
            env = dict(feeds)
            for stage in split_at(model, [cut.value.name]):
                env.update(_run(stage, env))
            for name, array in expected.items():
                np.testing.assert_allclose(env[name], array, rtol=1e-5, atol=1e-5)
