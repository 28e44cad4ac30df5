"""Tensor-parallel split (rank models, segments) and its run inside the pipeline, verified."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tensor_parallel import random_block
from tp_corpus_report import CORPUS

from onnx_ir_multidevice import OmnyFormatError, PipelineError, omny
from onnx_ir_multidevice._split.tensor_parallel import (
    MS_DOMAIN,
    TENSOR_PARALLEL_KEY,
    TensorParallelCollective,
    rank_models,
    split_tensor_parallel,
    tensor_parallel_degrees,
)
from onnx_ir_multidevice.analysis.tensor_parallel import find_regions
from onnx_ir_multidevice.planner import plan
from onnx_ir_multidevice.runtime import Pipeline
from onnx_ir_multidevice.runtime.tensor_parallel import (
    TensorParallelRunner,
    TensorParallelStage,
    tensor_parallel_chain,
    verify_tensor_parallel,
)
from onnx_ir_multidevice.testing.zoo import synthetic_transformer

TRANSFORMERS = {
    "gpt2_dynamo": None,
    "llama_gqa_dynamo": None,
    "bert_dynamo": None,
    "vit_dynamo": None,
    "whisper_encoder_dynamo": None,
    "gpt2_torchscript": None,
    "bert_torchscript": None,
    "llama_kv_optimum": {"batch_size": 2, "sequence_length": 5, "past_sequence_length": 3},
}


def _load(name: str) -> ir.Model:
    return ir.load(CORPUS / f"{name}.onnx")


@pytest.mark.parametrize("degree", [2, 4])
@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_corpus_transformer_split_equals_whole_model(name: str, degree: int):
    model = _load(name)
    dims = TRANSFORMERS[name]
    regions = find_regions(model, degree, dims=dims)
    assert regions, f"{name}: no region at degree {degree}"
    report = verify_tensor_parallel(model, degree, dims=dims)
    assert report.ok, report.outputs
    for output in report.outputs:
        assert output.max_abs_diff <= 1e-4 * max(1.0, output.scale)


@pytest.mark.parametrize("degree", [2, 4])
def test_rank_models_have_one_collective_per_region_collective(degree: int):
    model = _load("gpt2_dynamo")
    regions = find_regions(model, degree)
    expected = sum(len(r.collectives) for r in regions)
    models = rank_models(model, degree)
    assert len(models) == degree
    for rank, ranked in enumerate(models):
        proto = ir.to_proto(ranked)
        onnx.checker.check_model(proto)  # com.microsoft is a domain the checker accepts
        collectives = [n for n in proto.graph.node if n.domain == MS_DOMAIN]
        assert len(collectives) == expected
        assert {n.op_type for n in collectives} == {"AllReduce"}
        assert any(i.domain == MS_DOMAIN for i in proto.opset_import)
        # Rank k holds slice k: the fused QKV weight of the first layer, in 3 blocks.
        sliced = [n for n in proto.graph.initializer if n.name.endswith(f".tp{rank}of{degree}")]
        assert sliced


def test_rank_model_weights_are_views_of_the_source():
    model = _load("gpt2_dynamo")
    (first, *_) = rank_models(model, 2)
    sliced = {p.value.name for r in find_regions(model, 2) for p in r.weight_slices}
    whole = sum(model.graph.initializers[n].const_value.nbytes for n in sliced)
    mine = [first.graph.initializers[f"{n}.tp0of2"] for n in sliced]
    assert sum(v.const_value.nbytes for v in mine) * 2 == whole
    assert not sliced & set(first.graph.initializers)  # the whole weights are gone
    # A slice of one block is a numpy view of the source's array, not a copy.
    assert any(np.asarray(v.const_value.raw).base is not None for v in mine)


def test_fault_in_one_rank_fails_the_request_cleanly():
    model = synthetic_transformer(2, hidden=32, heads=2)
    chain = tensor_parallel_chain(model, 1, 2)
    (stage,) = chain.stages
    assert isinstance(stage, TensorParallelStage)
    # Rank 1's first segment gets a Reshape to an impossible shape: onnxruntime fails there.
    bad = ir.from_proto(onnx.load_from_string(_bad_segment(stage.ranks[1][0].source)))
    broken_rank = (
        stage.ranks[1][0].__class__(0, ir.to_proto(bad).SerializeToString(), *_io(stage, 1)),
        *stage.ranks[1][1:],
    )
    broken = TensorParallelStage(
        0, stage.source, stage.inputs, stage.outputs,
        ranks=(stage.ranks[0], broken_rank), steps=stage.steps,
    )  # fmt: skip
    good_chain = chain
    bad_chain = type(chain)((broken,), chain.graph_inputs, chain.graph_outputs, chain.input_specs)
    with Pipeline(good_chain) as pipe:
        inputs = pipe.example_inputs()
        expected = pipe.run(inputs)
    with Pipeline(bad_chain) as pipe:
        with pytest.raises(PipelineError, match=r"rank 1 of 2 .* segment 0"):
            pipe.run(inputs)
        with pytest.raises(PipelineError, match="rank 1"):
            list(pipe.map([inputs, inputs]))
        assert not pipe.closed
    # A runner on its own says the same.
    runner = TensorParallelRunner(broken, Pipeline(good_chain).devices[0])
    try:
        with pytest.raises(PipelineError, match="rank 1"):
            runner.run(inputs)
    finally:
        runner.close()
    assert set(expected) == set(chain.graph_outputs)


def _io(stage: TensorParallelStage, rank: int):
    segment = stage.ranks[rank][0]
    return segment.inputs, segment.outputs


def _bad_segment(source) -> bytes:
    proto = onnx.load_from_string(source) if isinstance(source, bytes) else ir.to_proto(source)
    first = proto.graph.output[0].name
    bad = onnx.helper.make_tensor("tp_bad_shape", onnx.TensorProto.INT64, [2], [7, 7])
    proto.graph.initializer.append(bad)
    for node in proto.graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name == first:
                    names[i] = first + "_pre"
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    proto.graph.node.append(
        onnx.helper.make_node("Reshape", [first + "_pre", "tp_bad_shape"], [first])
    )
    return proto.SerializeToString()


def test_pipeline_runs_tensor_parallel_stage_with_queue_api_and_stats():
    model = synthetic_transformer(2, hidden=32, heads=4)
    chain = tensor_parallel_chain(model, 1, 2)
    whole = ir.to_proto(model).SerializeToString()
    import onnxruntime as ort

    session = ort.InferenceSession(whole, providers=["CPUExecutionProvider"])
    with Pipeline(chain, intra_op_num_threads=1) as pipe:
        requests = [pipe.example_inputs(seed=k) for k in range(3)]
        for request in requests:
            pipe.send_input(request)
        received = [pipe.receive_output() for _ in requests]
        mapped = list(pipe.map(requests))
        stats = pipe.stats()
    assert stats.requests == 6
    for request, got, again in zip(requests, received, mapped, strict=True):
        (expected,) = session.run(None, request)
        name = chain.graph_outputs[0]
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got[name], again[name])


def test_pipeline_two_stages_by_tensor_two_on_gpt2():
    model = _load("gpt2_dynamo")
    metadata = plan(model, shards=2, dims={"batch": 1, "seq": 8})
    omny.write(model, metadata)
    chain = tensor_parallel_chain(model, 2, 2)
    assert [type(s).__name__ for s in chain.stages] == ["TensorParallelStage"] * 2
    report = verify_tensor_parallel(model, 2, shards=2)
    assert report.ok, report.outputs
    assert report.num_stages == 2
    with Pipeline(chain) as pipe:
        inputs = pipe.example_inputs()
        out = pipe.run(inputs)
    assert set(out) == {"logits"}


def test_model_without_regions_gives_a_plain_stage_and_one_reason():
    model = _load("resnet_dynamo")
    result = split_tensor_parallel(model, 2)
    assert result.degree == 1
    assert result.reason is not None
    assert "no tensor-parallel region found at degree 2" in result.reason
    assert "no tensor parallelism" in result.placement()
    chain = tensor_parallel_chain(model, 1, 2)
    assert not isinstance(chain.stages[0], TensorParallelStage)
    assert verify_tensor_parallel(model, 2).ok


def test_degree_from_the_models_record_and_strict_reader():
    model = synthetic_transformer(1)
    assert tensor_parallel_degrees(model) == {}
    model.metadata_props[TENSOR_PARALLEL_KEY] = "{not json"
    with pytest.raises(OmnyFormatError, match="OMNY225") as info:
        tensor_parallel_degrees(model)
    assert info.value.path == f"metadata_props[{TENSOR_PARALLEL_KEY}]"
    record = {
        "format": 1,
        "configurations": [
            {
                "name": "omny/1-shards",
                "num_shards": 1,
                "stages": [{"stage": 0, "degree": 2, "devices": [0, 1]}],
                "dims": {},
            }
        ],
    }
    import json

    model.metadata_props[TENSOR_PARALLEL_KEY] = json.dumps(record)
    assert tensor_parallel_degrees(model) == {0: 2}
    assert tensor_parallel_degrees(model, 2) == {}  # the record is for 1 stage
    chain = tensor_parallel_chain(model)
    assert isinstance(chain.stages[0], TensorParallelStage)
    assert chain.stages[0].degree == 2


def test_collective_combine_block_aware():
    pieces = [np.array([[0, 1, 4, 5]]), np.array([[2, 3, 6, 7]])]
    gather = TensorParallelCollective("AllGather", "v", "p", axis=-1, blocks=2)
    np.testing.assert_array_equal(gather.combine(pieces), [[0, 1, 2, 3, 4, 5, 6, 7]])
    reduce = TensorParallelCollective("AllReduce", "v", "p")
    np.testing.assert_array_equal(reduce.combine(pieces), [[2, 4, 10, 12]])
    assert TensorParallelCollective.from_dict(gather.to_dict()) == gather


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 1000),
    hidden=st.sampled_from([8, 16]),
    inner=st.sampled_from([8, 16]),
    activation=st.sampled_from(["Relu", "Tanh", "Identity"]),
    after=st.sampled_from(["Relu", "LayerNormalization", "AddBias", "Residual", "Scale"]),
    bias=st.booleans(),
    attention=st.booleans(),
    degree=st.sampled_from([2, 4]),
)
def test_random_blocks_split_equals_whole(
    seed, hidden, inner, activation, after, bias, attention, degree
):
    model = random_block(seed, hidden, inner, activation, after, bias, attention)
    result = split_tensor_parallel(model, degree)
    assert result.degree == degree
    x = np.random.default_rng(seed).standard_normal((2, 3, hidden)).astype(np.float32)
    report = verify_tensor_parallel(model, degree, {"x": x})
    assert report.ok, report.outputs


@pytest.mark.parametrize("degree", [2, 4])
def test_lm_head_is_column_parallel_and_gathered_at_the_output(degree: int):
    from onnx_ir_multidevice.testing.llama import TINY, build_llama

    model = build_llama(TINY)
    dims = {"batch": 1, "seq": 4}
    plain = find_regions(model, degree, dims=dims)
    regions = find_regions(model, degree, dims=dims, gather_outputs=True)
    assert len(regions) == len(plain) + 1
    gathers = [c for r in regions for c in r.collectives if c.kind == "AllGather"]
    assert [c.value.name for c in gathers] == ["logits"]
    result = split_tensor_parallel(model, degree, dims=dims)
    assert result.steps[-1] == (
        TensorParallelCollective("AllGather", "logits", "logits__tp_partial", -1, 1),
    )
    # The LM head weight is sliced: each rank holds 1/degree of the vocabulary's rows.
    head = next(
        v for v in model.graph.initializers.values() if v.const_value is not None and
        v.shape is not None and TINY.vocab in v.shape and "embed" not in (v.name or "")
    )  # fmt: skip
    last = result.segments[1][-1].graph.initializers
    sliced = [v for n, v in last.items() if n.startswith(f"{head.name}.tp1of{degree}")]
    assert len(sliced) == 1
    assert sliced[0].const_value.size * degree == head.const_value.size
    report = verify_tensor_parallel(model, degree, dims=dims)
    assert report.ok, report.outputs


def test_lone_output_gather_is_not_a_region():
    model = _load("resnet_dynamo")  # only its classifier head could be column-parallel
    assert find_regions(model, 2, allow_gather=True)
    assert find_regions(model, 2, gather_outputs=True) == []


def test_allreduce_combine_in_place_sums_into_the_first_piece():
    pieces = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    reduce = TensorParallelCollective("AllReduce", "v", "p")
    copied = reduce.combine(pieces)
    assert copied is not pieces[0]
    np.testing.assert_array_equal(pieces[0], [1.0, 2.0])
    total = reduce.combine(pieces, in_place=True)
    assert total is pieces[0]
    np.testing.assert_array_equal(total, [4.0, 6.0])
    frozen = np.array([1.0, 2.0])
    frozen.flags.writeable = False
    assert reduce.combine([frozen, pieces[1]], in_place=True) is not frozen


def test_kv_decoder_decode_step_splits_attention_by_heads():
    """Past keys/values sliced by heads per rank, present ones gathered at the output."""
    model = _load("gpt2_kv_dynamo")
    dims = {"batch": 2, "seq": 1, "past_seq": 3, "s53": 4}
    regions = find_regions(model, 2, dims=dims, gather_outputs=True)
    gathered = {c.value.name for r in regions for c in r.collectives if c.kind == "AllGather"}
    assert {"present.0.key", "present.0.value", "present.1.key", "present.1.value"} <= gathered
    blocks = [r for r in regions if not r.vocab_masks]  # less the position embedding
    assert len(blocks) == 4  # two attention blocks and two MLPs
    report = verify_tensor_parallel(model, 2, dims=dims)
    assert report.ok, report.outputs
    for output in report.outputs:
        assert output.max_abs_diff <= 1e-4 * max(1.0, output.scale)
