"""Tensor parallelism under hostile input: hand-edited records, degrees with no region, 1 device.

Each test is a defect an adversarial pass found through the public API and the ``omny`` CLI.
"""

from __future__ import annotations

import json
import pathlib

import onnx_ir as ir
import pytest

from onnx_ir_multidevice import (
    OmnyFormatError,
    PipelineError,
    PlanError,
    _cli,
    check,
    load,
    save_split,
)
from onnx_ir_multidevice.analysis import find_regions
from onnx_ir_multidevice.omny import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    TensorParallelRecord,
    read_tensor_parallel,
    write_tensor_parallel,
)
from onnx_ir_multidevice.planner.planning import plan_model
from onnx_ir_multidevice.runtime import Pipeline, load_stages, verify
from onnx_ir_multidevice.runtime.tensor_parallel import (
    TensorParallelStage,
    tensor_parallel_chain,
    verify_folder,
    verify_tensor_parallel,
)
from onnx_ir_multidevice.testing.zoo import synthetic_transformer

CORPUS = pathlib.Path(__file__).parent / "corpus"


def _gpt2_with_record(degrees: list[int]) -> ir.Model:
    model = load(CORPUS / "gpt2_dynamo.onnx")
    name = f"omny/{len(degrees)}-shards"
    configuration = TensorParallelConfiguration.contiguous(name, degrees, {"seq": 8})
    write_tensor_parallel(model, TensorParallelRecord((configuration,)))
    return model


def _edit_record(model: ir.Model, change) -> None:
    document = json.loads(model.metadata_props[TENSOR_PARALLEL_KEY])
    change(document["configurations"][0])
    model.metadata_props[TENSOR_PARALLEL_KEY] = json.dumps(document)


def test_split_and_run_refuse_a_record_whose_stage_count_is_not_the_splits(tmp_path):
    """``num_shards`` edited to 3 in the entry a 1-stage split uses: check says OMNY225, and
    split, run and verify must not go on with it."""
    model = _gpt2_with_record([2])
    _edit_record(model, lambda c: c.update(num_shards=3))
    path = f"metadata_props[{TENSOR_PARALLEL_KEY}].configurations[0].num_shards"
    for attempt in (
        lambda: save_split(model, tmp_path / "out", 1),
        lambda: tensor_parallel_chain(model, 1),
        lambda: verify(model, 1),
    ):
        with pytest.raises(OmnyFormatError, match="num_shards is 3") as info:
            attempt()
        assert info.value.path == path
    assert not (tmp_path / "out").exists()


def test_cli_split_of_a_record_whose_stage_count_is_not_the_splits(tmp_path, capsys):
    model = _gpt2_with_record([2])
    _edit_record(model, lambda c: c.update(num_shards=3))
    planned = tmp_path / "g.onnx"
    ir.save(model, planned)
    assert _cli.main(["split", str(planned), str(tmp_path / "out"), "--shards", "1"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert str(planned) in err and "configurations[0].num_shards" in err
    assert not (tmp_path / "out").exists()


def test_split_says_when_the_recorded_degree_finds_no_region(tmp_path, capsys):
    """GPT-2's heads do not divide by 3: the stage is written whole, and the split says so
    instead of silently dropping the recorded degree."""
    model = _gpt2_with_record([3])
    with pytest.warns(UserWarning, match=r"stage 0 is written whole.*degree 3"):
        manifest = save_split(model, tmp_path / "out", 1)
    assert manifest.stages[0].tensor_parallel is None
    planned = tmp_path / "g.onnx"
    ir.save(model, planned)
    assert _cli.main(["split", str(planned), str(tmp_path / "cli"), "--shards", "1"]) == 0
    err = capsys.readouterr().err
    assert "omny split: warning: stage 0 is written whole" in err and "degree 3" in err
    assert "Traceback" not in err and "UserWarning" not in err


@pytest.mark.parametrize(("shards", "degree"), [(1, 2), (1, "auto"), (2, 1)])
def test_plan_with_no_room_for_a_degree_above_1_says_why(shards, degree):
    """One device (or ``tensor_parallel=1``) leaves no degree to try: the reason must say
    that, not claim GPT-2 has no Megatron region ("at degree 2 to 1")."""
    model = load(CORPUS / "gpt2_dynamo.onnx")
    result = plan_model(model, shards=[shards], tensor_parallel=degree, dims={"seq": 8})
    assert result.tensor_parallel is not None
    reason = result.tensor_parallel.reason or ""
    assert "no tensor-parallel region" not in reason
    assert "degree 2 to 1" not in reason
    assert "at least 2" in reason


def test_check_of_an_entry_that_is_not_json_gives_the_advice_once():
    model = _gpt2_with_record([2])
    model.metadata_props[TENSOR_PARALLEL_KEY] = "{not json"
    messages = [d.message for d in check(model) if d.code == "OMNY225"]
    assert len(messages) == 1
    assert messages[0].count("re-plan the model") == 1


def test_cli_split_refuses_to_replace_the_folder_holding_its_input(tmp_path, capsys):
    """``omny split dir/m.omny dir --force`` deleted ``dir/m.omny`` (the planned model, its
    record with it) when it renamed the split over ``dir``."""
    folder = tmp_path / "work"
    folder.mkdir()
    planned = folder / "g.omny"
    ir.save(_gpt2_with_record([2]), planned)
    before = planned.read_bytes()
    assert _cli.main(["split", str(planned), str(folder), "--shards", "1", "--force"]) == 2
    err = capsys.readouterr().err
    assert f"{folder}: holds the input {planned}" in err and "Traceback" not in err
    assert planned.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["g.omny"]


def test_cli_annotate_counts_the_stages_not_the_devices(tmp_path, capsys):
    """2 stages of degree 2 on 4 devices: annotate printed 'nodes per stage [n0, n1, 0, 0]',
    two empty stages that do not exist."""
    source = tmp_path / "t.onnx"
    ir.save(synthetic_transformer(2), source)
    planned = tmp_path / "t.omny"
    assert _cli.main(["plan", str(source), "-o", str(planned), "--shards", "2"]) == 0
    model = load(planned)
    configuration = TensorParallelConfiguration.contiguous("omny/2-shards", [2, 2], {"seq": 16})
    write_tensor_parallel(model, TensorParallelRecord((configuration,)))
    ir.save(model, planned)
    capsys.readouterr()
    annotated = tmp_path / "a.onnx"
    assert _cli.main(["annotate", str(planned), str(annotated), "--shards", "2", "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["result"]["configurations"]
    assert summary["num_devices"] == 4
    assert len(summary["nodes_per_stage"]) == 2 and all(summary["nodes_per_stage"])


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_verify_split_of_a_path_that_is_no_folder_says_so(tmp_path, capsys, kind):
    """``omny verify m.omny --split typo`` answered "shards= is required to split a single
    model; pass shards=N": words of the Python API, about a folder that does not exist."""
    model = _gpt2_with_record([2])
    planned = tmp_path / "g.onnx"
    ir.save(model, planned)
    target = tmp_path / "typo"
    if kind == "file":
        target.write_text("not a split")
    with pytest.raises(PipelineError, match="not a split directory") as info:
        verify_folder(model, target)
    assert "shards=" not in str(info.value)
    assert _cli.main(["verify", str(planned), "--split", str(target)]) == 1
    err = capsys.readouterr().err
    assert f"{target}: " in err and "not a split directory" in err and "shards=" not in err


def test_a_rank_whose_weights_are_cut_short_is_named(tmp_path):
    """A split whose rank 1 data file was truncated (a copy cut short): the error named the
    stage and a tensor, not the rank, the segment or its file."""
    model = _gpt2_with_record([2])
    save_split(model, tmp_path / "out", 1)
    data = tmp_path / "out" / "stage_0.rank_1.onnx.data"
    with open(data, "r+b") as handle:
        handle.truncate(1000)
    pattern = r"\[stage 0\] rank 1 of 2, segment (\d+) \(stage_0\.rank_1\.segment_(\d+)\.onnx\)"
    with pytest.raises(PipelineError, match=pattern) as info:
        Pipeline(tmp_path / "out")
    message = str(info.value)
    assert "stage_0.rank_1.onnx.data" in message and "(1000 bytes)" in message
    assert "split the model again" in message


@pytest.mark.parametrize("degree", ["2", 2.0, None, 1, True])
def test_find_regions_refuses_a_degree_that_is_not_an_integer_of_at_least_2(degree):
    """'2' and None failed deep in the rules ("'<' not supported between 'str' and 'int'");
    2.0 was taken as a degree."""
    with pytest.raises(ValueError, match="a tensor-parallel degree must be an integer >= 2"):
        find_regions(synthetic_transformer(1), degree)


@pytest.mark.parametrize("degree", [2.0, "2"])
def test_run_and_verify_refuse_a_degree_that_is_not_an_integer(degree):
    """2.0 failed with "TypeError: 'float' object is not iterable"."""
    model = synthetic_transformer(1)
    for attempt in (
        lambda: verify_tensor_parallel(model, degree),
        lambda: tensor_parallel_chain(model, 1, degree),
    ):
        with pytest.raises(ValueError, match="degree must be a positive integer"):
            attempt()


def test_verify_and_run_say_when_the_recorded_degree_finds_no_region(tmp_path, capsys):
    """``omny verify`` of a model recorded at degree 3 said "OK: 1 stage" and nothing else:
    the degree was dropped without a word, as the split did."""
    model = _gpt2_with_record([3])
    with pytest.warns(UserWarning, match=r"stage 0 runs whole.*degree 3"):
        tensor_parallel_chain(model, 1)
    planned = tmp_path / "g.onnx"
    ir.save(model, planned)
    assert _cli.main(["verify", str(planned), "--shards", "1"]) == 0
    captured = capsys.readouterr()
    assert "omny verify: warning: stage 0 runs whole" in captured.err
    assert "UserWarning" not in captured.err and "OK: 1 stage" in captured.out


def test_a_tensor_parallel_plan_that_does_not_fit_says_by_how_much():
    """Devices of 3 MiB for a model whose stages need ~10 MiB per device at best: the
    pipeline-only refusal gives the figures, the tensor-parallel one said only "a stage does
    not fit a device at any degree"."""
    model = synthetic_transformer(1, hidden=256, heads=4)
    with pytest.raises(PlanError) as info:
        plan_model(model, devices=["3MiB", "3MiB"], tensor_parallel=2, dims={"seq": 64})
    message = str(info.value)
    assert "stage 0 does not fit a device at any degree: it needs" in message
    assert "but a device has 3.0 MiB" in message


def test_a_pipeline_of_a_model_file_runs_its_recorded_tensor_parallel_plan(tmp_path, capsys):
    """``omny run planned.omny --shards 1`` (and ``Pipeline(path, 1)``) ran a model recorded at
    degree 2 as one whole stage, while ``omny verify`` of the same file checked the degree-2
    split: the run was not what was verified."""
    model = _gpt2_with_record([2])
    planned = tmp_path / "g.onnx"
    ir.save(model, planned)
    for source in (model, planned):
        chain = load_stages(source, 1)
        (stage,) = chain.stages
        assert isinstance(stage, TensorParallelStage) and stage.degree == 2
    with Pipeline(planned, 1) as pipe:
        outputs = pipe.run(pipe.example_inputs())
    assert set(outputs) == {"logits"}
    assert _cli.main(["run", str(planned), "--shards", "1", "--requests", "2"]) == 0


def test_planning_again_without_tensor_parallelism_drops_the_old_record():
    """A model planned with ``--tensor-parallel`` and planned again without it kept the old
    record: the new pipeline-only plan of 2 stages was then split and run over 4 devices."""
    model = synthetic_transformer(2, hidden=512, heads=8, vocab=256)
    first = plan_model(model, shards=[4], tensor_parallel="auto", dims={"seq": 256})
    assert first.tensor_parallel is not None and first.tensor_parallel.parallel
    assert read_tensor_parallel(model) is not None
    plan_model(model, shards=[2], dims={"seq": 256})
    assert read_tensor_parallel(model) is None
