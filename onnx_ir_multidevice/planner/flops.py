"""Rough floating-point operation counts per node, to balance compute between stages.

Counted at the planning dims (multiply-add = 2 FLOPs, integer multiply-adds of quantised
ops alike):

* matrix products (:data:`~onnx_ir_multidevice.analysis.ops.MATMUL_OPS`: ``MatMul`` and its
  quantised and fused variants, ``MatMulInteger``, ``QLinearMatMul``,
  ``DynamicQuantizeMatMul``, ``MatMulIntegerToFloat``...): ``2 * elements(output) * K``;
* ``Gemm`` and its fused and quantised variants
  (:data:`~onnx_ir_multidevice.analysis.ops.GEMM_OPS`): ``2 * M * N * K``;
* convolutions (:data:`~onnx_ir_multidevice.analysis.ops.CONV_OPS`, ``ConvInteger`` and
  ``QLinearConv`` included): ``2 * elements(output) * (C_in / group) * prod(kernel)``;
  ``ConvTranspose`` the same over the input;
* recurrent layers (:data:`~onnx_ir_multidevice.analysis.ops.RECURRENT_OPS`): at every time
  step and in every direction, each of the ``G`` gates (4 for ``LSTM``, 3 for ``GRU``, 1 for
  ``RNN``) multiplies the input (``I`` features) and the hidden state (``H``):
  ``2 * seq * batch * directions * G * H * (I + H)``, read off the weights ``W``
  ``[directions, G*H, I]`` and ``R`` ``[directions, G*H, H]``;
* attention (:data:`~onnx_ir_multidevice.analysis.ops.ATTENTION_OPS`): the scores
  ``Q K^T`` and the context ``softmax(.) V``, ``2 * batch * q_seq * kv_seq * (D_q + D_v)``
  with ``D_q`` / ``D_v`` the query / value width over all heads and ``kv_seq`` the keys
  (past keys included). ``com.microsoft`` ``Attention`` and ``QAttention`` also project
  their input to Q, K and V: ``2 * batch * seq * hidden_in * (D_q + D_k + D_v)``. Covered:
  ``com.microsoft`` ``Attention``, ``QAttention``, ``MultiHeadAttention``,
  ``GroupQueryAttention`` and ONNX ``Attention`` (opset 23); the other fused attention ops
  are counted as ``4 * elements(query) * seq``;
* ``Einsum``: two operations per point of the product of every index's size;
* ``If`` / ``Loop`` / ``Scan``: the nodes of their bodies, once;
* anything else: one operation per output element (element-wise).

Each formula is a small rule in :data:`RULES`, registered by op type (in any domain, as the op
families of :mod:`~onnx_ir_multidevice.analysis.ops` are matched; ONNX ``Attention`` in the
ONNX domain has its own): counting a new operator is one rule here.

A count that needs an unknown shape is ``None``: callers report it rather than guess. With
``estimate=True`` an unknown shape is taken at the probe dims (every unbound symbol at an
example value, :meth:`~onnx_ir_multidevice.analysis.shapes.ValueShapes.estimate`): a count
for choosing cuts, not a figure to report.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["RULES", "FlopsRule", "node_flops", "nodes_flops"]

import math
from collections.abc import Callable, Collection, Sequence

import onnx_ir as ir

from onnx_ir_multidevice.analysis.ops import (
    ATTENTION_OPS,
    CONV_OPS,
    GEMM_OPS,
    MATMUL_OPS,
    RECURRENT_OPS,
)
from onnx_ir_multidevice.analysis.rules import ANY_DOMAIN, RuleRegistry
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.graph.index import OP_TYPE_OF, holds_subgraphs, node_subgraphs

# Attention ops with a formula of their own (the others: :func:`_other_attention`).
_OWN_ATTENTION_RULES = frozenset(
    {"Attention", "QAttention", "MultiHeadAttention", "GroupQueryAttention"}
)


class _Shapes:
    """Shapes at the planning dims, or at the probe dims for what those leave unknown."""

    def __init__(self, sizes: ValueSizes, estimate: bool) -> None:
        self.sizes = sizes
        self.estimate = estimate

    def __call__(self, node: ir.Node, index: int) -> tuple[int, ...] | None:
        value = node.inputs[index] if index < len(node.inputs) else None
        return self.of(value)

    def of(self, value: ir.Value | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        shape = self.sizes.shape(value)
        if shape is None and self.estimate:
            shape = self.sizes.shapes.estimate(value)
        return shape


def node_flops(node: ir.Node, sizes: ValueSizes, *, estimate: bool = False) -> int | None:
    """Estimate the FLOPs of one node at the planning dims (see the module docstring).

    Args:
        node: The node.
        sizes: Shapes at the planning dims of the node's graph.
        estimate: Take a shape the planning dims leave unknown at the probe dims.

    Returns:
        The estimate, or ``None`` when a shape it needs is unknown.
    """
    return _flops(node, _Shapes(sizes, estimate))


FlopsRule = Callable[[ir.Node, _Shapes], int | None]
"""``rule(node, shape)``: the FLOPs of ``node`` (``None``: a shape it needs is unknown)."""

RULES: RuleRegistry[FlopsRule] = RuleRegistry("FLOPs")
"""The ops with a formula of their own, by ``(domain, op_type)``; every other node is counted
element-wise (one operation per output element), or as the nodes of its bodies."""


def _flops(node: ir.Node, shape: _Shapes) -> int | None:
    rule = RULES.get(node.domain, node.op_type)
    if rule is not None:
        return rule(node, shape)
    bodies = list(node_subgraphs(node)) if node.attributes else []
    if bodies:
        return _bodies(bodies, shape)
    total = 0
    for value in node.outputs:
        found = shape.of(value)
        if found is None:
            return None
        total += math.prod(found)
    return total


def _bodies(bodies: Sequence[ir.Graph], shape: _Shapes) -> int | None:
    """``If`` / ``Loop`` / ``Scan``: the nodes of their bodies, once."""
    total = 0
    for body in bodies:
        body_shapes = _Shapes(ValueSizes(body, shape.sizes.dims, infer=False), shape.estimate)
        for inner in body:
            count = _flops(inner, body_shapes)
            if count is None:
                return None
            total += count
    return total


def _output(node: ir.Node, shape: _Shapes) -> tuple[int, ...] | None:
    return shape.of(node.outputs[0]) if node.outputs else ()


@RULES.register(*MATMUL_OPS, domain=ANY_DOMAIN)
def _matmul(node: ir.Node, shape: _Shapes) -> int | None:
    """``2 * elements(output) * K``."""
    out, a = _output(node, shape), shape(node, 0)
    if out is None or not a:
        return None
    return 2 * math.prod(out) * a[-1]


@RULES.register(*GEMM_OPS, domain=ANY_DOMAIN)
def _gemm(node: ir.Node, shape: _Shapes) -> int | None:
    """``2 * M * N * K``, ``K`` read off ``A`` (transposed with ``transA``)."""
    out, a = _output(node, shape), shape(node, 0)
    if out is None or not a:
        return None
    k = a[0] if node.attributes.get_int("transA", 0) else a[-1]
    return 2 * math.prod(out) * k


@RULES.register(*CONV_OPS, domain=ANY_DOMAIN)
def _conv(node: ir.Node, shape: _Shapes) -> int | None:
    """``2 * elements(output) * (C_in / group) * prod(kernel)``."""
    out, w = _output(node, shape), shape(node, 3 if node.op_type == "QLinearConv" else 1)
    if out is None or not w:
        return None
    return 2 * math.prod(out) * math.prod(w[1:])


@RULES.register("ConvTranspose", domain=ANY_DOMAIN)
def _conv_transpose(node: ir.Node, shape: _Shapes) -> int | None:
    """As a convolution, over the input: ``2 * elements(X) * prod(W.shape[1:])``."""
    x, w = shape(node, 0), shape(node, 1)
    if x is None or not w:
        return None
    return 2 * math.prod(x) * math.prod(w[1:])


@RULES.register(*RECURRENT_OPS, domain=ANY_DOMAIN)
def _recurrent(node: ir.Node, shape: _Shapes) -> int | None:
    """``2 * seq * batch * (elements(W) + elements(R))``: every gate, step and direction."""
    x, w, r = shape(node, 0), shape(node, 1), shape(node, 2)
    if x is None or len(x) != 3 or w is None or r is None:
        return None
    layout = node.attributes.get_int("layout", 0)
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    return 2 * seq * batch * (math.prod(w) + math.prod(r))


@RULES.register(*(ATTENTION_OPS - _OWN_ATTENTION_RULES), domain=ANY_DOMAIN)
def _other_attention(node: ir.Node, shape: _Shapes) -> int | None:
    """Fused attention ops without a formula of their own: ``4 * elements(query) * seq``."""
    q = shape(node, 0)
    if not q or len(q) < 2:
        return None
    return 4 * math.prod(q) * q[1]


def _core(batch: int, q_seq: int, kv_seq: int, q_width: int, v_width: int) -> int:
    """Scores ``Q K^T`` and context ``softmax(.) V`` over all heads."""
    return 2 * batch * q_seq * kv_seq * (q_width + v_width)


def _past_length(shape: _Shapes, node: ir.Node, index: int, axis: int) -> int | None:
    """The cached length of a past key input (0 when there is none)."""
    if index >= len(node.inputs) or node.inputs[index] is None:
        return 0
    past = shape(node, index)
    if past is None or len(past) <= axis:
        return None
    return past[axis]


@RULES.register("Attention", "QAttention", domain=ANY_DOMAIN)
def _fused_attention(node: ir.Node, shape: _Shapes) -> int | None:
    """``com.microsoft`` ``Attention`` / ``QAttention``: QKV projection, then attention."""
    x, w = shape(node, 0), shape(node, 1)
    if x is None or len(x) != 3 or w is None or len(w) != 2:
        return None
    batch, seq, hidden_in = x
    widths = node.attributes.get_ints("qkv_hidden_sizes", None)
    q_width, _, v_width = widths if widths and len(widths) == 3 else (w[1] // 3,) * 3
    # past: [2, batch, heads, past_seq, head_size] (input 4 of Attention, 8 of QAttention)
    past = _past_length(shape, node, 8 if node.op_type == "QAttention" else 4, 3)
    if past is None:
        return None
    projection = 2 * batch * seq * hidden_in * w[1]
    return projection + _core(batch, seq, seq + past, q_width, v_width)


@RULES.register("MultiHeadAttention", domain=ANY_DOMAIN)
def _multi_head_attention(node: ir.Node, shape: _Shapes) -> int | None:
    """``com.microsoft`` ``MultiHeadAttention``: Q, K, V already projected."""
    q = shape(node, 0)
    if q is None or len(q) not in (3, 5):
        return None
    if len(q) == 5:  # packed QKV: [batch, seq, heads, 3, head_size]
        batch, seq, heads, _, head = q
        return _core(batch, seq, seq, heads * head, heads * head)
    batch, seq, q_width = q
    k = shape(node, 1)
    if k is None:
        return None
    # key: [batch, kv_seq, width], [batch, heads, kv_seq, head_size] or packed KV
    # [batch, kv_seq, heads, 2, head_size]
    kv_seq = k[2] if len(k) == 4 else k[1]
    v_width = q_width
    if len(k) != 5 and len(node.inputs) > 2 and node.inputs[2] is not None:
        v = shape(node, 2)
        if v is None:
            return None
        v_width = v[1] * v[3] if len(v) == 4 else v[-1]
    past = _past_length(shape, node, 6, 2)  # past_key [batch, heads, past_seq, head_size]
    if past is None:
        return None
    return _core(batch, seq, kv_seq + past, q_width, v_width)


@RULES.register("GroupQueryAttention", domain=ANY_DOMAIN)
def _group_query_attention(node: ir.Node, shape: _Shapes) -> int | None:
    """``com.microsoft`` ``GroupQueryAttention``: few K/V heads shared by the query heads."""
    q = shape(node, 0)
    if q is None or len(q) != 3:
        return None
    batch, seq, width = q
    heads = node.attributes.get_int("num_heads", 0)
    kv_heads = node.attributes.get_int("kv_num_heads", 0)
    if len(node.inputs) < 2 or node.inputs[1] is None:  # packed QKV
        if heads < 1 or kv_heads < 1:
            return None
        width = width // (heads + 2 * kv_heads) * heads
    past = _past_length(shape, node, 3, 2)  # past_key [batch, kv_heads, past_seq, head_size]
    if past is None:
        return None
    return _core(batch, seq, past + seq, width, width)


@RULES.register("Attention")
def _onnx_attention(node: ir.Node, shape: _Shapes) -> int | None:
    """ONNX ``Attention`` (opset 23): Q, K, V of rank 3 (heads as attributes) or 4."""
    q, k, v = shape(node, 0), shape(node, 1), shape(node, 2)
    if q is None or k is None or v is None or len(q) not in (3, 4):
        return None
    if len(q) == 4:  # [batch, heads, seq, head_size]
        batch, heads, seq, head = q
        kv_seq, v_head = k[2], v[-1]
        q_width, v_width = heads * head, heads * v_head
    else:  # [batch, seq, heads * head_size]
        batch, seq, q_width = q
        kv_seq = k[1]
        heads = node.attributes.get_int("q_num_heads", 0)
        kv_heads = node.attributes.get_int("kv_num_heads", 0)
        if heads < 1 or kv_heads < 1:
            return None
        v_width = v[-1] // kv_heads * heads
    past = _past_length(shape, node, 4, 2)  # past_key [batch, kv_heads, past_seq, head_size]
    if past is None:
        return None
    return _core(batch, seq, kv_seq + past, q_width, v_width)


@RULES.register("Einsum", domain=ANY_DOMAIN)
def _einsum(node: ir.Node, shape: _Shapes) -> int | None:
    """Two operations per point of the index space (``ij,jk->ik``: ``2 * i * j * k``)."""
    equation = node.attributes.get_string("equation", "").replace(" ", "")
    terms = equation.split("->")[0].split(",")
    if "." in equation or len(terms) != len(node.inputs):
        return None
    extent: dict[str, int] = {}
    for k, term in enumerate(terms):
        found = shape(node, k)
        if found is None or len(found) != len(term):
            return None
        for letter, size in zip(term, found, strict=True):
            extent[letter] = max(extent.get(letter, 1), size)
    return 2 * math.prod(extent.values())


def nodes_flops(
    nodes: Sequence[ir.Node],
    sizes: ValueSizes,
    with_bodies: Collection[ir.Node] | None = None,
    op_types: Sequence[str] | None = None,
    *,
    estimate: bool = False,
) -> list[int | None]:
    """:func:`node_flops` of each of ``nodes``, the element-wise ones without a call each.

    Args:
        nodes: Nodes of the graph ``sizes`` describes.
        sizes: Shapes at the planning dims.
        with_bodies: The nodes that hold subgraphs, when known (found here otherwise).
        op_types: The op type of each of ``nodes``, when known.
        estimate: As for :func:`node_flops`.

    .. versionadded:: 0.1
    """
    shapes = _Shapes(sizes, estimate)
    shape = shapes.of if estimate else sizes.shape
    special = RULES.op_types()  # ops with a rule in some domain (rules added late included)
    rule_of = RULES.get
    prod = math.prod
    result: list[int | None] = []
    for node, op in zip(
        nodes, map(OP_TYPE_OF, nodes) if op_types is None else op_types, strict=True
    ):
        if op in special:
            rule = rule_of(node.domain, op)
            if rule is not None:
                result.append(rule(node, shapes))
                continue
        if node in with_bodies if with_bodies is not None else holds_subgraphs(node):
            result.append(_flops(node, shapes))
            continue
        total: int | None = 0
        for value in node.outputs:
            found = shape(value)
            if found is None:
                total = None
                break
            total += prod(found)  # type: ignore[operator]  # an int until the loop breaks
        result.append(total)
    return result
