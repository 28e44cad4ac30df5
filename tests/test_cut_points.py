"""Tests of cut-point discovery against a brute-force oracle built on assign_stages."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice import split_at
from onnx_ir_multidevice.analysis.boundaries import boundary_crossings
from onnx_ir_multidevice.analysis.cut_points import (
    analyse_cut_points,
    find_cut_points,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass, classify_values
from onnx_ir_multidevice.testing import zoo

F32 = ir.DataType.FLOAT
I64 = ir.DataType.INT64


# ---------------------------------------------------------------------------------------
# Oracle


def oracle(graph: ir.Graph, *, relaxed: bool, limit: int) -> dict[str, tuple[str, ...]]:
    """Cut tensor name -> sorted side names, from assign_stages + boundary_crossings.

    A value whose dtype is unknown (the random graphs type every value but the outputs of
    ``Opaque``, an op of an unknown domain) is no cut: no stage could take it as an input (as
    a side activation its size is unknown too).
    """
    classes = classify_values(graph)
    sizes = ValueSizes(graph)
    result = {}
    for node in graph:
        for value in node.outputs:
            if classes[value] is not TensorClass.ACTIVATION:
                continue
            stages = assign_stages(graph, [value], classes=classes)
            if 1 not in stages.values():
                continue
            (boundary,) = boundary_crossings(graph, stages, classes=classes, num_stages=2)
            crossing = boundary.activations
            if value not in crossing:
                continue
            if sizes.dtype(value) is None:  # a stage could not take it as an input
                continue
            side = [v for v in crossing if v is not value]
            if side and not relaxed:
                continue
            side_bytes = [sizes.estimate_nbytes(v) for v in side]  # at the probe dims
            if any(n is None for n in side_bytes) or sum(side_bytes) > limit:
                continue
            result[value.name] = tuple(sorted(v.name for v in side))
    return result


def found(graph: ir.Graph, *, relaxed: bool, limit: int) -> dict[str, tuple[str, ...]]:
    cuts = find_cut_points(graph, relaxed=relaxed, side_limit_bytes=limit)
    return {c.value.name: tuple(sorted(v.name for v in c.side)) for c in cuts}


# ---------------------------------------------------------------------------------------
# Random graphs: residuals, side branches, shape vectors, multi-output nodes, constants,
# dead nodes, several outputs.

OPS = (
    *("matmul", "relu", "add", "shape", "reshape") * 2,
    *("split", "const", "tconst", "input_op", "opaque"),
)


@st.composite
def random_graphs(draw) -> ir.Graph:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=ir.Shape([1, 8]))
    y = ir.Value(name="y", type=ir.TensorType(F32), shape=ir.Shape([1, 8]))
    nodes: list[ir.Node] = []
    inits: list[ir.Value] = []
    floats: list[ir.Value] = [x, y]
    ints: list[ir.Value] = []
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def emit(op: str, inputs, n_out=1, shape=(1, 8), dtype=F32, attrs=None) -> list[ir.Value]:
        outs = [
            ir.Value(name=fresh("v"), type=ir.TensorType(dtype), shape=ir.Shape(shape))
            for _ in range(n_out)
        ]
        node = ir.Node("", op, inputs, attributes=attrs or (), outputs=outs, name=fresh(op))
        nodes.append(node)
        return outs

    def weight(shape) -> ir.Value:
        data = rng.standard_normal(shape).astype(np.float32)
        value = ir.Value(name=fresh("w"), const_value=ir.tensor(data))
        value.shape = ir.Shape(shape)
        value.type = ir.TensorType(F32)
        inits.append(value)
        return value

    def pick(pool):
        # Prefer recent values (chains), sometimes far ones (residuals / side branches).
        if draw(st.booleans()):
            return pool[-1 - draw(st.integers(0, min(2, len(pool) - 1)))]
        return pool[draw(st.integers(0, len(pool) - 1))]

    floats += emit("MatMul", [x, weight((8, 8))])
    for _ in range(draw(st.integers(0, 18))):
        op = draw(st.sampled_from(OPS))
        if op == "matmul":
            floats += emit("MatMul", [pick(floats), weight((8, 8))])
        elif op == "relu":
            floats += emit("Relu", [pick(floats)])
        elif op == "add":
            floats += emit("Add", [pick(floats), pick(floats)])
        elif op == "shape":
            ints += emit("Shape", [pick(floats)], shape=(2,), dtype=I64)
        elif op == "reshape" and ints:
            floats += emit("Reshape", [pick(floats), pick(ints)])
        elif op == "split":
            floats += emit("Split", [pick(floats)], n_out=2, attrs=[ir.AttrInt64("num_outputs", 2)])
        elif op == "const":
            data = rng.standard_normal((1, 8)).astype(np.float32)
            floats += emit("Constant", [], attrs=[ir.AttrTensor("value", ir.tensor(data))])
        elif op == "tconst":
            floats += emit("Transpose", [weight((8, 8))], shape=(8, 8))
        elif op == "input_op":
            floats += emit("Sigmoid", [draw(st.sampled_from([x, y]))])
        elif op == "opaque":  # an op of an unknown domain: its output type is unknowable
            out = ir.Value(name=fresh("v"))
            nodes.append(ir.Node("example.custom", "Opaque", [pick(floats)], outputs=[out]))
            floats.append(out)
    produced = [v for n in nodes for v in n.outputs]
    outputs = [produced[-1]] if produced else [x]
    extra = draw(st.lists(st.integers(0, max(0, len(produced) - 1)), max_size=2))
    for i in extra:
        if produced and produced[i] not in outputs:
            outputs.append(produced[i])
    return ir.Graph([x, y], outputs, nodes=nodes, initializers=inits, opset_imports={"": 18})


@settings(max_examples=150, deadline=None)
@given(random_graphs(), st.sampled_from([0, 16, 40, 1 << 20]))
def test_matches_oracle_on_random_graphs(graph, limit):
    assert found(graph, relaxed=False, limit=limit) == oracle(graph, relaxed=False, limit=limit)
    assert found(graph, relaxed=True, limit=limit) == oracle(graph, relaxed=True, limit=limit)


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_chain_cuts_split_the_planning_order(graph):
    """Every chain cut feeds exactly the suffix of the planning order from its boundary."""
    analysis = analyse_cut_points(graph, relaxed=True, side_limit_bytes=64)
    assert list(analysis.boundaries) == sorted(set(analysis.boundaries))
    for cut, boundary in zip(analysis.chain, analysis.boundaries, strict=True):
        stages = assign_stages(graph, [cut.value], classes=analysis.classes)
        after = {n for n in analysis.order if stages[n] == 1}
        assert after == set(analysis.order[boundary:])


# ---------------------------------------------------------------------------------------
# Zoo models


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (zoo.resnet(depth_blocks=2), {"layer.0.out", "layer.1.out", "pool", "flatten"}),
        (zoo.bert(layers=2), {"layer.0.out", "layer.1.attn.norm", "embeddings.norm"}),
        (zoo.vit(layers=2), {"layer.0.out", "layer.1.out", "embeddings", "norm"}),
    ],
)
def test_zoo_layer_outputs_are_strict_cuts(model, expected):
    cuts = find_cut_points(model.graph)
    names = {c.value.name for c in cuts}
    assert expected <= names
    assert all(c.strict and c.bytes and c.node.outputs[0] is c.value for c in cuts)
    assert [c.position for c in cuts] == sorted(c.position for c in cuts)
    assert names == set(oracle(model.graph, relaxed=False, limit=0))


def test_gpt_side_activations_need_relaxed_cuts():
    model = zoo.gpt(layers=4)
    strict = find_cut_points(model.graph)
    relaxed = find_cut_points(model.graph, relaxed=True, side_limit_bytes=4096)
    strict_names = {c.value.name for c in strict}
    # The causal mask, sliced from the attn.bias buffer, crosses every layer but the last: no
    # strict cut there. The shape vectors (Shape(embeddings), proven equal to input_ids' dims
    # and the hidden size) are recomputed on each side: they are not side tensors.
    assert not {"layer.0.out", "layer.1.out", "layer.2.out"} & strict_names
    assert strict_names == set(oracle(model.graph, relaxed=False, limit=0))
    by_name = {c.value.name: c for c in relaxed}
    for i in range(3):
        cut = by_name[f"layer.{i}.out"]
        assert not cut.strict
        assert [v.name for v in cut.side] == ["causal.future"]
        assert cut.bytes == 1 * 16 * 64 * 4 + 16 * 16  # the hidden state and the bool mask
    assert len(relaxed) >= 3 * 3
    assert set(by_name) == set(oracle(model.graph, relaxed=True, limit=4096))


def test_control_flow_never_cuts_inside_bodies():
    model = zoo.control_flow()
    cuts = find_cut_points(model.graph, relaxed=True)
    main_values = {v for n in model.graph for v in n.outputs}
    assert cuts and all(c.value in main_values for c in cuts)
    names = {c.value.name for c in cuts}
    assert {"proj", "loop"} <= names
    assert names == set(oracle(model.graph, relaxed=True, limit=1 << 20))


def test_planning_dims_size_symbolic_batch():
    model = zoo.resnet(depth_blocks=2)
    one = {c.value.name: c.bytes for c in find_cut_points(model.graph)}
    four = {c.value.name: c.bytes for c in find_cut_points(model.graph, dims={"batch": 4})}
    assert all(four[name] == 4 * one[name] for name in one)


def test_missing_shapes_are_inferred_on_a_copy():
    model = zoo.resnet(depth_blocks=2)
    for node in model.graph:
        for value in node.outputs:
            if value not in model.graph.outputs:
                value.shape = None
    cuts = find_cut_points(model.graph)
    assert cuts and all(c.bytes for c in cuts)
    assert all(c.value.shape is None for c in cuts if c.value not in model.graph.outputs)


def test_bad_side_limit():
    with pytest.raises(ValueError, match="side_limit_bytes"):
        find_cut_points(zoo.resnet().graph, relaxed=True, side_limit_bytes=-1)


def _summary(analysis) -> tuple:
    return (
        [
            (c.value.name, c.position, tuple(v.name for v in c.side), c.bytes)
            for c in analysis.candidates
        ],
        [c.value.name for c in analysis.chain],
        analysis.boundaries,
        [n.name for n in analysis.order],
        [n.name for n in analysis.replicable_nodes],
    )


@pytest.mark.parametrize("relaxed", [False, True])
def test_shared_index_gives_the_same_analysis(relaxed):
    from onnx_ir_multidevice.graph.index import GraphIndex

    model = zoo.gpt(layers=2)
    plain = analyse_cut_points(model.graph, relaxed=relaxed)
    index = GraphIndex.for_model(model)  # functions do not change the default classes
    shared = analyse_cut_points(model.graph, relaxed=relaxed, index=index)
    assert _summary(shared) == _summary(plain)
    assert shared.index is index
    assert plain.index is not None and plain.index.graph is model.graph
    assert dict(shared.uses) == dict(plain.uses)


def test_index_of_another_graph_is_refused():
    from onnx_ir_multidevice.graph.index import GraphIndex

    other = GraphIndex.build(zoo.gpt(layers=1).graph)
    with pytest.raises(ValueError, match="GraphIndex"):
        analyse_cut_points(zoo.resnet(depth_blocks=2).graph, index=other)


# ---------------------------------------------------------------------------------------
# Index tables (the dynamo exporter's as_strided index) do not block cuts


def _strided_index_model(entries: int, layers: int = 4) -> ir.Model:
    """``Range(batch)`` read through an int64 table of ``entries`` rows at the top, used to
    gather the rows of the last activation at the end: it crosses every boundary unless
    each stage recomputes it."""
    rng = np.random.default_rng(0)
    x = ir.val("x", F32, ir.Shape(["batch", 8]))
    zero = ir.Value(name="zero", const_value=ir.tensor(np.array(0, np.int64)))
    one = ir.Value(name="one", const_value=ir.tensor(np.array(1, np.int64)))
    table = ir.Value(name="table", const_value=ir.tensor(np.arange(entries, dtype=np.int64)))
    initializers = [zero, one, table]
    nodes = []

    def op(op_type, inputs, name, **attributes):
        node = ir.node(op_type, inputs, attributes=attributes or None, name=name)
        node.outputs[0].name = name
        nodes.append(node)
        return node.outputs[0]

    batch = op("Gather", [op("Shape", [x], "shape"), zero], "batch", axis=0)
    index = op("Gather", [table, op("Range", [zero, batch, one], "rows")], "index", axis=0)
    h = x
    for i in range(layers):
        w = ir.Value(
            name=f"w{i}", const_value=ir.tensor(rng.standard_normal((8, 8)).astype(np.float32))
        )
        initializers.append(w)
        h = op("Relu", [op("MatMul", [h, w], f"mm{i}")], f"relu{i}")
    y = op("Gather", [h, index], "y", axis=0)
    y.type, y.shape = ir.TensorType(F32), ir.Shape(["batch", 8])
    graph = ir.Graph([x], [y], nodes=nodes, initializers=initializers, opset_imports={"": 18})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("entries", [127, 128, 4096])
def test_index_tables_do_not_block_cuts(entries):
    # 128 int64 rows are 1 KiB: the table counted as a weight made `index` an activation
    # crossing every boundary (0 cuts instead of 8).
    model = _strided_index_model(entries)
    classes = {v.name: c for v, c in classify_values(model.graph).items()}
    assert classes["index"] is TensorClass.REPLICABLE
    cuts = [c.value.name for c in find_cut_points(model.graph)]
    assert cuts == [f"{kind}{i}" for i in range(4) for kind in ("mm", "relu")]
    assert set(cuts) == set(oracle(model.graph, relaxed=False, limit=0))


def test_split_at_an_index_table_cut_runs_like_the_whole_model():
    model = _strided_index_model(128)
    stages = split_at(model, ["relu1"])
    # Each stage that reads `index` recomputes it from its own copy of the table.
    assert "index" not in {v.name for v in stages[0].graph.outputs}
    assert "table" in stages[1].graph.initializers
    feeds = {"x": np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)}

    def session(m):
        return ort.InferenceSession(
            ir.to_proto(m).SerializeToString(), providers=["CPUExecutionProvider"]
        )

    (expected,) = session(model).run(None, feeds)
    env = dict(feeds)
    for stage in stages:
        names = [i.name for i in stage.graph.inputs]
        outputs = session(stage).run(None, {n: env[n] for n in names})
        env.update(zip([o.name for o in stage.graph.outputs], outputs, strict=True))
    np.testing.assert_array_equal(env["y"], expected)
