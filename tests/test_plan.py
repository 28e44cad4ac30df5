"""plan() on zoo models: spec-shaped metadata, checker-clean, splittable; the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_ir_multidevice as root
from onnx_ir_multidevice import omny
from onnx_ir_multidevice._cli import main
from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice.checker.core import check
from onnx_ir_multidevice.omny._schema import OmnyMetadata
from onnx_ir_multidevice.planner.devices import (
    parse_devices,
    parse_dims,
    parse_memory_sizes,
    parse_size,
)
from onnx_ir_multidevice.planner.options import PlanOptions
from onnx_ir_multidevice.planner.planning import describe, guess_architecture, plan, plan_model
from onnx_ir_multidevice.testing import zoo

SPEC_EXAMPLE = json.loads((Path(__file__).parent / "data" / "spec_example.json").read_text())


def keys(document, path=""):
    """Every JSON key path of a document, list indices collapsed."""
    found = set()
    if isinstance(document, dict):
        for key, value in document.items():
            found.add(f"{path}.{key}")
            found |= keys(value, f"{path}.{key}")
    elif isinstance(document, list):
        for value in document:
            found |= keys(value, f"{path}[]")
    return found


ZOO = {
    "resnet": (lambda: zoo.resnet(depth_blocks=4), "cnn", False),
    "bert": (lambda: zoo.bert(layers=3), "transformer_encoder", False),
    "gpt": (lambda: zoo.gpt(layers=3), "transformer_decoder", True),
    "vit": (lambda: zoo.vit(layers=3), "vision_transformer", False),
    "control_flow": (zoo.control_flow, "mlp", True),
}


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_plans_are_spec_shaped_and_checker_clean(name):
    build, architecture, relaxed = ZOO[name]
    model = build()
    before = ir.to_proto(model).SerializeToString()
    meta = plan(model, shards=[2, 3] if name == "control_flow" else [2, 3, 4], relaxed=relaxed)
    # The graph is not modified; the planning dims are recorded beside the metadata (issue 9).
    assert omny.read_planning_dims(model) == {"batch": 1}
    omny.write_planning_dims(model, None)
    assert ir.to_proto(model).SerializeToString() == before
    document = json.loads(meta.to_json())
    assert keys(document) == keys(SPEC_EXAMPLE)  # only (and all) spec keys
    assert OmnyMetadata.from_json(meta.to_json()) == meta
    assert meta.model.architecture == architecture
    assert meta.model.total_params == sum(
        v.const_value.size for v in model.graph.initializers.values()
    ) + _constants(model)
    assert meta.export_info.source_framework == "onnx"
    assert meta.inputs[0].shape[0] == -1  # symbolic batch
    ids = [c.id for c in meta.cut_points]
    assert ids == [f"cut_{k}" for k in range(1, len(ids) + 1)]
    nodes = {n.name: n for n in model.graph}
    running = 0
    for cut in meta.cut_points:
        assert nodes[cut.after_node].outputs[0].name == cut.tensor_name
        running += cut.shard_memory_mb
        assert cut.cumulative_memory_mb == running
    for config in meta.sharding.configurations:
        assert len(config.cut_point_ids) == config.num_shards - 1
        assert len(config.memory_per_shard_mb) == config.num_shards
        assert max(config.memory_per_shard_mb) <= meta.sharding.max_shard_size_mb
        order = [ids.index(i) for i in config.cut_point_ids]
        assert order == sorted(order)
    assert meta.sharding.min_vram_mb >= meta.sharding.max_shard_size_mb
    omny.write(model, meta)
    errors = [d for d in check(model, relaxed_cuts=relaxed) if d.severity.value == "error"]
    assert errors == []


def _constants(model):
    return sum(
        n.attributes["value"].value.size
        for n in model.graph
        if n.op_type == "Constant" and "value" in n.attributes
    )


def test_plans_split_into_runnable_stages(tmp_path):
    from onnx_ir_multidevice._split import split

    model = zoo.bert(layers=2)
    omny.write(model, plan(model, shards=[3]))
    stages = split(model, 3)
    assert len(stages) == 3


def test_devices_and_tied_weights():
    model = zoo.gpt(layers=4, hidden=128, seq=64)
    result = plan_model(model, relaxed=True, devices=["4MiB", "2MiB", "2MiB"])
    (found,) = result.partitions
    assert [
        m.required_bytes <= c for m, c in zip(found.memory, result.capacities[0], strict=True)
    ] == [True] * 3
    wte = model.graph.initializers["wte.weight"].const_value.nbytes
    assert found.memory[0].weights_bytes > wte and found.memory[-1].weights_bytes > wte
    assert "3 shards" in describe(result) and "device 2.0 MiB" in describe(result)
    with pytest.raises(PlanError, match=r"stage .* needs .* but device .* has"):
        plan(model, relaxed=True, devices=["1MiB", "1MiB"])
    with pytest.raises(PlanError, match="4 shards need 4 devices"):
        plan(model, relaxed=True, devices=["4MiB", "2MiB", "2MiB"], shards=[4])
    with pytest.raises(PlanError, match="no unit"):
        plan(model, devices=["8.5"])
    with pytest.raises(PlanError, match=r"needs .* but device .* has 8 B"):
        plan(model, devices=["8", "8"])  # digits only: a byte count


def test_a_device_size_of_digits_only_is_a_byte_count():
    """Issue 18 item 24: "1073741824" was refused although the docs say byte counts work."""
    from onnx_ir_multidevice.planner.devices import parse_memory_sizes, parse_size

    assert parse_size("1073741824") == 2**30 == parse_size("1GiB")
    assert parse_memory_sizes("1073741824, 512MiB") == (2**30, 2**29)


def test_automatic_shard_counts_and_limits():
    model = zoo.resnet(depth_blocks=2)
    result = plan_model(model)
    counts = result.metadata.sharding.allowed_shards
    assert counts[0] == 2 and len(counts) == len(result.partitions)
    assert result.metadata.sharding.max_shards == max(counts)
    assert len(zoo.control_flow().graph) < 10
    small = plan_model(zoo.control_flow())
    assert small.metadata.sharding.allowed_shards == (2, 3)
    assert small.skipped and "at most 3 stages" in small.skipped[0][1]
    limited = plan(zoo.bert(layers=4, hidden=256, seq=128), max_shard_size_mb=5)
    assert all(max(c.memory_per_shard_mb) <= 5 for c in limited.sharding.configurations)
    assert limited.sharding.min_shards >= 3
    with pytest.raises(PlanError, match="no shard count"):
        plan(zoo.bert(layers=2, hidden=256, seq=128), max_shard_size_mb=1)
    with pytest.raises(PlanError, match="relaxed cuts may give more"):
        plan(zoo.gpt(layers=3), shards=[6])


def test_shards_takes_an_int_or_an_iterable_of_ints():
    model = zoo.resnet(depth_blocks=2)
    expected = plan(model, shards=[2]).sharding
    assert plan(model, shards=2).sharding == expected
    assert plan(model, shards=np.int64(2)).sharding == expected
    assert plan(model, shards=(2,)).sharding == expected
    assert plan(model, shards=iter([2])).sharding == expected
    assert plan(model, shards=range(2, 4)).sharding.allowed_shards == (2, 3)
    assert plan(model, shards=[3, 2, 3]).sharding.allowed_shards == (2, 3)


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        (-1, "shards: shard count -1 must be a positive integer"),
        (0, "shards: shard count 0 must be a positive integer"),
        ([2, 0], "shards: shard count 0 must be a positive integer"),
        ([2, "3"], "shards: shard count '3' must be a positive integer"),
        ([True], "shards: shard count True must be a positive integer"),
        (2.0, "shards must be a shard count or a list of them"),
        ("2,4", "shards must be a shard count or a list of them"),
        (True, "shards must be a shard count or a list of them"),
        ([], "shards is empty"),
    ],
)
def test_bad_shards_raise_plan_error_naming_the_argument(shards, message):
    model = zoo.resnet(depth_blocks=2)
    with pytest.raises(PlanError, match=re.escape(message)):
        plan(model, shards=shards)
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_model(model, shards=shards)


@pytest.mark.parametrize("kind", ["proto", "none"])
def test_model_must_be_loaded_first(tmp_path, kind):
    path = tmp_path / "m.onnx"
    ir.save(zoo.resnet(depth_blocks=2), path)
    model = {"str": str(path), "path": path, "proto": onnx.load(path), "none": None}[kind]
    for function, name in ((plan, "plan"), (plan_model, "plan_model")):
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes an onnx_ir\.Model, not "):
            function(model, shards=2)
        with pytest.raises(TypeError, match=r"onnx_ir_multidevice\.load\(path\)"):
            function(model)


def test_unnamed_nodes_are_refused_unless_names_are_assigned():
    model = zoo.resnet(depth_blocks=2)
    for node in model.graph:
        node.name = ""
    with pytest.raises(PlanError, match="NameFixPass"):
        plan(model, shards=[2])
    meta = plan(model, shards=[2], assign_names=True)
    names = {n.name for n in model.graph}
    assert all(c.after_node in names for c in meta.cut_points)


@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("gpt2_kv_dynamo", "transformer_decoder"),  # 4-D past keys in: not an image
        ("llama_kv_optimum", "transformer_decoder"),
        ("gpt2_merged_optimum", "transformer_decoder"),  # the attention is inside an If
        ("whisper_encoder_dynamo", "transformer_encoder"),  # 1-D convolutions over audio
        ("vit_dynamo", "vision_transformer"),
        ("bert_dynamo", "transformer_encoder"),
        ("t5_encoder_torchscript", "transformer_encoder"),  # Less against a constant: buckets
        ("gpt2_dynamo", "transformer_decoder"),  # LessOrEqual of two position ranges
        ("resnet_int8_qoperator", "cnn"),  # QLinearConv
        ("lstm_gru_torchscript", "rnn"),
    ],
)
def test_guess_architecture_on_real_exports(name, architecture):
    model = ir.load(Path(__file__).parent / "corpus" / f"{name}.onnx")
    assert guess_architecture(model.graph) == architecture


def test_guess_architecture_on_a_plain_graph():
    assert guess_architecture(ir.Graph([], [], nodes=[])) == "unknown"


def test_parse_sizes_and_dims():
    assert parse_size("24GiB") == 24 * 1024**3
    assert parse_size("8GB") == 8 * 1000**3
    assert parse_size("1.5 mib") == 1572864
    assert parse_memory_sizes("24GiB, 8GiB,8GiB") == (24 * 1024**3, 8 * 1024**3, 8 * 1024**3)
    assert parse_dims(["seq=512", "batch=2"]) == {"seq": 512, "batch": 2}
    for bad in ("8.5", "0", "8XB", "-1GB", "GB", "0MiB"):
        with pytest.raises(ValueError, match="memory size"):
            parse_size(bad)
    with pytest.raises(ValueError, match="NAME=POSITIVE_INT"):
        parse_dims(["seq"])
    with pytest.raises(ValueError, match="no device sizes"):
        parse_memory_sizes(" , ")


def test_parse_devices_is_a_deprecated_alias_of_parse_memory_sizes():
    with pytest.warns(DeprecationWarning, match="parse_memory_sizes"):
        assert parse_devices(["1KiB", "2KiB"]) == parse_memory_sizes("1KiB,2KiB") == (1024, 2048)


def test_cli_plan(tmp_path, capsys):
    source = tmp_path / "bert.onnx"
    ir.save(zoo.bert(layers=2), source)
    out = tmp_path / "bert.omny"
    assert main(["plan", str(source), "-o", str(out), "--shards", "2,3", "--dim", "batch=2"]) == 0
    text = capsys.readouterr().out
    assert "2 shards: cuts cut_" in text and "stage 2:" in text
    meta = omny.read(ir.load(out))
    assert meta is not None and meta.sharding.allowed_shards == (2, 3)
    assert main(["plan", str(source), "-o", str(out), "--shards", "2", "--json", "--force"]) == 0
    document = json.loads(capsys.readouterr().out)["result"]
    assert document["sharding"]["allowed_shards"] == [2]
    assert main(["plan", str(source), "-o", str(out), "--devices", "1KiB,1KiB", "--force"]) == 1
    assert "device 0 has 1.0 KiB" in capsys.readouterr().err
    assert main(["plan", str(source), "-o", str(out), "--devices", "1Q"]) == 2
    assert main(["plan", str(source), "-o", str(out), "--shards", "x"]) == 2
    assert main(["plan", str(source), "-o", str(out), "--headroom", "1.5"]) == 2
    assert main(["plan", str(tmp_path / "missing.onnx"), "-o", str(out)]) == 2


def test_docs_figure_is_drawn(tmp_path):
    import runpy

    pytest.importorskip("matplotlib", reason="the figure script draws with matplotlib")
    figure = runpy.run_path(str(Path(__file__).parent.parent / "docs" / "planning_figure.py"))
    result = figure["example"]()
    assert [p.num_stages for p in result.partitions] == [2, 3, 4]
    path = figure["draw"](result, tmp_path / "memory.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_options_object_and_keywords_give_the_same_plan():
    assert root.PlanOptions is PlanOptions and "PlanOptions" in root.__all__
    model = zoo.resnet(depth_blocks=2)
    options = PlanOptions(shards=[3, 2, 3], dims={"batch": 2})
    assert options.shards == (2, 3) and dict(options.dims) == {"batch": 2}
    assert hash(options) == hash(PlanOptions(shards=(2, 3), dims={"batch": 2}))
    expected = plan(model, shards=[2, 3], dims={"batch": 2}).sharding
    assert plan(model, options).sharding == expected
    assert plan_model(model, options).metadata.sharding == expected
    # Keywords replace the fields of the object; the object itself is unchanged.
    assert plan(model, options, shards=[2]).sharding.allowed_shards == (2,)
    assert options.shards == (2, 3)
    devices = PlanOptions(devices="1GiB, 2GiB")
    assert devices.devices == (1 << 30, 2 << 30)
    assert (devices.shard_counts, devices.explicit) == ((2,), True)
    assert (PlanOptions().shard_counts, PlanOptions().explicit) == (tuple(range(2, 9)), False)
    with pytest.raises(TypeError, match="shard"):
        plan(model, shard=[2])
    with pytest.raises(TypeError, match="PlanOptions"):
        plan(model, {"shards": [2]})


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"max_shard_size_mb": 0}, "max_shard_size_mb must be a positive number of MiB"),
        ({"max_shard_size_mb": 1.5}, "max_shard_size_mb must be a positive number of MiB"),
        ({"headroom": 1}, "headroom must be in [0, 1)"),
        ({"headroom": float("nan")}, "headroom must be in [0, 1)"),
        ({"headroom": "0.2"}, "headroom must be in [0, 1)"),
        ({"dims": {"seq": 0}}, "planning dim 'seq' must be a positive integer"),
        ({"dims": ["seq=2"]}, "dims must map dim names to sizes"),
        ({"side_limit_bytes": -1}, "side_limit_bytes must be a byte count"),
        ({"name": 3}, "name must be a string"),
        ({"devices": []}, "devices is empty"),
        ({"devices": [0]}, "device size 0 must be a positive byte count"),
        ({"devices": ["1GiB"], "shards": [2]}, "2 shards need 2 devices"),
    ],
)
def test_plan_options_refuse_bad_values_with_plan_error_naming_the_field(keywords, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        PlanOptions(**keywords)
    with pytest.raises(PlanError, match=re.escape(message)):
        plan(zoo.resnet(depth_blocks=2), **keywords)


def test_cli_plan_bad_options_are_usage_errors(tmp_path, capsys):
    source = tmp_path / "m.onnx"
    ir.save(zoo.resnet(depth_blocks=2), source)
    out = tmp_path / "m.omny"
    argv = ["plan", str(source), "-o", str(out)]
    assert main([*argv, "--devices", "1GiB", "--shards", "2"]) == 2
    assert "2 shards need 2 devices" in capsys.readouterr().err
    assert main([*argv, "--max-shard-mb", "0"]) == 2
    assert not out.exists()


def test_plan_split_and_verify_take_a_path_as_annotate_and_check_do(tmp_path):
    """Issue 18 item 27: annotate/check/Pipeline took a file, plan/split/verify raised
    TypeError on one. The file is read, never modified."""
    from onnx_ir_multidevice import annotate, check, split, verify
    from onnx_ir_multidevice._proto.files import load, save

    path = tmp_path / "resnet.onnx"
    ir.save(zoo.resnet(depth_blocks=2), path)
    before = path.read_bytes()
    for given in (str(path), path):
        assert plan(given, shards=[2]).sharding.configurations[0].num_shards == 2
        assert plan_model(given, shards=[2]).partitions[0].num_stages == 2
    assert path.read_bytes() == before
    model = load(path)
    omny.write(model, plan(model, shards=[2]))
    planned = tmp_path / "planned.omny"
    save(model, planned)
    for given in (str(planned), planned):
        assert [len(s.graph) for s in split(given, 2)] == [len(s.graph) for s in split(model, 2)]
        assert verify(given, 2).ok
        assert not [d for d in check(given) if d.is_error]
        assert annotate(given).device_configurations
