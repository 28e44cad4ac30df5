"""Rough floating-point operation counts per node, to balance compute between stages.

Counted at the planning dims (multiply-add = 2 FLOPs):

* matrix products (:data:`~onnx_ir_multidevice.analysis.ops.MATMUL_OPS`: ``MatMul`` and its
  quantised and fused variants): ``2 * elements(output) * K``;
* ``Gemm`` and its fused and quantised variants
  (:data:`~onnx_ir_multidevice.analysis.ops.GEMM_OPS`): ``2 * M * N * K``;
* convolutions (:data:`~onnx_ir_multidevice.analysis.ops.CONV_OPS`):
  ``2 * elements(output) * (C_in / group) * prod(kernel)``; ``ConvTranspose`` the same over
  the input;
* attention ops (:data:`~onnx_ir_multidevice.analysis.ops.ATTENTION_OPS`: ``Attention``,
  ``MultiHeadAttention``, ``GroupQueryAttention``...): ``4 * elements(query) * seq``;
* ``If`` / ``Loop`` / ``Scan``: the nodes of their bodies, once;
* anything else: one operation per output element (element-wise).

A count that needs an unknown shape is ``None``: callers report it rather than guess.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["node_flops", "nodes_flops"]

import math
from collections.abc import Collection, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.ops import ATTENTION_OPS, CONV_OPS, GEMM_OPS, MATMUL_OPS
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.graph.index import OP_TYPE_OF, holds_subgraphs, node_subgraphs


def _shape(sizes: ValueSizes, value: ir.Value | None) -> tuple[int, ...] | None:
    return None if value is None else sizes.shape(value)


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def node_flops(node: ir.Node, sizes: ValueSizes) -> int | None:
    """Estimate the FLOPs of one node at the planning dims (see the module docstring).

    Args:
        node: The node.
        sizes: Shapes at the planning dims of the node's graph.

    Returns:
        The estimate, or ``None`` when a shape it needs is unknown.
    """
    op = node.op_type
    out = _shape(sizes, node.outputs[0]) if node.outputs else ()
    if op in MATMUL_OPS or op in GEMM_OPS:
        a = _shape(sizes, _input(node, 0))
        if out is None or not a:
            return None
        if op in GEMM_OPS:
            trans_a = node.attributes.get_int("transA", 0)
            k = a[0] if trans_a else a[-1]
        else:
            k = a[-1]
        return 2 * math.prod(out) * k
    if op in CONV_OPS:
        w = _shape(sizes, _input(node, 3 if op == "QLinearConv" else 1))
        if out is None or not w:
            return None
        return 2 * math.prod(out) * math.prod(w[1:])
    if op == "ConvTranspose":
        x = _shape(sizes, _input(node, 0))
        w = _shape(sizes, _input(node, 1))
        if x is None or not w:
            return None
        return 2 * math.prod(x) * math.prod(w[1:])
    if op in ATTENTION_OPS:
        q = _shape(sizes, _input(node, 0))
        if not q or len(q) < 2:
            return None
        return 4 * math.prod(q) * q[1]
    bodies = list(node_subgraphs(node)) if node.attributes else []
    if bodies:
        total = 0
        for body in bodies:
            body_sizes = ValueSizes(body, sizes.dims, infer=False)
            for inner in body:
                count = node_flops(inner, body_sizes)
                if count is None:
                    return None
                total += count
        return total
    total = 0
    for value in node.outputs:
        shape = sizes.shape(value)
        if shape is None:
            return None
        total += math.prod(shape)
    return total


_SPECIAL_OPS = frozenset((*MATMUL_OPS, *GEMM_OPS, *CONV_OPS, *ATTENTION_OPS, "ConvTranspose"))


def nodes_flops(
    nodes: Sequence[ir.Node],
    sizes: ValueSizes,
    with_bodies: Collection[ir.Node] | None = None,
    op_types: Sequence[str] | None = None,
) -> list[int | None]:
    """:func:`node_flops` of each of ``nodes``, the element-wise ones without a call each.

    Args:
        nodes: Nodes of the graph ``sizes`` describes.
        sizes: Shapes at the planning dims.
        with_bodies: The nodes that hold subgraphs, when known (found here otherwise).
        op_types: The op type of each of ``nodes``, when known.

    .. versionadded:: 0.1
    """
    shape = sizes.shape
    prod = math.prod
    result: list[int | None] = []
    for node, op in zip(nodes, map(OP_TYPE_OF, nodes) if op_types is None else op_types):
        if op in _SPECIAL_OPS or (
            node in with_bodies if with_bodies is not None else holds_subgraphs(node)
        ):
            result.append(node_flops(node, sizes))
            continue
        total: int | None = 0
        for value in node.outputs:
            found = shape(value)
            if found is None:
                total = None
                break
            total += prod(found)  # type: ignore[operator]
        result.append(total)
    return result
