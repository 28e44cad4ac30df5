"""Vocabulary-parallel embeddings: a ``Gather`` of a constant table, split by rows per rank."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from tp_oracle import check_region, whole_values

from onnx_ir_multidevice._split.tensor_parallel import MS_DOMAIN, rank_models
from onnx_ir_multidevice.analysis import sharding
from onnx_ir_multidevice.analysis.sharding import Partial, VocabMask
from onnx_ir_multidevice.analysis.tensor_parallel import find_regions
from onnx_ir_multidevice.runtime.tensor_parallel import verify_tensor_parallel
from onnx_ir_multidevice.testing import llama

F32 = ir.DataType.FLOAT
VOCAB, HIDDEN, INNER = 16, 8, 16


@pytest.fixture(autouse=True)
def _any_table_size(monkeypatch):
    """The tables here are small: slice them all (the default skips tables under 1 MiB)."""
    monkeypatch.setattr(sharding, "VOCAB_PARALLEL_MIN_BYTES", 0)


def test_tables_under_the_minimum_stay_replicated(monkeypatch):
    """By default a table under VOCAB_PARALLEL_MIN_BYTES (the TINY Llama's embedding and its
    rotary caches) is not sliced; a table of that size or more is."""
    monkeypatch.setattr(sharding, "VOCAB_PARALLEL_MIN_BYTES", 1 << 20)
    assert _lookups(llama.build_llama(llama.TINY), 2) == []
    rows = (1 << 20) // (HIDDEN * 4)  # a 1 MiB float32 table
    model = embedding_model(vocab=rows)
    (region,) = _lookups(model, 2)
    assert region.vocab_masks[0].vocab == rows
    assert verify_tensor_parallel(model, 2).ok


def _const(name: str, array: np.ndarray) -> ir.Value:
    return ir.Value(
        name=name,
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        shape=ir.Shape(array.shape),
        const_value=ir.Tensor(array, name=name),
    )


def embedding_model(
    vocab: int = VOCAB,
    *,
    axis: int = 0,
    weight_input: bool = False,
    ids_type: ir.DataType = ir.DataType.INT64,
) -> ir.Model:
    """ids -> Gather(table) -> LayerNormalization -> MLP (MatMul, Relu, MatMul) -> y."""
    rng = np.random.default_rng(0)
    ids = ir.Value(name="ids", type=ir.TensorType(ids_type), shape=ir.Shape([2, 6]))
    table_shape = (vocab, HIDDEN) if axis == 0 else (HIDDEN, vocab)
    table_array = rng.standard_normal(table_shape).astype(np.float32)
    inputs = [ids]
    inits = []
    if weight_input:
        table = ir.Value(name="table", type=ir.TensorType(F32), shape=ir.Shape(table_shape))
        inputs.append(table)
    else:
        table = _const("table", table_array)
        inits.append(table)
    scale = _const("ln.scale", np.ones(HIDDEN, np.float32))
    bias = _const("ln.bias", np.zeros(HIDDEN, np.float32))
    up = _const("up.w", rng.standard_normal((HIDDEN, INNER)).astype(np.float32) / 4)
    down = _const("down.w", rng.standard_normal((INNER, HIDDEN)).astype(np.float32) / 4)
    inits += [scale, bias, up, down]
    lookup = ir.Node("", "Gather", [table, ids], [ir.AttrInt64("axis", axis)], name="lookup")
    h = lookup.outputs[0]
    h.name = "embedded"
    nodes = [lookup]
    if axis == 1:  # [HIDDEN, 2, 6] -> [2, 6, HIDDEN]
        nodes.append(ir.Node("", "Transpose", [h], [ir.AttrInt64s("perm", [1, 2, 0])]))
        h = nodes[-1].outputs[0]
        h.name = "embedded_t"
    for op, extra, name in (
        ("LayerNormalization", [scale, bias], "normed"),
        ("MatMul", [up], "up"),
        ("Relu", [], "act"),
        ("MatMul", [down], "y"),
    ):
        nodes.append(ir.Node("", op, [h, *extra], name=f"n_{name}"))
        h = nodes[-1].outputs[0]
        h.name = name
    h.type = ir.TensorType(F32)
    h.shape = ir.Shape([2, 6, HIDDEN])
    graph = ir.Graph(
        inputs, [h], nodes=nodes, initializers=inits, opset_imports={"": 18}, name="lookup"
    )
    return ir.Model(graph, ir_version=10)


def _boundary_ids(vocab: int, degree: int, dtype=np.int64) -> np.ndarray:
    """Id 0, V - 1, both sides of every rank's first row, and negative ids (-1, -V...)."""
    rows = vocab // degree
    edges = [0, vocab - 1, -1, -vocab, 1 - vocab, -rows]
    for k in range(1, degree):
        edges += [k * rows - 1, k * rows, -(k * rows), -(k * rows) - 1]
    edges = (edges * 2)[:12]
    return np.array(edges, dtype=dtype).reshape(2, 6)


def _lookups(model: ir.Model, degree: int, dims=None) -> list:
    return [r for r in find_regions(model, degree, dims=dims) if r.vocab_masks]


@pytest.mark.parametrize("ids_type", [ir.DataType.INT64, ir.DataType.INT32])
@pytest.mark.parametrize("degree", [2, 4])
def test_embedding_is_vocabulary_parallel_and_equals_the_whole_model(degree, ids_type):
    model = embedding_model(ids_type=ids_type)
    (region,) = _lookups(model, degree)
    (mask,) = region.vocab_masks
    assert (mask.node.name, mask.vocab, mask.rows) == ("lookup", VOCAB, VOCAB // degree)
    assert [mask.offset(k) for k in range(degree)] == [k * VOCAB // degree for k in range(degree)]
    (piece,) = region.weight_slices
    assert (piece.value.name, piece.axis, piece.degree) == ("table", 0, degree)
    assert isinstance(region.states[mask.node.outputs[0]], Partial)
    assert [c.kind for c in region.collectives] == ["AllReduce"]  # right after the lookup
    assert region.collectives[0].after is mask.node
    ids = _boundary_ids(VOCAB, degree, ids_type.numpy())
    # The oracle: each shard's lookup, summed, equals the whole one.
    check_region(model, region, whole_values(model, {"ids": ids}), engine="onnxruntime")
    report = verify_tensor_parallel(model, degree, {"ids": ids})
    assert report.ok, report.outputs
    assert report.outputs[0].max_abs_diff <= 1e-5


@pytest.mark.parametrize("degree", [2, 4])
def test_rank_models_hold_their_rows_and_reduce_after_the_mask(degree):
    model = embedding_model()
    table = model.graph.initializers["table"].const_value.numpy()
    rows = VOCAB // degree
    ids = _boundary_ids(VOCAB, degree)
    for rank, ranked in enumerate(rank_models(model, degree)):
        proto = ir.to_proto(ranked)
        onnx.checker.check_model(proto)  # topologically sorted: the AllReduce reads the mask
        assert "table" not in ranked.graph.initializers  # the whole table is gone
        mine = ranked.graph.initializers[f"table.tp{rank}of{degree}"].const_value.numpy()
        np.testing.assert_array_equal(mine, table[rank * rows : (rank + 1) * rows])
        ops = [n.op_type for n in ranked.graph]
        reduce = next(n for n in ranked.graph if n.domain == MS_DOMAIN)
        assert reduce.op_type == "AllReduce"
        assert reduce.inputs[0].producer().op_type == "Where"  # the masked rows
        # The mask nodes are those the planner counts (VocabMask.OP_TYPES).
        start = ops.index("Gather") - (len(VocabMask.OP_TYPES) - 1)
        assert [*ops[start : ops.index("Gather")], "Where"] == list(VocabMask.OP_TYPES)
        # Rank `rank`'s piece: its rows looked up, zeros for the ids of the other ranks.
        normal = np.where(ids < 0, ids + VOCAB, ids)
        mine_ids = (normal >= rank * rows) & (normal < (rank + 1) * rows)
        assert mine_ids.any() and not mine_ids.all()


@pytest.mark.parametrize("degree", [2, 4])
def test_per_rank_weight_bytes_shrink_by_the_embedding_share(degree):
    model = embedding_model(vocab=64)

    def weight_bytes(m: ir.Model) -> int:
        return sum(v.const_value.nbytes for v in m.graph.initializers.values())

    whole = weight_bytes(model)
    table = 64 * HIDDEN * 4
    sliced = sum(
        p.value.const_value.nbytes for r in find_regions(model, degree) for p in r.weight_slices
    )
    for ranked in rank_models(model, degree):
        # The embedding's (d - 1) / d share (and the MLP's) is gone from every rank.
        shrink = whole - weight_bytes(ranked)
        masks = sum(
            v.const_value.nbytes
            for v in ranked.graph.initializers.values()
            if ".tp_vocab." in (v.name or "")
        )
        assert shrink + masks == sliced * (degree - 1) // degree
        assert table * (degree - 1) // degree <= shrink + masks


@pytest.mark.parametrize("degree", [2, 4])
def test_tiny_llama_embedding_is_vocabulary_parallel(degree):
    model = llama.build_llama(llama.TINY)
    names = {r.vocab_masks[0].node.name for r in _lookups(model, degree)}
    assert "model.embed_tokens" in names
    ids = _boundary_ids(llama.TINY.vocab, degree)
    feeds = {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "position_ids": np.tile(np.arange(6, dtype=np.int64), (2, 1)),
    }
    report = verify_tensor_parallel(model, degree, feeds)
    assert report.ok, report.outputs
    for output in report.outputs:
        assert output.max_abs_diff <= 1e-4 * max(1.0, output.scale)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab": 18},  # 18 rows do not divide by 4
        {"weight_input": True},  # not a constant
        {"axis": 1},  # a lookup of columns
    ],
    ids=["uneven", "not-constant", "axis-1"],
)
def test_refused_lookups_stay_replicated_and_verify(kwargs):
    model = embedding_model(**kwargs)
    degree = 4
    assert not _lookups(model, degree)
    regions = find_regions(model, degree)
    assert regions  # the MLP still is a region
    assert all(n.op_type != "Gather" for r in regions for n in r.nodes)
    limit = HIDDEN if kwargs.get("axis") == 1 else kwargs.get("vocab", VOCAB)
    rng = np.random.default_rng(1)
    feeds = {"ids": rng.integers(-limit, limit, (2, 6)).astype(np.int64)}
    if kwargs.get("weight_input"):
        feeds["table"] = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    report = verify_tensor_parallel(model, degree, feeds)
    assert report.ok, report.outputs


def test_tied_table_read_whole_elsewhere_stays_replicated():
    """A table the graph also reads whole (a tied LM head's Transpose) is not sliced."""
    model = embedding_model()
    table = model.graph.initializers["table"]
    head = ir.Node("", "Transpose", [table], [ir.AttrInt64s("perm", [1, 0])], name="tied")
    head.outputs[0].name = "tied_t"
    logits = ir.Node("", "MatMul", [model.graph.outputs[0], head.outputs[0]], name="head")
    logits.outputs[0].name = "logits"
    model.graph.extend([head, logits])
    model.graph.outputs.append(logits.outputs[0])
    assert not _lookups(model, 2)
