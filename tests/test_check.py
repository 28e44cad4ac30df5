"""Checker tests: each diagnostic code has a model that triggers it and one that does not."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import omny
from onnx_ir_multidevice._errors import CheckError, OmnyIOError
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice.checker.core import check, check_device_configurations, run_check
from onnx_ir_multidevice.checker.diagnostics import CODES, Diagnostic, Severity
from onnx_ir_multidevice.omny import container as v2
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice.passes.api import annotate
from onnx_ir_multidevice.testing import zoo

DATA = Path(__file__).parent / "data"
F32 = ir.DataType.FLOAT


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def _value(name: str, shape: Sequence[int | str] = ("batch", 8)) -> ir.Value:
    return ir.Value(name=name, shape=ir.Shape(list(shape)), type=ir.TensorType(F32))


def chain(n: int = 6, *, side: bool = False) -> ir.Model:
    """x -> L0 .. L{n-1} (MatMul by a weight each) -> h{n}; optional side branch x -> S -> s
    read by a final Add (an activation that crosses every boundary)."""
    x = _value("x")
    nodes: list[ir.Node] = []
    inits = []
    h = x
    for i in range(n):
        w = ir.Value(
            name=f"w{i}",
            shape=ir.Shape([8, 8]),
            type=ir.TensorType(F32),
            const_value=ir.tensor(np.full((8, 8), 0.1, np.float32), name=f"w{i}"),
        )
        inits.append(w)
        out = _value(f"h{i + 1}")
        nodes.append(ir.Node("", "MatMul", [h, w], outputs=[out], name=f"L{i}"))
        h = out
    if side:
        w = ir.Value(
            name="ws",
            shape=ir.Shape([8, 8]),
            type=ir.TensorType(F32),
            const_value=ir.tensor(np.ones((8, 8), np.float32), name="ws"),
        )
        inits.append(w)
        s = _value("s")
        nodes.insert(0, ir.Node("", "MatMul", [x, w], outputs=[s], name="S"))
        y = _value("y")
        nodes.append(ir.Node("", "Add", [h, s], outputs=[y], name="final"))
        h = y
    graph = ir.Graph(
        [x], [h], nodes=nodes, initializers=inits, opset_imports={"": 18}, name="chain"
    )
    return ir.Model(graph, ir_version=11)


def _huge_input(model: ir.Model) -> ir.Model:
    """``model`` with its graph input's batch dim stated as 2**62 (issue 18 item 17)."""
    model.graph.inputs[0].shape = ir.Shape([2**62, 8])
    return model


def _dims(value: ir.Value) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else -1 for d in value.shape)


def plan(
    model: ir.Model,
    configurations: Sequence[Sequence[str]],
    **sharding: object,
) -> OmnyMetadata:
    """Write a .omny plan with one cut point per named tensor and one configuration per list."""
    values = {v.name: v for node in model.graph for v in node.outputs}
    order = {node: i for i, node in enumerate(model.graph)}
    tensors = sorted(
        {t for c in configurations for t in c}, key=lambda t: order[values[t].producer()]
    )
    cuts = tuple(
        CutPoint(
            id=f"cut_{t}",
            after_node=values[t].producer().name,
            tensor_name=t,
            shape=_dims(values[t]),
            dtype="float32",
            cumulative_memory_mb=10 * (k + 1),
            shard_memory_mb=10,
        )
        for k, t in enumerate(tensors)
    )
    configs = tuple(
        ShardConfiguration(
            num_shards=len(c) + 1,
            memory_per_shard_mb=(10,) * (len(c) + 1),
            cut_point_ids=tuple(f"cut_{t}" for t in c),
        )
        for c in configurations
    )
    fields = {
        "allowed_shards": tuple(sorted({len(c) + 1 for c in configurations})),
        "configurations": configs,
        **sharding,
    }
    metadata = OmnyMetadata(
        inputs=tuple(TensorInfo(v.name, _dims(v)) for v in model.graph.inputs),
        outputs=tuple(TensorInfo(v.name, _dims(v)) for v in model.graph.outputs),
        cut_points=cuts,
        sharding=Sharding(**fields),  # type: ignore[arg-type]
    )
    omny.write(model, metadata)
    return metadata


def planned(**kwargs: object) -> ir.Model:
    model = chain(**kwargs)  # type: ignore[arg-type]
    plan(model, [["h3"], ["h2", "h4"]])
    return model


def annotated(**kwargs: object) -> ir.Model:
    model = planned(**kwargs)
    annotate(model)
    return model


def edit_metadata(model: ir.Model, edit: Callable[[dict], None]) -> ir.Model:
    document = json.loads(model.metadata_props["omnynet_metadata"])
    edit(document)
    model.metadata_props["omnynet_metadata"] = json.dumps(document)
    return model


def node(model: ir.Model, name: str) -> ir.Node:
    return next(n for n in model.graph if n.name == name)


def configuration(model: ir.Model, name: str) -> ir.ModelConfiguration:
    return next(c for c in model.device_configurations if c.name == name)


def hand_staged(num_devices: int, stages: Sequence[int]) -> ir.Model:
    model = chain(len(stages))
    conf = model.add_device_configuration("hand", num_devices=num_devices)
    for n, s in zip(model.graph, stages, strict=True):
        n.set_pipeline_stage(conf, s)
    return model


def with_spec(**spec: object) -> ir.Model:
    """A model whose node L1 shards its input h1 under a 2-device configuration."""
    model = chain(3)
    conf = model.add_device_configuration("tp", num_devices=2)
    l1 = node(model, "L1")
    fields = {"value": l1.inputs[0], "device": (0, 1), **spec}
    l1.device_configurations = (
        ir.NodeDeviceConfiguration(conf, (ir.ShardingSpec(**fields),)),  # type: ignore[arg-type]
    )
    return model


def _sharded(axis: int = 0, num_shards: int = 2) -> ir.ShardedDim:
    return ir.ShardedDim(axis, (ir.SimpleShardedDim(8, num_shards),))


# ---------------------------------------------------------------------------------------------
# Triggers: code -> model (or proto / path) that must produce it
# ---------------------------------------------------------------------------------------------


def _t101() -> onnx.ModelProto:
    proto = ir.to_proto(chain(2))
    proto.graph.node[0].op_type = "NoSuchOp"
    return proto


def _t102() -> ir.Model:
    model = planned()
    del model.metadata_props["omnynet_version"]
    return model


def _t103() -> ir.Model:
    model = planned()
    del model.metadata_props["omnynet_metadata"]
    return model


def _t104() -> ir.Model:
    model = planned()
    model.metadata_props["omnynet_metadata"] = '{"version": "1.0", "cut_points": [1'
    return model


def _t105() -> ir.Model:
    model = edit_metadata(planned(), lambda d: d.__setitem__("version", "2.0"))
    model.metadata_props["omnynet_version"] = "2.0"
    return model


def _t106() -> onnx.ModelProto:
    """A model with training information, which onnx-ir drops and load() refuses."""
    proto = ir.to_proto(annotated())
    proto.training_info.add()
    return proto


def _t107() -> ir.Model:
    model = planned()
    model.metadata_props["omnynet_version"] = "2.0"  # the JSON document says 1.0
    return model


def _saved_with_external_data() -> Path:
    """A planned model saved with its weights in a data file, in a folder removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="omny-check-trigger-"))
    atexit.register(shutil.rmtree, folder, True)
    save(planned(), folder / "m.omny", external_data=True, size_threshold_bytes=0)
    return folder / "m.omny"


def _t108() -> Path:  # a weight read from outside the model's folder
    path = _saved_with_external_data()
    proto = onnx.load(path, load_external_data=False)
    shutil.copyfile(path.parent / "m.omny.data", path.parent.parent / f"{path.parent.name}.bin")
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = f"../{path.parent.name}.bin"
    onnx.save(proto, path)
    return path


def _t109() -> Path:  # the data file changed after the model was saved
    path = _saved_with_external_data()
    with open(path.parent / "m.omny.data", "r+b") as file:
        file.write(b"\xff\xff\xff\xff")
    return path


def _cut(field: str, value: object, k: int = 0) -> Callable[[], ir.Model]:
    def make() -> ir.Model:
        return edit_metadata(planned(), lambda d: d["cut_points"][k].__setitem__(field, value))

    return make


def _sharding(field: str, value: object) -> Callable[[], ir.Model]:
    def make() -> ir.Model:
        return edit_metadata(planned(), lambda d: d["sharding"].__setitem__(field, value))

    return make


def _configuration(field: str, value: object, i: int = 1) -> Callable[[], ir.Model]:
    def make() -> ir.Model:
        return edit_metadata(
            planned(), lambda d: d["sharding"]["configurations"][i].__setitem__(field, value)
        )

    return make


def _t113() -> ir.Model:
    x = _value("x", ("batch", 8))
    a, b = _value("a", ("batch", 4)), _value("b", ("batch", 4))
    split = ir.Node(
        "",
        "Split",
        [x],
        attributes=[ir.AttrInt64("axis", 1), ir.AttrInt64("num_outputs", 2)],
        outputs=[a, b],
        name="split",
    )
    y = _value("y", ("batch", 4))
    add = ir.Node("", "Add", [a, b], outputs=[y], name="add")
    model = ir.Model(ir.Graph([x], [y], nodes=[split, add], opset_imports={"": 18}), ir_version=11)
    plan(model, [["a"]])
    return model


def position_table_model(rows: int = 256, width: int = 8) -> ir.Model:
    """Token embeddings plus a position table sliced to the sequence length, as GPT-style
    exports write it: the model takes at most ``rows`` positions (``seq`` is symbolic)."""
    from onnx import TensorProto
    from onnx import helper as h
    from onnx.numpy_helper import from_array

    rng = np.random.default_rng(0)
    weights = {
        "wte": rng.random((100, width), np.float32),
        "wpe": rng.random((rows, width), np.float32),
        "one": np.array(1, np.int64),
        "zero": np.array([0], np.int64),
        "w1": rng.random((width, width), np.float32),
    }
    nodes = [
        h.make_node("Gather", ["wte", "input_ids"], ["tok"], name="tok_emb"),
        h.make_node("Shape", ["input_ids"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "one"], ["seq_len"], name="seq_len", axis=0),
        h.make_node("Unsqueeze", ["seq_len", "zero"], ["seq_end"], name="seq_end"),
        h.make_node("Slice", ["wpe", "zero", "seq_end"], ["pos"], name="pos_slice"),
        h.make_node("Add", ["tok", "pos"], ["h0"], name="add_pos"),
        h.make_node("MatMul", ["h0", "w1"], ["h1"], name="mm1"),
        h.make_node("Relu", ["h1"], ["out"], name="relu"),
    ]
    graph = h.make_graph(
        nodes,
        "positions",
        [h.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [h.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", width])],
        initializer=[from_array(array, name) for name, array in weights.items()],
    )
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)
    return ir.from_proto(proto)


def _t124() -> ir.Model:
    """Planned at seq=256, then the recorded planning dims say 512 (a file planned elsewhere)."""
    from onnx_ir_multidevice.omny.planning_dims import write_planning_dims
    from onnx_ir_multidevice.planner import plan_model

    model = position_table_model(256)
    result = plan_model(model, shards=[2], dims={"seq": 256})
    omny.write(model, result.metadata)
    write_planning_dims(model, {"batch": 1, "seq": 512})
    return model


def _t115() -> ir.Model:
    # A shape neither stated nor inferable: the producer is an op without a schema. (A shape
    # that is only missing from the file is inferred by the checker: no finding, issue 9.)
    model = planned()
    producer = node(model, "L2")
    producer.domain = "custom.ops"
    producer.outputs[0].shape = None
    model.opset_imports["custom.ops"] = 1
    return model


def _t117() -> ir.Model:
    model = zoo.control_flow()
    plan(model, [["proj"]])
    return edit_metadata(
        model,
        lambda d: d["cut_points"][0].update(after_node="branch.then", tensor_name="branch.then"),
    )


def _t118() -> ir.Model:
    return edit_metadata(planned(), lambda d: d["cut_points"][1].__setitem__("id", "cut_h2"))


def _t119() -> ir.Model:
    model = planned()
    node(model, "L3").name = "L1"  # two main-graph nodes named L1; cut_h2 comes after L1
    return model


def _t137() -> ir.Model:
    return edit_metadata(
        planned(), lambda d: d["sharding"].update(max_shard_size_mb=2000, min_vram_mb=1500)
    )


def _t138() -> ir.Model:
    return edit_metadata(planned(), lambda d: d["inputs"][0].__setitem__("name", "nope"))


def _v2_model(
    *, flags: int = 0, reserved: bytes = b"", padding: bytes | None = None, **manifest_edits
) -> ir.Model:
    """The upstream ``upgrade`` fixture, rebuilt with the given oddities, loaded from a file."""
    base = v2.read_container(DATA / "omny-v2" / "tiny_v2_upgrade.omny")
    manifest = json.loads(json.dumps(base.manifest))
    for path, value in manifest_edits.items():
        *parents, last = path.split("__")
        target = manifest
        for key in parents:
            target = target[key]
        target[last] = value
    built = v2.build_container(
        base.model_bytes,
        manifest,
        flags=flags,
        reserved=reserved,
        padding=padding if padding is not None else base.padding,
    )
    path = Path(tempfile.mkdtemp(prefix="omny-check-v2-")) / "tiny.omny"
    path.write_bytes(v2.serialize_container(built))
    return load(path)


def _t200() -> ir.Model:
    model = annotated()
    model.ir_version = 10
    return model


def _t201() -> ir.Model:
    model = chain(2)
    node(model, "L0").device_configurations = (ir.NodeDeviceConfiguration(None, (), 0),)
    return model


def _t202() -> ir.Model:
    model = chain(2)
    model.device_configurations = (ir.ModelConfiguration("", 1),)
    return model


def _t203() -> ir.Model:
    model = chain(2)
    node(model, "L0").set_pipeline_stage(ir.ModelConfiguration("ghost", 1), 0)
    return model


def _t204() -> ir.Model:
    model = chain(2)
    model.add_device_configuration("c", num_devices=1)
    node(model, "L0").set_pipeline_stage(ir.ModelConfiguration("c", 1), 0)
    return model


def _t206() -> ir.Model:
    model = with_spec()
    node(model, "L1").inputs[0].name = ""
    return model


def _t207() -> ir.Model:
    model = chain(3)
    return with_spec(value=node(model, "L2").outputs[0])


def _t212() -> ir.Model:
    model = chain(2)
    model.device_configurations = (ir.ModelConfiguration("c", 1), ir.ModelConfiguration("c", 1))
    return model


def _t213() -> ir.Model:
    model = chain(2)
    model.device_configurations = (ir.ModelConfiguration("c", 2, ("GPU:0",)),)
    return model


def _t214() -> ir.Model:
    model = chain(2)
    model.device_configurations = (ir.ModelConfiguration("c", 0),)
    return model


def _t215() -> ir.Model:
    model = chain(2)
    conf = model.add_device_configuration("c", num_devices=1)
    node(model, "L0").device_configurations = (
        ir.NodeDeviceConfiguration(conf, pipeline_stage=0),
        ir.NodeDeviceConfiguration(conf, pipeline_stage=0),
    )
    return model


def _t219() -> ir.Model:
    model = chain(2)
    conf = model.add_device_configuration("c", num_devices=1)
    node(model, "L0").set_pipeline_stage(conf, 2**31)
    node(model, "L1").set_pipeline_stage(conf, 0)
    return model


def _t220() -> ir.Model:
    model = with_spec()
    l1 = node(model, "L1")
    entry = l1.device_configurations[0]
    spec = entry.sharding_specs[0]
    l1.device_configurations = (dataclasses.replace(entry, sharding_specs=(spec, spec)),)
    return model


def _t300() -> ir.Model:
    model = annotated()
    node(model, "L0").set_pipeline_stage(configuration(model, "omny/2-shards"), 1)
    node(model, "L1").set_pipeline_stage(configuration(model, "omny/2-shards"), 0)
    return model


def _t301() -> ir.Model:
    model = annotated()
    node(model, "L5").device_configurations = ()
    return model


def _t305() -> ir.Model:
    model = zoo.control_flow()
    plan(model, [["proj"]])
    annotate(model)
    conf = configuration(model, "omny/2-shards")
    branch = node(model, "branch")
    inner = next(iter(branch.attributes["then_branch"].value))
    inner.set_pipeline_stage(conf, 0)  # its parent is at stage 1
    return model


def _t310() -> ir.Model:
    model = annotated()
    conf = configuration(model, "omny/2-shards")
    node(model, "L2").set_pipeline_stage(conf, 1)  # producer of cut h3 moves after the cut
    return model


def _t311() -> ir.Model:
    model = chain(side=True)
    plan(model, [["h3"]])
    annotate(model, check=False)
    node(model, "S").set_pipeline_stage(configuration(model, "omny/2-shards"), 1)
    return model


def _t313() -> ir.Model:
    model = annotated()
    model.add_device_configuration("omny/9-shards", num_devices=9)
    return model


def _t320() -> ir.Model:
    model = chain(side=True)
    plan(model, [["h3"]])
    return model


def _t323() -> ir.Model:
    model = chain(side=True)
    plan(model, [["s", "h2"]])
    return model


def _t324() -> ir.Model:
    """x -> R (Relu) -> r -> L (MatMul) -> y, cut at r: r is replicable (recomputed by stage
    1 from x), so stage 0 produces nothing that is read."""
    x, r, y = _value("x"), _value("r"), _value("y")
    w = ir.Value(
        name="w",
        shape=ir.Shape([8, 8]),
        type=ir.TensorType(F32),
        const_value=ir.tensor(np.full((8, 8), 0.1, np.float32), name="w"),
    )
    nodes = [
        ir.Node("", "Relu", [x], outputs=[r], name="R"),
        ir.Node("", "MatMul", [r, w], outputs=[y], name="L"),
    ]
    graph = ir.Graph([x], [y], nodes=nodes, initializers=[w], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=11)
    plan(model, [["r"]])
    return model


def tensor_parallel(
    *, reader_axis: int = -1, reduce: bool = True, producer_axis: int = -1, relu: bool = True
) -> ir.Model:
    """x -> L0 (column-parallel) -> h1 -> L1 (row-parallel) -> h2 -> R (Relu) -> y, 2 devices.

    L0 writes h1 split on ``producer_axis``, L1 reads it split on ``reader_axis`` (its weight
    split on rows); ``reduce``: L1 writes h2 replicated (the AllReduce), else h2 stays a
    partial sum read by the Relu.
    """
    model = chain(2)
    l0, l1 = node(model, "L0"), node(model, "L1")
    h2 = l1.outputs[0]
    y = _value("y")
    relu = ir.Node("", "Relu" if relu else "Identity", [h2], outputs=[y], name="R")
    model.graph.append(relu)
    model.graph.outputs[:] = [y]
    conf = model.add_device_configuration("tp", num_devices=2)
    l0.shard(l0.inputs[1], configuration=conf, axis=1, num_shards=2, device_indices=(0, 1))
    l0.shard(l0.outputs[0], configuration=conf, axis=producer_axis, num_shards=2,
             device_indices=(0, 1))  # fmt: skip
    l1.shard(
        l1.inputs[0], configuration=conf, axis=reader_axis, num_shards=2, device_indices=(0, 1)
    )
    l1.shard(l1.inputs[1], configuration=conf, axis=0, num_shards=2, device_indices=(0, 1))
    if reduce:
        group = (ir.IndexToDeviceGroupMapEntry(-1, (0, 1)),)
        spec = ir.ShardingSpec(h2, device=(-1,), index_to_device_group_map=group)
        entry = l1.device_configurations[0]
        l1.device_configurations = (
            dataclasses.replace(entry, sharding_specs=(*entry.sharding_specs, spec)),
        )
    return model


TRIGGERS: dict[str, Callable[[], object]] = {
    "OMNY100": lambda: chain(2),
    "OMNY101": _t101,
    "OMNY102": _t102,
    "OMNY103": _t103,
    "OMNY104": _t104,
    "OMNY105": _t105,
    "OMNY106": _t106,
    "OMNY107": _t107,
    "OMNY108": _t108,
    "OMNY109": _t109,
    "OMNY110": _cut("after_node", "nope"),
    "OMNY111": _cut("tensor_name", "nope"),
    "OMNY112": _cut("tensor_name", "h4"),
    "OMNY113": _t113,
    "OMNY114": _cut("shape", [-1, -1]),
    "OMNY115": _t115,
    "OMNY116": _cut("dtype", "int64"),
    "OMNY117": _t117,
    "OMNY118": _t118,
    "OMNY119": _t119,
    "OMNY120": _cut("shard_memory_mb", 0),
    "OMNY121": _cut("shard_memory_mb", 100),
    "OMNY122": _cut("shape", [-1, 2**62]),
    "OMNY123": lambda: _huge_input(chain(2)),
    "OMNY124": _t124,
    "OMNY130": _sharding("configurations", []),
    "OMNY131": _configuration("cut_point_ids", ["cut_h2"]),
    "OMNY132": _configuration("cut_point_ids", ["cut_h2", "cut_3"]),
    "OMNY133": _configuration("memory_per_shard_mb", [10, 10]),
    "OMNY134": _sharding("allowed_shards", [2]),
    "OMNY135": _sharding("min_shards", 9),
    "OMNY136": _configuration("memory_per_shard_mb", [10, 5000, 10]),
    "OMNY137": _t137,
    "OMNY138": _t138,
    "OMNY139": _configuration("cut_point_ids", ["cut_h2", "cut_h2"]),
    "OMNY140": lambda: _v2_model(flags=1),
    "OMNY141": lambda: _v2_model(reserved=b"processor bytes"),
    "OMNY142": lambda: _v2_model(padding=b"\x01" + bytes(191)),
    "OMNY143": lambda: _v2_model(version="3.0"),
    "OMNY144": lambda: _v2_model(input__tensor_names=["input_ids", "other"]),
    "OMNY145": lambda: _v2_model(sharding__allowed_shards=[4]),
    "OMNY200": _t200,
    "OMNY201": _t201,
    "OMNY202": _t202,
    "OMNY203": _t203,
    "OMNY204": _t204,
    "OMNY205": lambda: with_spec(value=None),
    "OMNY206": _t206,
    "OMNY207": _t207,
    "OMNY208": lambda: with_spec(sharded_dims=(_sharded(axis=5),)),
    "OMNY209": lambda: with_spec(sharded_dims=(_sharded(0), _sharded(-2))),
    "OMNY210": lambda: with_spec(sharded_dims=(_sharded(0, num_shards=0),), device=()),
    "OMNY211": lambda: with_spec(device=(0, 5), sharded_dims=(_sharded(0),)),
    "OMNY212": _t212,
    "OMNY213": _t213,
    "OMNY214": _t214,
    "OMNY215": _t215,
    "OMNY216": lambda: with_spec(
        device=(0,), index_to_device_group_map=(ir.IndexToDeviceGroupMapEntry(0, (0, 1)),)
    ),
    "OMNY217": lambda: with_spec(
        device=(0,), index_to_device_group_map=(ir.IndexToDeviceGroupMapEntry(-1, (0, 1)),)
    ),
    "OMNY218": lambda: with_spec(device=(0, 1), sharded_dims=(_sharded(0, num_shards=4),)),
    "OMNY219": _t219,
    "OMNY220": _t220,
    "OMNY221": lambda: with_spec(device=(0, 1, 1), sharded_dims=(_sharded(1, num_shards=3),)),
    "OMNY222": lambda: with_spec(
        sharded_dims=(ir.ShardedDim(1, (ir.SimpleShardedDim(16, 2),)),), device=(0, 1)
    ),
    "OMNY223": lambda: tensor_parallel(reader_axis=0),
    "OMNY224": lambda: tensor_parallel(reduce=False),
    "OMNY300": _t300,
    "OMNY301": _t301,
    "OMNY302": lambda: hand_staged(3, [0, 0, 2, 2]),
    "OMNY303": lambda: hand_staged(1, [0, 0, 1, 1]),
    "OMNY304": lambda: hand_staged(3, [0, 0, 1, 1]),
    "OMNY305": _t305,
    "OMNY310": _t310,
    "OMNY311": _t311,
    "OMNY312": planned,
    "OMNY313": _t313,
    "OMNY320": _t320,
    "OMNY321": annotated,
    "OMNY322": _configuration("cut_point_ids", ["cut_h4", "cut_h2"]),
    "OMNY323": _t323,
    "OMNY324": _t324,
}


def _planned_in_place(model: ir.Model, configurations: Sequence[Sequence[str]]) -> ir.Model:
    plan(model, configurations)
    return model


#: A clean counterpart for each code: by default the annotated chain (no error, no warning).
CLEAN: dict[str, Callable[[], object]] = {
    "OMNY100": annotated,
    "OMNY321": lambda: chain(3),
    "OMNY200": lambda: _set_ir_version(chain(2), 10),  # ir 10 without multi-device fields
    "OMNY302": lambda: hand_staged(3, [0, 1, 2, 2]),
    "OMNY303": lambda: hand_staged(2, [0, 0, 1, 1]),
    "OMNY304": lambda: hand_staged(2, [0, 0, 1, 1]),
    "OMNY205": with_spec,
    "OMNY208": lambda: with_spec(sharded_dims=(_sharded(-1),)),
    "OMNY211": lambda: with_spec(sharded_dims=(_sharded(0),)),
    "OMNY216": lambda: with_spec(
        device=(-1,), index_to_device_group_map=(ir.IndexToDeviceGroupMapEntry(-1, (0, 1)),)
    ),
    "OMNY218": lambda: with_spec(sharded_dims=(_sharded(0), _sharded(1, 1))),
    "OMNY320": lambda: _planned_in_place(chain(side=False), [["h3"]]),
    "OMNY221": lambda: with_spec(device=(0, 1), sharded_dims=(_sharded(1, num_shards=2),)),
    "OMNY222": lambda: with_spec(sharded_dims=(_sharded(1),)),
    "OMNY223": tensor_parallel,
    "OMNY224": tensor_parallel,
}


def _set_ir_version(model: ir.Model, version: int) -> ir.Model:
    model.ir_version = version
    return model


def codes(diagnostics: Sequence[Diagnostic]) -> set[str]:
    return {d.code for d in diagnostics}


def test_partial_sum_through_a_linear_op_is_not_flagged():
    diagnostics = check(tensor_parallel(reduce=False, relu=False))
    assert "OMNY224" not in codes(diagnostics), [str(d) for d in diagnostics]


def test_tensor_parallel_clean_model_has_no_error():
    diagnostics = check(tensor_parallel())
    assert [d for d in diagnostics if d.is_error] == [], [str(d) for d in diagnostics]


def test_every_code_has_a_trigger():
    assert set(TRIGGERS) == set(CODES)
    # ... and a row in the docs' table of codes (generated from CODES under exec_code)
    assert [line.split()[0] for line in _all_codes_table().splitlines()[1:]] == list(CODES)


@pytest.mark.parametrize("code", sorted(TRIGGERS))
def test_code_is_triggered(code: str):
    diagnostics = check(TRIGGERS[code]())  # type: ignore[arg-type]
    found = [d for d in diagnostics if d.code == code]
    assert found, f"{code} not reported; got {[str(d) for d in diagnostics]}"
    assert all(d.message and d.location for d in found)
    assert found[0].severity is CODES[code].severity


@pytest.mark.parametrize("code", sorted(TRIGGERS))
def test_code_is_not_triggered_on_clean_model(code: str):
    diagnostics = check(CLEAN.get(code, annotated)())  # type: ignore[arg-type]
    assert code not in codes(diagnostics), [str(d) for d in diagnostics]


def test_clean_annotated_model_has_no_error_or_warning():
    diagnostics = check(annotated())
    assert [d for d in diagnostics if d.severity is not Severity.INFO] == []
    infos = [d for d in diagnostics if d.code == "OMNY321"]
    assert len(infos) == 3  # one boundary in the 2-shard, two in the 3-shard configuration
    assert "'h3'" in infos[0].message


def test_spec_example_names_cut_3():
    model = chain(2)
    model.metadata_props["omnynet_version"] = "1.0"
    model.metadata_props["omnynet_metadata"] = (DATA / "spec_example.json").read_text()
    diagnostics = check(model)
    undefined = [d for d in diagnostics if d.code == "OMNY132"]
    assert len(undefined) == 1
    assert "'cut_3'" in undefined[0].message
    assert undefined[0].location == "sharding.configurations[1].cut_point_ids[2]"
    assert str(undefined[0]).startswith("error OMNY132 at sharding.configurations[1]")


def test_errors_come_first_and_diagnostics_are_frozen():
    diagnostics = check(_t132_and_info())
    ranks = [d.sort_key() for d in diagnostics]
    assert ranks == sorted(ranks)
    with pytest.raises(dataclasses.FrozenInstanceError):
        diagnostics[0].code = "X"  # type: ignore[misc]


def _t132_and_info() -> ir.Model:
    return TRIGGERS["OMNY132"]()  # type: ignore[return-value]


def test_relaxed_cuts_downgrade_320():
    diagnostics = check(_t320(), relaxed_cuts=True)
    found = [d for d in diagnostics if d.code == "OMNY320"]
    assert found and all(d.severity is Severity.WARNING for d in found)


def _if_reading_outer(a_stage: int, if_stage: int) -> ir.Model:
    """x -> A (Relu) -> a; If(c) whose branches read ``a`` only from the outer scope."""
    x = _value("x")
    c = ir.Value(name="c", shape=ir.Shape([]), type=ir.TensorType(ir.DataType.BOOL))
    a = _value("a")
    relu = ir.Node("", "Relu", [x], outputs=[a], name="A")

    def branch(op: str) -> ir.Graph:
        out = _value(f"{op}_out")
        return ir.Graph([], [out], nodes=[ir.Node("", op, [a], outputs=[out], name=op)])

    y = _value("y")
    if_node = ir.Node(
        "",
        "If",
        [c],
        attributes=[
            ir.AttrGraph("then_branch", branch("Neg")),
            ir.AttrGraph("else_branch", branch("Abs")),
        ],
        outputs=[y],
        name="if",
    )
    graph = ir.Graph([x, c], [y], nodes=[relu, if_node], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=11)
    conf = model.add_device_configuration("hand", num_devices=2)
    relu.set_pipeline_stage(conf, a_stage)
    if_node.set_pipeline_stage(conf, if_stage)
    return model


def test_outer_scope_read_counts_as_edge():
    assert "OMNY300" not in codes(check(_if_reading_outer(0, 1)))
    backward = [d for d in check(_if_reading_outer(1, 0)) if d.code == "OMNY300"]
    assert len(backward) == 1
    assert backward[0].location == "node:if" and "'a'" in backward[0].message


def test_check_matches_onnx_ir_private_checker():
    """Everything onnx-ir's private checker finds, we find (same models)."""
    from onnx_ir._multi_device import _check_device_configurations

    for code in [c for c in TRIGGERS if c.startswith("OMNY2")]:
        model = TRIGGERS[code]()
        theirs = _check_device_configurations(model)  # type: ignore[arg-type]
        ours = [d for d in check_device_configurations(model) if d.is_error]  # type: ignore[arg-type]
        if theirs:
            assert ours, (code, theirs)


def test_check_accepts_proto_and_path(tmp_path: Path):
    model = annotated()
    proto = ir.to_proto(model)
    before = proto.SerializeToString()
    assert codes(check(proto)) == codes(check(model))
    assert proto.SerializeToString() == before
    path = tmp_path / "m.omny"
    path.write_bytes(before)
    assert codes(check(path)) == codes(check(model))
    assert codes(check(str(path))) == codes(check(model))


def test_check_unreadable_file(tmp_path: Path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff not a protobuf")
    report = run_check(bad)
    assert report.model is None
    assert codes(report.diagnostics) == {"OMNY101"}
    with pytest.raises(OmnyIOError):
        check(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        check(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Model content that load() refuses: diagnostics, never an exception (issue 10 item 13)
# ---------------------------------------------------------------------------------------------


def _with_sparse_initializer(proto: onnx.ModelProto) -> None:
    values = onnx.helper.make_tensor("sparse.values", onnx.TensorProto.FLOAT, [1], [1.0])
    indices = onnx.helper.make_tensor("sparse.indices", onnx.TensorProto.INT64, [1], [0])
    proto.graph.sparse_initializer.append(onnx.helper.make_sparse_tensor(values, indices, [4]))


def _empty_configuration_id(proto: onnx.ModelProto) -> None:
    proto.graph.node[0].device_configurations[0].configuration_id = ""


def _empty_tensor_name(proto: onnx.ModelProto) -> None:
    proto.graph.node[1].device_configurations[0].sharding_spec.add().tensor_name = ""


@pytest.mark.parametrize(
    ("edit", "code", "location"),
    [
        (lambda proto: proto.training_info.add(), "OMNY106", "training_info"),
        (_with_sparse_initializer, "OMNY106", "graph.sparse_initializer"),
        (_empty_configuration_id, "OMNY201", "node:L0"),
        (_empty_tensor_name, "OMNY205", "node:L1"),
    ],
    ids=["training_info", "sparse_initializer", "empty_configuration_id", "empty_tensor_name"],
)
def test_check_reports_content_that_load_refuses(edit, code, location, tmp_path: Path):
    proto = ir.to_proto(annotated())
    edit(proto)
    path = tmp_path / "model.omny"
    path.write_bytes(proto.SerializeToString())
    from onnx_ir_multidevice._errors import OmnyFormatError
    from onnx_ir_multidevice._proto.files import load

    with pytest.raises(OmnyFormatError):
        load(path)  # what every other command does with it
    for given in (path, str(path), proto):
        report = run_check(given)
        found = [d for d in report.diagnostics if d.code == code]
        assert found and found[0].location == location and found[0].is_error, report.diagnostics
        assert "OMNY106" in codes(report.diagnostics)  # load() refuses it: say so
        assert report.model is not None  # the rest of the model was checked too
        assert "OMNY321" in codes(report.diagnostics)
        assert report.unreadable  # omny check exits 2, as the other commands do


@pytest.mark.parametrize(
    ("shape", "dtype", "code"),
    [
        ([-1, -8], "float32", "OMNY104"),  # not a dimension: the schema refuses the document
        ([-1, 2**62], "float32", "OMNY122"),
        ([2**40, 2**10], "float32", "OMNY122"),  # 4 PiB
        ([2**30, 2**10], "int8", None),  # 1 TiB: big, but a size
    ],
)
def test_cut_shapes_that_are_not_sizes_are_reported(shape, dtype, code):
    model = _cut("shape", shape)()
    edit_metadata(model, lambda d: d["cut_points"][0].__setitem__("dtype", dtype))
    found = codes(check(model)) & {"OMNY104", "OMNY122"}
    assert found == ({code} if code else set())


# ---------------------------------------------------------------------------------------------
# Severity says what breaks; --strict; at most max_per_code of one code (issue 9, issue 10)
# ---------------------------------------------------------------------------------------------


def _dynamic_at_cut() -> ir.Model:
    """A 2-shard plan whose cut tensor has a dynamic non-batch dim: it runs correctly."""
    model = chain(4)
    model.graph.inputs[0].shape = ir.Shape(["batch", "width"])
    for value in (v for n in model.graph for v in n.outputs):
        value.shape = ir.Shape(["batch", "width"])
    model.graph.initializers["w0"].shape = ir.Shape([8, 8])
    plan(model, [["h2"]])
    return model


def test_a_spec_departure_that_runs_is_a_warning_and_strict_makes_it_an_error():
    model = _dynamic_at_cut()
    found = [d for d in check(model) if d.code == "OMNY114"]
    assert found and all(d.severity is Severity.WARNING for d in found)
    assert not [d for d in check(model) if d.is_error]
    strict = check(model, strict=True)
    assert [d.code for d in strict if d.is_error] == ["OMNY114"] * len(found)
    assert not [d for d in strict if d.severity is Severity.WARNING]
    from onnx_ir_multidevice.passes.check import CheckPass

    CheckPass()(model)
    with pytest.raises(CheckError, match="OMNY114"):
        CheckPass(strict=True)(model)


def test_a_warning_blocks_neither_annotate_nor_split_nor_verify_nor_run():
    pytest.importorskip("onnxruntime")
    from onnx_ir_multidevice._proto.files import save
    from onnx_ir_multidevice._split import split
    from onnx_ir_multidevice.runtime import Pipeline
    from onnx_ir_multidevice.runtime.verification import verify

    model = _dynamic_at_cut()
    annotate(model)
    assert [c.name for c in model.device_configurations] == ["omny/2-shards"]
    assert len(split(model, 2)) == 2
    assert verify(model, 2, dims={"width": 8}).ok
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dynamic.omny"
        save(model, path)
        with Pipeline(path, 2) as pipeline:
            inputs = pipeline.example_inputs({"batch": 2, "width": 8})
            (result,) = pipeline.map([inputs])
        assert next(iter(result.values())).shape == (2, 8)


def _many_dangling_cuts(count: int) -> ir.Model:
    def add(document: dict) -> None:
        base = document["cut_points"][0]
        document["cut_points"] += [
            dict(base, id=f"c{i}", after_node=f"n{i}", tensor_name=f"t{i}") for i in range(count)
        ]

    return edit_metadata(planned(), add)


def test_diagnostics_are_capped_per_code_with_a_count_of_the_rest():
    model = _many_dangling_cuts(100)
    report = run_check(model)
    listed = [d for d in report.diagnostics if d.code == "OMNY110"]
    assert len(listed) == 21  # 20, then one that stands for the other 80
    summary = listed[-1]
    assert summary in report.omitted and summary.is_error
    assert "80 more OMNY110 errors" in summary.message and "--all" in summary.message
    assert report.omitted_counts == {
        ("OMNY110", Severity.ERROR): 80,
        ("OMNY111", Severity.ERROR): 80,
    }
    assert report.counts()["error"] == 200
    everything = check(model, max_per_code=None)
    assert len([d for d in everything if d.code == "OMNY110"]) == 100
    assert len([d for d in check(model, max_per_code=3) if d.code == "OMNY111"]) == 4
    from onnx_ir_multidevice._cli.check import _MAX_PER_CODE
    from onnx_ir_multidevice.checker.diagnostics import DEFAULT_MAX_PER_CODE

    assert _MAX_PER_CODE == DEFAULT_MAX_PER_CODE  # omny check says the same as check()


def _check_peak_bytes(count: int) -> int:
    import tracemalloc

    model = _many_dangling_cuts(count)
    tracemalloc.start()
    try:
        run_check(model)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_check_memory_is_linear_and_modest_in_the_cut_points():
    """Issue 10 item 16: a million cut points cost 4.7 GB and four million diagnostics."""
    small, large = _check_peak_bytes(2_000), _check_peak_bytes(8_000)
    # docs/diagnostics.md states about 1.2 KB per (broken) cut point, diagnostics included.
    assert large < 2_000 * 8_000, large
    assert large < 4.5 * small + 2**20, (small, large)


def test_check_does_not_modify_model():
    model = annotated()
    before = ir.to_proto(model).SerializeToString()
    check(model)
    assert ir.to_proto(model).SerializeToString() == before


def test_check_is_near_linear():
    """Per-node CPU time of check on 4000 nodes is within 2x of 1000 nodes (best of 3)."""
    import time

    def per_node(n: int) -> float:
        model = zoo.synthetic_chain(n)
        outs = [v.name for v in (nd.outputs[0] for nd in model.graph) if v.name.endswith(".out")]
        plan(model, [[outs[len(outs) // 2]], [outs[len(outs) // 4], outs[3 * len(outs) // 4]]])
        annotate(model)
        best = math.inf
        for _ in range(3):
            start = time.thread_time()
            check(model)
            best = min(best, time.thread_time() - start)
        return best / n

    small, large = per_node(1000), per_node(4000)
    # 2x per node (8x in all for 4x the nodes) plus 50 ms for scheduling noise.
    assert large * 4000 < 2.0 * small * 4000 + 0.05, (small, large)


def _many_cuts_cpu_seconds(cuts: int) -> float:
    """CPU time of check, annotate and split of a chain cut after every node (best of 2)."""
    import time

    from onnx_ir_multidevice._split import split

    model = chain(cuts + 1)
    plan(model, [[f"h{i}" for i in range(1, cuts + 1)]], max_shards=cuts + 1)
    best = math.inf
    for _ in range(2):  # the second annotate() rewrites the same stages
        start = time.thread_time()  # this thread's CPU time only
        found = check(model)
        stages = split(annotate(model), cuts + 1)
        best = min(best, time.thread_time() - start)
    assert not [d for d in found if d.is_error] and len(stages) == cuts + 1
    return best


def test_check_annotate_split_scale_linearly_in_the_cuts_of_one_configuration():
    """Issue 10 item 1: 1,000 / 2,000 / 4,000 cuts took 0.21 / 0.75 / 3.0 s (cubic)."""
    small, large = _many_cuts_cpu_seconds(1000), _many_cuts_cpu_seconds(4000)
    # 4x the cuts and nodes: about 4x the time when linear, 16x when quadratic; 0.1 s of noise.
    assert large < 8 * small + 0.1, (small, large)


# ---------------------------------------------------------------------------------------------
# The registry: blocking annotate, and the docs table generated from it
# ---------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_blocks_annotate_is_false_only_for_rules_about_an_existing_annotation():
    # What annotate() skipped before the registry had the field: OMNY3xx but the plan rules.
    not_blocking = {code for code, info in CODES.items() if not info.blocks_annotate}
    plan_rules = {"OMNY320", "OMNY322", "OMNY323", "OMNY324"}
    assert not_blocking == {c for c in CODES if c.startswith("OMNY3")} - plan_rules


def test_annotate_skips_non_blocking_errors_and_stops_on_blocking_ones():
    backwards = annotated()
    node(backwards, "L0").set_pipeline_stage(configuration(backwards, "omny/2-shards"), 1)
    assert "OMNY300" in {d.code for d in check(backwards) if d.is_error}
    assert not CODES["OMNY300"].blocks_annotate
    annotate(backwards)  # rewrites the backward annotation instead of refusing it
    assert "OMNY300" not in codes(check(backwards))
    with pytest.raises(CheckError) as info:
        annotate(TRIGGERS["OMNY320"]())
    assert CODES["OMNY320"].blocks_annotate
    assert "OMNY320" in {d.code for d in info.value.diagnostics}


def _all_codes_table() -> str:
    """Run the ``exec_code`` block of the "All codes" section of docs/diagnostics.md."""
    page = (DOCS / "diagnostics.md").read_text(encoding="utf-8")
    section = page.split("\n## All codes\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```{exec_code}\n", 1)[1].split("\n```", 1)[0]
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, "docs/diagnostics.md", "exec"), {})
    return output.getvalue()


def test_docs_table_lists_every_code_from_the_registry():
    rows = [line.split() for line in _all_codes_table().splitlines()[1:]]
    assert [row[0] for row in rows] == list(CODES)
    for row in rows:
        info = CODES[row[0]]
        assert row[1] == info.severity.value
        assert row[2] == ("yes" if info.blocks_annotate else "no")
        assert " ".join(row[3:]) == info.title
    page = (DOCS / "diagnostics.md").read_text(encoding="utf-8")
    assert "| `OMNY" not in page  # no hand-copied table left to drift from the registry


def test_a_code_row_without_the_blocks_annotate_column_is_refused():
    from onnx_ir_multidevice.checker import diagnostics

    with pytest.raises(TypeError, match="blocks_annotate"):
        diagnostics._codes(("OMNY199", Severity.ERROR, "A rule."))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        diagnostics._codes(
            ("OMNY199", Severity.ERROR, True, "A."), ("OMNY199", Severity.INFO, True, "B.")
        )


def test_planning_dims_the_model_cannot_take_are_refused_by_plan_and_caught_by_check(tmp_path):
    """Issue 18 item 25: `plan --dim seq=512 --static` on a 256-position model wrote a plan
    that check passed and onnxruntime could not load."""
    import onnxruntime as ort

    from onnx_ir_multidevice._cli import main
    from onnx_ir_multidevice._errors import PlanError
    from onnx_ir_multidevice.planner import plan_model

    source = tmp_path / "positions.onnx"
    save(position_table_model(256), source)
    out = tmp_path / "p.omny"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        status = main(["plan", str(source), "-o", str(out), "--dim", "seq=512", "--static"])
    assert status == 1 and not out.exists()
    assert "cannot take the planning dims (batch=1, seq=512)" in err.getvalue()
    assert "node 'add_pos' (Add)" in err.getvalue()
    with pytest.raises(PlanError, match="cannot take the planning dims"):
        plan_model(position_table_model(256), shards=[2], dims={"seq": 512})
    # at sizes it takes: planned, checked clean, loaded by onnxruntime
    assert main(["plan", str(source), "-o", str(out), "--dim", "seq=256", "--static"]) == 0
    assert "OMNY124" not in codes(check(out))
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    # a file made elsewhere, pinned at 512: check reports it, and onnxruntime indeed refuses it
    model = position_table_model(256)
    result = plan_model(model, shards=[2], dims={"seq": 256})
    omny.write(model, result.metadata)
    model.graph.inputs[0].shape = ir.Shape([1, 512])
    pinned = tmp_path / "pinned.omny"
    save(model, pinned)
    found = [d for d in check(pinned) if d.code == "OMNY124"]
    assert len(found) == 1 and found[0].location == "node:add_pos" and found[0].is_error
    with pytest.raises(Exception, match="Incompatible dimensions"):
        ort.InferenceSession(str(pinned), providers=["CPUExecutionProvider"])


def test_a_failing_onnxruntime_run_leaves_one_line_on_stderr(tmp_path, capfd):
    """Issue 18 item 25: onnxruntime's own log line (terminal colours) leaked to stderr
    besides the command's message. capfd sees what onnxruntime writes to file descriptor 2."""
    from onnx_ir_multidevice._cli import main

    source = tmp_path / "positions.onnx"
    save(position_table_model(256), source)
    planned = tmp_path / "p.omny"
    assert main(["plan", str(source), "-o", str(planned), "--dim", "seq=256"]) == 0
    capfd.readouterr()
    argv = ["run", str(planned), "--shards", "2", "--requests", "1", "--warmup", "0"]
    assert main([*argv, "--dim", "seq=512"]) == 1  # 512 positions: Add fails in stage 0
    err = capfd.readouterr().err
    assert "\x1b[" not in err and "[E:onnxruntime" not in err, err
    assert err.count("\n") == 1 and err.startswith("omny: error: ") and "add_pos" in err, err
