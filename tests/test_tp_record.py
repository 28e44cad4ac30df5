"""The tensor-parallel record: its entry, annotate from it, the checker on the output, reverse."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import onnx_ir as ir
import pytest

from onnx_ir_multidevice import OmnyFormatError, annotate, check, load, omny, save
from onnx_ir_multidevice.omny import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    TensorParallelRecord,
    TensorParallelStage,
    read_tensor_parallel,
    write_tensor_parallel,
)
from onnx_ir_multidevice.omny.tensor_parallel_record import parse_tensor_parallel
from onnx_ir_multidevice.passes.reverse import StagesToOmnyPass
from onnx_ir_multidevice.planner.planning import plan_model

CORPUS = pathlib.Path(__file__).parent / "corpus"
TRANSFORMERS = {
    "gpt2_dynamo": {"seq": 16},
    "llama_gqa_dynamo": {"seq": 16},
    "bert_dynamo": {"seq": 16},
    "vit_dynamo": {},
}


def record_for(name: str, degrees, dims) -> TensorParallelRecord:
    return TensorParallelRecord((TensorParallelConfiguration.contiguous(name, degrees, dims),))


# ---------------------------------------------------------------------------------------------
# The entry
# ---------------------------------------------------------------------------------------------


def test_record_round_trip_is_canonical():
    record = record_for("omny/2-shards", [2, 1], {"seq": 8, "batch": 1})
    text = record.to_json()
    assert json.loads(text)["configurations"][0]["stages"][1] == {
        "degree": 1,
        "devices": [2],
        "stage": 1,
    }
    again = TensorParallelRecord.from_json(text)
    assert again == record and again.to_json() == text
    # Key order and spacing do not matter to the reader; the writer is canonical.
    loose = json.dumps(json.loads(text), indent=2, sort_keys=False)
    assert parse_tensor_parallel(loose).to_json() == text


def test_absent_stage_takes_the_lowest_free_device():
    configuration = TensorParallelConfiguration("c", 3, (TensorParallelStage(1, 2, (0, 2)),))
    assert [configuration.devices_of(s) for s in range(3)] == [(1,), (0, 2), (3,)]
    assert configuration.num_devices == 4
    assert configuration.degree_of(0) == 1 and configuration.degree_of(1) == 2
    assert TensorParallelConfiguration("c", 2, ()).devices_of(1) == (1,)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d.update(format=2), "format"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d["configurations"][0].update(name=""), "configurations[0].name"),
        (lambda d: d["configurations"][0].update(num_shards=0), "configurations[0].num_shards"),
        (lambda d: d["configurations"][0]["stages"][0].update(degree=0), "stages[0].degree"),
        (lambda d: d["configurations"][0]["stages"][1].update(stage=5), "stages[1].stage"),
        (lambda d: d["configurations"][0]["stages"][1].update(stage=0), "stages[1].stage"),
        (lambda d: d["configurations"][0]["stages"][0].update(devices=[0, 0]), "stages[0].devices"),
        (lambda d: d["configurations"][0]["stages"][0].update(devices=[0]), "stages[0].devices"),
        (lambda d: d["configurations"][0]["stages"][1].update(devices=[1]), "stages[1].devices"),
        (lambda d: d["configurations"][0]["stages"][1]["devices"].__setitem__(0, -1), "devices[0]"),
        (lambda d: d["configurations"][0].update(dims={"seq": 0}), "dims.seq"),
        (lambda d: d["configurations"].append(d["configurations"][0]), "configurations[1].name"),
    ],
)
def test_a_broken_entry_names_its_json_path(change, path):
    data = json.loads(record_for("omny/2-shards", [2, 1], {"seq": 8}).to_json())
    change(data)
    with pytest.raises(OmnyFormatError) as caught:
        parse_tensor_parallel(json.dumps(data))
    assert caught.value.path.startswith(f"metadata_props[{TENSOR_PARALLEL_KEY}]")
    assert caught.value.path.endswith(path), caught.value.path


def test_write_and_read_on_a_model():
    model = ir.Model(ir.Graph([], [], nodes=[]), ir_version=11)
    assert read_tensor_parallel(model) is None
    record = record_for("omny/1-shards", [2], {})
    assert write_tensor_parallel(model, record)
    assert not write_tensor_parallel(model, record)  # unchanged
    assert read_tensor_parallel(model) == record
    assert write_tensor_parallel(model, None) and TENSOR_PARALLEL_KEY not in model.metadata_props
    model.metadata_props[TENSOR_PARALLEL_KEY] = "{"
    with pytest.raises(OmnyFormatError):
        read_tensor_parallel(model)


# ---------------------------------------------------------------------------------------------
# annotate from a record, check, reverse, save/load: the corpus transformers
# ---------------------------------------------------------------------------------------------


def planned(name: str, shards: int, degrees) -> ir.Model:
    model = load(CORPUS / f"{name}.onnx")
    dims = TRANSFORMERS[name]
    result = plan_model(model, shards=[shards], dims=dims)
    omny.write(model, result.metadata)
    omny.write_planning_dims(model, result.planning_dims)
    configuration = f"omny/{shards}-shards"
    write_tensor_parallel(model, record_for(configuration, degrees, result.planning_dims))
    return model


def split_specs(model: ir.Model) -> int:
    return sum(
        1
        for node in model.graph
        for entry in node.device_configurations
        for spec in entry.sharding_specs
        if spec.sharded_dims
    )


def errors(model: ir.Model) -> list[str]:
    return [str(d) for d in check(model) if d.is_error]


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_annotate_a_tensor_parallel_record(name, tmp_path):
    model = planned(name, 2, [2, 2])
    annotate(model)
    assert errors(model) == []
    configuration = model.device_configurations[0]
    assert configuration.num_devices == 4
    assert split_specs(model) > 0
    # Every node of a region carries its stage and its specs in one entry.
    staged = [
        entry
        for node in model.graph
        for entry in node.device_configurations
        if any(spec.sharded_dims for spec in entry.sharding_specs)
    ]
    assert all(entry.pipeline_stage in (0, 1) for entry in staged)
    devices = {
        spec.device for entry in staged for spec in entry.sharding_specs if spec.sharded_dims
    }
    # Stage 0 holds layers; stage 1 too, except for llama, cut after its last layer (its stage
    # 1 is the final norm and the vocabulary head: no region).
    assert (0, 1) in devices and devices <= {(0, 1), (2, 3)}
    # A second annotate changes nothing.
    from onnx_ir_multidevice.passes.annotation import AnnotatePass

    assert not AnnotatePass()(model).modified
    # Reverse: the record comes back from the annotations.
    text = model.metadata_props.pop(TENSOR_PARALLEL_KEY)
    assert StagesToOmnyPass()(model).modified
    assert model.metadata_props[TENSOR_PARALLEL_KEY] == text
    # Save and load keep the annotations byte for byte.
    path = tmp_path / "tp.onnx"
    save(model, path)
    again = load(path)
    assert (
        ir.to_proto(again).graph.SerializeToString() == ir.to_proto(model).graph.SerializeToString()
    )
    assert again.metadata_props[TENSOR_PARALLEL_KEY] == text
    assert errors(again) == []


def test_one_stage_of_four_devices():
    model = planned("gpt2_dynamo", 2, [4, 1])
    annotate(model)
    assert errors(model) == []
    assert model.device_configurations[0].num_devices == 5
    specs = {
        spec.device
        for node in model.graph
        for entry in node.device_configurations
        for spec in entry.sharding_specs
        if spec.sharded_dims
    }
    assert specs == {(0, 1, 2, 3)}


def test_a_tampered_spec_is_reported():
    model = planned("gpt2_dynamo", 2, [2, 2])
    annotate(model)
    for node in model.graph:
        entry = node.device_configurations[0]
        for i, spec in enumerate(entry.sharding_specs):
            if spec.sharded_dims and spec.sharded_dims[0].axis != 0 and node.op_type != "Gemm":
                dim = spec.sharded_dims[0]
                changed = dataclasses.replace(
                    spec, sharded_dims=(dataclasses.replace(dim, axis=0),)
                )
                specs = (*entry.sharding_specs[:i], changed, *entry.sharding_specs[i + 1 :])
                node.device_configurations = (dataclasses.replace(entry, sharding_specs=specs),)
                break
        else:
            continue
        break
    found = [d for d in check(model) if d.code == "OMNY226"]
    assert found and found[0].location.startswith("node:")
    # annotate rewrites it (OMNY226 does not block it).
    annotate(model, check=False)
    assert not [d for d in check(model) if d.code == "OMNY226"]


def test_a_record_naming_no_configuration_is_reported():
    model = planned("gpt2_dynamo", 2, [2, 2])
    write_tensor_parallel(model, record_for("omny/3-shards", [2, 1, 1], {}))
    found = [d for d in check(model) if d.code == "OMNY225"]
    assert found and found[0].location.endswith("configurations[0].name")


def test_the_record_describes_the_gathered_vocabulary_head_as_the_split_cuts_it():
    """annotate (and check's recomputation) find the regions the split cuts, the vocabulary
    head gathered at the output included: the record and the split agree."""
    from onnx_ir_multidevice.runtime import verify_tensor_parallel
    from onnx_ir_multidevice.testing.llama import TINY, build_llama

    model = build_llama(TINY)
    result = plan_model(model, shards=[1], dims={"batch": 1, "seq": 4})
    omny.write(model, result.metadata)
    layout = TensorParallelConfiguration.contiguous("omny/1-shards", [2], result.planning_dims)
    write_tensor_parallel(model, TensorParallelRecord((layout,)))
    annotate(model)
    assert errors(model) == []
    head = next(node for node in model.graph if "logits" in [v.name for v in node.outputs])
    specs = {
        spec.value.name: [
            (d.axis, [s.num_shards for s in d.simple_shardings]) for d in spec.sharded_dims
        ]
        for entry in head.device_configurations
        for spec in entry.sharding_specs
    }
    assert specs["logits"] == [(2, [2])]  # the vocabulary axis, in 2 shards
    assert verify_tensor_parallel(model, 2, dims={"batch": 1, "seq": 4}).ok
