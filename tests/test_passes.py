"""Tests of the passes: annotate (stages, sharding), reverse, strip and check."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_check import _value, annotated, chain, configuration, node, plan

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import BindingError, CheckError
from onnx_ir_multidevice.analysis.stages import assign_stages
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.passes import (
    AnnotatePass,
    AnnotateShardingPass,
    AnnotateStagesPass,
    CheckPass,
    StagesToOmnyPass,
    StripAnnotationsPass,
    configuration_names,
)
from onnx_ir_multidevice.testing import zoo


def stages_of(model: ir.Model, name: str) -> dict[str, int | None]:
    conf = configuration(model, name)
    result = {}
    for n in model.graph:
        entry = next((e for e in n.device_configurations if e.configuration is conf), None)
        result[n.name] = entry.pipeline_stage if entry else None
    return result


def specs_of(model: ir.Model, name: str) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    conf = configuration(model, name)
    result = {}
    for n in model.graph:
        for e in n.device_configurations:
            if e.configuration is conf and e.sharding_specs:
                result[n.name] = [(s.value.name, s.device) for s in e.sharding_specs]
    return result


# --- naming -----------------------------------------------------------------------------------


def test_configuration_names_are_unique_and_deterministic():
    confs = [type("C", (), {"num_shards": n}) for n in (2, 4, 2, 2, 4)]
    assert configuration_names(confs) == [
        "omny/2-shards",
        "omny/4-shards",
        "omny/2-shards#1",
        "omny/2-shards#2",
        "omny/4-shards#1",
    ]


# --- annotate -----------------------------------------------------------------------------------


def test_annotate_stages_and_specs_on_chain():
    model = chain(6)
    plan(model, [["h3"], ["h2", "h4"]])
    result = ir.passes.PassManager([AnnotatePass()])(model)
    assert result.modified and result.model is model
    assert model.ir_version == 11
    assert [c.name for c in model.device_configurations] == ["omny/2-shards", "omny/3-shards"]
    assert [c.num_devices for c in model.device_configurations] == [2, 3]
    assert stages_of(model, "omny/2-shards") == {f"L{i}": int(i >= 3) for i in range(6)}
    assert stages_of(model, "omny/3-shards") == {
        "L0": 0, "L1": 0, "L2": 1, "L3": 1, "L4": 2, "L5": 2,
    }  # fmt: skip
    # Cut h3: output of L2 on device 0, input of L3 on device 1.
    assert specs_of(model, "omny/2-shards") == {"L2": [("h3", (0,))], "L3": [("h3", (1,))]}
    assert specs_of(model, "omny/3-shards") == {
        "L1": [("h2", (0,))],
        "L2": [("h2", (1,))],
        "L3": [("h4", (1,))],
        "L4": [("h4", (2,))],
    }
    assert [d for d in check(model) if d.is_error] == []


def test_annotate_is_idempotent_and_modified_is_exact():
    model = chain(6)
    plan(model, [["h3"], ["h2", "h4"]])
    for pass_ in (AnnotateStagesPass(), AnnotateShardingPass(), AnnotatePass()):
        first = pass_(model)
        second = pass_(model)
        assert second.modified is False, pass_
        assert first.model is model
    before = ir.to_proto(model).SerializeToString()
    assert AnnotatePass()(model).modified is False
    assert ir.to_proto(model).SerializeToString() == before


def test_separate_passes_compose_to_annotate_pass():
    a, b = chain(6), chain(6)
    plan(a, [["h3"], ["h2", "h4"]])
    plan(b, [["h3"], ["h2", "h4"]])
    ir.passes.PassManager([AnnotateStagesPass(), AnnotateShardingPass()])(a)
    AnnotatePass()(b)
    assert ir.to_proto(a).SerializeToString() == ir.to_proto(b).SerializeToString()


def test_select_configurations_and_device_names():
    model = chain(6)
    plan(model, [["h3"], ["h2", "h4"], ["h1"]])
    AnnotatePass(configurations={2}, device_names=["GPU:0", "GPU:1", "GPU:2"])(model)
    names = [c.name for c in model.device_configurations]
    assert names == ["omny/2-shards", "omny/2-shards#1"]
    assert model.device_configurations[0].device_names == ("GPU:0", "GPU:1")
    assert stages_of(model, "omny/2-shards#1")["L1"] == 1
    # New names: the configuration object is replaced and every node rebound to it.
    result = AnnotatePass(configurations=[2], device_names={2: ["cpu", "npu"]})(model)
    assert result.modified
    conf = configuration(model, "omny/2-shards")
    assert conf.device_names == ("cpu", "npu")
    assert all(
        e.configuration is conf or e.configuration.name != conf.name
        for n in model.graph
        for e in n.device_configurations
    )
    # No names given: existing names are kept, nothing changes.
    assert AnnotatePass(configurations=[2])(model).modified is False


def test_annotate_errors():
    with pytest.raises(BindingError, match=r"no .omny metadata"):
        AnnotatePass()(chain(3))
    model = chain(6)
    plan(model, [["h3"]])
    with pytest.raises(BindingError, match=r"\[5\]"):
        AnnotatePass(configurations=[5])(model)
    with pytest.raises(BindingError, match="at least one name per device"):
        AnnotatePass(device_names=["only-one"])(model)
    metadata = omny.read(model)
    bad = dataclasses.replace(metadata.cut_points[0], tensor_name="nope")
    omny.write(model, dataclasses.replace(metadata, cut_points=(bad,)))
    with pytest.raises(BindingError, match="cut_point_ids"):
        AnnotatePass()(model)


def test_annotate_prunes_stale_omny_configurations_only():
    model = annotated()
    foreign = model.add_device_configuration("pipeline", num_devices=1)
    node(model, "L0").set_pipeline_stage(foreign, 0)
    stale = model.add_device_configuration("omny/9-shards", num_devices=9)
    node(model, "L1").set_pipeline_stage(stale, 3)
    assert AnnotatePass()(model).modified
    assert [c.name for c in model.device_configurations] == [
        "omny/2-shards",
        "omny/3-shards",
        "pipeline",
    ]
    assert all(e.configuration is not stale for n in model.graph for e in n.device_configurations)


def test_annotation_survives_proto_round_trip_and_renames():
    model = zoo.bert(layers=3)
    outs = [f"layer.{i}.out" for i in range(2)]
    plan(model, [outs[:1], outs])
    AnnotatePass()(model)
    restored = ir.from_proto(ir.to_proto(model))
    for name in ("omny/2-shards", "omny/3-shards"):
        assert stages_of(restored, name) == stages_of(model, name)
        assert specs_of(restored, name) == specs_of(model, name)
        conf = configuration(restored, name)
        for n in restored.graph:
            for e in n.device_configurations:
                assert e.configuration is conf or e.configuration.name != name
                for spec in e.sharding_specs:
                    assert spec.value in n.inputs or spec.value in n.outputs
    # Renaming the cut tensor renames it in the serialized specs.
    cut = next(v for n in restored.graph for v in n.outputs if v.name == "layer.0.out")
    cut.name = "renamed"
    again = ir.from_proto(ir.to_proto(restored))
    specs = specs_of(again, "omny/2-shards")
    assert specs["layer.0.out"] == [("renamed", (0,))]  # node and value share the name
    consumers = [k for k, v in specs.items() if ("renamed", (1,)) in v]
    assert consumers and "layer.0.out" not in consumers


def test_annotate_control_flow_and_functions():
    model = zoo.control_flow()
    plan(model, [["proj"], ["proj", "branch"]])
    AnnotatePass()(model)
    assert stages_of(model, "omny/3-shards") == {
        "proj": 0, "cond.sum": 1, "cond": 1, "branch": 1, "loop": 2, "output": 2,
    }  # fmt: skip
    branch = node(model, "branch")
    for body in (branch.attributes["then_branch"].value, branch.attributes["else_branch"].value):
        assert all(not n.device_configurations for n in body)  # bodies run with the parent
    # The If reads the cut 'proj' only inside its bodies: no spec on the If itself.
    assert "branch" not in specs_of(model, "omny/2-shards")


def _with_function() -> ir.Model:
    model = chain(4)
    fx = _value("fx")
    fy = _value("fy")
    function = ir.Function(
        "local",
        "Block",
        "",
        graph=ir.Graph([fx], [fy], nodes=[ir.Node("", "Relu", [fx], outputs=[fy])]),
        attributes=[],
    )
    model.functions[function.identifier()] = function
    model.opset_imports["local"] = 1
    last = node(model, "L3")
    out = _value("fout")
    call = ir.Node("local", "Block", [last.outputs[0]], outputs=[out], name="call")
    model.graph.append(call)
    model.graph.outputs[0] = out
    return model


def test_annotate_function_call_site():
    model = _with_function()
    plan(model, [["h2", "h4"]])
    AnnotatePass()(model)
    assert stages_of(model, "omny/3-shards")["call"] == 2
    function = next(iter(model.functions.values()))
    assert all(not n.device_configurations for n in function)
    assert [d for d in check(model) if d.is_error] == []


# --- property test: stages equal a brute-force oracle ----------------------------------------


def _oracle(graph: ir.Graph, cuts: list[ir.Value]) -> dict[str, int]:
    """Stage of a node = 1 + the largest j such that cut j reaches it (0 if none)."""
    stage = {n.name: 0 for n in graph}
    for j, cut in enumerate(cuts):
        stack, seen = [cut], set()
        while stack:
            value = stack.pop()
            for consumer in value.consumers():
                if consumer.name not in seen:
                    seen.add(consumer.name)
                    stage[consumer.name] = max(stage[consumer.name], j + 1)
                    stack.extend(consumer.outputs)
    return stage


@st.composite
def dags_with_cuts(draw):
    n = draw(st.integers(2, 14))
    reads = [
        draw(st.lists(st.integers(0, i), min_size=1, max_size=2, unique=True)) for i in range(n)
    ]
    chosen = draw(st.lists(st.integers(0, n - 1), max_size=min(n, 5), unique=True))
    return reads, sorted(chosen)


def _dag(reads: list[list[int]]) -> ir.Model:
    x = _value("x", (8, 8))
    w = ir.Value(
        name="w",
        shape=ir.Shape([8, 8]),
        type=ir.TensorType(ir.DataType.FLOAT),
        const_value=ir.tensor(np.eye(8, dtype=np.float32), name="w"),
    )
    values = [x]
    nodes = []
    for i, inputs in enumerate(reads):
        ins = [values[k] for k in inputs]
        if len(ins) == 1:
            ins.append(w)
        out = _value(f"v{i}", (8, 8))
        nodes.append(ir.Node("", "MatMul", ins, outputs=[out], name=f"n{i}"))
        values.append(out)
    graph = ir.Graph([x], [values[-1]], nodes=nodes, initializers=[w], opset_imports={"": 18})
    return ir.Model(graph, ir_version=11)


@settings(max_examples=80, deadline=None)
@given(dags_with_cuts())
def test_annotated_stages_equal_brute_force_oracle(case):
    reads, chosen = case
    model = _dag(reads)
    cut_names = [f"v{i}" for i in chosen]
    plan(model, [cut_names])
    AnnotatePass()(model)
    name = f"omny/{len(chosen) + 1}-shards"
    cuts = [v for n in model.graph for v in n.outputs if v.name in cut_names]
    assert stages_of(model, name) == _oracle(model.graph, cuts)
    assert {n.name: s for n, s in assign_stages(model.graph, cuts).items()} == _oracle(
        model.graph, cuts
    )


# --- reverse ---------------------------------------------------------------------------------


def _wide_chain(n: int, width: int) -> ir.Model:
    model = chain(n)
    for i, w in enumerate(model.graph.initializers.values()):
        w.const_value = ir.tensor(np.zeros((width, width), np.float32), name=f"w{i}")
        w.shape = ir.Shape([width, width])
    return model


def test_reverse_inverts_annotate():
    model = annotated()
    original = omny.read(model)
    model.metadata_props.clear()
    result = StagesToOmnyPass()(model)
    assert result.modified
    derived = omny.read(model)
    assert [(c.after_node, c.tensor_name) for c in derived.cut_points] == [
        (c.after_node, c.tensor_name) for c in original.cut_points
    ]
    assert [c.num_shards for c in derived.sharding.configurations] == [2, 3]
    ids = {c.id: c.tensor_name for c in derived.cut_points}
    assert [[ids[i] for i in c.cut_point_ids] for c in derived.sharding.configurations] == [
        ["h3"],
        ["h2", "h4"],
    ]
    assert derived.cut_points[0].shape == (-1, 8) and derived.cut_points[0].dtype == "float32"
    # Running it again changes nothing; annotating from the derived plan gives the same stages.
    assert StagesToOmnyPass()(model).modified is False
    again = chain(6)
    omny.write(again, derived)
    AnnotatePass()(again)
    for name in ("omny/2-shards", "omny/3-shards"):
        assert stages_of(again, name) == stages_of(model, name)
    assert [d for d in check(again) if d.is_error] == []


def test_reverse_keeps_existing_ids_and_fields():
    model = annotated()
    original = omny.read(model)
    StagesToOmnyPass()(model)
    derived = omny.read(model)
    assert [c.id for c in derived.cut_points] == [c.id for c in original.cut_points]
    assert derived.inputs == original.inputs
    assert derived.sharding.allowed_shards == original.sharding.allowed_shards


def test_reverse_memory_is_weight_bytes_in_mib_rounded_up():
    model = _wide_chain(6, 600)  # 600*600*4 bytes = 1.37 MiB per weight
    conf = model.add_device_configuration("hand", num_devices=2)
    for i, n in enumerate(model.graph):
        n.set_pipeline_stage(conf, 0 if i < 2 else 1)
    StagesToOmnyPass()(model)
    metadata = omny.read(model)
    per_weight = 600 * 600 * 4 / 2**20
    expected = [math.ceil(2 * per_weight), math.ceil(4 * per_weight)]
    assert metadata.sharding.configurations[0].memory_per_shard_mb == tuple(expected)
    cut = metadata.cut_points[0]
    assert (cut.tensor_name, cut.shard_memory_mb, cut.cumulative_memory_mb) == (
        "h2",
        expected[0],
        expected[0],
    )
    assert metadata.model.total_params == 6 * 600 * 600
    assert "OMNY120" not in {d.code for d in check(model)}


def test_reverse_hand_staged_resnet():
    model = zoo.resnet(depth_blocks=4)
    model.ir_version = 11  # zoo models are IR 10; multi-device fields need 11 (OMNY200)
    conf = model.add_device_configuration("pipeline", num_devices=2)
    stage = 0
    for n in model.graph:
        n.set_pipeline_stage(conf, stage)
        if n.name == "layer.1.out":
            stage = 1
    StagesToOmnyPass()(model)
    metadata = omny.read(model)
    assert [c.tensor_name for c in metadata.cut_points] == ["layer.1.out"]
    assert [d for d in check(model) if d.is_error] == []


def test_reverse_errors_and_relaxed():
    model = chain(side=True)
    conf = model.add_device_configuration("hand", num_devices=2)
    for n in model.graph:
        n.set_pipeline_stage(conf, 1 if n.name in ("L3", "L4", "L5", "final") else 0)
    with pytest.raises(BindingError, match="2 activations cross boundary 0"):
        StagesToOmnyPass()(model)
    StagesToOmnyPass(relaxed=True)(model)
    assert len(omny.read(model).cut_points) == 1
    with pytest.raises(BindingError, match="no model configuration has pipeline stages"):
        StagesToOmnyPass()(chain(3))
    partial = chain(3)
    conf = partial.add_device_configuration("hand", num_devices=2)
    node(partial, "L0").set_pipeline_stage(conf, 0)
    with pytest.raises(BindingError, match="have no stage"):
        StagesToOmnyPass()(partial)
    with pytest.raises(BindingError, match="not on the model"):
        StagesToOmnyPass(["nope"])(annotated())


# --- strip -----------------------------------------------------------------------------------


def test_strip_removes_only_ours_without_dangling_references():
    model = annotated()
    foreign = model.add_device_configuration("pipeline", num_devices=2)
    for n in model.graph:
        n.set_pipeline_stage(foreign, 0)
    result = StripAnnotationsPass()(model)
    assert result.modified
    assert [c.name for c in model.device_configurations] == ["pipeline"]
    for n in model.graph:
        assert [e.configuration for e in n.device_configurations] == [foreign]
    assert omny.read(model) is not None  # the plan stays
    assert StripAnnotationsPass()(model).modified is False
    proto = ir.to_proto(model)
    ids = {c.name for c in proto.configuration}
    assert all(c.configuration_id in ids for n in proto.graph.node for c in n.device_configurations)
    assert [d for d in check(model) if d.is_error] == []


def test_strip_removes_dangling_placeholders():
    model = annotated()
    conf = configuration(model, "omny/2-shards")
    model.device_configurations = tuple(c for c in model.device_configurations if c is not conf)
    restored = ir.from_proto(ir.to_proto(model))  # nodes now hold placeholders for omny/2-shards
    assert StripAnnotationsPass()(restored).modified
    assert all(
        e.configuration.name != "omny/2-shards"
        for n in restored.graph
        for e in n.device_configurations
    )


# --- check -----------------------------------------------------------------------------------


def test_check_pass_gate():
    model = annotated()
    assert CheckPass()(model).modified is False
    bad = chain(side=True)
    plan(bad, [["h3"]])
    with pytest.raises(CheckError) as info:
        CheckPass()(bad)
    assert {d.code for d in info.value.diagnostics} == {"OMNY320"}
    assert CheckPass(relaxed_cuts=True)(bad).modified is False
    with pytest.raises(CheckError):
        CheckPass(relaxed_cuts=True, warnings_as_errors=True)(bad)
    with pytest.raises(ir.passes.PassError) as wrapped:
        ir.passes.PassManager([AnnotatePass(), CheckPass()])(bad)
    assert isinstance(wrapped.value.__cause__.__cause__, CheckError)
