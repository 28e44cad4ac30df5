"""The lowest ONNX IR version that can hold a model's content.

Annotating a model raises its ``ir_version`` to 11 (the multi-device fields need it), but
onnxruntime 1.20 to 1.22 refuse any model above IR 10 ("max supported IR version: 10"). A stage
model made by the split, or a model whose annotations were stripped, carries no multi-device
field any more, so :func:`lowest_ir_version` gives it the lowest IR version its content needs
(:func:`required_ir_version`), never more than it had; a model below IR 11 keeps its own. What
needs which version (ONNX's ``onnx.proto`` and ``onnx.helper.VERSION_TABLE``):

* the operator sets imported (``ai.onnx``, ``ai.onnx.ml``, ``ai.onnx.training``; other domains
  need nothing), as ``onnx.helper.find_min_ir_version_for`` says: opset 17 or 18 needs 8, 21 or
  22 needs 10, 23 needs 11...;
* element types (of initializers, values, tensor attributes, ``Cast`` targets): 8-bit floats 9;
  ``int4``/``uint4`` 10; ``float4e2m1`` 11; ``float8e8m0`` 12; ``int2``/``uint2`` 13; 6-bit
  floats 14;
* model-local functions 8 (attributes with defaults 9); an ``overload``, or ``metadata_props``
  on a node, graph, function or value 10 (the dynamo exporter writes node metadata);
* optional and sparse tensor types 8;
* multi-device fields (model configurations, node device configurations) 11.
"""

from __future__ import annotations

__all__ = [
    "MIN_WRITTEN_IR_VERSION",
    "MULTI_DEVICE_IR_VERSION",
    "lowest_ir_version",
    "required_ir_version",
]

import contextlib
from collections.abc import Callable, Iterable
from typing import cast

import onnx
import onnx_ir as ir

from onnx_ir_multidevice.graph.index import holds_subgraphs, node_subgraphs

MULTI_DEVICE_IR_VERSION = 11
"""The IR version that introduced the multi-device fields."""

MIN_WRITTEN_IR_VERSION = 7
"""The lowest version :func:`lowest_ir_version` lowers a model to (IR 7, ONNX 1.7: below it the
rules for initializers and opsets of function bodies differ)."""

_D = ir.DataType
_TYPE_IR_VERSION: dict[ir.DataType, int] = {
    _D.FLOAT8E4M3FN: 9,
    _D.FLOAT8E4M3FNUZ: 9,
    _D.FLOAT8E5M2: 9,
    _D.FLOAT8E5M2FNUZ: 9,
    _D.UINT4: 10,
    _D.INT4: 10,
    _D.FLOAT4E2M1: 11,
}
for _name, _version in (
    ("FLOAT8E8M0", 12),
    ("UINT2", 13),
    ("INT2", 13),
    ("FLOAT6E2M3", 14),
    ("FLOAT6E3M2", 14),
):
    if hasattr(_D, _name):
        _TYPE_IR_VERSION[_D.__members__[_name]] = _version

_CAST_OPS = frozenset({"Cast"})
_FUNCTION_IR_VERSION = 8
_FUNCTION_DEFAULT_ATTRIBUTE_IR_VERSION = 9
_METADATA_IR_VERSION = 10


_TENSOR_TYPE = ir.TensorType
_NESTED_TYPES = (ir.SequenceType, ir.OptionalType)


def _type_version(type_: ir.TypeProtocol | None) -> int:
    # exact class tests: the types are Protocol subclasses, whose isinstance is slow
    if type_ is None:
        return 0
    if type(type_) is _TENSOR_TYPE:  # the common case
        return _TYPE_IR_VERSION.get(type_.dtype, 0)
    version = 0
    while type_ is not None:
        if type(type_) in (ir.OptionalType, ir.SparseTensorType):
            version = max(version, 8)
        version = max(version, _TYPE_IR_VERSION.get(type_.dtype, 0))
        if type(type_) not in _NESTED_TYPES:
            break
        type_ = cast("ir.TypeProtocol", type_.elem_type)  # a nested type's element is a type
    return version


def _value_version(value: ir.Value | None) -> int:
    if value is None:
        return 0
    version = _type_version(value.type)
    if value.metadata_props:
        version = max(version, _METADATA_IR_VERSION)
    tensor = value.const_value
    if tensor is not None:
        version = max(version, _TYPE_IR_VERSION.get(tensor.dtype, 0))
    return version


def _attribute_version(attribute: ir.Attr) -> int:
    if attribute.is_ref() or attribute.value is None:
        return 0
    kind = attribute.type
    if kind == ir.AttributeType.TENSOR:
        return _TYPE_IR_VERSION.get(attribute.value.dtype, 0)
    if kind == ir.AttributeType.TENSORS:
        return max((_TYPE_IR_VERSION.get(t.dtype, 0) for t in attribute.value), default=0)
    if kind in (ir.AttributeType.TYPE_PROTO, ir.AttributeType.TYPE_PROTOS):
        types = attribute.value if kind == ir.AttributeType.TYPE_PROTOS else [attribute.value]
        return max((_type_version(t) for t in types), default=0)
    return 0


def _node_version(node: ir.Node, kept: Callable[[ir.NodeDeviceConfiguration], bool]) -> int:
    version = 0
    if node.overload or node.metadata_props:
        version = _METADATA_IR_VERSION
    if node.device_configurations and any(map(kept, node.device_configurations)):
        return MULTI_DEVICE_IR_VERSION if version < MULTI_DEVICE_IR_VERSION else version
    attributes = node.attributes
    if attributes:
        for attribute in attributes.values():
            version = max(version, _attribute_version(attribute))
    if node.op_type in _CAST_OPS and node.domain in ("", "ai.onnx"):
        to = node.attributes.get("to")
        if to is not None and not to.is_ref() and to.type == ir.AttributeType.INT:
            with contextlib.suppress(ValueError):  # not an element type: the checker's business
                version = max(version, _TYPE_IR_VERSION.get(ir.DataType(to.as_int()), 0))
    for output in node.outputs:
        version = max(version, _value_version(output))
    return version


def _graph_version(graph: ir.Graph | ir.Function) -> int:
    version = _METADATA_IR_VERSION if graph.metadata_props else 0
    values: Iterable[ir.Value] = graph.inputs
    if isinstance(graph, ir.Graph):
        values = (*graph.inputs, *graph.outputs, *graph.initializers.values())
    for value in values:
        version = max(version, _value_version(value))
    return version


def _opset_version(opset_imports: dict[str, int]) -> int:
    ids = [onnx.helper.make_opsetid(domain, v) for domain, v in opset_imports.items()]
    known = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training"}
    return onnx.helper.find_min_ir_version_for(
        [i for i in ids if i.domain in known], ignore_unknown=True
    )


def required_ir_version(
    model: ir.Model,
    nodes: Iterable[ir.Node] | None = None,
    *,
    kept: Callable[[ir.NodeDeviceConfiguration], bool] = lambda entry: True,
    configurations: Iterable[ir.ModelConfiguration] | None = None,
    at_most: int | None = None,
) -> int:
    """The lowest IR version that can hold ``model``'s content (0 for nothing special).

    One walk over the nodes (subgraphs and functions included) and their values.

    Args:
        model: The model (not modified). Its opset imports, functions, graph inputs, outputs
            and initializers are read.
        nodes: The main-graph nodes to read instead of ``model.graph``'s (for a stage written
            from the input model's nodes); their subgraphs are read too.
        kept: Which node device configuration entries the written model keeps (default: all).
        configurations: The model configurations the written model keeps (default:
            ``model.device_configurations``).
        at_most: Stop walking once this version is reached (and return it).

    Returns:
        The largest version that one of the rules of the module docstring asks for.
    """
    if configurations is None:
        configurations = model.device_configurations
    if any(True for _ in configurations):
        return MULTI_DEVICE_IR_VERSION
    ceiling = at_most if at_most is not None else 1 << 30
    version = max(_opset_version(model.opset_imports), _graph_version(model.graph))
    scopes: list[Iterable[ir.Node]] = [model.graph if nodes is None else nodes]
    if model.functions:
        version = max(version, _FUNCTION_IR_VERSION)
    for function in model.functions.values():
        version = max(version, _graph_version(function), _opset_version(function.opset_imports))
        if function.overload or function.metadata_props:
            version = max(version, _METADATA_IR_VERSION)
        if any(a.value is not None for a in function.attributes.values()):
            version = max(version, _FUNCTION_DEFAULT_ATTRIBUTE_IR_VERSION)
        scopes.append(function)
    pending = scopes  # node sequences still to read: scopes, then subgraphs at any depth
    while pending:
        for node in pending.pop():
            version = max(version, _node_version(node, kept))
            if version >= ceiling:
                return version
            if holds_subgraphs(node):
                for graph in node_subgraphs(node):
                    version = max(version, _graph_version(graph))
                    pending.append(graph)
    return version


def lowest_ir_version(
    model: ir.Model,
    nodes: Iterable[ir.Node] | None = None,
    *,
    kept: Callable[[ir.NodeDeviceConfiguration], bool] = lambda entry: True,
    configurations: Iterable[ir.ModelConfiguration] | None = None,
) -> int:
    """The IR version to write ``model`` with, once its multi-device fields are gone or kept.

    A model below IR 11 keeps its own version (that of its file: whatever read the file reads
    the model). A model at IR 11 or above, which annotating may have raised it to, gets the
    lowest version its content needs (:func:`required_ir_version`), not below
    :data:`MIN_WRITTEN_IR_VERSION` and never above its own: 11 while it keeps multi-device
    fields, else usually 8 to 10, which onnxruntime 1.20 to 1.22 read.

    Args:
        model: The model (not modified).
        nodes: As for :func:`required_ir_version`.
        kept: As for :func:`required_ir_version`.
        configurations: As for :func:`required_ir_version`.

    Returns:
        The version.
    """
    if model.ir_version < MULTI_DEVICE_IR_VERSION:
        return model.ir_version
    needed = required_ir_version(
        model, nodes, kept=kept, configurations=configurations, at_most=model.ir_version
    )
    return min(model.ir_version, max(MIN_WRITTEN_IR_VERSION, needed))
