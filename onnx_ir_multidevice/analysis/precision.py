"""The arithmetic a model computes in, and the tolerance a comparison of its outputs needs.

A split computes exactly what the whole model computes, node for node, but onnxruntime
optimizes each stage model on its own: a fusion that spans a cut in the whole model
(``LayerNormalization``, ``MatMulIntegerToFloat``, ``SkipLayerNorm``...) becomes two kernels in
the stages, which round differently. In fp32 that stays below 1e-6 on every corpus model; in
fp16 and in quantized (int8) arithmetic it reaches a few units in the last place of the output:
up to 5.9e-3 (BERT in fp16, 6 stages), 4.6e-3 (GPT-2 with dynamic int8 quantization). So the
default tolerance of :func:`~onnx_ir_multidevice.runtime.verify` follows the model's arithmetic,
as ``torch.testing.assert_close`` follows the dtype: :data:`TOLERANCES`.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["HALF_RULES", "TOLERANCES", "arithmetic_family", "default_tolerance"]

from collections.abc import Callable, Mapping

import onnx_ir as ir

from onnx_ir_multidevice.analysis.ops import is_quantized_op
from onnx_ir_multidevice.analysis.rules import ANY_DOMAIN, RuleRegistry

TOLERANCES: Mapping[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-4),
    "fp16": (1e-2, 1e-2),
    "int8": (1e-2, 1e-2),
}
"""``(rtol, atol)`` by arithmetic family (:func:`arithmetic_family`)."""

_HALF = frozenset(
    {
        ir.DataType.FLOAT16,
        ir.DataType.BFLOAT16,
        ir.DataType.FLOAT8E4M3FN,
        ir.DataType.FLOAT8E4M3FNUZ,
        ir.DataType.FLOAT8E5M2,
        ir.DataType.FLOAT8E5M2FNUZ,
    }
)


HALF_RULES: RuleRegistry[Callable[[ir.Node], bool]] = RuleRegistry("half precision")
"""Whether a node makes a 16- or 8-bit float (beyond the graph's inputs, outputs and
initializers), by op type in any domain: one rule per op that can."""


@HALF_RULES.register("Cast", domain=ANY_DOMAIN)
def _cast_to_half(node: ir.Node) -> bool:
    to = node.attributes.get("to")
    return to is not None and ir.DataType(to.as_int()) in _HALF


@HALF_RULES.register("Constant", domain=ANY_DOMAIN)
def _half_constant(node: ir.Node) -> bool:
    tensor = node.attributes.get("value")
    return tensor is not None and getattr(tensor.value, "dtype", None) in _HALF


def arithmetic_family(model: ir.Model | ir.Graph) -> str:
    """``"int8"``, ``"fp16"`` or ``"fp32"``: the least precise arithmetic ``model`` computes in.

    ``"int8"`` when a node (in any subgraph) quantizes or computes on integers
    (:func:`~onnx_ir_multidevice.analysis.ops.is_quantized_op`); else ``"fp16"`` when an
    initializer, a graph input or output, or a node's result is a 16- or 8-bit float
    (:data:`HALF_RULES`: a ``Constant``, a ``Cast`` target); else ``"fp32"``. One pass
    over the nodes and initializers.

    Args:
        model: The model or its main graph.

    Returns:
        The family, a key of :data:`TOLERANCES`.
    """
    graph = model.graph if isinstance(model, ir.Model) else model
    half = any(
        v.dtype in _HALF for v in (*graph.inputs, *graph.outputs, *graph.initializers.values())
    )
    for node in ir.traversal.RecursiveGraphIterator(graph):
        op = node.op_type
        if is_quantized_op(op):
            return "int8"
        if half:
            continue
        rule = HALF_RULES.get(node.domain, op)
        half = rule is not None and rule(node)
    return "fp16" if half else "fp32"


def default_tolerance(model: ir.Model | ir.Graph) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing ``model``'s split with the whole model.

    :data:`TOLERANCES` of its :func:`arithmetic_family`: ``1e-4`` for fp32 models, ``1e-2``
    for fp16 and quantized ones.
    """
    return TOLERANCES[arithmetic_family(model)]
