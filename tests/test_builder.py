"""One ``.omny`` builder: ``plan()`` and ``StagesToOmnyPass`` describe the same cuts alike."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice.analysis.omny_document import (
    StagedConfiguration,
    build_metadata,
    memory_mb,
    tensor_info,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.omny._schema import OMNY_METADATA_KEY, OMNY_VERSION_KEY
from onnx_ir_multidevice.passes.annotation import AnnotatePass
from onnx_ir_multidevice.passes.reverse import StagesToOmnyPass
from onnx_ir_multidevice.planner.memory import MIB
from onnx_ir_multidevice.planner.planning import plan
from onnx_ir_multidevice.testing import zoo

MODELS = {
    "resnet": lambda: zoo.resnet(depth_blocks=4),
    "bert": lambda: zoo.bert(layers=3),
    "vit": lambda: zoo.vit(layers=3),
}


def _reversed(model: ir.Model) -> omny.OmnyMetadata:
    """Annotate the planned model, drop its document and derive it back from the stages."""
    AnnotatePass()(model)
    del model.metadata_props[OMNY_METADATA_KEY]
    del model.metadata_props[OMNY_VERSION_KEY]
    StagesToOmnyPass()(model)
    derived = omny.read(model)
    assert derived is not None
    return derived


@pytest.mark.parametrize("name", list(MODELS))
def test_reverse_pass_and_plan_write_the_same_cut_points_model_inputs_and_outputs(name):
    model = MODELS[name]()
    planned = plan(model, shards=[2, 3])
    omny.write(model, planned)
    derived = _reversed(model)

    def cut(c):
        return (c.id, c.after_node, c.tensor_name, c.shape, c.dtype)

    assert [cut(c) for c in derived.cut_points] == [cut(c) for c in planned.cut_points]
    assert derived.inputs == planned.inputs
    assert derived.outputs == planned.outputs
    # The model section is the same but for the memory of a whole run, which the reverse
    # pass counts as the weights only (it has no activation model).
    assert dataclasses.replace(derived.model, inference_memory_mb=0) == dataclasses.replace(
        planned.model, inference_memory_mb=0
    )
    assert derived.model.inference_memory_mb == derived.model.total_size_mb
    assert [(c.num_shards, c.cut_point_ids) for c in derived.sharding.configurations] == [
        (c.num_shards, c.cut_point_ids) for c in planned.sharding.configurations
    ]
    assert derived.sharding.allowed_shards == planned.sharding.allowed_shards
    # Memory: the weights a stage reads are part of the planner's full figure.
    for ours, theirs in zip(
        derived.sharding.configurations, planned.sharding.configurations, strict=True
    ):
        assert all(
            a <= b
            for a, b in zip(ours.memory_per_shard_mb, theirs.memory_per_shard_mb, strict=True)
        )
    # Both documents follow the same rounding and running sums, and check clean.
    for document in (planned, derived):
        running = 0
        for c in document.cut_points:
            running += c.shard_memory_mb
            assert c.shard_memory_mb >= 1 and c.cumulative_memory_mb == running
        largest = max(max(c.memory_per_shard_mb) for c in document.sharding.configurations)
        assert document.sharding.max_shard_size_mb == largest
    assert [d for d in check(model) if d.is_error] == []


def test_one_configuration_cut_memory_is_the_stage_before_it():
    model = zoo.bert(layers=3)
    planned = plan(model, shards=[3])
    omny.write(model, planned)
    derived = _reversed(model)
    (configuration,) = derived.sharding.configurations
    assert [c.shard_memory_mb for c in derived.cut_points] == list(
        configuration.memory_per_shard_mb[:-1]
    )


def test_memory_is_rounded_up_to_whole_mib_and_never_zero():
    assert [memory_mb(n) for n in (0, 1, MIB, MIB + 1, 5 * MIB)] == [1, 1, 1, 2, 5]


def _small_graph() -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n", 4]))
    w = ir.Value(name="w", const_value=ir.tensor(np.ones((4, 4), np.float32), name="w"))
    h = ir.Value(name="h")  # no type: the builder infers it
    y = ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n", 4]))
    nodes = [
        ir.Node("", "MatMul", [x, w], outputs=[h], name="mm"),
        ir.Node("", "Relu", [h], outputs=[y], name="relu"),
    ]
    graph = ir.Graph([x], [y], nodes=nodes, initializers=[w], opset_imports={"": 21}, name="g")
    return ir.Model(graph, ir_version=10)


def test_builder_infers_what_the_graph_lacks_and_keeps_existing_ids():
    model = _small_graph()
    sizes = ValueSizes(model.graph)
    h = model.graph.node("mm").outputs[0]
    # The inferred shape keeps the symbolic batch as -1, like the inputs and outputs (issue 9).
    assert tensor_info(h, sizes) == omny.TensorInfo("h", (-1, 4), "float32")
    configuration = StagedConfiguration(cuts=(h,), stage_bytes=(3 * MIB, 0))
    metadata = build_metadata(
        model, [configuration], {h: 3 * MIB}, sizes=sizes, inference_memory_bytes=MIB + 1
    )
    assert metadata.model.total_params == 16 and metadata.model.inference_memory_mb == 2
    assert metadata.sharding.configurations[0].memory_per_shard_mb == (3, 1)
    assert (metadata.sharding.max_shard_size_mb, metadata.sharding.min_vram_mb) == (3, 4)
    renamed = dataclasses.replace(
        metadata, cut_points=(dataclasses.replace(metadata.cut_points[0], id="mine"),)
    )
    again = build_metadata(
        model, [configuration], {h: MIB}, sizes=sizes, inference_memory_bytes=0, existing=renamed
    )
    assert [c.id for c in again.cut_points] == ["mine"]
    assert again.sharding.configurations[0].cut_point_ids == ("mine",)
    assert again.export_info == renamed.export_info
    with pytest.raises(ValueError, match="missing from cut_bytes"):
        build_metadata(model, [configuration], {}, sizes=sizes, inference_memory_bytes=0)
    with pytest.raises(ValueError, match="at least one shard configuration"):
        build_metadata(model, [], {}, sizes=sizes, inference_memory_bytes=0)
