"""One list per op family: tensor classes, FLOPs and the architecture guess read the same sets."""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice.analysis import ops, precision
from onnx_ir_multidevice.analysis.omny_document import guess_architecture
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.tensor_classes import HEAVY_OPS
from onnx_ir_multidevice.planner.flops import node_flops

FAMILIES = {
    name: getattr(ops, name)
    for name in ops.__all__
    # QUANTIZED_OPS is a property across the families; SHAPE_ARITHMETIC_OPS are light ops
    # whose small integer values the shape evaluators compute, not a family of heavy ops.
    if name.endswith("_OPS") and name not in ("QUANTIZED_OPS", "SHAPE_ARITHMETIC_OPS")
}


def test_families_are_disjoint_and_heavy_ops_is_their_union():
    for (a, x), (b, y) in itertools.combinations(FAMILIES.items(), 2):
        assert not x & y, (a, b, x & y)
    assert frozenset().union(*FAMILIES.values()) == HEAVY_OPS
    assert {"MatMul", "Gemm", "Conv", "Attention", "LSTM", "Einsum"} <= HEAVY_OPS


def _node(op_type: str, domain: str = "com.microsoft") -> tuple[ir.Node, ValueSizes]:
    a = ir.Value(name="a", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 8, 16]))
    b = ir.Value(name="b", const_value=ir.tensor(np.ones((16, 4), np.float32), name="b"))
    y = ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 8, 4]))
    node = ir.Node(domain, op_type, [a, b], outputs=[y], name="n")
    graph = ir.Graph([a], [y], nodes=[node], initializers=[b], opset_imports={"": 21})
    return node, ValueSizes(graph, infer=False)


def test_flops_count_every_matrix_product_of_the_family_alike():
    expected = 2 * (2 * 8 * 4) * 16
    for op_type in sorted(ops.MATMUL_OPS | ops.GEMM_OPS):
        assert node_flops(*_node(op_type)) == expected, op_type
    assert node_flops(*_node("Relu", "")) == 2 * 8 * 4  # element-wise


def test_every_fused_attention_op_makes_a_transformer():
    for op_type in ops.ATTENTION_OPS:
        node, _ = _node(op_type)
        assert node.graph is not None
        assert guess_architecture(node.graph) == "transformer_encoder", op_type
    assert guess_architecture(_node("MatMul", "")[0].graph) == "mlp"  # type: ignore[arg-type]


def test_quantized_ops_have_one_home_that_precision_reads():
    heavy = frozenset().union(*FAMILIES.values())
    by_name = {
        op
        for op in heavy
        if op.startswith("Q") or any(w in op for w in ("Integer", "Quantiz", "NBits", "Bnb4"))
    }
    assert by_name and all(ops.is_quantized_op(op) for op in by_name), by_name - ops.QUANTIZED_OPS
    assert ops.is_quantized_op("QLinearAdd") and not ops.is_quantized_op("MatMul")
    # No second list in precision: it asks ops, and every quantized op makes a model int8.
    lists = [v for v in vars(precision).values() if isinstance(v, frozenset) and "MatMul" in str(v)]
    assert lists == []
    for op_type in sorted(ops.QUANTIZED_OPS | {"QLinearAdd"}):
        node, _ = _node(op_type)
        assert precision.arithmetic_family(node.graph) == "int8", op_type
    assert precision.arithmetic_family(_node("MatMul", "")[0].graph) == "fp32"
