"""Recomputing a shape read of an activation from the graph inputs, in a stage without it.

A ``Shape``/``Size`` node whose requested dims are static or equal to dims of graph inputs
(:class:`~onnx_ir_multidevice.analysis.shape_reads.ShapeRead`) is replicable; a stage that
needs its result but does not hold the activation it reads computes the same value from the
graph inputs instead:

* each run of consecutive dims of one input becomes ``Shape(input, start, end)`` (opset 15
  and later) or ``Gather(Shape(input), [axes])``;
* each run of static dims becomes an ``int64`` ``Constant``;
* the pieces are joined by ``Concat(axis=0)`` (one piece: that piece, through ``Identity``
  when it must take the output's name), and for ``Size`` reduced by
  ``ReduceProd(keepdims=0)``.

The last node's output has the original output's name, so the nodes reading it in the stage
are unchanged. Nothing is baked: every symbolic dim is read from the input at run time.
"""

from __future__ import annotations

__all__ = ["recompute_from_inputs"]

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis.shape_reads import ShapeRead

_SHAPE_START_END_OPSET = 15
"""The default-domain opset from which ``Shape`` takes ``start`` and ``end``."""


def _runs(read: ShapeRead) -> list[tuple[ir.Value | None, list[int]]]:
    """Split the dims into runs: ``(input, consecutive axes)`` or ``(None, static sizes)``."""
    runs: list[tuple[ir.Value | None, list[int]]] = []
    for dim in read.dims:
        if isinstance(dim, int):
            if runs and runs[-1][0] is None:
                runs[-1][1].append(dim)
            else:
                runs.append((None, [dim]))
            continue
        value, axis = dim
        if runs and runs[-1][0] is value and runs[-1][1][-1] + 1 == axis:
            runs[-1][1].append(axis)
        else:
            runs.append((value, [axis]))
    return runs


def recompute_from_inputs(
    read: ShapeRead, opset: int, fresh_name: Callable[[str], str]
) -> tuple[list[ir.Node], ir.Value]:
    """Nodes computing the output of ``read.node`` from the graph inputs alone.

    Args:
        read: The proven shape read.
        opset: The default-domain opset of the model.
        fresh_name: Gives a name, unused in the model, from a wished one.

    Returns:
        The nodes (in order) and the value that stands for the node's output; that value has
        the output's name. The nodes read the graph inputs of :attr:`ShapeRead.inputs` (the
        model's own values: a stage maps them to its inputs) and make new values otherwise.
    """
    node = read.node
    output = node.outputs[0]
    base = node.name or output.name or node.op_type
    nodes: list[ir.Node] = []

    def add(op_type: str, inputs: list[ir.Value], **attributes: Any) -> ir.Value:
        made = ir.node(
            op_type,
            inputs,
            attributes=attributes,
            name=fresh_name(f"{base}/from_inputs/{op_type}"),
        )
        made.outputs[0].name = fresh_name(f"{base}/from_inputs/{op_type}_output")
        nodes.append(made)
        return made.outputs[0]

    def constant(values: list[int]) -> ir.Value:
        return add("Constant", [], value=ir.tensor(np.asarray(values, dtype=np.int64)))

    pieces: list[ir.Value] = []
    for source, entries in _runs(read):
        if source is None:
            pieces.append(constant(entries))
        elif opset >= _SHAPE_START_END_OPSET:
            pieces.append(add("Shape", [source], start=entries[0], end=entries[-1] + 1))
        else:
            pieces.append(add("Gather", [add("Shape", [source]), constant(entries)], axis=0))
    if not pieces:
        pieces.append(constant([]))
    if len(pieces) == 1:
        result = pieces[0]
    else:
        result = add("Concat", pieces, axis=0)
    if read.is_size:
        result = add("ReduceProd", [result], keepdims=0)
    # The last value takes the output's name (its own fresh name is dropped).
    result.name = output.name
    return nodes, result
