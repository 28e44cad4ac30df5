"""replace_all_uses_preserving keeps the sharding specs onnx-ir's replace_all_uses_with drops."""

from __future__ import annotations

import onnx_ir as ir

from onnx_ir_multidevice.graph.preserve import move_sharding, replace_all_uses_preserving

F32 = ir.TensorType(ir.DataType.FLOAT)


def _model():
    """x -> Identity -> y -> Relu -> z, and y -> Neg -> w; both consumers bind y to device 1."""
    x = ir.Value(name="x", shape=ir.Shape([4]), type=F32)
    y = ir.Value(name="y", shape=ir.Shape([4]), type=F32)
    identity = ir.Node("", "Identity", [x], outputs=[y], name="id")
    relu = ir.Node("", "Relu", [y], outputs=[ir.Value(name="z")], name="relu")
    neg = ir.Node("", "Neg", [y], outputs=[ir.Value(name="w")], name="neg")
    graph = ir.Graph(
        [x], [relu.outputs[0], neg.outputs[0]], nodes=[identity, relu, neg], opset_imports={"": 18}
    )
    model = ir.Model(graph, ir_version=11)
    conf = model.add_device_configuration("c", num_devices=2)
    identity.device_configurations = (
        ir.NodeDeviceConfiguration(conf, (ir.ShardingSpec(value=y, device=(0,)),), 0),
    )
    for consumer in (relu, neg):
        consumer.device_configurations = (
            ir.NodeDeviceConfiguration(conf, (ir.ShardingSpec(value=y, device=(1,)),), 1),
        )
    return model, conf, x, y, relu, neg


def test_onnx_ir_replace_all_uses_with_drops_specs():
    """The raw onnx-ir behaviour this module works around."""
    _, _, x, y, relu, _neg = _model()
    y.replace_all_uses_with(x)
    assert relu.inputs[0] is x
    assert relu.sharding_of(x) == () and relu.sharding_of(y) == ()
    assert relu.device_configurations[0].sharding_specs == ()  # the placement is gone
    assert relu.device_configurations[0].pipeline_stage == 1


def test_replace_all_uses_preserving_moves_specs():
    model, conf, x, y, relu, neg = _model()
    assert replace_all_uses_preserving(y, x) == 2
    for consumer in (relu, neg):
        (spec,) = consumer.sharding_of(x)
        assert spec.value is x and spec.device == (1,)
        assert consumer.device_configurations[0].configuration is conf
        assert consumer.device_configurations[0].pipeline_stage == 1
    # Survives serialization, bound to the right objects.
    restored = ir.from_proto(ir.to_proto(model))
    relu2 = next(n for n in restored.graph if n.name == "relu")
    assert relu2.device_configurations[0].sharding_specs[0].value is relu2.inputs[0]
    assert relu2.inputs[0].name == "x"


def test_existing_spec_of_the_replacement_wins():
    x = ir.Value(name="x", shape=ir.Shape([4]), type=F32)
    y = ir.Value(name="y", shape=ir.Shape([4]), type=F32)
    identity = ir.Node("", "Identity", [x], outputs=[y], name="id")
    add = ir.Node("", "Add", [y, x], outputs=[ir.Value(name="z")], name="add")
    neg = ir.Node("", "Neg", [y], outputs=[ir.Value(name="w")], name="neg")
    graph = ir.Graph([x], [add.outputs[0], y], nodes=[identity, add, neg], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=11)
    conf = model.add_device_configuration("c", num_devices=2)
    add.device_configurations = (
        ir.NodeDeviceConfiguration(
            conf, (ir.ShardingSpec(value=y, device=(1,)), ir.ShardingSpec(value=x, device=(0,)))
        ),
    )
    neg.device_configurations = (
        ir.NodeDeviceConfiguration(conf, (ir.ShardingSpec(value=y, device=(1,)),)),
    )
    moved = replace_all_uses_preserving(y, x, replace_graph_outputs=True)
    assert moved == 1  # neg got one; add already had its own spec of x, which stays
    assert [s.device for s in add.sharding_of(x)] == [(0,)]
    assert [s.device for s in neg.sharding_of(x)] == [(1,)]
    assert graph.outputs[1] is x


def test_move_sharding_creates_an_entry():
    model, _conf, _x, y, relu, _neg = _model()
    other = model.add_device_configuration("d", num_devices=2)
    spec = ir.ShardingSpec(value=y, device=(1,))
    assert move_sharding(relu, other, spec, relu.inputs[0])
    assert relu.device_configurations[-1].configuration is other
    assert not move_sharding(relu, other, spec, relu.inputs[0])  # already there
