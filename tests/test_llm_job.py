"""The whole job on a small Llama decoder (the code path of ``benchmarks/llm.py``), and the
memory model's runtime terms against what onnxruntime measurably uses."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_ir_multidevice import load, save_split
from onnx_ir_multidevice.analysis.cut_points import analyse_cut_points
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.planner import (
    RUNTIME_NODE_BYTES,
    RUNTIME_OP_TYPE_BYTES,
    RUNTIME_OVERHEAD_BYTES,
    plan_model,
)
from onnx_ir_multidevice.planner.memory import MIB, MemoryModel, StageMemory
from onnx_ir_multidevice.runtime import (
    ModelSession,
    Pipeline,
    make_inputs,
    measure_memory,
    measure_stages,
    verify,
)
from onnx_ir_multidevice.testing import llama

pytest.importorskip("onnxruntime")

CONFIG = dataclasses.replace(llama.TINY, kv_cache=True, layers=4)
DIMS = {"batch": 1, "seq": 16, "past_seq": 1, "total_seq": 17}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The decoder written with external data, loaded, planned for 2 shards and split."""
    folder = tmp_path_factory.mktemp("llm")
    path = llama.write_llama(folder / "decoder.onnx", CONFIG)
    model = load(path)
    result = plan_model(model, shards=[2], dims=DIMS, relaxed=True)
    save_split(model, folder / "split", 2, metadata=result.metadata)
    return path, model, result, folder / "split"


def requests(past: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {
        "input_ids": rng.integers(0, CONFIG.vocab, size=(1, seq), dtype=np.int64),
        "attention_mask": np.ones((1, past + seq), dtype=np.int64),
        "position_ids": np.arange(past, past + seq, dtype=np.int64)[None],
    }
    shape = (1, CONFIG.kv_heads, past, CONFIG.head_dim)
    for i in range(CONFIG.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


def test_plan_split_verify_run(job):
    path, model, result, folder = job
    # Relaxed cuts: the rotary cos/sin rows cross every layer as side activations.
    (cut,) = result.partitions[0].cuts
    assert cut.value.name.startswith("model.layers.") and not cut.strict
    stages = [folder / f"stage_{k}.onnx" for k in range(2)]
    for stage in stages:
        proto = onnx.load(stage, load_external_data=False)
        external = [t for t in proto.graph.initializer if t.data_location == 1]
        assert external and (folder / f"{stage.name}.data").is_file()

    report = verify(model, 2, metadata=result.metadata, dims=DIMS)
    assert report.ok, str(report)
    assert len(report.stage_create_seconds) == 2 and report.whole_create_seconds > 0
    assert report.to_dict()["stage_create_seconds"] == list(report.stage_create_seconds)

    # Prefill then decode with the KV cache, through the pipeline and the whole model.
    with ModelSession(path) as whole, Pipeline(folder, intra_op_num_threads=1) as pipe:
        names = [o.name for o in whole.session.get_outputs()]
        for feeds in (requests(0, 16, seed=1), requests(16, 1, seed=2)):
            expected = dict(zip(names, whole.session.run(None, feeds), strict=True))
            got = pipe.run(feeds)
            assert set(got) == set(names)
            for name in names:
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
        streamed = list(pipe.map([requests(16, 1, seed=s) for s in range(3)]))
        assert [r["logits"].shape for r in streamed] == [(1, 1, CONFIG.vocab)] * 3


def test_measured_stages_match_the_prediction(job):
    _, model, result, folder = job
    measured = measure_stages(folder, make_inputs(model, dims=DIMS))
    assert len(measured) == 2
    for stage, found in zip(result.partitions[0].memory, measured, strict=True):
        assert found.peak_bytes >= found.steady_bytes > 0 and found.peak_reset
        assert found.output_bytes > 0 and found.create_seconds > 0
        # The goal of docs/memory_accuracy.md, with room for a noisy neighbour.
        assert 0.85 <= stage.resident_bytes / found.peak_bytes <= 1.3


def _matmul_model(width: int, table_rows: int) -> ir.Model:
    """ids -> Gather(table) -> MatMul(w) -> y: a pre-packed weight and a Gather-only table."""
    rng = np.random.default_rng(0)
    ids = ir.val("ids", ir.DataType.INT64, ir.Shape([1, 8]))
    table = ir.Value(name="table", const_value=ir.tensor(
        rng.standard_normal((table_rows, width), dtype=np.float32)))  # fmt: skip
    weight = ir.Value(name="w", const_value=ir.tensor(
        rng.standard_normal((width, width), dtype=np.float32)))  # fmt: skip
    h = ir.val("h", ir.DataType.FLOAT, ir.Shape([1, 8, width]))
    y = ir.val("y", ir.DataType.FLOAT, ir.Shape([1, 8, width]))
    nodes = [
        ir.node("Gather", [table, ids], outputs=[h], name="embed"),
        ir.node("MatMul", [h, weight], outputs=[y], name="proj"),
    ]
    graph = ir.Graph([ids], [y], nodes=nodes, initializers=[table, weight],
                     opset_imports={"": 18})  # fmt: skip
    return ir.Model(graph, ir_version=10)


def test_runtime_terms_by_hand():
    model = _matmul_model(width=1024, table_rows=16384)
    memory = MemoryModel(analyse_cut_points(model.graph, sizes=ValueSizes(model.graph)))
    whole = memory.whole()
    weight, table = 1024 * 1024 * 4, 16384 * 1024 * 4
    assert whole.prepack_bytes == weight  # the MatMul weight, not the table
    # 8 rows read, at most 2 MiB resident around each (a folio), the rest stays mapped.
    assert whole.mapped_bytes == table - 8 * 2 * MIB
    assert whole.workspace_bytes == 0
    assert whole.runtime_bytes == (
        RUNTIME_OVERHEAD_BYTES + 2 * RUNTIME_NODE_BYTES + 2 * RUNTIME_OP_TYPE_BYTES + weight
        - whole.activations_bytes
        - whole.io_bytes
    )  # fmt: skip
    assert whole.total_bytes == table + weight + whole.activations_bytes + whole.io_bytes
    assert whole.resident_bytes == whole.total_bytes + whole.runtime_bytes - whole.mapped_bytes
    # Without a model the runtime terms are zero: the .omny numbers are unchanged.
    plain = StageMemory(weights_bytes=MIB, activations_bytes=1, io_bytes=0)
    assert plain.resident_bytes == plain.total_bytes


def test_measure_memory_sees_prepacking_and_mapped_tables(tmp_path):
    model = _matmul_model(width=1024, table_rows=16384)  # 4 MiB weight, 64 MiB table
    # A stage file with external data, written by save_split from the in-memory model: its
    # pages are still in the page cache in large folios (the case the model's bound covers).
    save_split(model, tmp_path / "split", 1)
    path = tmp_path / "split" / "stage_0.onnx"
    memory = MemoryModel(analyse_cut_points(model.graph, sizes=ValueSizes(model.graph))).whole()
    feeds = {"ids": np.arange(8, dtype=np.int64)[None] * 2000}
    found = measure_memory(path, feeds, arena=False)
    # The table is mostly not resident, the weight is held twice while the session is made.
    assert found.peak_bytes < RUNTIME_OVERHEAD_BYTES + 32 * MIB
    assert found.session_peak_bytes > RUNTIME_OVERHEAD_BYTES // 2 + 2 * 4 * MIB
    # The bound is looser than the model's ±20 % goal: in a stage this small the fixed
    # onnxruntime cost dominates, and how much of onnxruntime's library a fresh child finds
    # already resident varies with the environment (1.13 in a long-used venv, 1.23 in a new
    # one made by a fresh clone's scripts/test: baseline 48 vs 65 MB, same prediction).
    assert 0.8 <= memory.resident_bytes / found.peak_bytes <= 1.3
    with pytest.raises(Exception, match="measuring"):
        measure_memory(path, {}, arena=True)  # the input is missing
