"""What a model proto holds that onnx-ir 1.1 does not keep, recorded on load, put back on save.

onnx-ir rebuilds a proto from its object model. For a file it represents fully, three kinds of
information do not survive that on their own; :func:`record` notes them while the proto and the
freshly built IR are side by side, and :func:`restore` puts them back into the proto that
onnx-ir writes, for every object the caller left as it was:

* **Which values have a ``value_info`` entry, and in which order.** onnx-ir writes an entry for
  every value that has a type (initializers get theirs from the tensor, so a TorchScript export
  with no ``value_info`` at all comes back with one per weight), in its own order, and none for
  a graph output (whose type it writes into ``output`` instead). The record keeps each graph's
  entries in file order, with the value each one describes and that value's state right after
  loading. On save, an entry whose value is unchanged is written back as it was read (its
  bytes); a changed value is written the onnx-ir way; a value that left the graph loses its
  entry; an entry that names no value of its graph (some exporters list subgraph or function
  values there) is kept as it was. Types that onnx-ir adds only because an initializer implies
  them are not written; a type the caller (or a pass) gave a value is.
* **Graph inputs and outputs as written.** An ``If`` body output without a type whose type is
  given by a ``value_info`` entry of the body comes back from onnx-ir with the type written into
  the output. Inputs and outputs whose value is unchanged are written back as they were read.
* **Fields set to their default value.** Optional (proto2) fields written explicitly as ``''``
  or ``0`` (``doc_string``, ``producer_version``, ``model_version``, a node's ``domain``...)
  are dropped by onnx-ir, which writes only non-empty values. They are written again where the
  IR still holds the default.

Everything else onnx-ir keeps itself, or :mod:`onnx_ir_multidevice._proto.convert` restores it
(the presence of multi-device fields, opset and ``metadata_props`` order) or refuses it up front
(training information, sparse initializers, duplicate keys).
"""

from __future__ import annotations

__all__ = ["FIDELITY_META_KEY", "FidelityRecord", "record", "restore"]

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import onnx
import onnx_ir as ir

#: Key under which :func:`record` stores its record in ``ir.Model.meta``.
FIDELITY_META_KEY = "onnx_ir_multidevice.proto_fidelity"

_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS

_MODEL_FIELDS = ("producer_name", "producer_version", "domain", "model_version", "doc_string")
_GRAPH_FIELDS = ("name", "doc_string")
_NODE_FIELDS = ("name", "domain", "overload", "doc_string")
_ATTRIBUTE_FIELDS = ("doc_string", "ref_attr_name")


def _state(value: ir.Value) -> tuple[Any, ...]:
    """What a value's ``ValueInfoProto`` says, in a form that compares by value.

    Reads onnx-ir's slots where the public properties would allocate (``metadata_props``
    creates an empty dict on first read; ``Shape.dims`` copies), with the public API as the
    fallback should the slots ever change.
    """
    type_ = value.type
    shape = value.shape
    props = getattr(value, "_metadata_props", None) if _SLOTS else value.metadata_props
    if shape is None:
        dims = None
    elif _SLOTS:
        dims = (tuple(shape._dims), tuple(shape._denotations))  # noqa: SLF001
    else:
        dims = (shape.dims, tuple(map(shape.get_denotation, range(len(shape)))))
    return (
        value.name,
        type_,
        None if type_ is None else type_.denotation,
        dims,
        value.doc_string,
        tuple(props.items()) if props else None,
    )


def _has_slots() -> bool:
    shape = ir.Shape([1])
    value = ir.Value(name="x", shape=shape)
    return (
        getattr(shape, "_dims", None) == [1]
        and getattr(shape, "_denotations", None) == [None]
        and hasattr(value, "_metadata_props")
    )


_SLOTS = _has_slots()


@dataclasses.dataclass(slots=True)
class _Entry:
    """One ``ValueInfoProto`` as read, and the value it described right after loading."""

    value: ir.Value | None
    """The value the entry describes; ``None`` when it names no value of its graph."""
    state: tuple[Any, ...] | None
    """The value's :func:`_state` right after loading."""
    index: int
    """Position of the entry, as read, in its :class:`_GraphRecord` list of protos."""


@dataclasses.dataclass(slots=True)
class _GraphRecord:
    """What a graph (or function) proto held that onnx-ir does not keep."""

    graph: ir.Graph | ir.Function
    protos: onnx.GraphProto
    """A copy of the graph's ``value_info``, ``input`` and ``output`` entries as read."""
    value_info: list[_Entry]
    inputs: list[_Entry]
    outputs: list[_Entry]
    unmatched: frozenset[str]
    """Names of ``value_info`` entries that name no value of the graph."""
    defaults: tuple[str, ...]
    """Fields (``name``, ``doc_string``) present in the proto with their default value."""


@dataclasses.dataclass(slots=True)
class FidelityRecord:
    """What :func:`record` saw that onnx-ir cannot hold, keyed by the IR objects it concerns."""

    model_defaults: tuple[str, ...] = ()
    """``ModelProto`` fields present with their default value (``doc_string: ''``...)."""
    graphs: dict[int, _GraphRecord] = dataclasses.field(default_factory=dict)
    """``id(graph or function) -> its record`` (the record holds the object, so ids stay)."""
    node_defaults: dict[int, tuple[ir.Node, tuple[str, ...], tuple[tuple[int, str], ...]]] = (
        dataclasses.field(default_factory=dict)
    )
    """``id(node) -> (node, node fields, (attribute index, field) pairs)`` set to defaults."""


# ---------------------------------------------------------------------------------------------
# Walking a proto and its IR side by side


def _subgraphs(
    node_proto: onnx.NodeProto, node: ir.Node
) -> Iterator[tuple[onnx.GraphProto, ir.Graph]]:
    attrs = list(node.attributes.values())
    for k, attr_proto in enumerate(node_proto.attribute):
        if attr_proto.type == _GRAPH:
            yield attr_proto.g, attrs[k].as_graph()
        elif attr_proto.type == _GRAPHS:
            yield from zip(attr_proto.graphs, attrs[k].as_graphs(), strict=False)


def _graph_pairs(
    proto: onnx.ModelProto, model: ir.Model
) -> Iterator[tuple[Any, ir.Graph | ir.Function, bool]]:
    """Yield ``(graph or function proto, IR object, is_function)``: main graph first."""
    yield proto.graph, model.graph, False
    for f_proto, function in zip(proto.functions, model.functions.values(), strict=False):
        yield f_proto, function, True


def _node_pairs(
    nodes_proto: Sequence[onnx.NodeProto], graph: ir.Graph | ir.Function
) -> Iterator[tuple[onnx.NodeProto, ir.Node]]:
    return zip(nodes_proto, graph, strict=False)


def _values_by_name(graph: ir.Graph | ir.Function) -> dict[str, ir.Value]:
    """Every value a graph defines: inputs, initializers and node outputs."""
    names: dict[str, ir.Value] = {}
    for value in graph.inputs:
        if value.name:
            names[value.name] = value
    if isinstance(graph, ir.Graph):
        names.update(graph.initializers)
    for node in graph:
        for value in node.outputs:
            if value.name:
                names[value.name] = value
    return names


def _defaults(message: Any, fields: tuple[str, ...]) -> tuple[str, ...]:
    """Names of ``fields`` that ``message`` holds explicitly with their default value."""
    return tuple(name for name in fields if not getattr(message, name) and message.HasField(name))


# ---------------------------------------------------------------------------------------------
# Recording


def _record_graph(
    rec: FidelityRecord,
    g_proto: Any,
    graph: ir.Graph | ir.Function,
    is_function: bool,
) -> None:
    """Record what ``graph`` does not keep of ``g_proto``: its fields, then its nodes'."""
    _record_graph_fields(rec, g_proto, graph, is_function)
    _record_nodes(rec, g_proto, graph)


def _record_graph_fields(
    rec: FidelityRecord,
    g_proto: Any,
    graph: ir.Graph | ir.Function,
    is_function: bool,
) -> None:
    """The graph's value infos, inputs, outputs and fields set to ``''`` (not its nodes)."""
    protos = onnx.GraphProto()
    value_info: list[_Entry] = []
    unmatched: set[str] = set()
    if len(g_proto.value_info):
        protos.value_info.extend(g_proto.value_info)
        names = _values_by_name(graph)
        found = [names.get(info.name) for info in g_proto.value_info]
        value_info = [_Entry(v, None if v is None else _state(v), i) for i, v in enumerate(found)]
        unmatched = {
            info.name for info, v in zip(g_proto.value_info, found, strict=True) if v is None
        }
    inputs: list[_Entry] = []
    outputs: list[_Entry] = []
    defaults: tuple[str, ...] = ()
    if not is_function:
        protos.quantization_annotation.extend(g_proto.quantization_annotation)
        protos.input.extend(g_proto.input)
        protos.output.extend(g_proto.output)
        inputs = [_Entry(v, _state(v), i) for i, v in enumerate(graph.inputs)]
        outputs = [_Entry(v, _state(v), i) for i, v in enumerate(graph.outputs)]
        defaults = _defaults(g_proto, _GRAPH_FIELDS)
    if value_info or inputs or outputs or defaults:
        rec.graphs[id(graph)] = _GraphRecord(
            graph, protos, value_info, inputs, outputs, frozenset(unmatched), defaults
        )


def _record_nodes(rec: FidelityRecord, g_proto: Any, graph: ir.Graph | ir.Function) -> None:
    """The fields set to ``''`` of each node and its attributes; subgraphs recursively."""
    node_defaults = rec.node_defaults
    for node_proto, node in _node_pairs(g_proto.node, graph):
        # Inline tests first: nearly every node has none of these fields set to ''.
        if (
            (not node_proto.domain and node_proto.HasField("domain"))
            or (not node_proto.name and node_proto.HasField("name"))
            or (not node_proto.doc_string and node_proto.HasField("doc_string"))
            or (not node_proto.overload and node_proto.HasField("overload"))
        ):
            fields = _defaults(node_proto, _NODE_FIELDS)
        else:
            fields = ()
        if node_proto.attribute:
            attr_fields = _attribute_defaults(node_proto)
            for sub_proto, sub in _subgraphs(node_proto, node):
                _record_graph(rec, sub_proto, sub, False)
            if attr_fields:
                node_defaults[id(node)] = (node, fields, attr_fields)
                continue
        if fields:
            node_defaults[id(node)] = (node, fields, ())


def _attribute_defaults(node_proto: onnx.NodeProto) -> tuple[tuple[int, str], ...]:
    """``(attribute index, field)`` of attribute fields set explicitly to ``''``."""
    return tuple(
        (k, name)
        for k, attr in enumerate(node_proto.attribute)
        if attr.HasField("doc_string") or attr.HasField("ref_attr_name")
        for name in _defaults(attr, _ATTRIBUTE_FIELDS)
    )


def record(proto: onnx.ModelProto, model: ir.Model) -> FidelityRecord:
    """Note what ``proto`` holds that ``model`` (just deserialised from it) does not keep.

    Args:
        proto: The model proto.
        model: The IR model onnx-ir built from it, untouched since.

    Returns:
        The record for :func:`restore`.
    """
    rec = FidelityRecord(model_defaults=_defaults(proto, _MODEL_FIELDS))
    for g_proto, graph, is_function in _graph_pairs(proto, model):
        _record_graph(rec, g_proto, graph, is_function)
    return rec


# ---------------------------------------------------------------------------------------------
# Restoring


def _set_default(message: Any, name: str) -> None:
    """Make ``message.name`` present with its default value (if the IR still has the default)."""
    if not getattr(message, name):
        setattr(message, name, type(getattr(message, name))())


def _is_implied_by_initializer(value: ir.Value) -> bool:
    """Whether a value's type and shape say only what its initializer tensor says."""
    tensor = value.const_value
    if tensor is None or value.doc_string or value.metadata_props:
        return False
    type_ = value.type
    if type_ is not None and (type_ != ir.TensorType(tensor.dtype) or type_.denotation):
        return False
    return value.shape is None or value.shape == tensor.shape


def _restore_io(
    protos: Any, kept: Any, values: Sequence[ir.Value], entries: Sequence[_Entry]
) -> None:
    for i, (entry, value) in enumerate(zip(entries, values, strict=False)):
        if entry.value is value and entry.state == _state(value):
            protos[i].CopyFrom(kept[entry.index])


def _restore_value_info(g_proto: Any, names: dict[str, ir.Value], rec: _GraphRecord) -> None:
    kept = rec.protos.value_info
    written = list(g_proto.value_info)
    out: list[onnx.ValueInfoProto] = []
    done: set[int] = set()
    for entry in rec.value_info:
        value = entry.value
        if value is None:
            out.append(kept[entry.index])
            continue
        if value.name is None or names.get(value.name) is not value or id(value) in done:
            continue  # the value left the graph (or is listed twice and written already)
        done.add(id(value))
        if entry.state == _state(value):
            out.append(kept[entry.index])
        elif (
            value.type is not None
            or value.shape is not None
            or value.doc_string
            or value.metadata_props
        ):
            info = onnx.ValueInfoProto()
            ir.serde.serialize_value_into(info, value)
            out.append(info)
    for info in written:
        value = names.get(info.name)
        if value is None:
            if info.name not in rec.unmatched:
                out.append(info)
        elif id(value) not in done and not _is_implied_by_initializer(value):
            out.append(info)
    new = onnx.GraphProto()
    new.value_info.extend(out)
    del g_proto.value_info[:]
    g_proto.value_info.extend(new.value_info)


def _restore_quantization(g_proto: onnx.GraphProto, names: dict[str, ir.Value], kept: Any) -> None:
    """Quantization annotations in file order; onnx-ir writes them in its own order.

    An annotation onnx-ir writes unchanged is written as read, in the file's place; one it
    writes differently, or anew, is written its way, after those; one naming no value of the
    graph is kept as read.
    """
    written = {a.tensor_name: a for a in g_proto.quantization_annotation}
    out: list[Any] = []
    for annotation in kept:
        now = written.pop(annotation.tensor_name, None)
        if now is None:
            if annotation.tensor_name not in names:
                out.append(annotation)  # names nothing onnx-ir could hold: kept as read
        elif now.SerializeToString() == annotation.SerializeToString():
            out.append(annotation)
        else:
            out.append(now)
    out.extend(written.values())
    new = onnx.GraphProto()
    new.quantization_annotation.extend(out)
    del g_proto.quantization_annotation[:]
    g_proto.quantization_annotation.extend(new.quantization_annotation)


def _restore_graph(
    rec: FidelityRecord, g_proto: Any, graph: ir.Graph | ir.Function, is_function: bool
) -> None:
    g_rec = rec.graphs.get(id(graph))
    if g_rec is not None and g_rec.graph is graph:
        names = _values_by_name(graph)  # one map per graph, for both lists below
        _restore_value_info(g_proto, names, g_rec)
        if not is_function:
            assert isinstance(graph, ir.Graph)  # only functions are not graphs
            if len(g_rec.protos.quantization_annotation):
                _restore_quantization(g_proto, names, g_rec.protos.quantization_annotation)
            _restore_io(g_proto.input, g_rec.protos.input, graph.inputs, g_rec.inputs)
            _restore_io(g_proto.output, g_rec.protos.output, graph.outputs, g_rec.outputs)
            for name in g_rec.defaults:
                _set_default(g_proto, name)
    for node_proto, node in _node_pairs(g_proto.node, graph):
        entry = rec.node_defaults.get(id(node))
        if entry is not None and entry[0] is node:
            for name in entry[1]:
                _set_default(node_proto, name)
            for k, name in entry[2]:
                if k < len(node_proto.attribute):
                    _set_default(node_proto.attribute[k], name)
        if node_proto.attribute:
            for sub_proto, sub in _subgraphs(node_proto, node):
                _restore_graph(rec, sub_proto, sub, False)


def restore(proto: onnx.ModelProto, model: ir.Model, rec: FidelityRecord | None) -> None:
    """Put back into ``proto`` (onnx-ir's serialisation of ``model``) what ``rec`` noted.

    Objects the caller replaced or changed since loading, and models built in memory (no
    record), are written the onnx-ir way.

    Args:
        proto: The proto :func:`onnx_ir.serde.serialize_model` wrote for ``model``; changed in
            place.
        model: The IR model.
        rec: The record :func:`record` made when the model was loaded, or ``None``.
    """
    if rec is None:
        return
    for name in rec.model_defaults:
        _set_default(proto, name)
    for g_proto, graph, is_function in _graph_pairs(proto, model):
        _restore_graph(rec, g_proto, graph, is_function)
