"""What onnx-ir 1.1 cannot represent in a valid ONNX model, found before it fails on it.

onnx-ir 1.1 has no map types (``map(int64, tensor(float))``) and no sparse tensor attributes:
deserialising a model that holds one raises ``NotImplementedError`` deep inside onnx-ir. Such
models are valid ONNX (``onnx.checker`` accepts them, onnxruntime runs them): scikit-learn
classifiers exported by skl2onnx end in a ``ZipMap`` whose output is ``seq(map(...))``.
:func:`check_representable` names every such value (where it is, its type, which node writes
it) and says what to do, instead of calling the file invalid.

Only type protos are read (graph inputs, outputs and ``value_info`` of the main graph, of every
subgraph and of every function, and type attributes): one pass, linear in their number.
"""

from __future__ import annotations

__all__ = ["Unrepresentable", "check_representable", "find_unrepresentable", "type_text"]

import dataclasses
from collections.abc import Iterator

import onnx

from onnx_ir_multidevice._errors import OmnyFormatError

_A = onnx.AttributeProto
_MAX_LISTED = 5


@dataclasses.dataclass(frozen=True)
class Unrepresentable:
    """One element of a model proto that onnx-ir 1.1 cannot represent."""

    path: str
    """Proto field path, e.g. ``graph.output[1]`` or ``graph.node[2].attribute[0]``."""
    name: str
    """The value's (or attribute's) name."""
    type: str
    """Its type as ONNX spells it, e.g. ``seq(map(int64,tensor(float)))``."""
    producer: str = ""
    """``op_type`` and name of the node that writes the value, when one does (``ZipMap
    'ZipMap'``)."""
    producer_op: str = ""
    """``op_type`` of that node (``ZipMap``)."""

    def __str__(self) -> str:
        written = f", written by {self.producer}" if self.producer else ""
        return f"{self.path} {self.name!r} of type {self.type}{written}"


def type_text(proto: onnx.TypeProto) -> str:
    """A type proto as ONNX spells types: ``tensor(float)``, ``seq(map(int64,tensor(float)))``."""
    kind = proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(proto, kind)
        element = onnx.TensorProto.DataType.Name(inner.elem_type).lower()
        return f"{'tensor' if kind == 'tensor_type' else 'sparse_tensor'}({element})"
    if kind == "sequence_type":
        return f"seq({type_text(proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_text(proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(proto.map_type.key_type).lower()
        return f"map({key},{type_text(proto.map_type.value_type)})"
    return kind or "undefined"


def _has_map(proto: onnx.TypeProto) -> bool:
    while True:
        kind = proto.WhichOneof("value")
        if kind == "tensor_type" or kind is None:
            return False
        if kind == "map_type":
            return True
        if kind == "sequence_type":
            proto = proto.sequence_type.elem_type
        elif kind == "optional_type":
            proto = proto.optional_type.elem_type
        else:
            return False


def _graph_items(
    graph: onnx.GraphProto | onnx.FunctionProto, path: str
) -> Iterator[tuple[str, str, str, onnx.TypeProto | None]]:
    """``(path, name, kind, type)``: value infos of ``graph`` and attributes of its nodes.

    ``kind`` is ``"value"`` or ``"attribute"``; an attribute whose type onnx-ir 1.1 cannot hold
    whatever it contains (a sparse tensor) comes with ``None``.
    """
    # a function's inputs and outputs are names; their types are in its value_info
    fields = ("input", "output", "value_info") if isinstance(graph, onnx.GraphProto) else ()
    for field in fields or ("value_info",):
        for i, info in enumerate(getattr(graph, field)):
            yield f"{path}.{field}[{i}]", info.name, "value", info.type
    for n, node in enumerate(graph.node):
        if not node.attribute:
            continue
        node_path = f"{path}.node[{n}]"
        for k, attr in enumerate(node.attribute):
            attr_path = f"{node_path}.attribute[{k}]"
            if attr.type == _A.GRAPH:
                yield from _graph_items(attr.g, f"{attr_path}.g")
            elif attr.type == _A.GRAPHS:
                for g, sub in enumerate(attr.graphs):
                    yield from _graph_items(sub, f"{attr_path}.graphs[{g}]")
            elif attr.type == _A.TYPE_PROTO:
                yield attr_path, attr.name, "attribute", attr.tp
            elif attr.type == _A.TYPE_PROTOS:
                for t, tp in enumerate(attr.tps):
                    yield f"{attr_path}.tps[{t}]", attr.name, "attribute", tp
            elif attr.type in (_A.SPARSE_TENSOR, _A.SPARSE_TENSORS):
                yield attr_path, attr.name, "attribute", None


def _producers(
    graph: onnx.GraphProto | onnx.FunctionProto, path: str
) -> dict[str, tuple[str, str]]:
    """``{value name: (op_type, "op_type 'name' (path)")}`` for the nodes of ``graph``."""
    found: dict[str, tuple[str, str]] = {}
    for n, node in enumerate(graph.node):
        named = f" {node.name!r}" if node.name else ""
        label = f"{node.op_type} node{named} ({path}.node[{n}])"
        for output in node.output:
            if output:
                found[output] = (node.op_type, label)
    return found


def find_unrepresentable(proto: onnx.ModelProto) -> list[Unrepresentable]:
    """Every value with a map type and every sparse tensor attribute of ``proto``.

    Args:
        proto: The model (not modified).

    Returns:
        The findings in proto order: main graph (and its subgraphs), then functions.
    """
    found: list[Unrepresentable] = []
    scopes: list[tuple[onnx.GraphProto | onnx.FunctionProto, str]] = [(proto.graph, "graph")]
    scopes.extend((f, f"functions[{i}]") for i, f in enumerate(proto.functions))
    for graph, root in scopes:
        items = [
            (path, name, kind, tp)
            for path, name, kind, tp in _graph_items(graph, root)
            if tp is None or _has_map(tp)
        ]
        if not items:
            continue
        producers = _producers(graph, root)
        for path, name, kind, tp in items:
            if tp is None:
                found.append(Unrepresentable(path, name, "sparse_tensor (attribute)"))
                continue
            op, label = producers.get(name, ("", "")) if kind == "value" else ("", "")
            found.append(Unrepresentable(path, name, type_text(tp), label, op))
    return found


def _advice(found: list[Unrepresentable]) -> str:
    steps = []
    if any(f.producer_op == "ZipMap" for f in found):
        steps.append(
            "a scikit-learn classifier exported by skl2onnx ends in ZipMap by default: export "
            "it without, skl2onnx.to_onnx(clf, X, options={id(clf): {'zipmap': False}}) (or "
            "options={'zipmap': False}), which gives the probabilities as a float tensor; or "
            "remove the ZipMap node with onnx and make its input a graph output"
        )
    if any("map(" in f.type for f in found) and not steps:
        steps.append(
            "change the model so that these values are tensors (or sequences of tensors), "
            "e.g. output the map's values as a tensor"
        )
    if any(f.type.startswith("sparse_tensor") for f in found):
        steps.append("convert sparse tensor attributes to dense tensors (Constant value=)")
    return "; ".join(steps)


def check_representable(proto: onnx.ModelProto) -> None:
    """Raise a typed error naming what of ``proto`` onnx-ir 1.1 cannot represent, if anything.

    Args:
        proto: The model (not modified).

    Raises:
        OmnyFormatError: The model holds values of map type (e.g. the ``seq(map(int64,
            tensor(float)))`` output of a ``ZipMap``) or sparse tensor attributes. ``path`` is
            the first one's proto field path; the message lists them (type, writing node) and
            says what to do.
    """
    found = find_unrepresentable(proto)
    if not found:
        return
    listed = "; ".join(str(f) for f in found[:_MAX_LISTED])
    more = len(found) - _MAX_LISTED
    if more > 0:
        listed += f"; and {more} more"
    kinds = sorted({"map types" if "map(" in f.type else "sparse tensor attributes" for f in found})
    advice = _advice(found)
    raise OmnyFormatError(
        found[0].path,
        f"the model is valid ONNX, but onnx-ir 1.1 (which this package builds on) has no "
        f"{' and no '.join(kinds)}, so it cannot load: {listed}. {advice[:1].upper()}"
        f"{advice[1:]}; then plan, split and verify that model",
    )
