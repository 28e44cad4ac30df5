"""Tensor classes, stage assignment and stage boundaries on real onnx-ir graphs."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice._errors import OmnyError
from onnx_ir_multidevice.analysis import (
    DEFAULT_INDEX_TABLE_BYTES,
    DEFAULT_LARGE_CONSTANT_BYTES,
    AnalysisError,
    Boundary,
    StageAssignmentError,
    TensorClass,
    assign_stages,
    boundary_crossings,
    classify_values,
    edge_violations,
    graph_uses,
    node_uses,
    stages_from_annotations,
    topological_order,
)

F = TensorClass.FORWARDED
R = TensorClass.REPLICABLE
A = TensorClass.ACTIVATION
FLOAT = ir.DataType.FLOAT


def _weight(name: str, *shape: int) -> ir.Value:
    array = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return ir.Value(name=name, const_value=ir.tensor(array, name=name))


def _input(name: str, dtype: ir.DataType = FLOAT, shape=(2, 8)) -> ir.Value:
    return ir.val(name, dtype, shape)


class _Builder:
    """A tiny graph builder: named nodes whose single output carries the node's name."""

    def __init__(self) -> None:
        self.nodes: list[ir.Node] = []
        self.initializers: list[ir.Value] = []

    def weight(self, name: str, *shape: int) -> ir.Value:
        value = _weight(name, *shape)
        self.initializers.append(value)
        return value

    def op(self, op_type: str, inputs, name: str, **attributes) -> ir.Value:
        node = ir.node(op_type, inputs, attributes=attributes or None, name=name)
        node.outputs[0].name = name
        self.nodes.append(node)
        return node.outputs[0]

    def graph(self, inputs, outputs, name: str = "main") -> ir.Graph:
        return ir.Graph(
            inputs,
            outputs,
            nodes=self.nodes,
            initializers=self.initializers,
            opset_imports={"": 18},
            name=name,
        )


def _by_name(graph: ir.Graph) -> dict[str, ir.Node]:
    return {node.name: node for node in graph}


def _names(values) -> list[str]:
    return [v.name for v in values]


# ---------------------------------------------------------------------------------------------
# Example models


def _chain(layers: int = 3) -> ir.Graph:
    b = _Builder()
    x = _input("x")
    h = x
    for i in range(layers):
        h = b.op("MatMul", [h, b.weight(f"w{i}", 8, 8)], f"mm{i}")
        h = b.op("Relu", [h], f"relu{i}")
    return b.graph([x], [h])


def _residual(blocks: int = 2) -> ir.Graph:
    b = _Builder()
    x = _input("x")
    h = b.op("MatMul", [x, b.weight("w_in", 8, 8)], "embed")
    for i in range(blocks):
        w_t = b.op("Transpose", [b.weight(f"w{i}", 8, 8)], f"wt{i}")  # constant-derived
        y = b.op("MatMul", [h, w_t], f"mm{i}")
        y = b.op("Relu", [y], f"relu{i}")
        h = b.op("Add", [h, y], f"out{i}")
    return b.graph([x], [h])


def _transformer(*, mask_from_activation: bool, layers: int = 2) -> ir.Graph:
    """Token ids -> embedding (large) -> layers with a causal mask added to the scores."""
    b = _Builder()
    ids = _input("ids", ir.DataType.INT64, (1, 8))
    emb = b.weight("emb", 100, 16)  # an embedding table: a large initializer
    h = b.op("Gather", [emb, ids], "embed")
    one = b.op("Constant", [], "one", value=ir.tensor(np.array([1], dtype=np.int64)))
    minus_inf = b.weight("minus_inf", 1)
    mask = None
    for i in range(layers):
        source = h if mask_from_activation else ids
        if mask_from_activation or mask is None:
            shape = b.op("Shape", [source], f"shape{i}")
            seq = b.op("Gather", [shape, one], f"seq{i}", axis=0)
            tri = b.op(
                "Trilu",
                [
                    b.op(
                        "ConstantOfShape",
                        [b.op("Concat", [seq, seq], f"sq{i}", axis=0)],
                        f"ones{i}",
                    )
                ],
                f"tri{i}",
            )
            mask = b.op("Mul", [b.op("Sub", [tri, minus_inf], f"neg{i}"), minus_inf], f"mask{i}")
        q = b.op("MatMul", [h, b.weight(f"wq{i}", 16, 16)], f"q{i}")
        scores = b.op("MatMul", [q, b.op("Transpose", [h], f"kt{i}")], f"scores{i}")
        probs = b.op("Softmax", [b.op("Add", [scores, mask], f"masked{i}")], f"probs{i}")
        attn = b.op("MatMul", [probs, h], f"attn{i}")
        h = b.op("Add", [h, attn], f"layer{i}")
    return b.graph([ids], [h])


# ---------------------------------------------------------------------------------------------
# Tensor classes


def test_chain_classes():
    graph = _chain()
    classes = classify_values(graph)
    by_name = {v.name: c for v, c in classes.items()}
    assert by_name["x"] is F
    assert all(by_name[f"w{i}"] is R for i in range(3))
    assert all(by_name[f"mm{i}"] is A and by_name[f"relu{i}"] is A for i in range(3))
    assert len(classes) == 1 + 3 + 6


def test_residual_constant_derived_weights_are_replicable():
    classes = {v.name: c for v, c in classify_values(_residual()).items()}
    assert classes["wt0"] is R and classes["wt1"] is R
    assert classes["embed"] is A and classes["out1"] is A


@pytest.mark.parametrize("from_activation", [True, False])
def test_transformer_mask_class(from_activation):
    graph = _transformer(mask_from_activation=from_activation)
    classes = {v.name: c for v, c in classify_values(graph).items()}
    assert classes["embed"] is A  # cheap op, but reads the large embedding table
    assert classes["one"] is R and classes["minus_inf"] is R
    # Shape of an activation whose dims are the input's (proven by the shape layer) is
    # replicable, and so is the mask made from it (analysis/shape_reads.py).
    assert classes["shape0"] is R
    assert classes["mask0"] is R
    assert classes["q0"] is A


def test_index_table_limits():
    assert DEFAULT_LARGE_CONSTANT_BYTES == 1024
    assert DEFAULT_INDEX_TABLE_BYTES == 4 << 20
    b = _Builder()
    x = _input("x")
    shape = b.op("Shape", [x], "shape")
    for name, array in (
        ("ints", np.zeros(INDEX_TABLE_LARGE_ROWS - 1, np.int64)),  # 4 MiB - 8 bytes
        ("too_many_ints", np.zeros(INDEX_TABLE_LARGE_ROWS, np.int64)),  # 4 MiB
        ("mask", np.zeros(1 << 20, np.bool_)),  # 1 MiB: a causal mask of 1,024 positions
        ("floats", np.zeros(256, np.float32)),  # 1 KiB of weights
        ("bytes", np.zeros(1024, np.int8)),  # 1 KiB of quantised weights
    ):
        b.initializers.append(ir.Value(name=name, const_value=ir.tensor(array)))
        b.op("Gather", [b.initializers[-1], shape], f"read_{name}")
    graph = b.graph([x], [v for n in b.nodes for v in n.outputs])
    classes = {v.name: c for v, c in classify_values(graph).items()}
    assert classes["read_ints"] is R and classes["read_mask"] is R
    assert classes["read_too_many_ints"] is A
    assert classes["read_floats"] is A and classes["read_bytes"] is A


def test_large_constant_threshold_and_heavy_ops_are_parameters():
    graph = _transformer(mask_from_activation=False)
    classes = {v.name: c for v, c in classify_values(graph, large_constant_bytes=1 << 20).items()}
    assert classes["embed"] is R  # the table is small under this threshold
    classes = {
        v.name: c
        for v, c in classify_values(
            graph, heavy_ops={"Trilu"}, large_constant_bytes=1, index_table_bytes=1
        ).items()
    }
    assert classes["tri0"] is A  # a heavy op now
    assert classes["seq0"] is A  # reads the 8-byte Constant `one`, large under this threshold
    classes = {v.name: c for v, c in classify_values(graph, large_constant_bytes=1).items()}
    assert classes["seq0"] is R  # `one` is int64: an index table, under its own limit
    assert classes["shape0"] is R  # Shape(ids): no constant, no heavy op


def test_constant_node_size_counts():
    b = _Builder()
    x = _input("x")
    big = b.op("Constant", [], "big", value=ir.tensor(np.zeros((600, 600), dtype=np.float32)))
    small = b.op("Constant", [], "small", value_float=2.0)
    y = b.op("Add", [x, big], "y")
    z = b.op("Mul", [x, small], "z")
    classes = {v.name: c for v, c in classify_values(b.graph([x], [y, z])).items()}
    assert classes["big"] is R and classes["small"] is R
    assert classes["y"] is A and classes["z"] is R


def test_nondeterministic_ops_are_activations():
    b = _Builder()
    x = _input("x")
    noise = b.op("RandomNormal", [], "noise", shape=[2, 8])
    y = b.op("Add", [x, noise], "y")
    z = b.op("Neg", [noise], "z")
    classes = {v.name: c for v, c in classify_values(b.graph([x], [y, z])).items()}
    assert classes["noise"] is A and classes["y"] is A and classes["z"] is A


def _if_model(
    *, heavy_body: bool, capture: str, const_cond: bool = False
) -> tuple[ir.Graph, ir.Node]:
    """An If whose then-branch reads an outer value (x, h or the weight w)."""
    b = _Builder()
    x = _input("x")
    cond_input = _input("cond", ir.DataType.BOOL, ())
    cond = cond_input
    if const_cond:
        cond = ir.Value(name="cond_c", const_value=ir.tensor(np.array(True)))
        b.initializers.append(cond)
    w = b.weight("w", 8, 8)
    h = b.op("MatMul", [x, w], "h")
    outer = {"x": x, "h": h, "w": w}[capture]
    then_node = ir.node("MatMul" if heavy_body else "Neg", [outer, w] if heavy_body else [outer])
    then_node.outputs[0].name = "then_out"
    then_branch = ir.Graph([], then_node.outputs, nodes=[then_node], name="then")
    if outer.producer() is not None:
        else_branch = ir.Graph([], [outer], nodes=[], name="else")  # an outer value as output
    else:  # graph inputs and initializers belong to the main graph: read them through a node
        identity = ir.node("Identity", [outer])
        else_branch = ir.Graph([], identity.outputs, nodes=[identity], name="else")
    out = b.op("If", [cond], "if", then_branch=then_branch, else_branch=else_branch)
    y = b.op("Relu", [out], "y")
    return b.graph([x, cond_input], [y]), out.producer()


def test_node_uses_include_outer_scope_captures():
    graph, if_node = _if_model(heavy_body=True, capture="h")
    assert _names(node_uses(if_node)) == ["cond", "h", "w"]
    uses = graph_uses(graph)
    assert list(uses) == list(graph)
    assert _names(uses[if_node]) == ["cond", "h", "w"]


@pytest.mark.parametrize(
    ("heavy_body", "capture", "const_cond", "expected"),
    [
        (False, "x", False, R),  # cheap body over graph inputs
        (False, "w", False, R),  # cheap body, input condition
        (True, "w", True, R),  # heavy, but constant-derived (constant condition too)
        (True, "w", False, A),  # heavy body, the condition is a graph input
        (True, "x", True, A),  # heavy body over a graph input
        (False, "h", True, A),  # reads an activation
    ],
)
def test_if_classes(heavy_body, capture, const_cond, expected):
    graph, if_node = _if_model(heavy_body=heavy_body, capture=capture, const_cond=const_cond)
    classes = classify_values(graph)
    assert classes[if_node.outputs[0]] is expected


def _loop_graph() -> ir.Graph:
    b = _Builder()
    x = _input("x")
    trip = b.weight("trip", 1)
    h1 = b.op("Relu", [b.op("MatMul", [x, b.weight("w1", 8, 8)], "mm1")], "h1")
    h2 = b.op("Relu", [b.op("MatMul", [h1, b.weight("w2", 8, 8)], "mm2")], "h2")
    i = ir.val("i", ir.DataType.INT64, ())
    c = ir.val("c", ir.DataType.BOOL, ())
    carried = ir.val("carried", FLOAT, (2, 8))
    cond_out = ir.node("Identity", [c])
    add = ir.node("Add", [carried, h1])  # outer-scope read of h1
    body = ir.Graph(
        [i, c, carried], [cond_out.outputs[0], add.outputs[0]], nodes=[cond_out, add], name="body"
    )
    loop_out = b.op("Loop", [trip, None, h2], "loop", body=body)
    y = b.op("Add", [loop_out, h2], "y")
    return b.graph([x], [y])


def test_loop_capture_is_a_use_and_edge_violation():
    graph = _loop_graph()
    nodes = _by_name(graph)
    values = {v.name: v for v in classify_values(graph)}
    assert _names(node_uses(nodes["loop"])) == ["trip", "h2", "h1"]
    stages = assign_stages(graph, [values["h1"]])
    assert stages[nodes["loop"]] == 1 and stages[nodes["mm1"]] == 0
    assert list(edge_violations(graph, stages)) == []
    # The loop annotated at stage 0 reads h1 (captured) and h2, both produced at stage >= 0;
    # put mm1/h1 at stage 1 and the loop at 0: the capture runs backwards.
    bad = dict(stages)
    bad[nodes["h1"]] = 1
    bad[nodes["mm2"]] = 1
    bad[nodes["h2"]] = 1
    bad[nodes["loop"]] = 0
    violations = {(p.name, c.name, v.name) for p, c, v in edge_violations(graph, bad)}
    assert violations == {("h1", "loop", "h1"), ("h2", "loop", "h2")}


def test_function_call_judged_from_its_body():
    x = _input("x")
    fx = ir.val("fx", FLOAT, (2, 8))
    fw = ir.val("fw", FLOAT, (8, 8))
    mm = ir.node("MatMul", [fx, fw])
    function = ir.Function(
        "local",
        "Dense",
        "",
        graph=ir.Graph([fx, fw], mm.outputs, nodes=[mm], name="Dense"),
        attributes=[],
    )
    b = _Builder()
    w = b.weight("w", 8, 8)
    node = ir.Node("local", "Dense", [x, w], name="dense", num_outputs=1)
    node.outputs[0].name = "dense"
    b.nodes.append(node)
    y = b.op("Relu", [node.outputs[0]], "y")
    graph = b.graph([x], [y])
    model = ir.Model(graph, ir_version=10, functions=[function])
    assert classify_values(graph)[node.outputs[0]] is R  # op type alone: unknown, cheap
    classes = classify_values(graph, functions=model.functions)
    assert classes[node.outputs[0]] is A and classes[y] is A


# ---------------------------------------------------------------------------------------------
# Stages


def test_chain_stages_and_strict_boundaries():
    graph = _chain()
    values = {v.name: v for v in classify_values(graph)}
    stages = assign_stages(graph, [values["relu0"], values["relu1"]])
    assert {n.name: s for n, s in stages.items()} == {
        "mm0": 0,
        "relu0": 0,
        "mm1": 1,
        "relu1": 1,
        "mm2": 2,
        "relu2": 2,
    }
    boundaries = boundary_crossings(graph, stages)
    assert [b.index for b in boundaries] == [0, 1]
    assert [_names(b.activations) for b in boundaries] == [["relu0"], ["relu1"]]
    assert all(b.is_strict for b in boundaries)
    assert all(b.outputs_carried == () for b in boundaries)


def test_residual_cut_carries_the_skip_connection():
    graph = _residual()
    values = {v.name: v for v in classify_values(graph)}
    stages = assign_stages(graph, [values["out0"]])
    named = {n.name: s for n, s in stages.items()}
    assert named["wt0"] == 0 and named["wt1"] == 1  # replicable: moved to its consumer
    (boundary,) = boundary_crossings(graph, stages)
    assert _names(boundary.activations) == ["out0"] and boundary.is_strict
    # Cutting inside the block: the skip connection crosses too.
    stages = assign_stages(graph, [values["relu1"]])
    (boundary,) = boundary_crossings(graph, stages)
    assert _names(boundary.activations) == ["out0", "relu1"] and not boundary.is_strict


@pytest.mark.parametrize("from_activation", [True, False])
def test_transformer_boundary_side_activations(from_activation):
    graph = _transformer(mask_from_activation=from_activation)
    values = {v.name: v for v in classify_values(graph)}
    stages = assign_stages(graph, [values["layer0"]])
    (boundary,) = boundary_crossings(graph, stages)
    assert _names(boundary.activations) == ["layer0"]
    named = {n.name: s for n, s in stages.items()}
    if from_activation:
        assert named["shape1"] == 1  # Shape(layer0)
    else:
        # The mask is built once from the ids; it is replicable and recomputed.
        assert named["mask0"] == 0
        assert [c for v, c in boundary.tensors if v.name == "mask0"] == [R]
    # A cut in the middle of layer 1 carries the mask (an activation when it comes from Shape
    # of an activation) next to the residual stream.
    stages = assign_stages(graph, [values["q1"]])
    (boundary,) = boundary_crossings(graph, stages)
    # kt1 = Transpose(layer0) runs with q1 in stage 0 and is read by stage 1.
    expected = ["kt1", "layer0", "mask1", "q1"] if from_activation else ["kt1", "layer0", "q1"]
    assert sorted(_names(boundary.activations)) == expected


def test_replicable_graph_output_goes_to_last_stage_and_dead_stays():
    b = _Builder()
    x = _input("x")
    h = b.op("Relu", [b.op("MatMul", [x, b.weight("w", 8, 8)], "mm")], "h")
    shape = b.op("Shape", [x], "shape")  # replicable graph output
    b.op("Neg", [x], "dead")  # replicable, unused
    y = b.op("Relu", [b.op("MatMul", [h, b.weight("w2", 8, 8)], "mm2")], "y")
    graph = b.graph([x], [y, shape, h])
    stages = {n.name: s for n, s in assign_stages(graph, [h]).items()}
    assert stages == {"mm": 0, "h": 0, "shape": 1, "dead": 0, "mm2": 1, "y": 1}
    (boundary,) = boundary_crossings(graph, assign_stages(graph, [h]))
    assert _names(v for v, _ in boundary.outputs_carried) == ["h"]
    assert _names(boundary.activations) == ["h"]


def test_cut_producer_is_never_moved():
    b = _Builder()
    x = _input("x")
    shape = b.op("Shape", [x], "shape")  # replicable, but cut
    h = b.op("MatMul", [x, b.op("Cast", [shape], "cast", to=1)], "h")
    graph = b.graph([x], [h])
    stages = {n.name: s for n, s in assign_stages(graph, [shape]).items()}
    assert stages == {"shape": 0, "cast": 1, "h": 1}


@pytest.mark.parametrize(
    ("make_cuts", "match"),
    [
        (lambda v: [v["relu1"], v["relu0"]], r"cut 0 'relu1'.*computed from cut 1 'relu0'"),
        (lambda v: [v["relu0"], v["relu0"]], r"cut 1 'relu0'.*repeats cut 0"),
        (lambda v: [v["x"]], r"cut 0 'x' is not produced by a node"),
        (lambda v: [v["w0"]], r"cut 0 'w0' is not produced by a node"),
        (lambda v: ["relu0"], r"not an onnx_ir.Value"),
    ],
)
def test_invalid_cuts(make_cuts, match):
    graph = _chain()
    values = {v.name: v for v in classify_values(graph)}
    with pytest.raises(StageAssignmentError, match=match) as info:
        assign_stages(graph, make_cuts(values))
    assert isinstance(info.value, OmnyError) and isinstance(info.value, ValueError)


def test_cut_inside_subgraph_is_rejected():
    graph, if_node = _if_model(heavy_body=True, capture="h")
    inner = if_node.attributes["then_branch"].as_graph()[0].outputs[0]
    with pytest.raises(StageAssignmentError, match=r"'then_out'.*inside a subgraph"):
        assign_stages(graph, [inner])


def test_independent_later_cut_is_accepted():
    b = _Builder()
    x = _input("x")
    a = b.op("Relu", [x], "a")
    c = b.op("Neg", [x], "c")
    y = b.op("Add", [a, c], "y")
    graph = b.graph([x], [y])
    stages = {n.name: s for n, s in assign_stages(graph, [a, c]).items()}
    assert stages == {"a": 0, "c": 0, "y": 2}
    boundaries = boundary_crossings(graph, assign_stages(graph, [a, c]))
    assert [sorted(_names(b.activations)) for b in boundaries] == [[], []]  # a, c replicable
    assert [sorted(_names(v for v, _ in b.tensors)) for b in boundaries] == [["a", "c"]] * 2


def test_stages_from_annotations():
    graph = _chain()
    config = ir.ModelConfiguration("pipe", 2)
    other = ir.ModelConfiguration("other", 2)
    nodes = list(graph)
    for i, node in enumerate(nodes[:-1]):
        node.set_pipeline_stage(config, i // 3)
    nodes[0].set_pipeline_stage(other, 1)
    nodes[-1].shard(nodes[-1].outputs[0], configuration=config, axis=0, num_shards=2)
    result = stages_from_annotations(graph, config)
    assert list(result.values()) == [0, 0, 0, 1, 1, None]
    assert stages_from_annotations(graph, other)[nodes[0]] == 1
    # An equal (not identical) configuration object still finds the entries.
    assert stages_from_annotations(graph, ir.ModelConfiguration("pipe", 2))[nodes[4]] == 1
    assert set(stages_from_annotations(graph, ir.ModelConfiguration("x", 1)).values()) == {None}


def test_boundaries_reject_missing_stage():
    graph = _chain()
    stages: dict[ir.Node, int | None] = dict.fromkeys(graph, 0)
    stages[list(graph)[2]] = None
    with pytest.raises(StageAssignmentError, match="'mm1' has no stage"):
        boundary_crossings(graph, stages)
    with pytest.raises(StageAssignmentError, match="num_stages=1"):
        boundary_crossings(graph, dict.fromkeys(graph, 1), num_stages=1)
    assert len(boundary_crossings(graph, dict.fromkeys(graph, 0), num_stages=3)) == 2


def test_boundary_properties():
    x = ir.val("x", FLOAT, (1,))
    a = ir.val("a", FLOAT, (1,))
    boundary = Boundary(0, ((x, R), (a, A)))
    assert boundary.activations == (a,) and boundary.is_strict
    assert not Boundary(0, ((x, R),)).is_strict
    assert not dataclasses.replace(boundary, tensors=((a, A), (x, A))).is_strict


def test_topological_order_sorts_and_detects_cycles():
    b = _Builder()
    x = _input("x")
    h = x
    for i in range(4):
        h = b.op("Relu", [b.op("MatMul", [h, b.weight(f"w{i}", 8, 8)], f"mm{i}")], f"relu{i}")
    nodes = list(b.nodes)
    b.nodes.reverse()
    shuffled = b.graph([x], [h])
    assert next(iter(shuffled)) is nodes[-1]
    assert topological_order(shuffled) == nodes
    stages = assign_stages(shuffled, [nodes[1].outputs[0]])
    assert stages[nodes[-1]] == 1 and stages[nodes[0]] == 0
    # A cycle: feed the last output back into the first node.
    nodes[0].replace_input_with(0, nodes[-1].outputs[0])
    with pytest.raises(AnalysisError, match="cycle through node"):
        classify_values(shuffled)


def test_analysis_does_not_modify_the_graph():
    graph = _transformer(mask_from_activation=True)
    before = ir.to_proto(ir.Model(graph, ir_version=10)).SerializeToString()
    values = {v.name: v for v in classify_values(graph)}
    stages = assign_stages(graph, [values["layer0"]])
    boundary_crossings(graph, stages)
    list(edge_violations(graph, stages))
    assert ir.to_proto(ir.Model(graph, ir_version=10)).SerializeToString() == before


# ---------------------------------------------------------------------------------------------
# Property tests against brute-force oracles


@dataclasses.dataclass
class RandomGraph:
    graph: ir.Graph
    reads: dict[ir.Node, list[ir.Value]]  # ground truth from the generator, captures included
    own_costly: dict[ir.Node, bool]  # heavy op / large constant in the node or its body
    own_pinned: dict[ir.Node, bool]
    large: set[ir.Value]  # large initializers


OPS = ["Add", "Relu", "MatMul", "Split", "Constant", "If", "RandomNormal", "Neg"]


INDEX_TABLE_LARGE_ROWS = DEFAULT_INDEX_TABLE_BYTES // 8
"""Rows of an int64 table at the index-table limit (4 MiB)."""


def _oracle_large(size: int, dtype) -> bool:
    """The rule, restated: float constants are large from 1 KiB, index tables (int32, int64,
    bool) from 4 MiB."""
    nbytes = size * np.dtype(dtype).itemsize
    if np.dtype(dtype) in (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)):
        return nbytes >= DEFAULT_INDEX_TABLE_BYTES
    return nbytes >= DEFAULT_LARGE_CONSTANT_BYTES


@st.composite
def random_graphs(draw) -> RandomGraph:
    inputs = [ir.val(f"in{i}", FLOAT, (2,)) for i in range(draw(st.integers(1, 3)))]
    initializers = []
    large = set()
    for i in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from([np.float32, np.int64]))
        if dtype is np.float32:
            size = draw(st.sampled_from([1, 4, 255, 256, 3000]))  # float32: 1 KiB at 256
        else:  # an index table: large from 4 MiB (524,288 int64) only
            size = draw(st.sampled_from([1, 128, 3000, INDEX_TABLE_LARGE_ROWS]))
        value = ir.Value(name=f"init{i}", const_value=ir.tensor(np.zeros(size, dtype)))
        initializers.append(value)
        if _oracle_large(size, dtype):
            large.add(value)
    available = [*inputs, *initializers]
    nodes, reads, own_costly, own_pinned = [], {}, {}, {}
    body_outputs: set[ir.Value] = set()
    for n in range(draw(st.integers(1, 22))):
        op = draw(st.sampled_from(OPS))

        def pick(k, available=available):
            # Bias toward recent values (chains) while allowing far reads (residuals, late
            # graph inputs).
            idx = st.one_of(
                st.integers(0, len(available) - 1),
                st.integers(max(0, len(available) - 3), len(available) - 1),
            )
            return [available[draw(idx)] for _ in range(k)]

        costly = pinned = False
        captured: list[ir.Value] = []
        attributes = None
        num_outputs = 1
        if op == "Constant":
            dtype = draw(st.sampled_from([np.float32, np.int64, np.bool_]))
            size = draw(st.sampled_from([1, 255, 256, INDEX_TABLE_LARGE_ROWS]))
            attributes = {"value": ir.tensor(np.zeros(size, dtype))}
            costly = _oracle_large(size, dtype)
            inputs_ = []
        elif op == "RandomNormal":
            attributes = {"shape": [2]}
            pinned = True
            inputs_ = []
        elif op == "If":
            inputs_ = pick(1)
            captured = pick(draw(st.integers(1, 2)))
            heavy_body = draw(st.booleans())
            inner = ir.node(
                "MatMul" if heavy_body else "Sub", captured[:2] * (2 // len(captured[:2]))
            )
            inner.outputs[0].name = f"n{n}_then"
            then_branch = ir.Graph([], inner.outputs, nodes=[inner], name=f"then{n}")
            if captured[0].producer() is not None and captured[0] not in body_outputs:
                body_outputs.add(captured[0])  # an outer value as a body output
                else_branch = ir.Graph([], [captured[0]], nodes=[], name=f"else{n}")
            else:  # a value is the output of one graph only
                identity = ir.node("Identity", [captured[0]])
                identity.outputs[0].name = f"n{n}_else"
                else_branch = ir.Graph([], identity.outputs, nodes=[identity], name=f"else{n}")
            attributes = {"then_branch": then_branch, "else_branch": else_branch}
            costly = heavy_body
        else:
            arity = {"Add": 2, "MatMul": 2, "Relu": 1, "Neg": 1, "Split": 1}[op]
            inputs_ = pick(arity)
            costly = op == "MatMul"
            num_outputs = 2 if op == "Split" else 1
        node = ir.node(op, inputs_, attributes=attributes, num_outputs=num_outputs, name=f"n{n}")
        for i, out in enumerate(node.outputs):
            out.name = f"n{n}_{i}"
        nodes.append(node)
        reads[node] = list(dict.fromkeys([*inputs_, *captured]))
        own_costly[node] = costly
        own_pinned[node] = pinned
        available.extend(node.outputs)
    produced = [v for node in nodes for v in node.outputs if v not in body_outputs]
    outputs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique=True))
    graph = ir.Graph(inputs, outputs, nodes=nodes, initializers=initializers, name="random")
    return RandomGraph(graph, reads, own_costly, own_pinned, large)


def _oracle_classes(rg: RandomGraph) -> dict[ir.Value, TensorClass]:
    result = {}
    for value in rg.graph.inputs:
        result[value] = F
    for value in rg.graph.initializers.values():
        result[value] = R
    for node in rg.graph:
        # Brute force: the whole cone of the node, by a fresh search.
        seen_nodes, seen_values, stack = set(), set(), [node]
        while stack:
            current = stack.pop()
            if current in seen_nodes:
                continue
            seen_nodes.add(current)
            for value in rg.reads[current]:
                seen_values.add(value)
                if value.producer() is not None:
                    stack.append(value.producer())
        has_input = any(v.is_graph_input() for v in seen_values)
        costly = any(rg.own_costly[n] for n in seen_nodes) or bool(seen_values & rg.large)
        pinned = any(rg.own_pinned[n] for n in seen_nodes)
        cls = A if pinned or (has_input and costly) else R
        for value in node.outputs:
            result[value] = cls
    return result


@settings(max_examples=120, deadline=None)
@given(random_graphs())
def test_classify_values_matches_brute_force(rg):
    assert classify_values(rg.graph) == _oracle_classes(rg)
    assert graph_uses(rg.graph) == {n: tuple(v) for n, v in rg.reads.items()}


def _oracle_stages(rg: RandomGraph, cuts: list[ir.Value], classes) -> dict[ir.Node, int] | None:
    """Fixpoint of the stage definition; None where the cuts are out of order."""
    nodes = list(rg.graph)
    position = {v: j for j, v in enumerate(cuts)}
    stage = dict.fromkeys(nodes, 0)

    def read(value):
        if value in position:
            return position[value] + 1
        return stage[value.producer()] if value.producer() is not None else 0

    changed = True
    while changed:
        changed = False
        for node in nodes:
            new = max((read(v) for v in rg.reads[node]), default=0)
            if new != stage[node]:
                stage[node], changed = new, True
    if any(stage[v.producer()] > j for v, j in position.items()):
        return None
    outputs = set(rg.graph.outputs)
    movable = [n for n in nodes if all(classes[v] is R and v not in position for v in n.outputs)]
    changed = True
    while changed:
        changed = False
        for node in movable:
            targets = [stage[c] for c in nodes for v in rg.reads[c] if v in node.outputs]
            if any(v in outputs for v in node.outputs):
                targets.append(len(cuts))
            if targets and min(targets) != stage[node]:
                stage[node], changed = min(targets), True
    return stage


@settings(max_examples=120, deadline=None)
@given(random_graphs(), st.data())
def test_assign_stages_matches_fixpoint(rg, data):
    produced = [v for node in rg.graph for v in node.outputs]
    cuts = data.draw(st.lists(st.sampled_from(produced), max_size=4, unique=True))
    classes = classify_values(rg.graph)
    expected = _oracle_stages(rg, cuts, classes)
    if expected is None:
        with pytest.raises(StageAssignmentError, match="pipeline order"):
            assign_stages(rg.graph, cuts)
        return
    stages = assign_stages(rg.graph, cuts)
    assert stages == expected
    assert list(edge_violations(rg.graph, stages)) == []
    assert max(stages.values()) <= len(cuts)


@settings(max_examples=120, deadline=None)
@given(random_graphs(), st.data(), st.sampled_from([1, 2, 3, 60]))
def test_stages_of_several_cut_lists_match_fixpoint(rg, data, fused_cuts):
    """Several configurations staged at once (one shared walk per group of at most
    FUSED_CUTS distinct cuts, longer lists on their own) give the fixpoint of each."""
    from onnx_ir_multidevice.analysis import stages as stages_module
    from onnx_ir_multidevice.graph.index import GraphIndex

    produced = [v for node in rg.graph for v in node.outputs]
    order = {v: k for k, v in enumerate(produced)}
    cut_lists = []
    for _ in range(data.draw(st.integers(1, 4))):
        cuts = data.draw(st.lists(st.sampled_from(produced), max_size=5, unique=True))
        if data.draw(st.booleans()):  # in graph order: mostly a valid pipeline
            cuts.sort(key=order.__getitem__)
        cut_lists.append(cuts)
    classes = classify_values(rg.graph)
    index = GraphIndex.build(rg.graph)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages_module, "FUSED_CUTS", fused_cuts)
        stages_module.precompute_stages(rg.graph, cut_lists, index=index)
    for cuts in cut_lists:
        expected = _oracle_stages(rg, cuts, classes)
        if expected is None:
            assert cuts not in stages_module.stage_cache(index)
            with pytest.raises(StageAssignmentError, match="pipeline order"):
                assign_stages(rg.graph, cuts, index=index)
            continue
        assert assign_stages(rg.graph, cuts, index=index) == expected


def test_stages_of_cut_lists_sharing_cuts_in_another_order():
    """A later list whose cuts were first seen in another order (mark bits not increasing)."""
    from onnx_ir_multidevice.analysis.stages import precompute_stages, stage_cache
    from onnx_ir_multidevice.graph.index import GraphIndex

    graph = _chain(3)
    values = {v.name: v for node in graph for v in node.outputs}
    late, both = [values["relu1"]], [values["relu0"], values["relu1"]]
    index = GraphIndex.build(graph)
    precompute_stages(graph, [late, both], index=index)
    assert both in stage_cache(index)
    stages = {node.name: s for node, s in assign_stages(graph, both, index=index).items()}
    assert stages == {**dict.fromkeys(["mm0", "relu0"], 0), "mm1": 1, "relu1": 1,
                      "mm2": 2, "relu2": 2}  # fmt: skip
    assert stages == {node.name: s for node, s in assign_stages(graph, both).items()}


def _oracle_boundaries(rg: RandomGraph, stages, classes, num_stages):
    nodes = list(rg.graph)
    result = []
    for k in range(num_stages - 1):
        tensors, carried = [], []
        for node in nodes:
            for value in node.outputs:
                if stages[node] > k:
                    continue
                if any(stages[c] > k and value in rg.reads[c] for c in nodes):
                    tensors.append((value, classes[value]))
                if value in rg.graph.outputs:
                    carried.append((value, classes[value]))
        result.append(Boundary(k, tuple(tensors), tuple(carried)))
    return result


@settings(max_examples=120, deadline=None)
@given(random_graphs(), st.data())
def test_boundaries_and_violations_match_brute_force(rg, data):
    nodes = list(rg.graph)
    # Arbitrary stages, consistent or not.
    stages = {n: data.draw(st.integers(0, 3), label=n.name) for n in nodes}
    classes = classify_values(rg.graph)
    num_stages = max(stages.values()) + 1
    assert boundary_crossings(rg.graph, stages) == _oracle_boundaries(
        rg, stages, classes, num_stages
    )
    expected = {
        (v.producer(), c, v)
        for c in nodes
        for v in rg.reads[c]
        if v.producer() is not None and stages[c] < stages[v.producer()]
    }
    found = list(edge_violations(rg.graph, stages))
    assert len(found) == len(set(found)) and set(found) == expected


# ---------------------------------------------------------------------------------------------
# Zoo models (real architectures) and scale


def test_zoo_gpt_has_side_activations_and_resnet_strict_cuts():
    zoo = pytest.importorskip("onnx_ir_multidevice.testing.zoo")
    gpt = zoo.gpt()
    graph = gpt.graph
    classes = classify_values(graph, functions=gpt.functions)
    values = {v.name: v for v in classes}
    layer_outs = sorted(
        name for name in values if name.startswith("layer.") and name.endswith(".out")
    )
    assert layer_outs, "zoo.gpt names its layer outputs layer.<i>.out"
    stages = assign_stages(graph, [values[layer_outs[0]]], classes=classes)
    (boundary,) = boundary_crossings(graph, stages, classes=classes)
    assert layer_outs[0] in _names(boundary.activations)
    assert not boundary.is_strict  # the causal mask, sliced from the attn.bias buffer


def _analysis_cpu_seconds(graph: ir.Graph) -> float:
    start = time.thread_time()  # this thread's CPU time only
    classes = classify_values(graph)
    produced = [v for node in graph for v in node.outputs if classes[v] is A]
    cuts = [produced[len(produced) * (j + 1) // 8] for j in range(7)]
    stages = assign_stages(graph, cuts, classes=classes)
    boundaries = boundary_crossings(graph, stages, classes=classes)
    list(edge_violations(graph, stages))
    assert len(boundaries) == 7
    return time.thread_time() - start


def test_analysis_scales_linearly():
    zoo = pytest.importorskip("onnx_ir_multidevice.testing.zoo")
    small, large = zoo.synthetic_chain(3_000).graph, zoo.synthetic_chain(12_000).graph
    t_small = min(_analysis_cpu_seconds(small) for _ in range(2))
    t_large = min(_analysis_cpu_seconds(large) for _ in range(2))
    # 4x the nodes: about 4x the time when linear, 16x when quadratic.
    assert t_large < 8 * t_small + 0.05, (t_small, t_large)


def test_graph_index_shared_results_match_unindexed() -> None:
    """Results with a shared GraphIndex equal the results computed from scratch."""
    from onnx_ir_multidevice.analysis import (
        GraphIndex,
        assign_stages,
        boundary_crossings,
        classify_values,
        edge_violations,
        graph_uses,
        topological_order,
    )
    from onnx_ir_multidevice.testing import zoo

    model = zoo.synthetic_chain(40)
    graph = model.graph
    index = GraphIndex.for_model(model)
    assert list(index.nodes) == topological_order(graph)
    assert index.uses_by_node == graph_uses(graph)
    assert classify_values(graph, index=index) == classify_values(graph)
    outs = [v for node in graph for v in node.outputs if v.name.endswith(".out")]
    cuts = [outs[2], outs[6]]
    stages = assign_stages(graph, cuts, index=index)
    assert stages == assign_stages(graph, cuts)
    assert assign_stages(graph, cuts, index=index) == stages  # cached, still a fresh dict
    assert assign_stages(graph, cuts, index=index) is not stages
    assert boundary_crossings(graph, stages, index=index) == boundary_crossings(graph, stages)
    backwards = {node: 2 - s for node, s in stages.items()}
    assert list(edge_violations(graph, backwards, index=index)) == list(
        edge_violations(graph, backwards)
    )
    other = zoo.synthetic_chain(8).graph
    with pytest.raises(ValueError, match="GraphIndex"):
        assign_stages(other, [], index=index)


def test_graph_index_keeps_the_analyses_results_under_their_own_keys() -> None:
    """The analyses keep their results on the index under their own keys; it computes none."""
    import subprocess
    import sys

    from onnx_ir_multidevice.analysis import GraphIndex, assign_stages, default_classes
    from onnx_ir_multidevice.analysis.stages import _REPLICABLE_POSITIONS, stage_cache
    from onnx_ir_multidevice.analysis.tensor_classes import (
        has_default_flags,
        kept_default_classes,
    )
    from onnx_ir_multidevice.graph.index import CutListCache
    from onnx_ir_multidevice.testing import zoo

    model = zoo.synthetic_chain(40)
    graph = model.graph
    index = GraphIndex.for_model(model)
    assert not hasattr(index, "_cache") and not hasattr(index, "classes")
    assert kept_default_classes(index) is None and not has_default_flags(index)
    classes = default_classes(index)
    assert kept_default_classes(index) is classes and default_classes(index) is classes
    assert classes == classify_values(graph)
    assert has_default_flags(index)  # kept by classify_values for the stage walks
    outs = [v for node in graph for v in node.outputs if v.name.endswith(".out")]
    cuts = [outs[2], outs[6]]
    cache = stage_cache(index)
    assert isinstance(cache, CutListCache) and cuts not in cache
    stages = assign_stages(graph, cuts, index=index)
    assert cache.get(cuts) == stages and [outs[6], outs[2]] not in cache
    assert index.result(_REPLICABLE_POSITIONS) is not None
    # One topological order: topological_order() is the index's.
    assert topological_order(graph, index=index) == list(index.nodes) == topological_order(graph)
    # graph sits below analysis: building and querying an index imports no analysis module.
    code = (
        "import sys; from onnx_ir_multidevice.testing import zoo; "
        "from onnx_ir_multidevice.graph.index import GraphIndex, topological_order; "
        "m = zoo.synthetic_chain(8); i = GraphIndex.for_model(m); topological_order(m.graph); "
        "i.value_names; i.inner_node_names; "
        "print(sorted(n for n in sys.modules if n.startswith('onnx_ir_multidevice.analysis')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stdout


def test_check_and_annotate_accept_a_shared_index() -> None:
    from onnx_ir_multidevice import omny
    from onnx_ir_multidevice.analysis import GraphIndex
    from onnx_ir_multidevice.checker.core import check
    from onnx_ir_multidevice.omny._schema import (
        CutPoint,
        OmnyMetadata,
        ShardConfiguration,
        Sharding,
    )
    from onnx_ir_multidevice.passes.api import annotate
    from onnx_ir_multidevice.testing import zoo

    def planned() -> ir.Model:
        model = zoo.synthetic_chain(24)
        out = next(v for node in model.graph for v in node.outputs if v.name == "block.2.out")
        cut = CutPoint("cut_1", out.producer().name, out.name, (-1, 8), "float32", 10, 10)
        configuration = ShardConfiguration(2, (10, 10), ("cut_1",))
        omny.write(
            model,
            OmnyMetadata(cut_points=(cut,), sharding=Sharding(configurations=(configuration,))),
        )
        return model

    plain, shared = planned(), planned()
    annotate(plain)
    index = GraphIndex.for_model(shared)
    annotate(shared, index=index)
    assert [str(d) for d in check(shared, index=index)] == [str(d) for d in check(plain)]
    stages_plain = [[e.pipeline_stage for e in n.device_configurations] for n in plain.graph]
    stages_shared = [[e.pipeline_stage for e in n.device_configurations] for n in shared.graph]
    assert stages_plain == stages_shared
    with pytest.raises(ValueError, match="GraphIndex"):
        annotate(planned(), index=index)


@st.composite
def plain_graphs(draw):
    """Graphs without subgraphs: repeated inputs, empty (None) inputs, several outputs,
    dangling reads, and nodes listed out of topological order."""
    x = ir.val("x", ir.DataType.FLOAT, [2])
    w = ir.Value(name="w", const_value=ir.tensor(np.ones(2, np.float32)))
    dangling = ir.val("dangling", ir.DataType.FLOAT, [2])  # produced by no node
    available = [x, w, dangling]
    nodes = []
    for n in range(draw(st.integers(1, 12))):
        arity = draw(st.integers(0, 3))
        inputs = [
            None if draw(st.integers(0, 5)) == 0 else draw(st.sampled_from(available))
            for _ in range(arity)
        ]
        node = ir.node("Op", inputs, num_outputs=draw(st.integers(0, 2)), name=f"n{n}")
        for i, out in enumerate(node.outputs):
            out.name = f"n{n}_{i}"
        nodes.append(node)
        available.extend(node.outputs)
    order = draw(st.permutations(nodes))
    outputs = [v for node in nodes for v in node.outputs][-1:]
    return ir.Graph([x], outputs, nodes=order, initializers=[w], name="plain")


@settings(max_examples=150, deadline=None)
@given(plain_graphs())
def test_graph_index_fast_path_matches_brute_force(graph):
    """The bulk build of a graph without subgraphs gives the definitions' uses and slots."""
    from onnx_ir_multidevice.analysis import GraphIndex

    index = GraphIndex.build(graph)
    graph_order = list(graph)
    position = {node: i for i, node in enumerate(graph_order)}
    # Brute force, in graph order: uses, external values in first-read order, sortedness.
    uses = {node: tuple(dict.fromkeys(v for v in node.inputs if v is not None)) for node in graph}
    external = list(
        dict.fromkeys(v for node in graph_order for v in uses[node] if v.producer() not in position)
    )
    sorted_already = all(
        position[v.producer()] < position[node]
        for node in graph_order
        for v in uses[node]
        if v.producer() in position
    )
    assert index.in_graph_order == sorted_already
    assert list(index.external) == external
    assert set(index.nodes) == set(graph_order)
    topo = {node: i for i, node in enumerate(index.nodes)}
    for i, node in enumerate(index.nodes):
        assert index.uses[i] == uses[node]
        expected = tuple(
            topo[v.producer()] if v.producer() in topo else len(graph_order) + external.index(v)
            for v in uses[node]
        )
        assert index.reads[i] == expected
        assert all(p < i for p in expected if p < len(graph_order))  # topological
    # The flat arrays list every read in order; readers of a few slots match ``consumers``.
    flat_slots, flat_readers = index.flat_reads
    assert list(zip(flat_readers.tolist(), flat_slots.tolist(), strict=True)) == [
        (i, p) for i, slots in enumerate(index.reads) for p in slots
    ]
    some = list(range(0, len(index.nodes) + len(index.external), 2))
    readers = index.readers_of(some)
    assert readers == {p: index.consumers[p] for p in some}


@settings(max_examples=80, deadline=None)
@given(random_graphs(), st.data())
def test_precompute_stages_matches_assign_stages_one_by_one(rg, data):
    from onnx_ir_multidevice.analysis import GraphIndex
    from onnx_ir_multidevice.analysis.stages import _stage_list, _validate_cuts, precompute_stages

    produced = [v for node in rg.graph for v in node.outputs]
    cut_lists = data.draw(
        st.lists(st.lists(st.sampled_from(produced), max_size=4, unique=True), max_size=3)
    )
    index = GraphIndex.build(rg.graph)
    precompute_stages(rg.graph, cut_lists, index=index)
    for cuts in cut_lists:
        fresh = GraphIndex.build(rg.graph)
        try:
            expected = _stage_list(fresh, cuts, _validate_cuts(rg.graph, cuts), None)
        except StageAssignmentError:
            with pytest.raises(StageAssignmentError, match="pipeline order"):
                assign_stages(rg.graph, cuts, index=index)
            continue
        assert assign_stages(rg.graph, cuts, index=index) == dict(
            zip(fresh.nodes, expected, strict=False)
        )


@st.composite
def classed_graphs(draw):
    """Graphs of light, heavy and non-deterministic ops over inputs and small or large
    constants (initializers and ``Constant`` nodes), nodes out of order."""
    x = ir.val("x", ir.DataType.FLOAT, [2])
    available = [x]
    initializers = []
    for k in range(draw(st.integers(0, 3))):
        size = draw(st.sampled_from([1, 4, 300]))  # 300 float32: 1200 bytes, large
        w = ir.Value(name=f"w{k}", const_value=ir.tensor(np.ones(size, np.float32)))
        initializers.append(w)
        available.append(w)
    nodes = []
    for n in range(draw(st.integers(1, 10))):
        op = draw(st.sampled_from(["Add", "Mul", "MatMul", "RandomUniformLike", "Constant"]))
        if op == "Constant":
            size = draw(st.sampled_from([1, 300]))
            node = ir.node(
                "Constant", [], attributes={"value": ir.tensor(np.ones(size, np.float32))}
            )
        else:
            arity = 1 if op == "RandomUniformLike" else 2
            inputs = [draw(st.sampled_from(available)) for _ in range(arity)]
            node = ir.node(op, inputs)
        node.name = f"n{n}"
        node.outputs[0].name = f"n{n}_0"
        nodes.append(node)
        available.append(node.outputs[0])
    order = draw(st.permutations(nodes))
    return ir.Graph([x], [nodes[-1].outputs[0]], nodes=order, initializers=initializers)


@settings(max_examples=150, deadline=None)
@given(classed_graphs())
def test_classify_values_matches_the_cone_definition(graph):
    """Each node output's class from everything it is computed from (the module's rules)."""
    large = 1024
    heavy, pinned = "MatMul", "RandomUniformLike"

    def cone_flags(value, seen):
        producer = value.producer()
        if producer is None:
            if value.const_value is None:
                return {"input"}
            return {"costly"} if value.const_value.nbytes >= large else set()
        if producer in seen:
            return set()
        seen.add(producer)
        found = set()
        if producer.op_type == heavy:
            found.add("costly")
        if producer.op_type == pinned:
            found.add("pinned")
        if producer.op_type == "Constant" and producer.attributes["value"].value.nbytes >= large:
            found.add("costly")
        for read in producer.inputs:
            found |= cone_flags(read, seen)
        return found

    classes = classify_values(graph)
    for node in graph:
        value = node.outputs[0]
        flags = cone_flags(value, set())
        expected = (
            TensorClass.ACTIVATION
            if "pinned" in flags or {"input", "costly"} <= flags
            else TensorClass.REPLICABLE
        )
        assert classes[value] is expected, value.name
