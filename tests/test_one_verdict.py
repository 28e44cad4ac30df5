"""One cut resolver: ``check``, ``split`` and ``annotate`` give one verdict on every file.

Cut points are resolved by :func:`~onnx_ir_multidevice.binding.bind.bind` alone; the checker,
the split and the annotation passes take their cut values from its result.
"""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import BindingError, CheckError, SplitError
from onnx_ir_multidevice._split.build import split
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
)
from onnx_ir_multidevice.passes.api import annotate

F32 = ir.DataType.FLOAT


def _value(name: str) -> ir.Value:
    return ir.Value(name=name, shape=ir.Shape([2, 4]), type=ir.TensorType(F32))


def _duplicated_name_model() -> ir.Model:
    """x -> L0 (MatMul) -> h1 -> act (Relu) -> h2 -> L2 (MatMul) -> h3 -> act (Tanh) -> h4.

    Two main-graph nodes are named ``act``; the plan cuts after ``act`` at ``h2``.
    """
    x = _value("x")
    w = ir.Value(
        name="w",
        shape=ir.Shape([4, 4]),
        type=ir.TensorType(F32),
        const_value=ir.tensor(np.eye(4, dtype=np.float32), name="w"),
    )
    h1, h2, h3, h4 = (_value(f"h{i}") for i in range(1, 5))
    nodes = [
        ir.Node("", "MatMul", [x, w], outputs=[h1], name="L0"),
        ir.Node("", "Relu", [h1], outputs=[h2], name="act"),
        ir.Node("", "MatMul", [h2, w], outputs=[h3], name="L2"),
        ir.Node("", "Tanh", [h3], outputs=[h4], name="act"),
    ]
    graph = ir.Graph([x], [h4], nodes=nodes, initializers=[w], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=11)
    omny.write(
        model,
        OmnyMetadata(
            cut_points=(CutPoint("cut_1", "act", "h2", (2, 4), "float32", 10, 10),),
            sharding=Sharding(configurations=(ShardConfiguration(2, (10, 10), ("cut_1",)),)),
        ),
    )
    return model


def test_duplicated_node_name_gets_one_verdict():
    """check, split and annotate all refuse a cut after a node name two nodes share."""
    errors = [d for d in check(_duplicated_name_model()) if d.is_error]
    assert [(d.code, d.location) for d in errors] == [("OMNY119", "cut_points[0].after_node")]
    message = errors[0].message
    # Both nodes are named, with their op types and positions in the main graph.
    assert "'act'" in message and "#1 (Relu)" in message and "#3 (Tanh)" in message
    with pytest.raises(SplitError) as split_error:
        split(_duplicated_name_model(), 2)
    assert message in str(split_error.value) and "OMNY119" in str(split_error.value)
    with pytest.raises(CheckError) as check_error:
        annotate(_duplicated_name_model())
    assert [d.code for d in check_error.value.diagnostics] == ["OMNY119"]
    with pytest.raises(BindingError) as binding_error:
        annotate(_duplicated_name_model(), check=False)
    assert binding_error.value.code == "OMNY119" and message in str(binding_error.value)


# ---------------------------------------------------------------------------------------------
# Property: the three verdicts agree on random graphs with random (possibly bad) cut references


_NODE_NAMES = ("a", "b", "c", "d", "e", "f")


@st.composite
def _graph_specs(draw: st.DrawFn) -> dict:
    """A small DAG description: nodes (op, name, inputs), value names, an optional If."""
    nodes = []
    values = ["x"]  # readable main-graph values, by index; x is the graph input
    for i in range(draw(st.integers(2, 7))):
        op = draw(st.sampled_from(["Relu", "Neg", "Add", "MatMul", "Pair", "If"]))
        # Mostly unique names; a few from a small pool, which repeat: ambiguous references.
        name = f"n{i}" if draw(st.integers(0, 4)) else draw(st.sampled_from(_NODE_NAMES))
        count = {"Add": 2}.get(op, 1)
        inputs = [draw(st.integers(0, len(values) - 1)) for _ in range(count)]
        outputs = [f"v{i}"] if op != "Pair" else [f"v{i}", f"v{i}b"]
        if draw(st.integers(0, 9)) == 0:
            outputs[0] = draw(st.sampled_from(values))  # a value name used twice
        nodes.append((op, name, inputs, outputs))
        values.extend(outputs)
    return {"nodes": nodes}


def _build(spec: dict) -> ir.Model:
    x = _value("x")
    c = ir.Value(name="cond", shape=ir.Shape([]), type=ir.TensorType(ir.DataType.BOOL))
    w = ir.Value(
        name="w",
        shape=ir.Shape([4, 4]),
        type=ir.TensorType(F32),
        const_value=ir.tensor(np.eye(4, dtype=np.float32), name="w"),
    )
    values = [x]
    nodes = []
    for op, name, inputs, outputs in spec["nodes"]:
        reads = [values[i] for i in inputs]
        produced = [_value(n) for n in outputs]
        if op == "MatMul":
            node = ir.Node("", op, [reads[0], w], outputs=produced, name=name)
        elif op == "Pair":  # two outputs: never a valid cut (OMNY113)
            node = ir.Node("com.test", op, reads, outputs=produced, name=name)
        elif op == "If":  # bodies read the outer value; their nodes are named "inner"
            bodies = []
            for branch in ("then", "else"):
                inner_out = _value("inner_out")
                inner = ir.Node("", "Neg", [reads[0]], outputs=[inner_out], name="inner")
                bodies.append(ir.Graph([], [inner_out], nodes=[inner], name=branch))
            node = ir.Node(
                "",
                op,
                [c],
                attributes=[
                    ir.AttrGraph("then_branch", bodies[0]),
                    ir.AttrGraph("else_branch", bodies[1]),
                ],
                outputs=produced,
                name=name,
            )
        else:
            node = ir.Node("", op, reads, outputs=produced, name=name)
        nodes.append(node)
        values.extend(produced)
    read = {v for node in nodes for v in node.inputs}
    outputs = [v for node in nodes for v in node.outputs if v not in read]
    graph = ir.Graph(
        [x, c],
        outputs,
        nodes=nodes,
        initializers=[w],
        opset_imports={"": 18, "com.test": 1},
        name="main",
    )
    return ir.Model(graph, ir_version=11)


@st.composite
def _plans(draw: st.DrawFn) -> tuple[dict, OmnyMetadata]:
    spec = draw(_graph_specs())
    model = _build(spec)
    producers = [(v.name, node.name) for node in model.graph for v in node.outputs]
    cut_points = []
    for k in range(draw(st.integers(1, 3))):
        cut_id = f"c{k}" if draw(st.integers(0, 7)) else "c0"  # ids may repeat
        if draw(st.integers(0, 3)):  # mostly a real tensor with its producer's name
            tensor, after = draw(st.sampled_from(producers))
        else:
            names = [after for _, after in producers]
            tensor = draw(st.sampled_from(["x", "w", "inner_out", "nope", *dict(producers)]))
            after = draw(st.sampled_from(["inner", "nope", *names]))
        cut_points.append(CutPoint(cut_id, after, tensor, (2, 4), "float32", 10 * (k + 1), 10))
    ids = sorted({cut.id for cut in cut_points})
    listed = draw(st.permutations(ids))[: draw(st.integers(1, len(ids)))]
    if not draw(st.integers(0, 5)):  # an undefined or a repeated id
        listed.insert(draw(st.integers(0, len(listed))), draw(st.sampled_from([*ids, "zz"])))
    n = len(listed) + 1
    metadata = OmnyMetadata(
        cut_points=tuple(cut_points),
        sharding=Sharding(
            min_shards=1,
            max_shards=8,
            allowed_shards=(n,),
            configurations=(ShardConfiguration(n, (10,) * n, tuple(listed)),),
        ),
    )
    return spec, metadata


def _model(spec: dict, metadata: OmnyMetadata) -> ir.Model:
    model = _build(spec)
    omny.write(model, metadata)
    return model


_CUT_PATH = re.compile(r"cut_points\[(\d+)\]")


@settings(max_examples=150, deadline=None)
@given(_plans())
def test_check_split_and_annotate_agree(case: tuple[dict, OmnyMetadata]):
    """check has no error for the configuration <=> split succeeds <=> annotate succeeds.

    Errors of cut points the configuration does not use do not count (``annotate`` with
    ``configurations=`` does not block on them either). Cuts are judged relaxed: whether a
    cut is strict is a policy of the checker (OMNY320), not a matter of resolution.
    """
    spec, metadata = case
    (configuration,) = metadata.sharding.configurations
    n = configuration.num_shards
    used = {k for k, cut in enumerate(metadata.cut_points) if cut.id in configuration.cut_point_ids}
    errors = []
    for diagnostic in check(_model(spec, metadata), relaxed_cuts=True):
        match = _CUT_PATH.match(diagnostic.location)
        if diagnostic.is_error and (match is None or int(match[1]) in used):
            errors.append(diagnostic)
    try:
        split(_model(spec, metadata), n)
        split_error = None
    except SplitError as error:
        split_error = error
    try:
        annotate(_model(spec, metadata), configurations={n}, relaxed_cuts=True)
        annotate_error = None
    except (CheckError, BindingError) as error:
        annotate_error = error
    verdicts = (not errors, split_error is None, annotate_error is None)
    assert verdicts in ((True, True, True), (False, False, False)), (
        [str(d) for d in errors],
        split_error,
        annotate_error,
    )
    if isinstance(annotate_error, CheckError):
        # The same codes: annotate blocks on the checker's errors.
        assert {d.code for d in annotate_error.diagnostics} == {d.code for d in errors}
