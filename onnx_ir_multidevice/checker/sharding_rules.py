"""``OMNY221``-``OMNY224``: tensor-parallel sharding specs checked against the graph.

* ``OMNY221`` (warning): a sharded axis whose size is not a multiple of its shard count.
  ONNX allows such uneven shards (the last one smaller); this package's sharding rules and
  split only make even ones, so the spec is kept but flagged.
* ``OMNY222``: a ``SimpleShardedDim.dim`` that disagrees with the value's stated size.
* ``OMNY223``: a value read by a sharded node whose producer shards it differently under the
  same configuration (axis, shard count or devices): the package inserts no resharding.
* ``OMNY224``: a partial sum (a row-parallel ``MatMul``'s output, by the rules of
  :mod:`~onnx_ir_multidevice.analysis.sharding`) that reaches an op not linear in it (a
  ``Relu``, ``Softmax``, a normalisation, a residual ``Add`` of an activation) with no spec
  making it whole (an ``AllReduce``) first.

Only the main graph's nodes with sharding specs are read, each once per configuration: linear
in the size of the model.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["check_sharding"]

from collections.abc import Iterable, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    PARTIAL,
    REPLICATED,
    Partial,
    Replicated,
    ShardingContext,
    ShardState,
    Split,
    propagate,
)
from onnx_ir_multidevice.checker.diagnostics import Diagnostic, make, node_location

_Key = tuple[tuple[tuple[int, int], ...], tuple[int, ...]]


def check_sharding(
    model: ir.Model,
    nodes: Sequence[ir.Node] | None = None,
    entries_list: Sequence[Sequence[ir.NodeDeviceConfiguration]] | None = None,
) -> list[Diagnostic]:
    """Check the tensor-parallel sharding specs of ``model``'s main graph (``OMNY221``-``224``).

    Args:
        model: The model.
        nodes: The main graph's nodes in graph order, when already listed.
        entries_list: Each of ``nodes``' ``device_configurations``, when already read.

    Returns:
        The diagnostics, in graph order per configuration.
    """
    if nodes is None or entries_list is None:
        nodes = list(model.graph)
        entries_list = [node.device_configurations for node in nodes]
    # Entry tuples are shared between nodes (annotate() writes one per stage): a model whose
    # specs only place tensors (no sharded dims: pipeline hand-offs) has nothing to check.
    distinct = {id(entries): entries for entries in entries_list if entries}
    if not any(
        spec.sharded_dims
        for entries in distinct.values()
        for entry in entries
        for spec in entry.sharding_specs
    ):
        return []
    annotated = [
        (i, node, entry)
        for i, (node, entries) in enumerate(zip(nodes, entries_list, strict=True))
        for entry in entries
        if entry.sharding_specs and entry.configuration is not None
    ]
    if not annotated:
        return []
    diagnostics: list[Diagnostic] = []
    by_configuration: dict[int, list[tuple[int, ir.Node, ir.NodeDeviceConfiguration]]] = {}
    for item in annotated:
        by_configuration.setdefault(id(item[2].configuration), []).append(item)
    shapes: ValueShapes | None = None
    for items in by_configuration.values():
        specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec] = {}
        for position, node, entry in items:
            for spec in entry.sharding_specs:
                if spec.value is None:
                    continue
                specs[(node, spec.value)] = spec
                _check_sizes(spec, node_location(node, position), diagnostics)
        _check_consistency(items, specs, diagnostics)
        degree = _degree(specs.values())
        if degree >= 2:
            if shapes is None:
                shapes = ValueShapes(model.graph, {})
            _check_partials(nodes, specs, ShardingContext(model.graph, degree, shapes), diagnostics)
    return diagnostics


def _shards(spec: ir.ShardingSpec) -> list[tuple[int, int]]:
    """``(axis, num_shards)`` of each sharded axis, the axis as written."""
    result = []
    for sharded in spec.sharded_dims:
        count = 1
        for simple in sharded.simple_shardings:
            count *= max(simple.num_shards, 1)
        result.append((sharded.axis, count))
    return result


def _degree(specs: Iterable[ir.ShardingSpec]) -> int:
    counts = [count for spec in specs for _, count in _shards(spec)]
    return max(counts, default=1)


def _rank(value: ir.Value) -> int | None:
    return len(value.shape) if value.shape is not None else None


def _check_sizes(spec: ir.ShardingSpec, location: str, diagnostics: list[Diagnostic]) -> None:
    value = spec.value
    assert value is not None
    rank = _rank(value)
    label = value.name or "<unnamed>"
    for sharded in spec.sharded_dims:
        if rank is None or not -rank <= sharded.axis < rank:
            continue  # OMNY208 reports a bad axis
        size = value.shape[sharded.axis]  # type: ignore[index]
        stated = 1
        for simple in sharded.simple_shardings:
            stated = stated * simple.dim if isinstance(simple.dim, int) and stated else 0
        if isinstance(size, int) and stated and stated != size:
            diagnostics.append(
                make(
                    "OMNY222",
                    f"axis {sharded.axis} of value {label!r} has size {size} but its sharding "
                    f"states dim {stated}; state the value's size",
                    location,
                )
            )
        count = 1
        for simple in sharded.simple_shardings:
            count *= max(simple.num_shards, 1)
        if isinstance(size, int) and count > 1 and size % count:
            diagnostics.append(
                make(
                    "OMNY221",
                    f"axis {sharded.axis} of value {label!r} (size {size}) is split into {count} "
                    "uneven shards; ONNX allows it (the last shard is smaller) but this package "
                    "only splits and runs even shards: choose a shard count dividing the size",
                    location,
                )
            )


def _key(spec: ir.ShardingSpec) -> _Key:
    rank = _rank(spec.value) if spec.value is not None else None
    axes = tuple(
        sorted(
            (axis + rank if rank is not None and axis < 0 else axis, n) for axis, n in _shards(spec)
        )
    )
    return axes, tuple(spec.device)


def _check_consistency(
    items: Sequence[tuple[int, ir.Node, ir.NodeDeviceConfiguration]],
    specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec],
    diagnostics: list[Diagnostic],
) -> None:
    for position, node, entry in items:
        for spec in entry.sharding_specs:
            value = spec.value
            if value is None or value not in node.inputs:
                continue
            producer = value.producer()
            written = specs.get((producer, value)) if producer is not None else None
            if written is None or _key(written) == _key(spec):
                continue
            if not _key(written)[0] and not _key(spec)[0]:
                continue  # placements only: a transfer between devices (a pipeline hand-off)
            name = entry.configuration.name if entry.configuration is not None else ""
            diagnostics.append(
                make(
                    "OMNY223",
                    f"value {value.name!r} is written by {producer.name!r} as "  # type: ignore[union-attr]
                    f"{_describe(written)} but read by this node as {_describe(spec)} under "
                    f"configuration {name!r}; no resharding is inserted: give both the same "
                    "sharded dims and devices",
                    node_location(node, position),
                )
            )


def _describe(spec: ir.ShardingSpec) -> str:
    shards = ", ".join(f"axis {axis} in {n}" for axis, n in _shards(spec)) or "replicated"
    return f"[{shards}] on devices {tuple(spec.device)}"


def _state(spec: ir.ShardingSpec) -> ShardState | None:
    shards = [(axis, n) for axis, n in _shards(spec) if n > 1]
    if not shards:
        return REPLICATED
    rank = _rank(spec.value) if spec.value is not None else None
    if len(shards) != 1 or (shards[0][0] >= 0 and rank is None):
        return None
    axis = shards[0][0]
    return Split(axis - rank if axis >= 0 and rank is not None else axis)


def _product_of_partial(node: ir.Node, inputs: Sequence[ShardState]) -> bool:
    """A ``MatMul``/``Gemm`` of a partial sum by a replicated matrix: linear, still partial.

    The region finder reduces before such a product (else each device repeats it); a spec
    asking for it is not wrong.
    """
    return (
        node.op_type in ("MatMul", "Gemm")
        and isinstance(inputs[0], Partial)
        and all(isinstance(s, Replicated) for s in inputs[1:])
        and not (node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] is not None)
    )


def _check_partials(
    nodes: Sequence[ir.Node],
    specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec],
    context: ShardingContext,
    diagnostics: list[Diagnostic],
) -> None:
    """Follow partial sums from the specs with the rules, in graph order (one pass)."""
    sharded_nodes = {node for node, _ in specs}
    states: dict[ir.Value, ShardState] = {}
    for position, node in enumerate(nodes):
        if node not in sharded_nodes and not any(v in states for v in node.inputs):
            continue
        inputs = _input_states(node, specs, context, states)
        if all(isinstance(s, Replicated) for s in inputs):
            continue
        result = propagate(context, node, inputs)
        if result is None and _product_of_partial(node, inputs):
            states.update((v, PARTIAL) for v in node.outputs[:1] if (node, v) not in specs)
        elif result is None:
            _report_unreduced(node, position, inputs, specs, diagnostics)
        else:
            _record_outputs(node, result.outputs, specs, states)


def _input_states(
    node: ir.Node,
    specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec],
    context: ShardingContext,
    states: dict[ir.Value, ShardState],
) -> list[ShardState]:
    """The state of each input of ``node``: its spec's, else the state its producer left."""
    inputs: list[ShardState] = []
    for value in node.inputs:
        spec = specs.get((node, value)) if value is not None else None
        if spec is not None and context.constant(value) is None:
            inputs.append(_state(spec) or REPLICATED)
        elif spec is not None:
            inputs.append(REPLICATED)  # a sliced weight: the rule slices it
        else:
            inputs.append(states.get(value, REPLICATED) if value is not None else REPLICATED)
    return inputs


def _report_unreduced(
    node: ir.Node,
    position: int,
    inputs: list[ShardState],
    specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec],
    diagnostics: list[Diagnostic],
) -> None:
    """OMNY224 for each unannotated partial-sum input of a node that is not linear in it."""
    for value, state in zip(node.inputs, inputs, strict=True):
        if isinstance(state, Partial) and (node, value) not in specs:
            diagnostics.append(
                make(
                    "OMNY224",
                    f"value {value.name!r} is a partial sum (a row-parallel product "  # type: ignore[union-attr]
                    f"not yet reduced) but {node.op_type} is not linear in it; shard "
                    "its producer's output as replicated (an AllReduce) or annotate "
                    "this node to read it whole",
                    node_location(node, position),
                )
            )


def _record_outputs(
    node: ir.Node,
    outputs: Sequence[ShardState],
    specs: dict[tuple[ir.Node, ir.Value], ir.ShardingSpec],
    states: dict[ir.Value, ShardState],
) -> None:
    """Keep the state of each output that is not replicated (a spec on it decides it)."""
    for value, state in zip(node.outputs, outputs, strict=True):
        spec = specs.get((node, value)) if value is not None else None
        written = state if spec is None else _state(spec) or REPLICATED  # a spec: made so
        if value is not None and not isinstance(written, Replicated):
            states[value] = written
