"""Op families: the one list of each kind of operator the analysis and the planner look for.

Op types are matched by name in any domain (``com.microsoft`` fuses many of them). The
families are disjoint: :data:`~onnx_ir_multidevice.analysis.tensor_classes.HEAVY_OPS` (what
makes a value expensive to recompute) is their union, :mod:`~onnx_ir_multidevice.planner.flops`
counts each family with its own formula and
:func:`~onnx_ir_multidevice.analysis.omny_document.guess_architecture` looks for attention.
:data:`QUANTIZED_OPS` (with :func:`is_quantized_op`) cuts across the families: the ops that
quantize or compute on integers, which
:func:`~onnx_ir_multidevice.analysis.precision.arithmetic_family` looks for.
:data:`SHAPE_ARITHMETIC_OPS` are the ops (ONNX domain only) whose small integer values both
shape evaluators compute: :mod:`~onnx_ir_multidevice.analysis.shape_data` and
:mod:`~onnx_ir_multidevice.analysis.shape_propagation`.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_OPS",
    "CONV_OPS",
    "GEMM_OPS",
    "MATMUL_OPS",
    "OTHER_HEAVY_OPS",
    "QUANTIZED_OPS",
    "RECURRENT_OPS",
    "SHAPE_ARITHMETIC_OPS",
    "is_quantized_op",
]

MATMUL_OPS: frozenset[str] = frozenset(
    {
        "MatMul",
        "MatMulInteger",
        "MatMulInteger16",
        "QLinearMatMul",
        "FusedMatMul",
        "MatMulIntegerToFloat",
        "MatMulNBits",
        "MatMulBnb4",
        "DynamicQuantizeMatMul",
        "QOrderedMatMul",
    }
)
"""Matrix products ``A @ B`` (float and quantised): ``2 * elements(output) * K`` FLOPs."""

GEMM_OPS: frozenset[str] = frozenset({"Gemm", "FusedGemm", "QGemm"})
"""General matrix multiplication ``alpha * A' @ B' + beta * C`` (``transA`` / ``transB``)."""

CONV_OPS: frozenset[str] = frozenset(
    {"Conv", "ConvInteger", "QLinearConv", "FusedConv", "DeformConv"}
)
"""Convolutions with the weight as input 1 (input 3 for ``QLinearConv``)."""

ATTENTION_OPS: frozenset[str] = frozenset(
    {
        "Attention",
        "MultiHeadAttention",
        "GroupQueryAttention",
        "PackedAttention",
        "PackedMultiHeadAttention",
        "QAttention",
        "SparseAttention",
        "DecoderMaskedMultiHeadAttention",
    }
)
"""Fused attention layers: scores and context over every head (``com.microsoft``
``Attention`` and ``QAttention`` also project their input to Q, K and V); see
:mod:`~onnx_ir_multidevice.planner.flops`."""

RECURRENT_OPS: frozenset[str] = frozenset({"LSTM", "GRU", "RNN"})
"""Recurrent layers: ``4`` / ``3`` / ``1`` gates times the input and hidden matrix products
at every time step and in every direction."""

OTHER_HEAVY_OPS: frozenset[str] = frozenset(
    {"ConvTranspose", "Einsum", "GatherBlockQuantized", "MoE", "QMoE"}
)
"""Other ops that do model computation: transposed convolution, ``Einsum``, quantised
embedding lookups, mixtures of experts."""

QUANTIZED_OPS: frozenset[str] = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "DynamicQuantizeLSTM",
        "MatMulInteger",
        "MatMulInteger16",
        "MatMulIntegerToFloat",
        "MatMulNBits",
        "MatMulBnb4",
        "DynamicQuantizeMatMul",
        "QOrderedMatMul",
        "QLinearMatMul",
        "QGemm",
        "ConvInteger",
        "QLinearConv",
        "QAttention",
        "GatherBlockQuantized",
        "QMoE",
    }
)
"""Ops that quantize, dequantize or compute on integers (or on packed low-bit weights): not a
family of its own but a property, so it overlaps the families above. Every ``QLinear*`` op is
one too (:func:`is_quantized_op`)."""


def is_quantized_op(op_type: str) -> bool:
    """Whether ``op_type`` quantizes or computes on integers.

    True for the ops of :data:`QUANTIZED_OPS` and for every ``QLinear*`` op, in any domain.
    """
    return op_type in QUANTIZED_OPS or op_type.startswith("QLinear")


SHAPE_ARITHMETIC_OPS: frozenset[str] = frozenset(
    {
        "Constant",
        "Shape",
        "Size",
        "Gather",
        "Concat",
        "Slice",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Identity",
        "Cast",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
    }
)
"""The shape arithmetic exporters write (``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape``...): the ops, in the ONNX domain, whose small integer outputs both
:data:`onnx_ir_multidevice.analysis.shape_data.RULES` (NumPy arrays at one binding of the
input dims) and :data:`onnx_ir_multidevice.analysis.shape_propagation.RULES` (integers or
*duals*, at two bindings at once, for vectors of at most 64 elements) compute. The two
evaluate the same ONNX semantics on different data and are checked against onnx's reference
evaluator (``tests/test_rules.py``); an op added here needs a rule in both."""
