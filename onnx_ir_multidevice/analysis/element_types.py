"""Element types of a graph's values, without shapes.

The dtype of a value does not depend on the dims a model is run at, but ONNX shape inference
decides both at once: where a model is invalid at the planning dims (a 32-row position table
read at ``seq`` 128, a ``Concat`` of 4 rows and 1 row), inference fails at one node and every
value downstream is left without a type. :func:`element_types` propagates element types
alone, in one topological pass, from what the graph states (graph inputs, initializers,
``value_info``) and, per node, from:

* the op's ONNX schema (any domain :mod:`onnx.defs` knows): an output whose type variable an
  input shares takes that input's dtype; a variable allowed a single type (``Shape``:
  ``int64``; ``Equal``: ``bool``) gives that type;
* a rule where the schema alone does not tell (:data:`RULES`): ``Cast`` (``to``),
  ``Constant``, ``ConstantOfShape``, ``QuantizeLinear`` without a zero point, the random
  generators, ``If``/``Loop``/``Scan`` (from their bodies, propagated the same way), and the
  ``com.microsoft`` ops onnxruntime's quantizer and fusions write (``QLinearConv``,
  ``QLinearAdd``..., ``QGemm``, ``DynamicQuantizeMatMul``, ``Gelu``, attention...), which
  have no ONNX schema;
* a call of a model-local function: its body, with the call's input dtypes.

A value whose type nothing tells stays out of the result: never guessed. O(N + E) over the
graph and the bodies of its nodes (each function body once per distinct signature).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["RULES", "element_types"]

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice.analysis.rules import RuleRegistry
from onnx_ir_multidevice.graph.index import GraphIndex

Dtypes = list["ir.DataType | None"]
"""The dtype of each output of a node (``None``: not known)."""

Rule = Callable[[ir.Node, "list[ir.DataType | None]"], Dtypes]
"""A rule: (the node, its input dtypes) -> its output dtypes."""

_FLOAT = ir.DataType.FLOAT
_UNSET = object()


def _parse_type(type_str: str) -> ir.DataType | None:
    """``"tensor(int64)"`` -> ``INT64``; ``None`` for a non-tensor type (sequence, map...)."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    try:
        return ir.DataType[type_str[len("tensor(") : -1].upper()]
    except KeyError:
        return None


def _attr(node: ir.Node, name: str, default: Any = None) -> Any:
    attr = node.attributes.get(name)
    if attr is None or not isinstance(attr, ir.Attr) or attr.is_ref():
        return default
    return attr.value


def _dtype_attr(node: ir.Node, name: str, default: ir.DataType | None) -> ir.DataType | None:
    value = _attr(node, name)
    if value is None or not value:
        return default
    try:
        return ir.DataType(int(value))
    except ValueError:
        return None


def _at(ins: Sequence[ir.DataType | None], slot: int) -> ir.DataType | None:
    return ins[slot] if slot < len(ins) else None


def _first(*candidates: ir.DataType | None) -> ir.DataType | None:
    for candidate in candidates:
        if candidate is not None:
            return candidate
    return None


def _like(slot: int, count: int = 1) -> Rule:
    """Every output (``count`` of them, at most) has the dtype of input ``slot``."""

    def rule(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
        return [_at(ins, slot)] * min(count, len(node.outputs))

    return rule


def _outputs_like(slot: int, outputs: Sequence[int]) -> Rule:
    """Outputs ``outputs`` have the dtype of input ``slot``; the others are not told."""

    def rule(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
        result: Dtypes = [None] * len(node.outputs)
        for k in outputs:
            if k < len(result):
                result[k] = _at(ins, slot)
        return result

    return rule


# -- rules for standard ops the schema alone does not type ---------------------------------------


def _cast(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    return [_dtype_attr(node, "to", None)]


def _constant(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    tensor = _attr(node, "value")
    if tensor is not None:
        return [tensor.dtype]
    for name, dtype in (
        ("value_float", _FLOAT),
        ("value_floats", _FLOAT),
        ("value_int", ir.DataType.INT64),
        ("value_ints", ir.DataType.INT64),
        ("value_string", ir.DataType.STRING),
        ("value_strings", ir.DataType.STRING),
    ):
        if name in node.attributes:
            return [dtype]
    return [None]  # a sparse constant: its type is not read here


def _constant_of_shape(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    tensor = _attr(node, "value")
    return [_FLOAT if tensor is None else tensor.dtype]


def _quantize(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    # The zero point's type, else ``output_dtype`` (opset 21), else uint8.
    return [_first(_at(ins, 2), _dtype_attr(node, "output_dtype", ir.DataType.UINT8))]


def _dequantize(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    return [_first(_at(ins, 1), _dtype_attr(node, "output_dtype", None))]


def _generator(default: ir.DataType | None, like: int | None = None) -> Rule:
    """``dtype`` attribute, else the dtype of input ``like``, else ``default``."""

    def rule(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
        fallback = _at(ins, like) if like is not None else None
        return [_dtype_attr(node, "dtype", _first(fallback, default))]

    return rule


# -- com.microsoft (onnxruntime contrib ops: no ONNX schema) --------------------------------------


def _qlinear_conv(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    return [_first(_at(ins, 7), _at(ins, 0))]  # y_zero_point, else x


def _qlinear_concat(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    return [_first(_at(ins, 1), _at(ins, 2))]  # Y_zero_point, else the first X


def _qgemm(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    # Quantized output when y_scale is given (typed by y_zero_point), float otherwise.
    if len(node.inputs) > 7 and node.inputs[7] is not None:
        return [_first(_at(ins, 8), ir.DataType.UINT8)]
    return [_first(_at(ins, 1), _FLOAT)]  # float, as the scale of A


def _matmul_integer_to_float(node: ir.Node, ins: list[ir.DataType | None]) -> Dtypes:
    return [_first(_at(ins, 2), _FLOAT)]  # the dtype of a_scale


_MS = "com.microsoft"

RULES: RuleRegistry[Rule] = RuleRegistry("element type")
"""Rules by ``(domain, op_type)``, tried before the schema; one rule per op or op family."""

RULES.add(_cast, "Cast")
RULES.add(_constant, "Constant")
RULES.add(_constant_of_shape, "ConstantOfShape")
RULES.add(_generator(None, like=0), "EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli")
RULES.add(_generator(_FLOAT), "RandomNormal", "RandomUniform")
RULES.add(_generator(ir.DataType.INT32), "Multinomial")
RULES.add(_outputs_like(0, (0,)), "SimplifiedLayerNormalization")
for _domain in ("", _MS):
    RULES.add(_quantize, "QuantizeLinear", domain=_domain)
    RULES.add(_dequantize, "DequantizeLinear", domain=_domain)
RULES.add(_qlinear_conv, "QLinearConv", domain=_MS)
RULES.add(_qlinear_concat, "QLinearConcat", domain=_MS)
RULES.add(_qgemm, "QGemm", domain=_MS)
RULES.add(_matmul_integer_to_float, "MatMulIntegerToFloat", domain=_MS)
RULES.add(_like(0), "DynamicQuantizeMatMul", "MatMulNBits", domain=_MS)
RULES.add(_outputs_like(0, (0, 3)), "SkipLayerNormalization", domain=_MS)
RULES.add(_outputs_like(0, (0, 3)), "SkipSimplifiedLayerNormalization", domain=_MS)
RULES.add(_outputs_like(0, (0,)), "SimplifiedLayerNormalization", domain=_MS)
RULES.add(_like(0, 2), "Attention", domain=_MS)
RULES.add(_like(0, 3), "MultiHeadAttention", "GroupQueryAttention", domain=_MS)
# Ops whose outputs all have the dtype of their first input.
RULES.add(
    _like(0),
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearSoftmax",
    "QLinearGlobalAveragePool",
    "QLinearAveragePool",
    "QLinearReduceMean",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuickGelu",
    "FusedConv",
    "FusedMatMul",
    "FusedGemm",
    "BiasAdd",
    "RotaryEmbedding",
    "NhwcConv",
    domain=_MS,
)
del _domain


# -- the propagation -----------------------------------------------------------------------------


class _Schemas:
    """ONNX schemas by (domain, op, opset version), looked up once each."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, int], object] = {}

    def get(self, domain: str, op_type: str, version: int) -> onnx.defs.OpSchema | None:
        key = (domain, op_type, version)
        found = self._cache.get(key, _UNSET)
        if found is _UNSET:
            try:
                found = onnx.defs.get_schema(op_type, version, domain)
            except onnx.defs.SchemaError:
                found = None
            self._cache[key] = found
        return found  # type: ignore[return-value]  # not _UNSET any more


_SCHEMAS = _Schemas()


def _from_schema(
    schema: onnx.defs.OpSchema, node: ir.Node, ins: list[ir.DataType | None]
) -> Dtypes:
    """Output dtypes that the schema's type variables tell (see the module docstring)."""
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    formals = schema.inputs
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    by_type: dict[str, ir.DataType] = {}
    for k, formal in enumerate(formals):
        last = k == len(formals) - 1
        slots = range(k, len(ins)) if last and formal.option == variadic else (k,)
        for slot in slots:
            dtype = _at(ins, slot)
            if dtype is not None:
                by_type.setdefault(formal.type_str, dtype)
                break
    result: Dtypes = []
    outputs = schema.outputs
    for k in range(len(node.outputs)):
        if not outputs:
            result.append(None)
            continue
        type_str = outputs[min(k, len(outputs) - 1)].type_str
        allowed = constraints.get(type_str)
        if allowed is None:
            result.append(_parse_type(type_str))
        elif type_str in by_type:
            result.append(by_type[type_str])
        elif len(allowed) == 1:
            result.append(_parse_type(next(iter(allowed))))
        else:
            result.append(None)
    return result


class _Propagation:
    """One propagation: dtypes found so far, shared by a graph and the bodies it holds."""

    def __init__(self, functions: Mapping[ir.OperatorIdentifier, ir.Function]) -> None:
        self.found: dict[ir.Value, ir.DataType] = {}
        self.functions = functions
        self._calls: dict[tuple, Dtypes] = {}

    def dtype(self, value: ir.Value | None) -> ir.DataType | None:
        if value is None:
            return None
        dtype = value.dtype
        if dtype is not None:
            return dtype
        found = self.found.get(value)
        if found is not None:
            return found
        tensor = value.const_value
        return None if tensor is None else tensor.dtype

    def set(self, value: ir.Value, dtype: ir.DataType | None) -> None:
        if dtype is not None and value.dtype is None:
            self.found[value] = dtype

    def run(self, nodes: Sequence[ir.Node], opsets: Mapping[str, int]) -> None:
        dtype = self.dtype
        for node in nodes:
            ins = [dtype(v) for v in node.inputs]
            outs = self.node_dtypes(node, ins, opsets)
            for value, out in zip(node.outputs, outs, strict=False):
                self.set(value, out)

    def node_dtypes(
        self, node: ir.Node, ins: list[ir.DataType | None], opsets: Mapping[str, int]
    ) -> Dtypes:
        domain = "" if node.domain == "ai.onnx" else node.domain
        op_type = node.op_type
        function = self.functions.get(node.op_identifier())
        if function is not None:
            return self._call(function, ins)
        if domain == "" and op_type in ("If", "Loop", "Scan"):
            return self._control_flow(node, ins, opsets)
        rule = RULES.get(domain, op_type)
        if rule is not None:
            return rule(node, ins)
        version = node.version or opsets.get(domain)
        if version is None and domain == "":
            version = opsets.get("ai.onnx")
        if version is None:
            return [None] * len(node.outputs)
        schema = _SCHEMAS.get(domain, op_type, version)
        if schema is None:
            return [None] * len(node.outputs)
        return _from_schema(schema, node, ins)

    def _body(
        self, body: ir.Graph, inputs: Sequence[ir.DataType | None], opsets: Mapping[str, int]
    ) -> Dtypes:
        for value, dtype in zip(body.inputs, inputs, strict=False):
            self.set(value, dtype)
        self.run(list(body), {**opsets, **body.opset_imports})
        return [self.dtype(v) for v in body.outputs]

    def _control_flow(
        self, node: ir.Node, ins: list[ir.DataType | None], opsets: Mapping[str, int]
    ) -> Dtypes:
        count = len(node.outputs)
        if node.op_type == "If":
            then_branch, else_branch = _attr(node, "then_branch"), _attr(node, "else_branch")
            if then_branch is None or else_branch is None:
                return [None] * count
            a, b = self._body(then_branch, (), opsets), self._body(else_branch, (), opsets)
            return [_first(x, y) for x, y in zip(a, b, strict=False)]
        body = _attr(node, "body")
        if body is None:
            return [None] * count
        if node.op_type == "Loop":  # inputs: M, cond, carried...; body: iter, cond, carried...
            carried = ins[2:]
            outs = self._body(body, [ir.DataType.INT64, ir.DataType.BOOL, *carried], opsets)
            result = [_first(c, o) for c, o in zip(carried, outs[1:], strict=False)]
            return (result + outs[1 + len(carried) :])[:count]
        # Scan (opset >= 9): inputs: states..., scan inputs...; body: states..., elements...
        if (node.version or opsets.get("", 9)) < 9:
            return [None] * count
        outs = self._body(body, ins, opsets)
        states = len(ins) - int(_attr(node, "num_scan_inputs", 0))
        result = [_first(s, o) for s, o in zip(ins[:states], outs, strict=False)]
        return (result + outs[states:])[:count]

    def _call(self, function: ir.Function, ins: list[ir.DataType | None]) -> Dtypes:
        key = (function.identifier(), tuple(ins))
        found = self._calls.get(key)
        if found is None:
            inner = _Propagation(self.functions)
            for value, dtype in zip(function.inputs, ins, strict=False):
                inner.set(value, dtype)
            inner.run(list(function), dict(function.opset_imports))
            found = self._calls[key] = [inner.dtype(v) for v in function.outputs]
        return found


def element_types(
    graph: ir.Graph,
    *,
    index: GraphIndex | None = None,
    functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None,
) -> dict[ir.Value, ir.DataType]:
    """The element type of every value of ``graph`` that the graph leaves untyped.

    Args:
        graph: A main graph (its nodes need not be stored in topological order).
        index: Its :class:`~onnx_ir_multidevice.graph.index.GraphIndex`, when built.
        functions: The model's local functions (default: ``index.functions``, else none).

    Returns:
        ``{value: dtype}`` for the values without a stated type whose dtype follows from the
        graph (values of ``If``/``Loop``/``Scan`` bodies included). The graph is not
        modified.

    Raises:
        AnalysisError: If the graph has a cycle.

    .. versionadded:: 0.1
    """
    if index is None:
        index = GraphIndex.build(graph, functions=functions)
    if functions is None:
        functions = index.functions or {}
    propagation = _Propagation(functions)
    propagation.run(index.nodes, graph.opset_imports)
    return propagation.found
