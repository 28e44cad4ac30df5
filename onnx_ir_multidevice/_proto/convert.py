"""Lossless ``onnx.ModelProto`` <-> ``ir.Model`` conversion and a field-level proto diff.

onnx-ir 1.1 round-trips the IR v11 multi-device metadata, but not byte for byte. This module
wraps :func:`onnx_ir.serde.deserialize_model` and :func:`onnx_ir.serde.serialize_model` and
fixes the known gaps:

* **Field presence.** Unset proto2 fields (``DeviceConfigurationProto.name`` /
  ``num_devices``, ``ShardedDimProto.axis``, ``SimpleShardedDimProto.num_shards``,
  ``IntIntListEntryProto.key``) and an unset ``OperatorSetIdProto.domain`` come back as
  explicit defaults. :func:`from_proto` records, in one pass over the input, which of them
  were unset; :func:`to_proto` clears them again on the objects that are still the same.
  Objects the caller replaced are written the onnx-ir way (explicit values).
* **Quadratic loading.** onnx-ir merges all enclosing scopes into a new dict for every
  annotated node; :func:`from_proto` attaches node configurations itself in linear time.
* **Dropped fields.** onnx-ir drops ``ModelProto.training_info`` and
  ``GraphProto.sparse_initializer``; :func:`from_proto` refuses a proto that has them.
* **Duplicated metadata keys.** onnx-ir holds ``metadata_props`` as a dict: of two entries
  with one key (in the model, a graph, a node, a function, a value or a tensor) it keeps the
  last. :func:`from_proto` refuses such a proto, naming the second entry.
* **Names that are not text.** protobuf hands a string field holding invalid UTF-8 (a damaged
  file) over as ``bytes``, which onnx-ir stores as a name and every later step trips on;
  :func:`from_proto` refuses a proto whose names, metadata keys or values are not text.
* **Invalid graphs.** What onnx-ir cannot deserialise (two nodes writing one tensor name, an
  element type no ONNX type has, a function output nothing produces...) raises
  ``onnx_ir.serde.SerdeError`` around a bare exception; :func:`from_proto` raises an
  :class:`~onnx_ir_multidevice.OmnyFormatError` with onnx-ir's reason instead.
* **Empty references.** An empty ``configuration_id`` or ``tensor_name`` loads in onnx-ir
  and then makes serialisation fail. :func:`from_proto` refuses such a proto up front with an
  :class:`~onnx_ir_multidevice.OmnyFormatError` naming the field.
* **Old IR versions.** With ``ir_version < 11`` onnx-ir drops the model and main-graph
  configurations but keeps those in If/Loop/Scan bodies. :func:`to_proto` refuses to write
  a model whose IR version cannot hold its annotations, instead of changing it silently.
* **Order of metadata_props.** onnx-ir sorts the keys when writing; :func:`to_proto`
  writes them in the IR's order (the file's order, then insertions) for the model, the main
  graph, functions and every node.
* **Function input types.** onnx-ir writes ``FunctionProto.value_info`` for function
  inputs but does not read it back; :func:`from_proto` does.
* **Out-of-range integers.** ``pipeline_stage`` and ``num_devices`` are ``int32`` in the
  proto, the other integers ``int64``; :func:`to_proto` names the offending field instead
  of failing inside protobuf.

Paths in errors and in :func:`diff` follow the proto field names, e.g.
``graph.node[3].attribute[0].g.node[1].device_configurations[0].pipeline_stage``.
"""

from __future__ import annotations

__all__ = ["diff", "from_proto", "multi_device_messages", "roundtrip", "to_proto"]

import dataclasses
import math
from collections import ChainMap
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir
from google.protobuf import message as _message

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._proto import fidelity
from onnx_ir_multidevice._proto.unrepresentable import check_representable
from onnx_ir_multidevice._util import gc_paused

_MULTI_DEVICE_IR_VERSION = 11
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
_UNDEFINED = onnx.AttributeProto.UNDEFINED

#: Key under which :func:`from_proto` stores its presence record in ``ir.Model.meta``.
PRESENCE_META_KEY = "onnx_ir_multidevice.proto_presence"


# ---------------------------------------------------------------------------------------------
# Walking a proto and the IR built from it side by side


def _subgraph_pairs(
    node_proto: onnx.NodeProto, node: ir.Node, path: str
) -> Iterator[tuple[str, onnx.GraphProto, ir.Graph]]:
    """Yield ``(path, graph proto, ir graph)`` for the subgraph attributes of a node."""
    attrs = list(node.attributes.values()) if node_proto.attribute else []
    for k, attr_proto in enumerate(node_proto.attribute):
        if attr_proto.type == _GRAPH:
            yield f"{path}.attribute[{k}].g", attr_proto.g, attrs[k].as_graph()
        elif attr_proto.type == _GRAPHS:
            for j, (g_proto, g) in enumerate(
                zip(attr_proto.graphs, attrs[k].as_graphs(), strict=False)
            ):
                yield f"{path}.attribute[{k}].graphs[{j}]", g_proto, g


def _node_pairs(
    node_protos: Sequence[onnx.NodeProto], nodes: Sequence[ir.Node], path: str
) -> Iterator[tuple[str, onnx.NodeProto, ir.Node]]:
    """Yield ``(path, node proto, ir node)`` for a node list and, recursively, its subgraphs.

    The IR keeps nodes and attributes in proto order, so pairing is positional (linear).
    """
    if len(node_protos) != len(nodes):
        raise AssertionError(f"{path}: {len(node_protos)} node protos but {len(nodes)} IR nodes")
    for i, (node_proto, node) in enumerate(zip(node_protos, nodes, strict=True)):
        node_path = f"{path}.node[{i}]"
        yield node_path, node_proto, node
        if node_proto.attribute:
            for sub_path, g_proto, g in _subgraph_pairs(node_proto, node, node_path):
                yield from _node_pairs(g_proto.node, list(g), sub_path)


def _model_node_pairs(
    proto: onnx.ModelProto, model: ir.Model
) -> Iterator[tuple[str, onnx.NodeProto, ir.Node]]:
    yield from _node_pairs(proto.graph.node, list(model.graph), "graph")
    for f, (f_proto, function) in enumerate(
        zip(proto.functions, model.functions.values(), strict=False)
    ):
        yield from _node_pairs(f_proto.node, list(function), f"functions[{f}]")


def _ir_nodes(model: ir.Model) -> Iterator[tuple[str, ir.Node]]:
    """Yield ``(proto path, node)`` for every node of the model, subgraphs and functions too."""

    def visit(graph: ir.Graph | ir.Function, path: str) -> Iterator[tuple[str, ir.Node]]:
        for i, node in enumerate(graph):
            node_path = f"{path}.node[{i}]"
            yield node_path, node
            if not node.attributes:
                continue
            for k, attr in enumerate(node.attributes.values()):
                if attr.is_ref():
                    continue
                if attr.type == ir.AttributeType.GRAPH:
                    yield from visit(attr.as_graph(), f"{node_path}.attribute[{k}].g")
                elif attr.type == ir.AttributeType.GRAPHS:
                    for j, g in enumerate(attr.as_graphs()):
                        yield from visit(g, f"{node_path}.attribute[{k}].graphs[{j}]")

    yield from visit(model.graph, "graph")
    for f, function in enumerate(model.functions.values()):
        yield from visit(function, f"functions[{f}]")


# ---------------------------------------------------------------------------------------------
# Presence record


@dataclasses.dataclass
class _PresenceRecord:
    """What :func:`from_proto` saw in the proto that the IR cannot hold."""

    opset_dict: dict[str, int]
    """The model's opset imports as the IR holds them right after loading."""
    opset_protos: list[onnx.OperatorSetIdProto]
    """The original ``ModelProto.opset_import`` entries (order and presence)."""
    unset: dict[int, tuple[Any, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    """``id(ir object) -> (ir object, names of proto fields that were unset)``."""

    def note(self, obj: Any, msg: _message.Message, fields: tuple[str, ...]) -> None:
        missing = tuple(name for name in fields if not msg.HasField(name))
        if missing:
            self.unset[id(obj)] = (obj, missing)

    def clear(self, obj: Any, msg: _message.Message) -> None:
        entry = self.unset.get(id(obj))
        if entry is not None and entry[0] is obj:
            for name in entry[1]:
                msg.ClearField(name)


def _node_config_presence(
    configs: Sequence[onnx.NodeDeviceConfigurationProto],
    ir_configs: Sequence[ir.NodeDeviceConfiguration],
) -> Iterator[tuple[Any, _message.Message, tuple[str, ...]]]:
    """Yield ``(ir object, its proto message, optional fields)`` of node device configurations.

    Those fields are scalars whose presence onnx-ir does not keep: ``key`` of index-to-group
    map entries, ``axis`` of sharded dims and ``num_shards`` of simple shardings.
    """
    for config, ir_config in zip(configs, ir_configs, strict=False):
        for spec, ir_spec in zip(config.sharding_spec, ir_config.sharding_specs, strict=False):
            for entry, ir_entry in zip(
                spec.index_to_device_group_map, ir_spec.index_to_device_group_map, strict=False
            ):
                yield ir_entry, entry, ("key",)
            for dim, ir_dim in zip(spec.sharded_dim, ir_spec.sharded_dims, strict=False):
                yield ir_dim, dim, ("axis",)
                for simple, ir_simple in zip(
                    dim.simple_sharding, ir_dim.simple_shardings, strict=False
                ):
                    yield ir_simple, simple, ("num_shards",)


def _note_node_configs(
    record: _PresenceRecord,
    configs: Sequence[onnx.NodeDeviceConfigurationProto],
    ir_configs: Sequence[ir.NodeDeviceConfiguration],
) -> None:
    for obj, msg, fields in _node_config_presence(configs, ir_configs):
        record.note(obj, msg, fields)


def _clear_node_configs(
    record: _PresenceRecord,
    configs: Sequence[onnx.NodeDeviceConfigurationProto],
    ir_configs: Sequence[ir.NodeDeviceConfiguration],
) -> None:
    for obj, msg, _ in _node_config_presence(configs, ir_configs):
        record.clear(obj, msg)


def _check_proto_references(path: str, node_proto: onnx.NodeProto) -> None:
    """Refuse empty ``configuration_id`` / ``tensor_name`` (onnx-ir cannot write them back)."""
    for j, config in enumerate(node_proto.device_configurations):
        if not config.configuration_id:
            raise OmnyFormatError(
                f"{path}.device_configurations[{j}].configuration_id",
                "is empty or unset, but IR v11 requires it to name a model configuration; "
                "set it to the name of one of ModelProto.configuration",
            )
        for k, spec in enumerate(config.sharding_spec):
            if not spec.tensor_name:
                raise OmnyFormatError(
                    f"{path}.device_configurations[{j}].sharding_spec[{k}].tensor_name",
                    "is empty or unset, but IR v11 requires it to name an input or output "
                    f"of node {node_proto.name!r}; set it or remove the sharding spec",
                )


def _check_range(path: str, value: int, bounds: tuple[int, int], proto_type: str) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise OmnyFormatError(
            path,
            f"{value} does not fit the proto field type {proto_type} "
            f"[{bounds[0]}, {bounds[1]}]; use a smaller value",
        )


def _check_node_configs(path: str, node: ir.Node) -> None:
    """Check what onnx-ir would fail on (or overflow) inside protobuf, naming the field."""
    for j, config in enumerate(node.device_configurations):
        config_path = f"{path}.device_configurations[{j}]"
        if config.configuration is None or not config.configuration.name:
            raise OmnyFormatError(
                f"{config_path}.configuration_id",
                f"node {node.name!r} has a device configuration without a named model "
                "configuration; bind it to one of model.device_configurations",
            )
        if config.pipeline_stage is not None:
            _check_range(f"{config_path}.pipeline_stage", config.pipeline_stage, _INT32, "int32")
        for k, spec in enumerate(config.sharding_specs):
            spec_path = f"{config_path}.sharding_spec[{k}]"
            if spec.value is None or not spec.value.name:
                raise OmnyFormatError(
                    f"{spec_path}.tensor_name",
                    f"node {node.name!r} shards a value without a name; name the value",
                )
            for d, device in enumerate(spec.device):
                _check_range(f"{spec_path}.device[{d}]", device, _INT64, "int64")
            for e, entry in enumerate(spec.index_to_device_group_map):
                entry_path = f"{spec_path}.index_to_device_group_map[{e}]"
                _check_range(f"{entry_path}.key", entry.key, _INT64, "int64")
            for s, dim in enumerate(spec.sharded_dims):
                _check_range(f"{spec_path}.sharded_dim[{s}].axis", dim.axis, _INT64, "int64")
                for t, simple in enumerate(dim.simple_shardings):
                    _check_range(
                        f"{spec_path}.sharded_dim[{s}].simple_sharding[{t}].num_shards",
                        simple.num_shards,
                        _INT64,
                        "int64",
                    )


# ---------------------------------------------------------------------------------------------
# Public conversion API


def _proto_nodes(
    proto: onnx.ModelProto, subgraphs: list[tuple[str, onnx.GraphProto]] | None = None
) -> Iterator[tuple[str, onnx.NodeProto]]:
    """Yield ``(path, node proto)`` for every node: main graph, subgraphs, functions.

    Args:
        proto: The model.
        subgraphs: When given, ``(path, graph proto)`` of every subgraph met is appended.
    """

    def visit(nodes: Sequence[onnx.NodeProto], path: str) -> Iterator[tuple[str, Any]]:
        for i, node in enumerate(nodes):
            node_path = f"{path}.node[{i}]"
            yield node_path, node
            if not node.attribute:
                continue
            for k, attr in enumerate(node.attribute):
                if attr.type == _GRAPH:
                    sub_path = f"{node_path}.attribute[{k}].g"
                    if subgraphs is not None:
                        subgraphs.append((sub_path, attr.g))
                    yield from visit(attr.g.node, sub_path)
                elif attr.type == _GRAPHS:
                    for g, graph in enumerate(attr.graphs):
                        sub_path = f"{node_path}.attribute[{k}].graphs[{g}]"
                        if subgraphs is not None:
                            subgraphs.append((sub_path, graph))
                        yield from visit(graph.node, sub_path)

    yield from visit(proto.graph.node, "graph")
    for f, function in enumerate(proto.functions):
        yield from visit(function.node, f"functions[{f}]")


def _check_unique_functions(proto: onnx.ModelProto) -> None:
    seen: set[tuple[str, str, str]] = set()
    for f, func in enumerate(proto.functions):
        key = (func.domain, func.name, func.overload)
        if key in seen:
            raise OmnyFormatError(
                f"functions[{f}]",
                f"function {func.domain}::{func.name} (overload {func.overload!r}) is "
                "defined twice; remove one definition",
            )
        seen.add(key)


def _check_supported(proto: onnx.ModelProto) -> None:
    """Refuse fields onnx-ir 1.1 drops without a word."""
    if proto.training_info:
        raise OmnyFormatError(
            "training_info",
            "onnx-ir does not keep TrainingInfoProto, so the model cannot be loaded without "
            "losing it; remove it (e.g. with onnx) or keep working with onnx directly",
        )
    if proto.graph.sparse_initializer:
        raise OmnyFormatError(
            "graph.sparse_initializer",
            "onnx-ir does not keep sparse initializers, so the model cannot be loaded without "
            "losing them; convert them to dense initializers first",
        )
    check_representable(proto)  # map types, sparse tensor attributes: named, with what to do


def _not_utf8(path: str) -> OmnyFormatError:
    return OmnyFormatError(
        path,
        "holds a name or text that is not valid UTF-8 (protobuf hands it over as bytes, which "
        "no later step can use): the file is damaged; re-export the model or repair it",
    )


def _check_unique_keys(entries: Sequence[onnx.StringStringEntryProto], path: str) -> None:
    """Refuse two ``metadata_props`` entries with one key, or a key or value that is not text.

    onnx-ir would keep the last value of a key; a value that is not text is a damaged file.
    """
    if not entries:
        return
    try:
        "".join([entry.key + entry.value for entry in entries])
    except TypeError:
        raise _not_utf8(path) from None
    if len(entries) < 2:
        return
    first: dict[str, int] = {}
    for i, entry in enumerate(entries):
        j = first.setdefault(entry.key, i)
        if j != i:
            raise OmnyFormatError(
                f"{path}[{i}]",
                f"key {entry.key!r} appears twice (entries {j} and {i}); onnx-ir keeps one "
                "value per key, so loading would lose one of them silently; remove or rename "
                "one entry (e.g. with onnx) and load the file again",
            )


def _check_node_text(node: onnx.NodeProto, path: str) -> None:
    """Refuse a node whose names are not text (invalid UTF-8 comes back as bytes)."""
    try:  # str.join raises TypeError on bytes: one C-level check of every name
        "".join([*node.input, *node.output, node.name, node.op_type, node.domain])
        if node.attribute:
            "".join([attribute.name for attribute in node.attribute])
    except TypeError:
        raise _not_utf8(path) from None
    if node.attribute:
        for k, attribute in enumerate(node.attribute):
            if not attribute.ref_attr_name and attribute.type == _UNDEFINED:
                raise OmnyFormatError(
                    f"{path}.attribute[{k}].type",
                    f"attribute {attribute.name!r} of node {node.name!r} has no type "
                    "(UNDEFINED), so neither onnx-ir nor onnxruntime can use it: the file is "
                    "damaged; re-export the model or repair it",
                )


def _check_graph_keys(graph: onnx.GraphProto, path: str) -> None:
    _check_unique_keys(graph.metadata_props, f"{path}.metadata_props")
    if not isinstance(graph.name, str):
        raise _not_utf8(f"{path}.name")
    for field in ("input", "output", "value_info", "initializer"):
        items = getattr(graph, field)
        try:
            "".join([item.name for item in items])
        except TypeError:
            bad = next(i for i, item in enumerate(items) if not isinstance(item.name, str))
            raise _not_utf8(f"{path}.{field}[{bad}].name") from None
        for i, item in enumerate(items):
            if item.metadata_props:
                _check_unique_keys(item.metadata_props, f"{path}.{field}[{i}].metadata_props")


def _check_all_keys(
    proto: onnx.ModelProto, subgraphs: Sequence[tuple[str, onnx.GraphProto]]
) -> None:
    """Check the ``metadata_props`` and names of the model, graphs, functions and values.

    Nodes are checked during the walk over the nodes (:func:`_from_proto`).
    """
    _check_unique_keys(proto.metadata_props, "metadata_props")
    try:
        "".join([opset.domain for opset in proto.opset_import])
    except TypeError:
        raise _not_utf8("opset_import") from None
    _check_graph_keys(proto.graph, "graph")
    for path, graph in subgraphs:
        _check_graph_keys(graph, path)
    for f, function in enumerate(proto.functions):
        _check_unique_keys(function.metadata_props, f"functions[{f}].metadata_props")
        try:
            "".join([function.name, function.domain, function.overload, *function.input])
            "".join(function.output)
        except TypeError:
            raise _not_utf8(f"functions[{f}]") from None
        for i, info in enumerate(function.value_info):
            _check_unique_keys(
                info.metadata_props, f"functions[{f}].value_info[{i}].metadata_props"
            )


_SERDE_ERRORS = (
    ir.serde.SerdeError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    RecursionError,
)
"""What onnx-ir raises on what it cannot represent (``SerdeError`` wraps most of them)."""


def _innermost(error: BaseException) -> tuple[BaseException, str]:
    """The innermost exception of ``error``'s chain, and its first line."""
    root: BaseException = error
    seen = {id(root)}
    while True:
        nxt = root.__cause__ or root.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        root = nxt
    reason = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
    return root, reason


def _unreadable(error: BaseException) -> OmnyFormatError:
    """The typed error for a proto onnx-ir failed to deserialise: its innermost reason."""
    root, reason = _innermost(error)
    if isinstance(root, KeyError):
        reason = f"{reason} is used but never defined"
    path = "functions" if "deserialize_function" in str(error).partition("\n")[0] else "graph"
    return OmnyFormatError(
        path,
        f"onnx-ir cannot read the model: {reason} ({type(root).__name__}); the file is not a "
        "valid ONNX model: check it with onnx.checker.check_model, then repair or re-export it",
    )


def _scope_of(graph: ir.Graph | ir.Function) -> dict[str, ir.Value]:
    """Names visible in a graph's own scope: inputs, initializers and node outputs."""
    scope: dict[str, ir.Value] = {v.name: v for v in graph.inputs if v.name}
    if isinstance(graph, ir.Graph):
        scope.update(graph.initializers)
    for node in graph:
        for value in node.outputs:
            if value.name:
                scope[value.name] = value
    return scope


def _attach_node_configs(proto: onnx.ModelProto, model: ir.Model, record: _PresenceRecord) -> None:
    """Deserialise the node device configurations that :func:`from_proto` held back.

    onnx-ir 1.1 merges every enclosing scope into a new dict for each annotated node, which
    is quadratic when every node carries a stage. Here each graph's scope is built once and
    chained (inner names shadow outer ones, as in onnx-ir). Names are resolved, and
    configuration ids bound to the model's configurations, the way onnx-ir does.
    """
    known = {config.name: config for config in model.device_configurations}

    def attach(node_proto: onnx.NodeProto, node: ir.Node, scope: ChainMap[str, ir.Value]) -> None:
        config_protos = node_proto.device_configurations
        if any(
            spec.tensor_name not in scope
            for config in config_protos
            for spec in config.sharding_spec
        ):
            own = {v.name: v for v in (*node.inputs, *node.outputs) if v is not None and v.name}
            scope = scope.new_child(own)
        configs = []
        for config_proto in config_protos:
            config = ir.serde.deserialize_node_device_configuration(config_proto, values=scope)
            bound = known.get(config_proto.configuration_id)
            if bound is not None:
                config = dataclasses.replace(config, configuration=bound)
            configs.append(config)
        node.device_configurations = tuple(configs)
        _note_node_configs(record, config_protos, configs)

    def visit(
        node_protos: Sequence[onnx.NodeProto],
        graph: ir.Graph | ir.Function,
        outer: ChainMap[str, ir.Value],
    ) -> None:
        scope = outer.new_child(_scope_of(graph))
        for node_proto, node in zip(node_protos, graph, strict=False):
            if node_proto.device_configurations:
                attach(node_proto, node, scope)
            if node_proto.attribute:
                for _, g_proto, g in _subgraph_pairs(node_proto, node, ""):
                    visit(g_proto.node, g, scope)

    visit(proto.graph.node, model.graph, ChainMap())
    for f_proto, function in zip(proto.functions, model.functions.values(), strict=False):
        visit(f_proto.node, function, ChainMap())


def from_proto(proto: onnx.ModelProto) -> ir.Model:
    """Deserialise a model proto, keeping what onnx-ir would lose on the way back.

    Node device configurations are held back from onnx-ir (removed from the proto for the
    duration of the call and put back, so the proto is unchanged afterwards but must not be
    used by another thread meanwhile) and attached in one linear pass.

    Args:
        proto: The model proto.

    Returns:
        The IR model. ``model.meta`` holds a presence record that :func:`to_proto` uses to
        write unchanged multi-device objects back byte for byte.

    Raises:
        OmnyFormatError: A node device configuration has an empty ``configuration_id``, a
            sharding spec an empty ``tensor_name``, two functions share one identifier
            (onnx-ir would keep only the last), or the proto has ``training_info`` or main-graph
            ``sparse_initializer`` (onnx-ir drops them), a ``metadata_props`` key appears
            twice in one message, or onnx-ir cannot deserialise the proto (an invalid graph,
            e.g. two nodes writing one tensor name). The error's ``path`` names the field.
    """
    # onnx-ir builds many small acyclic objects: without the pause, the collector's full
    # scans of everything else the process holds make loading superlinear.
    with gc_paused():
        return _from_proto(proto)


def from_proto_unrecorded(proto: onnx.ModelProto) -> ir.Model:
    """:func:`from_proto` without the fidelity record, for a model that is only read.

    The same checks and annotations; ``model.meta`` lacks the record of the proto's field
    details (a pass as long as the graph), so :func:`to_proto` writes the model as onnx-ir
    does rather than byte for byte.
    """
    with gc_paused():
        return _from_proto(proto, record_fidelity=False)


def _from_proto(proto: onnx.ModelProto, *, record_fidelity: bool = True) -> ir.Model:
    _check_unique_functions(proto)
    _check_supported(proto)
    held: list[tuple[onnx.NodeProto, list[onnx.NodeDeviceConfigurationProto]]] = []
    subgraphs: list[tuple[str, onnx.GraphProto]] = []
    for path, node_proto in _proto_nodes(proto, subgraphs):
        if node_proto.device_configurations:
            _check_proto_references(path, node_proto)
            held.append((node_proto, list(node_proto.device_configurations)))
        _check_node_text(node_proto, path)
        if node_proto.metadata_props:
            _check_unique_keys(node_proto.metadata_props, f"{path}.metadata_props")
    _check_all_keys(proto, subgraphs)
    for node_proto, _ in held:
        del node_proto.device_configurations[:]
    try:
        model = ir.serde.deserialize_model(proto)
    except _SERDE_ERRORS as error:
        raise _unreadable(error) from error
    finally:
        for node_proto, configs in held:
            node_proto.device_configurations.extend(configs)
    try:
        for f_proto, function in zip(proto.functions, model.functions.values(), strict=False):
            if f_proto.value_info:
                _restore_function_input_types(f_proto, function)
        record = _PresenceRecord(
            opset_dict=dict(model.opset_imports),
            opset_protos=list(proto.opset_import),
        )
        for config, ir_config in zip(
            proto.configuration, model.device_configurations, strict=False
        ):
            record.note(ir_config, config, ("name", "num_devices"))
        if held:
            _attach_node_configs(proto, model, record)
    except _SERDE_ERRORS as error:
        raise _unreadable(error) from error
    model.meta[PRESENCE_META_KEY] = record
    if record_fidelity:
        model.meta[fidelity.FIDELITY_META_KEY] = fidelity.record(proto, model)
    return model


def _restore_function_input_types(f_proto: onnx.FunctionProto, function: ir.Function) -> None:
    """Read back the value_info of function inputs, which onnx-ir 1.1 writes but ignores."""
    infos = {info.name: info for info in f_proto.value_info}
    for value in function.inputs:
        info = infos.get(value.name)
        if info is not None and value.type is None and value.shape is None:
            ir.serde.deserialize_value_info_proto(info, value)


def _restore_prop_order(entries: Any, props: Mapping[str, str]) -> None:
    """Write ``metadata_props`` in the IR's (insertion) order; onnx-ir 1.1 sorts the keys."""
    if len(props) > 1:
        keys = list(props)
        if keys != sorted(keys):
            del entries[:]
            for key in keys:
                entries.add(key=key, value=props[key])


def _check_model(model: ir.Model) -> None:
    """Refuse a model that onnx-ir would serialise wrongly, naming the first bad field."""
    first_annotated = "configuration[0]" if model.device_configurations else None
    for c, config in enumerate(model.device_configurations):
        _check_range(f"configuration[{c}].num_devices", config.num_devices, _INT32, "int32")
    for path, node in _ir_nodes(model):
        if node.device_configurations:
            _check_node_configs(path, node)
            if first_annotated is None:
                first_annotated = f"{path}.device_configurations"
    if first_annotated is not None and model.ir_version < _MULTI_DEVICE_IR_VERSION:
        raise OmnyFormatError(
            "ir_version",
            f"is {model.ir_version}, but the model carries IR v11 multi-device annotations "
            f"(first at {first_annotated}), which onnx-ir would drop in part, silently; set "
            "model.ir_version = 11 or remove the annotations",
        )


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """Serialise a model, restoring the field presence recorded by :func:`from_proto`.

    Args:
        model: The IR model. It is not modified.

    Returns:
        The model proto.

    Raises:
        OmnyFormatError: The model cannot be written without losing or corrupting its
            multi-device annotations (IR version below 11, a stage or integer out of the
            proto range, an unnamed configuration or sharded value; ``path`` names the
            field), or onnx-ir cannot serialise it (a string that is not valid UTF-8...).
    """
    _check_model(model)
    try:
        proto = ir.serde.serialize_model(model)
    except _SERDE_ERRORS as error:
        root, reason = _innermost(error)
        raise OmnyFormatError(
            "",
            f"onnx-ir cannot serialise the model: {reason} ({type(root).__name__}); a name or "
            "string of the model may not be valid UTF-8 (a damaged file), or a value may not "
            "fit its proto field; fix it in the IR, or re-export the model",
        ) from error
    kept = model.meta.get(fidelity.FIDELITY_META_KEY)
    fidelity.restore(proto, model, kept if isinstance(kept, fidelity.FidelityRecord) else None)
    record = model.meta.get(PRESENCE_META_KEY)
    if not isinstance(record, _PresenceRecord):
        record = None
    if record is not None and dict(model.opset_imports) == record.opset_dict:
        del proto.opset_import[:]
        proto.opset_import.extend(record.opset_protos)
    _restore_prop_order(proto.metadata_props, model.metadata_props)
    _restore_prop_order(proto.graph.metadata_props, model.graph.metadata_props)
    for f_proto, function in zip(proto.functions, model.functions.values(), strict=False):
        _restore_prop_order(f_proto.metadata_props, function.metadata_props)
    if record is not None and record.unset:
        for config, ir_config in zip(
            proto.configuration, model.device_configurations, strict=False
        ):
            record.clear(ir_config, config)
    for _, node_proto, node in _model_node_pairs(proto, model):
        if len(node_proto.metadata_props) > 1:
            _restore_prop_order(node_proto.metadata_props, node.metadata_props)
        if record is not None and record.unset and node_proto.device_configurations:
            _clear_node_configs(
                record, node_proto.device_configurations, node.device_configurations
            )
    return proto


def roundtrip(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Pass a model proto through onnx-ir and back, losslessly.

    Equivalent to ``to_proto(from_proto(proto))``. For a proto that onnx-ir represents
    fully, ``diff(proto, roundtrip(proto)) == []`` and every multi-device message is byte
    identical under deterministic serialisation.

    Args:
        proto: The model proto. It is not modified.

    Returns:
        A new model proto.

    Raises:
        OmnyFormatError: See :func:`from_proto` and :func:`to_proto`.
        TypeError: ``proto`` is not an ``onnx.ModelProto``.
    """
    if not isinstance(proto, onnx.ModelProto):
        raise TypeError(
            f"roundtrip() takes an onnx.ModelProto, not {type(proto).__name__}; read a file "
            "with onnx.load(path), or use onnx_ir_multidevice.load(path) for an IR model"
        )
    return to_proto(from_proto(proto))


# ---------------------------------------------------------------------------------------------
# Multi-device messages and diff


def multi_device_messages(proto: onnx.ModelProto) -> Iterator[tuple[str, _message.Message]]:
    """Yield ``(path, message)`` for every multi-device message of a model proto.

    Covers ``ModelProto.configuration`` and ``NodeProto.device_configurations`` in the main
    graph, in every subgraph (If/Loop/Scan bodies...) and in every function.

    Args:
        proto: The model proto.

    Yields:
        The path of each message (``graph.node[2].device_configurations[0]``...) and the
        message itself.
    """
    for c, config in enumerate(proto.configuration):
        yield f"configuration[{c}]", config
    for path, node in _proto_nodes(proto):
        for j, config in enumerate(node.device_configurations):
            yield f"{path}.device_configurations[{j}]", config


_UNSET = "<unset>"
_MAX_REPR = 80


def _show(value: Any) -> str:
    if isinstance(value, _message.Message):
        return f"<{type(value).__name__}>"
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _same_scalar(x: Any, y: Any) -> bool:
    if x == y:
        return True
    # NaN payloads in float fields compare unequal to themselves; treat NaN == NaN.
    return isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)


def _diff_messages(a: _message.Message, b: _message.Message, path: str, out: list[str]) -> None:
    fields = {f.number: f for f, _ in a.ListFields()}
    fields.update({f.number: f for f, _ in b.ListFields()})
    for number in sorted(fields):
        field = fields[number]
        name = field.name
        field_path = f"{path}.{name}" if path else name
        x, y = getattr(a, name), getattr(b, name)
        is_message = field.type == field.TYPE_MESSAGE
        if field.is_repeated:
            if len(x) != len(y):
                out.append(f"{field_path}: {len(x)} items != {len(y)} items")
            if is_message:
                for i, (u, v) in enumerate(zip(x, y, strict=False)):
                    _diff_messages(u, v, f"{field_path}[{i}]", out)
            elif list(x) != list(y):
                for i, (u, v) in enumerate(zip(x, y, strict=False)):
                    if not _same_scalar(u, v):
                        out.append(f"{field_path}[{i}]: {_show(u)} != {_show(v)}")
            continue
        has_x, has_y = a.HasField(name), b.HasField(name)
        if has_x != has_y:
            left = _show(x) if has_x else _UNSET
            right = _show(y) if has_y else _UNSET
            out.append(f"{field_path}: {left} != {right}")
        elif is_message:
            _diff_messages(x, y, field_path, out)
        elif not _same_scalar(x, y):
            out.append(f"{field_path}: {_show(x)} != {_show(y)}")


def diff(a: _message.Message, b: _message.Message) -> list[str]:
    """List the differences between two protobuf messages of the same type, field by field.

    Presence counts: a field set to its default on one side and unset on the other is a
    difference (``<unset>``). Repeated fields are compared by position. The walk follows the
    message descriptors, so it is linear in the size of the messages.

    Args:
        a: The first message (e.g. an ``onnx.ModelProto``).
        b: The second message, of the same type.

    Returns:
        One line per difference, ``path: value_a != value_b``, e.g.
        ``graph.node[3].device_configurations[0].pipeline_stage: 2 != <unset>``; ``[]``
        when the messages are equal.

    Raises:
        TypeError: The arguments are not protobuf messages, or of different types.
    """
    for name, message in (("a", a), ("b", b)):
        if not isinstance(message, _message.Message):
            raise TypeError(
                f"diff() compares protobuf messages (e.g. onnx.ModelProto); {name} is a "
                f"{type(message).__name__}; convert an IR model with to_proto(model) first"
            )
    if a.DESCRIPTOR is not b.DESCRIPTOR:
        raise TypeError(
            f"cannot diff a {a.DESCRIPTOR.full_name} against a {b.DESCRIPTOR.full_name}"
        )
    out: list[str] = []
    _diff_messages(a, b, "", out)
    return out
