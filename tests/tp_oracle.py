"""The numeric oracle of tensor-parallel regions: each region run shard by shard, compared.

For a region found by :func:`~onnx_ir_multidevice.analysis.tensor_parallel.find_regions`:
the whole model runs once (every intermediate value kept); then, for each of ``degree``
shards, the region's nodes run as a model of their own, fed the whole run's values of their
replicated inputs, the weight slices of the shard, the rewritten shapes and attributes, zeros
for a bias added by another shard, and the whole value for an input read after its
collective. Every value the region computes is then made whole as its state says (a Split
concatenated, a Partial summed = the AllReduce, a Replicated one equal on every shard) and
compared with the whole model's value.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator

from onnx_ir_multidevice.analysis.sharding import (
    LocalShape,
    Partial,
    Replicated,
    Split,
    constant_array,
)
from onnx_ir_multidevice.analysis.tensor_parallel import Region


def _all_outputs_model(model: ir.Model) -> onnx.ModelProto:
    proto = ir.to_proto(model)
    names = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        for name in node.output:
            if name and name not in names:
                proto.graph.output.append(onnx.ValueInfoProto(name=name))
                names.add(name)
    return proto


def whole_values(
    model: ir.Model, feeds: Mapping[str, np.ndarray], *, engine: str = "reference"
) -> dict[str, np.ndarray]:
    """Every value of the model's main graph (constants included) for ``feeds``."""
    values: dict[str, np.ndarray] = dict(feeds)
    for value in model.graph.initializers.values():
        values[value.name] = value.const_value.numpy()  # type: ignore[union-attr]
    if engine == "reference":
        proto = _all_outputs_model(model)
        names = [o.name for o in proto.graph.output]
        results = ReferenceEvaluator(proto).run(names, dict(feeds))
    else:
        proto = ir.to_proto(model)
        inferred = onnx.shape_inference.infer_shapes(proto)
        types = {
            vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
        }
        names = [n for node in proto.graph.node for n in node.output if n]
        del proto.graph.output[:]
        proto.graph.output.extend(
            types.get(n) or helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
            for n in names
        )
        session = ort.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        results = session.run(names, dict(feeds))
    values.update(zip(names, results, strict=True))
    return values


def _shard_feeds_and_proto(
    model: ir.Model, region: Region, whole: Mapping[str, np.ndarray], shard: int
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[str]]:
    produced = {v for node in region.nodes for v in node.outputs if v is not None}
    slices = {(piece.node, piece.value): piece for piece in region.weight_slices}
    rewrites: dict[tuple[ir.Node, int], list] = {}
    for rewrite in region.shape_rewrites:
        rewrites.setdefault((rewrite.node, rewrite.input_index), []).append(rewrite)
    once = {(b.node, b.input_index) for b in region.bias_once}
    attributes: dict[ir.Node, dict[str, int | tuple[int, ...]]] = {}
    for rewrite in region.attribute_rewrites:
        attributes.setdefault(rewrite.node, {})[rewrite.name] = rewrite.new
    masks = {mask.node: mask for mask in region.vocab_masks}
    feeds: dict[str, np.ndarray] = {}
    nodes = []
    for n, node in enumerate(region.nodes):
        proto = ir.serde.serialize_node(node)
        del proto.input[:]
        read = region.input_states[node]
        valid = None
        for i, value in enumerate(node.inputs):
            if value is None:
                proto.input.append("")
                continue
            whole_value = whole.get(value.name)
            if whole_value is None:
                whole_value = constant_array(value)
            piece = slices.get((node, value))
            special = (node, i) in rewrites or (node, i) in once or piece is not None
            reads_whole = (
                value in produced
                and isinstance(read[i], Replicated)
                and not isinstance(region.states[value], Replicated)
            )
            if value in produced and not reads_whole:
                proto.input.append(value.name)
                continue
            array = np.array(whole_value)
            if piece is not None:
                array = piece.take(array, shard)
            for rewrite in rewrites.get((node, i), ()):
                array = array.copy()
                array[rewrite.position] = rewrite.new
            if (node, i) in once and shard != 0:
                array = np.zeros_like(array)
            mask = masks.get(node)
            if mask is not None and i == 1:  # this shard's rows: the ids in its range
                ids = np.where(array < 0, array + mask.vocab, array)
                local = ids - shard * (mask.vocab // region.degree)
                valid = (local >= 0) & (local < mask.vocab // region.degree)
                array = np.where(valid, local, 0).astype(array.dtype)
                special = True
            name = f"{value.name}__{n}_{i}" if special or reads_whole else f"{value.name}__in"
            feeds[name] = array
            proto.input.append(name)
        for attribute in proto.attribute:
            if attribute.name in attributes.get(node, {}):
                changed = attributes[node][attribute.name]
                if isinstance(changed, int):
                    attribute.i = changed
                else:
                    attribute.ints[:] = changed
        nodes.append(proto)
        if valid is not None:  # the rows of the ids out of range are zeros
            name = proto.output[0]
            proto.output[0] = f"{name}__rows"
            feeds[f"{name}__valid"] = valid[..., None]
            zero = np.zeros((), dtype=np.asarray(whole[name]).dtype)
            feeds[f"{name}__zero"] = zero
            nodes.append(
                helper.make_node(
                    "Where", [f"{name}__valid", f"{name}__rows", f"{name}__zero"], [name]
                )
            )
    outputs = [v.name for node in region.nodes for v in node.outputs if v is not None and v.name]
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for name, a in feeds.items()
    ]
    graph = helper.make_graph(
        nodes, "shard", inputs, [onnx.ValueInfoProto(name=name) for name in outputs]
    )
    opsets = [helper.make_opsetid(d, v) for d, v in model.opset_imports.items()]
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=min(model.ir_version, 10))
    return proto, feeds, outputs


def _run(proto: onnx.ModelProto, feeds: dict, outputs: list[str], engine: str, whole) -> list:
    if engine == "reference":
        return ReferenceEvaluator(proto).run(outputs, feeds)
    del proto.graph.output[:]
    proto.graph.output.extend(
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(whole[n].dtype), None)
        for n in outputs
    )
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def _make_whole(state, pieces: list[np.ndarray]) -> np.ndarray:
    if isinstance(state, Partial):
        return np.sum(np.stack(pieces), axis=0)
    if isinstance(state, Split):
        axis = pieces[0].ndim + state.axis
        blocks = [np.split(p, state.blocks, axis=axis) for p in pieces]
        return np.concatenate(
            [blocks[s][b] for b in range(state.blocks) for s in range(len(pieces))], axis=axis
        )
    for piece in pieces[1:]:
        np.testing.assert_array_equal(piece, pieces[0])
    if isinstance(state, LocalShape):  # per-device sizes: the whole model's times the degree
        whole = np.array(pieces[0], copy=True)
        flat = whole.reshape(-1)
        for position in state.positions:
            flat[position] *= len(pieces)
        return whole
    return pieces[0]


def check_region(
    model: ir.Model,
    region: Region,
    whole: Mapping[str, np.ndarray],
    *,
    engine: str = "reference",
    tolerance: float = 1e-4,
) -> float:
    """Run ``region`` shard by shard and compare every value it computes with ``whole``.

    Returns:
        The largest absolute difference (of floating values) seen.

    Raises:
        AssertionError: A value differs by more than ``tolerance`` (relative and absolute).
    """
    with np.errstate(all="ignore"):
        return _check_region(model, region, whole, engine, tolerance)


def _check_region(model, region, whole, engine, tolerance) -> float:
    per_shard = []
    for shard in range(region.degree):
        proto, feeds, outputs = _shard_feeds_and_proto(model, region, whole, shard)
        per_shard.append(
            dict(zip(outputs, _run(proto, feeds, outputs, engine, whole), strict=True))
        )
    worst = 0.0
    for node in region.nodes:
        for value in node.outputs:
            if value is None or not value.name:
                continue
            state = region.states[value]
            made = _make_whole(state, [shard[value.name] for shard in per_shard])
            expected = np.asarray(whole[value.name])
            assert made.shape == expected.shape, (
                value.name,
                str(state),
                made.shape,
                expected.shape,
            )
            if expected.dtype.kind == "f":
                finite = np.isfinite(expected)
                diff = float(np.max(np.abs(made[finite] - expected[finite]), initial=0.0))
                worst = max(worst, diff)
                np.testing.assert_allclose(
                    made,
                    expected,
                    rtol=tolerance,
                    atol=tolerance,
                    err_msg=f"{value.name} ({state})",
                )
            else:
                np.testing.assert_array_equal(made, expected, err_msg=f"{value.name} ({state})")
    return worst
