"""Shape reads of activations that the graph inputs' shapes alone determine.

TorchScript exports read sizes from activations: GPT-2 takes the sequence length from
``Shape`` of the token embedding (``[batch, seq, 768]``, an activation: it reads the
embedding table) and builds from it the causal mask and a shape vector that every layer
reads. The *values* of such a read are not model computation: each dim it returns is
either static or, as the shape layer proves, equal to a dim of a graph input
(``seq`` is ``input_ids``'s second dim). Such a read is a **shape read of the inputs**:

* ``Shape(X)`` (with ``start``/``end``) or ``Size(X)``, default domain, ``X`` of known rank;
* each requested dim of ``X`` is static, or a symbolic dim that
  :meth:`~onnx_ir_multidevice.analysis.shapes.ValueShapes.symbolic` names after an input
  symbol which is the whole dim of a graph input (``"seq"`` for ``input_ids: [batch,
  seq]``; an expression such as ``"past + seq"`` does not qualify). The shape layer names a
  dim so only when it takes the symbol's value at two bindings of the symbols (the probe
  dims and the probe dims doubled), exactly in its own propagation or confirmed by ONNX
  inference;
* the proof is made at the default dims (no planning dims), so which values are shape reads
  never depends on the dims a user plans at.

The tensor classes (:mod:`~onnx_ir_multidevice.analysis.tensor_classes`) count such a node
as reading graph inputs only: its output is replicable, and so is what is computed cheaply
from it. The split recomputes it, in a stage that does not hold ``X``, from the graph inputs
the dims come from (:attr:`ShapeRead.dims` is the recipe). Anything not proven keeps the
rules as before: a dim the shape layer cannot name (the output of ``NonZero``, a ``Reshape``
to a data-dependent shape) leaves the read an activation.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["SHAPE_READ_OPS", "ShapeRead", "input_dims_by_symbol", "prove_shape_reads"]

import dataclasses
from collections.abc import Iterable, Mapping

import onnx_ir as ir

from onnx_ir_multidevice.analysis.dim_expressions import DimExpression
from onnx_ir_multidevice.analysis.shapes import ValueShapes, normalize_dims
from onnx_ir_multidevice.graph.index import GraphIndex

SHAPE_READ_OPS: frozenset[str] = frozenset({"Shape", "Size"})
"""Op types (default domain) whose output depends on their input's shape only."""

InputDim = tuple[ir.Value, int]
"""A dim of a graph input: ``(input, axis)``."""


@dataclasses.dataclass(frozen=True)
class ShapeRead:
    """A ``Shape``/``Size`` node whose result the graph inputs' shapes determine.

    .. versionadded:: 0.1
    """

    node: ir.Node
    """The ``Shape`` or ``Size`` node."""

    dims: tuple[int | InputDim, ...]
    """The dims it reads, in order: a static size, or ``(graph input, axis)`` whose size it
    equals. ``Shape`` returns them as an ``int64`` vector, ``Size`` their product."""

    @property
    def is_size(self) -> bool:
        """Whether the node is ``Size`` (the product of :attr:`dims`, a scalar)."""
        return self.node.op_type == "Size"

    @property
    def inputs(self) -> tuple[ir.Value, ...]:
        """The graph inputs the dims come from, in order of first use."""
        return tuple(dict.fromkeys(d[0] for d in self.dims if not isinstance(d, int)))


def input_dims_by_symbol(graph: ir.Graph) -> dict[str, InputDim]:
    """For each input symbol that is a whole dim of a graph input, the first such dim.

    Inputs with a default value (an initializer of the same name) are left out: a stage
    reads them like any other input, but their shape is the caller's choice only when fed.
    """
    found: dict[str, InputDim] = {}
    initializers = graph.initializers
    for value in graph.inputs:
        if value.name in initializers or value.shape is None:
            continue
        for axis, dim in enumerate(normalize_dims(value.name or "", value.shape)):
            if isinstance(dim, DimExpression) and dim.is_symbol:
                found.setdefault(dim.text, (value, axis))
    return found


def _requested_axes(node: ir.Node, rank: int) -> range:
    """The axes ``Shape`` returns (``start``/``end`` clamped as ONNX does); all for ``Size``."""
    if node.op_type == "Size":
        return range(rank)
    start_attr = node.attributes.get("start")
    end_attr = node.attributes.get("end")
    start = start_attr.as_int() if start_attr is not None else 0
    end = end_attr.as_int() if end_attr is not None else rank
    if start < 0:
        start += rank
    if end < 0:
        end += rank
    start = min(max(start, 0), rank)
    end = min(max(end, 0), rank)
    return range(start, max(start, end))


def _prove(
    node: ir.Node, shapes: ValueShapes, by_symbol: Mapping[str, InputDim]
) -> ShapeRead | None:
    source = node.inputs[0] if len(node.inputs) == 1 else None
    if source is None:
        return None
    symbolic = shapes.symbolic(source)
    if symbolic is None:
        return None
    dims: list[int | InputDim] = []
    for axis in _requested_axes(node, len(symbolic)):
        dim = symbolic[axis]
        if isinstance(dim, int):
            if dim < 0:
                return None
            dims.append(dim)
            continue
        found = by_symbol.get(dim) if isinstance(dim, str) else None
        if found is None:
            return None
        dims.append(found)
    return ShapeRead(node, tuple(dims))


def prove_shape_reads(index: GraphIndex, positions: Iterable[int]) -> dict[int, ShapeRead]:
    """Prove which of the nodes at ``positions`` are shape reads of the inputs.

    Args:
        index: The :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of the main graph.
        positions: Positions in ``index`` of candidate nodes (others than default-domain
            ``Shape``/``Size`` nodes with one input are never proven).

    Returns:
        The proven ones, by position. Empty when the graph inputs carry no symbolic dim
        that is a whole input dim and nothing is static, or when the shape layer cannot
        answer (a model it cannot propagate through): the rules are then those without
        this one.
    """
    nodes = index.nodes
    wanted = [
        i
        for i in positions
        if nodes[i].op_type in SHAPE_READ_OPS
        and nodes[i].domain == ""
        and len(nodes[i].inputs) == 1
        and nodes[i].inputs[0] is not None
    ]
    if not wanted:
        return {}
    graph = index.graph
    by_symbol = input_dims_by_symbol(graph)
    sources = [v for i in wanted if (v := nodes[i].inputs[0]) is not None]
    try:
        shapes = ValueShapes.cached(graph, None, index=index, focus=sources)
        found = {i: _prove(nodes[i], shapes, by_symbol) for i in wanted}
    except Exception:  # noqa: BLE001  # no proof is the safe answer: the old rules apply
        return {}
    return {i: read for i, read in found.items() if read is not None}
