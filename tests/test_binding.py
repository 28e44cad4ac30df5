"""Binding .omny metadata to onnx-ir models: resolution, renames, unresolved placeholders."""

from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice._errors import BindingError
from onnx_ir_multidevice.analysis import assign_stages, boundary_crossings
from onnx_ir_multidevice.binding.bind import BoundPlan, UnresolvedReference, bind
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)

SPEC_EXAMPLE = pathlib.Path(__file__).parent / "data" / "spec_example.json"
FLOAT = ir.DataType.FLOAT


def _spec_model(*, layers: int = 30) -> ir.Model:
    """A chain whose node / value names match the spec example (encoder.layer.<i>)."""
    image = ir.val("image", FLOAT, (1, 8))
    nodes, initializers = [], []
    h = image
    for i in range(1, layers + 1):
        w = ir.Value(
            name=f"encoder.layer.{i}.weight",
            const_value=ir.tensor(np.eye(8, dtype=np.float32)),
        )
        initializers.append(w)
        mm = ir.node("MatMul", [h, w], name=f"encoder.layer.{i}.matmul")
        mm.outputs[0].name = f"encoder.layer.{i}.mm"
        relu = ir.node("Relu", mm.outputs, name=f"encoder.layer.{i}")
        relu.outputs[0].name = f"hidden_states_{i}"
        nodes += [mm, relu]
        h = relu.outputs[0]
    # A node inside an If body, with a name a cut point could wrongly refer to.
    cond = ir.val("flag", ir.DataType.BOOL, ())
    inner = ir.node("Neg", [h], name="decoder.inner")
    inner.outputs[0].name = "decoder.inner_out"
    then_branch = ir.Graph([], inner.outputs, nodes=[inner], name="then")
    other = ir.node("Identity", [h], name="decoder.other")
    other.outputs[0].name = "decoder.other_out"
    else_branch = ir.Graph([], other.outputs, nodes=[other], name="else")
    if_node = ir.node(
        "If",
        [cond],
        attributes={"then_branch": then_branch, "else_branch": else_branch},
        name="decoder.if",
    )
    if_node.outputs[0].name = "masks"
    nodes.append(if_node)
    graph = ir.Graph(
        [image, cond],
        if_node.outputs,
        nodes=nodes,
        initializers=initializers,
        name="main",
        opset_imports={"": 18},
    )
    return ir.Model(graph, ir_version=10)


def _spec_metadata() -> OmnyMetadata:
    return OmnyMetadata.from_json(SPEC_EXAMPLE.read_text())


def _nodes(model: ir.Model) -> dict[str, ir.Node]:
    return {node.name: node for node in model.graph}


def test_spec_example_resolves_except_cut_3():
    model, metadata = _spec_model(), _spec_metadata()
    plan = bind(model, metadata)
    assert isinstance(plan, BoundPlan) and plan.metadata is metadata and plan.model is model
    assert [c.id for c in plan.cut_points] == ["cut_1", "cut_2"]
    nodes = _nodes(model)
    cut_1 = plan.cut_point("cut_1")
    assert cut_1.resolved and cut_1.node is nodes["encoder.layer.12"]
    assert cut_1.value is nodes["encoder.layer.12"].outputs[0]
    assert cut_1.spec is metadata.cut_points[0]
    assert plan.cut_point("cut_3") is None
    two, four = plan.configurations
    assert two.num_shards == 2 and two.index == 0 and two.cut_points == (plan.cut_point("cut_2"),)
    assert four.cut_points[:2] == (cut_1, plan.cut_point("cut_2")) and four.cut_points[2] is None
    assert two.resolved and not four.resolved
    assert plan.unresolved == (
        UnresolvedReference(
            "cut_point",
            "sharding.configurations[1].cut_point_ids[2]",
            "cut_3",
            "is not the id of any entry of cut_points (defined: 'cut_1', 'cut_2'); define the "
            "cut point or remove the id",
            "OMNY132",
        ),
    )
    assert str(plan.unresolved[0]).startswith(
        "sharding.configurations[1].cut_point_ids[2]: cut_point 'cut_3' is not the id"
    )
    assert plan.configuration_for(2) is two and plan.configuration_for(4) is four
    assert plan.configuration_for(3) is None
    # Unchanged: the very same metadata object, byte-identical JSON.
    assert plan.to_metadata() is metadata
    assert plan.to_metadata().to_json() == SPEC_EXAMPLE.read_text()


def test_cut_values_feed_stage_assignment():
    model = _spec_model()
    plan = bind(model, _spec_metadata())
    two = plan.configuration_for(2)
    (cut,) = two.cut_values()
    stages = assign_stages(model.graph, [cut])
    (boundary,) = boundary_crossings(model.graph, stages)
    assert [v.name for v in boundary.activations] == ["hidden_states_24"]
    with pytest.raises(BindingError, match=r"configurations\[1\]\.cut_point_ids\[2\].*'cut_3'"):
        plan.configuration_for(4).cut_values()


def test_renames_follow_into_metadata():
    model, metadata = _spec_model(), _spec_metadata()
    plan = bind(model, metadata)
    nodes = _nodes(model)
    nodes["encoder.layer.12"].name = "blocks.11"
    nodes["encoder.layer.24"].outputs[0].name = "h24"
    model.graph.inputs[0].name = "pixels"
    new = plan.to_metadata()
    assert new is not metadata
    assert new.cut_points[0].after_node == "blocks.11"
    assert new.cut_points[0].tensor_name == "hidden_states_12"
    assert new.cut_points[1].after_node == "encoder.layer.24"
    assert new.cut_points[1].tensor_name == "h24"
    assert new.inputs[0].name == "pixels" and new.outputs is metadata.outputs
    # Everything else is carried over unchanged (same objects).
    assert new.sharding is metadata.sharding and new.model is metadata.model
    assert new.cut_points[0] == dataclasses.replace(metadata.cut_points[0], after_node="blocks.11")
    # The rewritten document parses back to the new names and binds again.
    again = OmnyMetadata.from_json(new.to_json())
    assert again.cut_point("cut_1").after_node == "blocks.11"
    rebound = bind(model, again)
    assert rebound.cut_point("cut_1").node is nodes["encoder.layer.12"]
    assert [u.name for u in rebound.unresolved] == ["cut_3"]


def test_single_rename_keeps_other_entries_identical():
    model, metadata = _spec_model(), _spec_metadata()
    plan = bind(model, metadata)
    _nodes(model)["encoder.layer.24"].name = "renamed"
    new = plan.to_metadata()
    assert new.cut_points[0] is metadata.cut_points[0]
    assert new.cut_points[1] is not metadata.cut_points[1]
    assert new.inputs is metadata.inputs


def test_lost_name_fails_closed():
    model = _spec_model()
    plan = bind(model, _spec_metadata())
    _nodes(model)["encoder.layer.12"].name = None
    with pytest.raises(BindingError, match=r"cut_points\[0\]\.after_node.*'encoder.layer.12'"):
        plan.to_metadata()


def test_wrong_argument_types_say_what_to_pass(tmp_path):
    model = _spec_model(layers=3)
    metadata = _spec_metadata()
    path = tmp_path / "m.onnx"
    ir.save(model, path)
    for bad_model in (ir.to_proto(model), None, 3):
        with pytest.raises(TypeError, match=r"bind\(\) takes an onnx_ir\.Model or a path") as info:
            bind(bad_model, metadata)
        assert "onnx_ir.from_proto(proto)" in str(info.value)
    for bad_metadata in (metadata.to_json(), {"version": "1.0"}, path):
        with pytest.raises(TypeError, match=r"bind\(\) takes an OmnyMetadata as metadata") as info:
            bind(model, bad_metadata)
        message = str(info.value)
        assert type(bad_metadata).__name__ in message
        assert "omny.read(model)" in message and "OmnyMetadata.from_json" in message
    for no_plan in (model, path):  # no metadata given, none in the model: typed, says how
        with pytest.raises(BindingError, match=r"returns None.*omny plan"):
            bind(no_plan)
        with pytest.raises(BindingError, match=r"has no \.omny metadata"):
            bind(no_plan, None)
    # A model passed first with metadata in the wrong place is reported for the model.
    with pytest.raises(TypeError, match="as model, not OmnyMetadata"):
        bind(metadata, model)


def test_bind_takes_a_path_as_plan_split_verify_annotate_and_check_do(tmp_path):
    """`bind(path)` raised TypeError while plan, split, verify, annotate and check take a
    path: it loads the file with the package's `load` (the file is not modified) and binds
    the model's own plan, or the metadata passed."""
    from onnx_ir_multidevice import load, omny, save

    model = _spec_model(layers=30)
    omny.write(model, _spec_metadata())
    path = tmp_path / "m.omny"
    save(model, path)
    before = path.read_bytes()
    expected = bind(load(path))
    for given in (path, str(path)):
        plan = bind(given)
        assert isinstance(plan.model, ir.Model) and plan.model is not model
        assert [c.id for c in plan.cut_points] == [c.id for c in expected.cut_points]
        assert [c.node.name for c in plan.cut_points] == [c.node.name for c in expected.cut_points]
        assert plan.cut_points[0].node.graph is plan.model.graph  # bound to the loaded model
        assert plan.unresolved == expected.unresolved
        assert bind(given, _spec_metadata()).to_metadata() == plan.to_metadata()
    assert path.read_bytes() == before
    from onnx_ir_multidevice import OmnyIOError

    with pytest.raises(OmnyIOError):
        bind(tmp_path / "missing.omny")


def _metadata(cut_points, configurations=(), inputs=(), outputs=()) -> OmnyMetadata:
    return OmnyMetadata(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        cut_points=tuple(cut_points),
        sharding=Sharding(configurations=tuple(configurations)),
    )


@pytest.mark.parametrize(
    ("after_node", "tensor_name", "expected"),
    [
        ("no.such.node", "hidden_states_3", [("node", "after_node", "is not a node of the main")]),
        ("encoder.layer.3", "nope", [("value", "tensor_name", "is not a tensor of the main")]),
        (
            "encoder.layer.3",
            "hidden_states_4",
            [("value", "tensor_name", "is an output of node 'encoder.layer.4', not an output")],
        ),
        ("encoder.layer.3", "image", [("value", "tensor_name", "is a graph input, not")]),
        (
            "encoder.layer.3",
            "encoder.layer.3.weight",
            [("value", "tensor_name", "is an initializer, not")],
        ),
        (
            "decoder.inner",
            "decoder.inner_out",
            [
                ("node", "after_node", "is inside the control-flow body 'then'"),
                ("value", "tensor_name", "is a value inside a control-flow body"),
            ],
        ),
    ],
)
def test_unresolved_cut_point_keeps_its_names(after_node, tensor_name, expected):
    model = _spec_model(layers=4)
    spec = CutPoint("c", after_node, tensor_name, (1, 8))
    metadata = _metadata(
        [spec], [ShardConfiguration(2, (1, 1), ("c",))], [TensorInfo("image", (1, 8))]
    )
    plan = bind(model, metadata)
    cut = plan.cut_point("c")
    assert not cut.resolved and cut.spec is spec
    assert [(u.kind, u.json_path, u.name) for u in plan.unresolved] == [
        (kind, f"cut_points[0].{field}", getattr(spec, field)) for kind, field, _ in expected
    ]
    for unresolved, (_, _, reason) in zip(plan.unresolved, expected, strict=True):
        assert reason in unresolved.reason
    assert not plan.configurations[0].resolved
    with pytest.raises(BindingError, match=r"cut point 'c' \(cut_points\[0\]\) does not resolve"):
        plan.configurations[0].cut_values()
    # Written back unchanged, even after renames elsewhere.
    _nodes(model)["encoder.layer.1"].name = "x"
    assert plan.to_metadata() is metadata


def test_unresolved_parts_keep_spec_names_while_bound_parts_follow():
    model = _spec_model(layers=4)
    spec = CutPoint("c", "encoder.layer.3", "missing", (1, 8))
    plan = bind(model, _metadata([spec]))
    cut = plan.cut_point("c")
    assert cut.node is _nodes(model)["encoder.layer.3"] and cut.value is None
    cut.node.name = "layer3"
    new = plan.to_metadata().cut_points[0]
    assert (new.after_node, new.tensor_name) == ("layer3", "missing")


def test_ambiguous_names_are_unresolved():
    model = _spec_model(layers=4)
    _nodes(model)["encoder.layer.2"].name = "encoder.layer.3"
    plan = bind(model, _metadata([CutPoint("c", "encoder.layer.3", "hidden_states_3", (1,))]))
    (unresolved,) = plan.unresolved
    assert unresolved.kind == "node" and "ambiguous: 2 nodes" in unresolved.reason
    assert unresolved.code == "OMNY119" and "(#3 (Relu), #5 (Relu))" in unresolved.reason


def test_inputs_and_outputs_bind_by_name():
    model = _spec_model(layers=2)
    metadata = _metadata(
        [],
        inputs=[TensorInfo("image", (1, 8)), TensorInfo("text", (1, 4), "int64")],
        outputs=[TensorInfo("masks", (1, 8)), TensorInfo("hidden_states_1", (1, 8))],
    )
    plan = bind(model, metadata)
    assert plan.inputs[0].value is model.graph.inputs[0] and plan.inputs[1].value is None
    assert plan.outputs[0].value is model.graph.outputs[0]
    assert [(u.kind, u.json_path, u.name) for u in plan.unresolved] == [
        ("input", "inputs[1].name", "text"),
        ("output", "outputs[1].name", "hidden_states_1"),  # a tensor, not a graph output
    ]
    model.graph.outputs[0].name = "segmentation"
    new = plan.to_metadata()
    assert [t.name for t in new.outputs] == ["segmentation", "hidden_states_1"]
    assert new.outputs[1] is metadata.outputs[1] and new.inputs is metadata.inputs


def test_duplicate_cut_ids_bind_to_the_first():
    model = _spec_model(layers=4)
    first = CutPoint("c", "encoder.layer.1", "hidden_states_1", (1, 8))
    second = CutPoint("c", "encoder.layer.2", "hidden_states_2", (1, 8))
    plan = bind(model, _metadata([first, second], [ShardConfiguration(2, (1, 1), ("c",))]))
    assert plan.cut_point("c").spec is first
    assert plan.configurations[0].cut_points[0] is plan.cut_points[0]
    # The second definition is reported (the checker's OMNY118) and makes every
    # configuration that names the id unusable, as the checker says.
    (duplicate,) = plan.unresolved
    assert (duplicate.code, duplicate.json_path) == ("OMNY118", "cut_points[1].id")
    assert plan.cut_points[0].resolved and not plan.cut_points[1].resolved
    assert not plan.configurations[0].resolved
    with pytest.raises(BindingError, match=r"cut_point_ids\[0\].*OMNY118") as error:
        plan.configurations[0].cut_values()
    assert error.value.code == "OMNY118"


def test_bind_does_not_modify_the_model():
    model = _spec_model()
    before = ir.to_proto(model).SerializeToString()
    bind(model, _spec_metadata()).to_metadata()
    assert ir.to_proto(model).SerializeToString() == before


def _bind_cpu_seconds(layers: int) -> float:
    model = _spec_model(layers=layers)
    cut_points = [
        CutPoint(f"cut_{i}", f"encoder.layer.{i}", f"hidden_states_{i}", (1, 8))
        for i in range(1, layers + 1)
    ]
    configurations = [ShardConfiguration(2, (1, 1), (f"cut_{i}",)) for i in range(1, layers + 1)]
    metadata = _metadata(cut_points, configurations)
    start = time.thread_time()  # this thread's CPU time only
    plan = bind(model, metadata)
    assert plan.to_metadata() is metadata
    elapsed = time.thread_time() - start
    assert all(c.resolved for c in plan.cut_points) and plan.unresolved == ()
    return elapsed


def test_bind_scales_linearly():
    t_small = min(_bind_cpu_seconds(500) for _ in range(2))
    t_large = min(_bind_cpu_seconds(2000) for _ in range(2))
    # 4x the cut points and nodes: about 4x the time when linear, 16x when quadratic.
    assert t_large < 8 * t_small + 0.05, (t_small, t_large)


def test_one_rule_chooses_a_configuration_everywhere():
    """Sharding.configuration_index is the one home; no other module picks by num_shards."""
    a = ShardConfiguration(num_shards=2, memory_per_shard_mb=(1, 1), cut_point_ids=("x",))
    b = ShardConfiguration(num_shards=3, memory_per_shard_mb=(1, 1, 1), cut_point_ids=("x", "y"))
    c = ShardConfiguration(num_shards=2, memory_per_shard_mb=(2, 2), cut_point_ids=("y",))
    sharding = Sharding(configurations=(a, b, c))
    assert [sharding.configuration_index(n) for n in (1, 2, 3)] == [None, 0, 1]
    assert [sharding.configuration_index(2, i) for i in (-1, 0, 2, 3)] == [None, 0, 2, None]
    assert sharding.configuration_index(2, c) == 2 and sharding.configuration_index(3, b) == 1
    assert sharding.configuration_index(2, dataclasses.replace(c)) == 2  # an equal copy
    assert sharding.configuration_index(2, dataclasses.replace(c, num_shards=5)) is None
    assert sharding.configuration_index() is None  # several: no default
    assert Sharding(configurations=(b,)).configuration_index() == 0
    assert Sharding().configuration_index() is None and Sharding().configuration_index(2) is None

    # binding, split, exporters and OAAX ask it, and none spells the rule again
    package = pathlib.Path(__file__).resolve().parent.parent / "onnx_ir_multidevice"
    for path in package.rglob("*.py"):
        if path.name != "_schema.py":
            code = [line.split("#")[0] for line in path.read_text().splitlines()]
            assert not [line for line in code if ".num_shards == " in line], path
