"""The graph fingerprint, the per-graph cache, and the analyses reused through it (issue 17 §8).

A result kept for a graph must never be reused after the graph changed: every kind of change
onnx-ir allows must change the fingerprint, annotations must not, and the shapes, the index
and the checker's findings reused through the cache must equal a fresh computation after any
sequence of changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_ir_multidevice import omny
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.graph.fingerprint import GraphCache, GraphFingerprint
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.testing import zoo


def _node(model: ir.Model, name: str) -> ir.Node:
    return next(n for n in model.graph if n.name == name)


def _value(model: ir.Model, name: str) -> ir.Value:
    return next(v for n in model.graph for v in n.outputs if v.name == name)


def _insert_identity(model: ir.Model) -> None:
    node = _node(model, "layer.0.out")
    out = ir.Value(name="extra")
    extra = ir.Node("", "Identity", [node.outputs[0]], outputs=[out], name="extra")
    model.graph.insert_after(node, extra)


def _remove_output_node(model: ir.Model) -> None:
    graph = model.graph
    out = graph.outputs[0]
    producer = out.producer()
    graph.outputs[0] = producer.inputs[0]
    graph.remove(producer, safe=True)


def _reorder(model: ir.Model) -> None:
    graph = model.graph
    first = graph[0]
    graph.remove(first)
    graph.append(first)


def _replace_input(model: ir.Model) -> None:
    node = _node(model, "layer.0.attn.residual")
    node.replace_input_with(1, node.inputs[0])


def _replace_attribute(model: ir.Model) -> None:
    node = _node(model, "layer.0.attn.q_heads")
    node.attributes["perm"] = ir.AttrInt64s("perm", [0, 1, 2, 3])


def _remove_attribute(model: ir.Model) -> None:
    del _node(model, "layer.0.attn.probs").attributes["axis"]


def _set_op_type(model: ir.Model) -> None:
    _node(model, "layer.0.mlp.act.erf").op_type = "Tanh"


def _set_domain(model: ir.Model) -> None:
    _node(model, "layer.0.mlp.act.erf").domain = "com.example"


def _set_version(model: ir.Model) -> None:
    _node(model, "layer.0.mlp.act.erf").version = 13


def _set_overload(model: ir.Model) -> None:
    _node(model, "layer.0.mlp.act.erf").overload = "other"


def _set_shape(model: ir.Model) -> None:
    _value(model, "layer.0.out").shape = ir.Shape(["batch", "seq", 32])


def _set_type(model: ir.Model) -> None:
    _value(model, "layer.0.out").type = ir.TensorType(ir.DataType.FLOAT16)


def _shape_in_place(model: ir.Model) -> None:
    model.graph.inputs[0].shape = ir.Shape(["batch", "seq"])  # not frozen
    fingerprint = GraphFingerprint(model.graph)
    model.graph.inputs[0].shape[1] = 7
    assert GraphFingerprint(model.graph) != fingerprint


def _dtype_in_place(model: ir.Model) -> None:
    model.graph.inputs[0].type.dtype = ir.DataType.INT32


def _replace_initializer_tensor(model: ir.Model) -> None:
    value = model.graph.initializers["attention.split_shape"]
    value.const_value = ir.tensor(np.asarray([0, -1, 4, 4], np.int64), name=value.name)


def _add_initializer(model: ir.Model) -> None:
    extra = ir.Value(name="unused", const_value=ir.tensor(np.zeros(3, np.float32), name="unused"))
    model.graph.register_initializer(extra)


def _remove_input(model: ir.Model) -> None:
    model.graph.inputs.pop()


def _add_output(model: ir.Model) -> None:
    model.graph.outputs.append(_value(model, "layer.0.out"))


def _set_opset(model: ir.Model) -> None:
    model.graph.opset_imports[""] = 17


def _rename_value(model: ir.Model) -> None:
    _value(model, "layer.0.out").name = "renamed"


def _rename_input(model: ir.Model) -> None:
    model.graph.inputs[0].name = "tokens"


def _rename_node(model: ir.Model) -> None:
    _node(model, "layer.0.out").name = "renamed"


CHANGES: dict[str, Callable[[ir.Model], None]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _insert_identity,
        _remove_output_node,
        _reorder,
        _replace_input,
        _replace_attribute,
        _remove_attribute,
        _set_op_type,
        _set_domain,
        _set_version,
        _set_overload,
        _set_shape,
        _set_type,
        _shape_in_place,
        _dtype_in_place,
        _replace_initializer_tensor,
        _add_initializer,
        _remove_input,
        _add_output,
        _set_opset,
        _rename_value,
        _rename_input,
        _rename_node,
    )
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_every_change_changes_the_fingerprint(change):
    model = zoo.synthetic_transformer(2)
    before = GraphFingerprint(model.graph)
    assert GraphFingerprint(model.graph) == before
    change(model)
    assert GraphFingerprint(model.graph) != before


def _annotations(model: ir.Model, name: str = "pipe") -> None:
    graph = model.graph
    model.ir_version = 11
    config = model.add_device_configuration(name, num_devices=2)
    for i, node in enumerate(graph):
        node.set_pipeline_stage(config, 0 if i < len(graph) // 2 else 1)
        node.metadata_props["note"] = "x"
        node.doc_string = "annotated"
        node.meta["seen"] = True
    model.metadata_props["omnynet_version"] = "1.0"
    graph.doc_string = "annotated"
    for value in graph.initializers.values():
        value.metadata_props["note"] = "x"


def test_annotations_do_not_change_the_fingerprint():
    model = zoo.synthetic_transformer(2)
    before = GraphFingerprint(model.graph)
    _annotations(model)
    assert GraphFingerprint(model.graph) == before


def test_a_change_inside_a_subgraph_changes_the_fingerprint():
    model = zoo.control_flow()
    before = GraphFingerprint(model.graph)
    branch = _node(model, "branch").attributes["then_branch"].value
    next(iter(branch)).op_type = "Mul"
    assert GraphFingerprint(model.graph) != before


def test_the_cache_is_kept_while_unchanged_and_dropped_after_a_change():
    model = zoo.synthetic_transformer(2)
    cache = GraphCache.of(model.graph)
    calls = []
    assert cache.get("answer", lambda: calls.append(1) or 42) == 42
    _annotations(model)
    again = GraphCache.of(model.graph)
    assert again is cache and again.get("answer", lambda: calls.append(1) or 0) == 42
    assert calls == [1]
    _set_shape(model)
    fresh = GraphCache.of(model.graph)
    assert fresh is not cache and "answer" not in fresh
    GraphCache.invalidate(model.graph)  # the explicit hook
    assert GraphCache.of(model.graph) is not fresh


def test_a_deep_copy_of_a_model_does_not_carry_the_results():
    import copy

    model = zoo.synthetic_transformer(1)
    index = GraphIndex.for_model(model)
    twin = copy.deepcopy(model)
    twin_index = GraphIndex.for_model(twin)
    assert twin_index is not index and twin_index.graph is twin.graph
    assert GraphIndex.for_model(model) is index


def test_for_model_reuses_the_index_until_the_graph_changes():
    model = zoo.synthetic_transformer(2)
    index = GraphIndex.for_model(model)
    assert GraphIndex.for_model(model) is index
    _insert_identity(model)
    rebuilt = GraphIndex.for_model(model)
    assert rebuilt is not index and len(rebuilt.nodes) == len(index.nodes) + 1
    assert rebuilt.nodes == GraphIndex.build(model.graph).nodes


def _answers(shapes: ValueShapes, graph: ir.Graph) -> list:
    return [
        (v.name, shapes.dtype(v), shapes.shape(v), shapes.estimate(v), shapes.symbolic(v))
        for node in graph
        for v in node.outputs
    ]


def test_cached_shapes_follow_a_change_of_the_graph():
    model = zoo.synthetic_transformer(2)
    out = _value(model, "layer.1.out")
    first = ValueShapes.cached(model.graph, {"seq": 8})
    assert first.shape(out) == (1, 8, 32)
    assert ValueShapes.cached(model.graph, {"seq": 8}) is first
    assert ValueShapes.cached(model.graph, {"seq": 9}) is not first  # other dims: other key
    # Pin the sequence length in the file: the cached answer would now be wrong.
    for value in model.graph.inputs:
        value.shape = ir.Shape(["batch", 5])
    again = ValueShapes.cached(model.graph, {"seq": 8})
    assert again is not first
    assert again.shape(out) == ValueShapes(model.graph, {"seq": 8}).shape(out) == (1, 5, 32)


@pytest.mark.parametrize("focus_at", [0.0, 0.3, 0.9])
def test_a_focused_walk_answers_every_value_like_a_whole_one(focus_at):
    model = zoo.synthetic_transformer(3)
    values = [v for node in model.graph for v in node.outputs]
    focus = values[int(len(values) * focus_at)]
    focused = ValueShapes(model.graph, {"batch": 2}, focus=[focus])
    focused.shape(focus)
    walked = sum(focused._walked)
    assert 0 < walked < len(model.graph)  # only the focus's cone at first
    whole = ValueShapes(model.graph, {"batch": 2})
    assert _answers(focused, model.graph) == _answers(whole, model.graph)
    assert sum(focused._walked) > walked  # the later values came from extensions of the walk


_MUTATIONS = st.lists(
    st.sampled_from(
        [
            "seq_dim",
            "split_target",
            "insert_transpose",
            "state_a_shape",
            "drop_a_layer",
            "annotate",
        ]
    ),
    min_size=1,
    max_size=4,
)


def _mutate(model: ir.Model, what: str, step: int) -> None:
    graph = model.graph
    if what == "seq_dim":
        graph.inputs[0].shape = ir.Shape(["batch", 4 + step])
        graph.inputs[1].shape = ir.Shape(["batch", 4 + step])
    elif what == "split_target":
        value = graph.initializers["attention.split_shape"]
        heads = 4 if step % 2 else 2
        target = np.asarray([0, -1, heads, 32 // heads], np.int64)
        value.const_value = ir.tensor(target, name=value.name)
    elif what == "insert_transpose":  # a transposed, then restored, attention context
        node = _node(model, "layer.0.attn.context")
        out = node.outputs[0]
        consumers = list(out.uses())
        perm = [ir.AttrInt64s("perm", [0, 1, 3, 2])]
        swapped, restored = ir.Value(name=f"swap{step}"), ir.Value(name=f"unswap{step}")
        swap = ir.Node("", "Transpose", [out], perm, outputs=[swapped], name=f"swap{step}")
        back = ir.Node("", "Transpose", [swapped], perm, outputs=[restored], name=f"back{step}")
        graph.insert_after(node, [swap, back])
        for use in consumers:
            use.node.replace_input_with(use.idx, restored)
    elif what == "state_a_shape":
        _value(model, "layer.0.ln_2").shape = ir.Shape(["batch", "seq", 32])
        _value(model, "layer.0.ln_2").type = ir.TensorType(ir.DataType.FLOAT)
    elif what == "drop_a_layer":
        last = _value(model, "ln_f")
        producer = last.producer()
        producer.replace_input_with(0, _value(model, "layer.0.out"))
    else:
        _annotations(model, f"pipe{step}")


@settings(max_examples=25, deadline=None)
@given(_MUTATIONS)
def test_cached_shapes_equal_a_fresh_computation_after_any_changes(mutations):
    model = zoo.synthetic_transformer(2)
    dims = {"seq": 6}
    ValueShapes.cached(model.graph, dims).shape(model.graph.outputs[0])
    for step, what in enumerate(mutations):
        _mutate(model, what, step)
        cached = ValueShapes.cached(model.graph, dims)
        fresh = ValueShapes(model.graph, dims)
        assert _answers(cached, model.graph) == _answers(fresh, model.graph)


def _planned(layers: int = 4) -> ir.Model:
    model = zoo.synthetic_transformer(layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_model(model, shards=[2, 4])
    omny.write(model, result.metadata)
    return model


def _codes(diagnostics) -> list[tuple[str, str]]:
    return sorted((d.code, d.location) for d in diagnostics)


def test_check_after_annotate_reuses_the_analysis_and_sees_a_change():
    model = _planned()
    annotate(model)
    index = GraphIndex.for_model(model)
    assert index is GraphIndex.for_model(model)  # annotate left it for check
    assert _codes(check(model)) == _codes(check(_copy(model)))
    # State a wrong shape on a cut tensor after annotating: check must see it (OMNY116).
    cut = omny.read(model).cut_points[0]
    value = _value(model, cut.tensor_name)
    value.type = ir.TensorType(ir.DataType.FLOAT)
    value.shape = ir.Shape([1, 3, 5])
    codes = [d.code for d in check(model)]
    assert "OMNY116" in codes
    assert _codes(check(model)) == _codes(check(_copy(model)))


def _copy(model: ir.Model) -> ir.Model:
    return ir.serde.deserialize_model(ir.serde.serialize_model(model))


def test_check_infers_untyped_cut_shapes_anew_after_a_change():
    model = _planned()
    for cut in omny.read(model).cut_points:  # untyped, as other writers leave them
        value = _value(model, cut.tensor_name)
        value.type = value.shape = None
    annotate(model)
    before = _codes(check(model))
    assert before == _codes(check(_copy(model)))
    dynamic = [c for c in before if c[0] == "OMNY114" and c[1].startswith("value:")]
    assert dynamic  # the symbolic seq crosses every cut
    for value in model.graph.inputs:  # pin seq in the file: the cut tensors become static
        value.shape = ir.Shape([1, 7])
    after = _codes(check(model))
    assert after == _codes(check(_copy(model)))
    assert not [c for c in after if c[0] == "OMNY114" and c[1].startswith("value:")]


# ---------------------------------------------------------------------------------------------
# node_list: the C-level read of a graph's nodes equals onnx-ir's own iteration


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abrmx"), st.integers(0, 50)), max_size=40))
def test_node_list_matches_iteration_after_any_edits(edits):
    """Appends, inserts before/after, removals and moves in any order: ``node_list(graph)`` is
    ``list(graph)``, whether the fast read applies (insertion order is the list's order) or
    the fallback does."""
    from onnx_ir_multidevice.graph.fingerprint import node_list

    graph = ir.Graph([], [], nodes=[], name="g")
    made = 0
    for kind, k in edits:
        nodes = list(graph)
        if kind == "a" or not nodes:
            graph.append(ir.Node("", "Identity", [], name=f"n{made}"))
            made += 1
        elif kind in "br":
            anchor = nodes[k % len(nodes)]
            new = ir.Node("", "Identity", [], name=f"n{made}")
            made += 1
            (graph.insert_before if kind == "b" else graph.insert_after)(anchor, new)
        elif kind == "m" and len(nodes) > 1:  # move a node to the end
            node = nodes[k % len(nodes)]
            graph.remove(node)
            graph.append(node)
        else:
            graph.remove(nodes[k % len(nodes)])
        assert node_list(graph) == list(graph)
    function = ir.Function("d", "f", "", graph=graph, attributes=[])
    assert node_list(function) == list(function)
