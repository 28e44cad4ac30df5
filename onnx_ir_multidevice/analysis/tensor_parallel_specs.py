"""The IR v11 sharding specs of a tensor-parallel plan: what ``annotate`` writes and checks.

A :class:`~onnx_ir_multidevice.omny.TensorParallelRecord` gives each pipeline stage of a
configuration a degree ``d`` and ``d`` devices. :func:`stage_regions` finds the regions of
every stage with ``d > 1`` (:func:`~onnx_ir_multidevice.analysis.tensor_parallel.find_regions`
on the whole model at the record's dims, keeping the regions whose nodes are all in the
stage), and :func:`region_specs` turns a region into the
:class:`onnx_ir.ShardingSpec` entries of each of its nodes, as the IR v11 examples write
them:

* a value in state :class:`~onnx_ir_multidevice.analysis.sharding.Split` (and a weight each
  device holds a slice of): ``sharded_dims = [ShardedDim(axis, [SimpleShardedDim(dim=size,
  num_shards=d)])]`` with ``device`` the stage's ``d`` devices in shard order. A value made of
  ``b`` equal blocks, each sliced (a fused QKV projection), is the fused-axes form:
  ``[SimpleShardedDim(dim=b, num_shards=1), SimpleShardedDim(dim=size / b, num_shards=d)]``;
* a replicated value read or written by a region node: no ``sharded_dims``, ``device = (-1,)``
  and ``index_to_device_group_map = [-1 -> the stage's devices]``, the seed's replication
  example;
* a :class:`~onnx_ir_multidevice.analysis.sharding.Partial` value: IR v11 has no field for a
  pending reduction. The value a collective reduces gets, on its producer, the *replicated*
  spec over the stage's devices: that is the ``AllReduce`` point (the output is whole once the
  node is done); its region readers read it replicated too. A partial value not yet reduced
  (a row-parallel ``MatMul``'s output read by the bias ``Add`` that device 0 alone applies)
  gets no spec: its state follows from the rules, as the checker's ``OMNY224`` derives it.

The axis of a split value is written non-negative when its rank is known.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "GROUP_KEY",
    "region_specs",
    "replicated_spec",
    "split_spec",
    "stage_regions",
]

from collections.abc import Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    LocalShape,
    Partial,
    Replicated,
    ShardState,
    Split,
)
from onnx_ir_multidevice.analysis.tensor_parallel import Region, find_regions

GROUP_KEY = -1
"""The device-group key of replicated specs (negative, as the IR v11 examples use)."""


def replicated_spec(value: ir.Value, devices: Sequence[int]) -> ir.ShardingSpec:
    """``value`` whole on every one of ``devices``: one group key, no sharded dims."""
    return ir.ShardingSpec(
        value=value,
        device=(GROUP_KEY,),
        index_to_device_group_map=(ir.IndexToDeviceGroupMapEntry(GROUP_KEY, tuple(devices)),),
    )


def _dim(value: ir.Value, axis: int, shapes: ValueShapes | None) -> int | ir.SymbolicDim:
    if value.shape is not None and -len(value.shape) <= axis < len(value.shape):
        dim = value.shape[axis]
        return dim if isinstance(dim, int) else ir.SymbolicDim(dim.value)
    symbolic = shapes.symbolic(value) if shapes is not None else None
    if symbolic is not None and -len(symbolic) <= axis < len(symbolic):
        entry = symbolic[axis]
        return entry if isinstance(entry, int) else ir.SymbolicDim(entry)
    return ir.SymbolicDim(None)


def _rank(value: ir.Value, shapes: ValueShapes | None) -> int | None:
    if value.shape is not None:
        return len(value.shape)
    return shapes.rank(value) if shapes is not None else None


def split_spec(
    value: ir.Value,
    axis: int,
    devices: Sequence[int],
    *,
    blocks: int = 1,
    shapes: ValueShapes | None = None,
) -> ir.ShardingSpec:
    """``value`` split on ``axis`` over ``devices`` (shard ``k`` on ``devices[k]``).

    Args:
        value: The value.
        axis: The axis; negative counts from the end (written non-negative when the rank is
            known).
        devices: The devices, one per shard.
        blocks: How many equal blocks the axis is made of, each sliced (the fused-axes form).
        shapes: Shapes to take the axis size from when ``value`` has no shape.
    """
    rank = _rank(value, shapes)
    if rank is not None and axis < 0:
        axis += rank
    size = _dim(value, axis, shapes)
    degree = len(devices)
    if blocks > 1:
        inner: int | ir.SymbolicDim = (
            size // blocks if isinstance(size, int) else ir.SymbolicDim(None)
        )
        simple: tuple[ir.SimpleShardedDim, ...] = (
            ir.SimpleShardedDim(dim=blocks, num_shards=1),
            ir.SimpleShardedDim(dim=inner, num_shards=degree),
        )
    else:
        simple = (ir.SimpleShardedDim(dim=size, num_shards=degree),)
    return ir.ShardingSpec(
        value=value,
        device=tuple(devices),
        sharded_dims=(ir.ShardedDim(axis=axis, simple_shardings=simple),),
    )


def _spec(
    value: ir.Value, state: ShardState, devices: Sequence[int], shapes: ValueShapes | None
) -> ir.ShardingSpec | None:
    if isinstance(state, Split):
        return split_spec(value, state.axis, devices, blocks=state.blocks, shapes=shapes)
    if isinstance(state, Replicated):
        return replicated_spec(value, devices)
    assert isinstance(state, (Partial, LocalShape))
    return None  # a partial sum or per-device shape data: no spec of its own


def region_specs(
    region: Region, devices: Sequence[int], shapes: ValueShapes | None = None
) -> dict[ir.Node, list[ir.ShardingSpec]]:
    """The sharding specs of each node of ``region`` on ``devices`` (see the module).

    Args:
        region: A region found at degree ``len(devices)``.
        devices: The stage's devices; device ``devices[k]`` holds shard ``k``.
        shapes: Shapes for values without one (their axis sizes and ranks).

    Returns:
        For each node of the region, in its order, the specs of its inputs then outputs (one
        per distinct value; a value read twice gets one spec).
    """
    if len(devices) != region.degree:
        raise ValueError(f"{len(devices)} devices for a region of degree {region.degree}")
    sliced = {(piece.node, piece.value): piece for piece in region.weight_slices}
    reduced = {collective.value for collective in region.collectives}
    result: dict[ir.Node, list[ir.ShardingSpec]] = {}
    for node in region.nodes:
        specs: dict[ir.Value, ir.ShardingSpec] = {}
        states = region.input_states.get(node, ())
        for i, value in enumerate(node.inputs):
            if value is None or value in specs:
                continue
            piece = sliced.get((node, value))
            if piece is not None:
                spec: ir.ShardingSpec | None = split_spec(
                    value, piece.axis, devices, blocks=piece.blocks, shapes=shapes
                )
            else:
                state = states[i] if i < len(states) else region.states.get(value)
                spec = _spec(value, state or Replicated(), devices, shapes)
            if spec is not None:
                specs[value] = spec
        for value in node.outputs:
            if value is None or value in specs:
                continue
            state = region.states.get(value, Replicated())
            if isinstance(state, Partial) and value in reduced:
                spec = replicated_spec(value, devices)  # the AllReduce point
            else:
                spec = _spec(value, state, devices, shapes)
            if spec is not None:
                specs[value] = spec
        result[node] = list(specs.values())
    return result


def stage_regions(
    model: ir.Model,
    stages: Mapping[ir.Node, int | None],
    degrees: Mapping[int, int],
    *,
    dims: Mapping[str, int] | None = None,
    shapes: ValueShapes | None = None,
) -> dict[int, list[Region]]:
    """The tensor-parallel regions of each stage with a degree above 1.

    Regions are found on the whole model, once per distinct degree, at ``dims``; a stage keeps
    those whose nodes are all in it (a region crossing a stage boundary is dropped: its nodes
    stay replicated).

    Args:
        model: The model (not modified).
        stages: The stage of every main-graph node.
        degrees: The degree of each stage (absent: 1).
        dims: The planning dims.
        shapes: The main graph's shapes at ``dims``, when already built.

    Returns:
        For each stage with a degree above 1, its regions in graph order (possibly none).
    """
    if shapes is None and any(d > 1 for d in degrees.values()):
        shapes = ValueShapes(model.graph, dims)
    found: dict[int, list[Region]] = {}
    result: dict[int, list[Region]] = {}
    for stage, degree in sorted(degrees.items()):
        if degree < 2:
            continue
        if degree not in found:
            found[degree] = find_regions(model, degree, shapes=shapes, gather_outputs=True)
        result[stage] = [
            region
            for region in found[degree]
            if all(stages.get(node) == stage for node in region.nodes)
        ]
    return result
