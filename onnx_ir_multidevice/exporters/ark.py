"""The ``ark`` format: one ARK model file per rank (``rank_<k>.json``) and ``index.json``.

Stage ``k`` of the plan is rank ``k`` of an ARK world of ``num_stages`` ranks. A rank file holds
what ARK's model files hold (``Rank``, ``WorldSize``, ``Nodes``), with

* the **communication, exactly**: every activation the split sends from stage ``j`` to stage
  ``k`` (``manifest.json``) is a ``Send`` + ``SendDone`` on rank ``j`` and a ``Recv`` on rank
  ``k``, with one tag per transfer, so a tag is paired with exactly one sending buffer and one
  receiving buffer, as ARK's executor pairs them. Graph inputs (forwarded to every stage) and
  recomputed (replicable) values are local: they are never transferred;
* the **compute** either as a *skeleton* (default): one virtual ``Tensor`` op per value the
  stage produces, named ``skeleton:stage_<k>.onnx:<tensor>`` after the ONNX stage model that
  computes it and reading the stage inputs it depends on -- the file describes the pipeline, it
  is not executable by itself; or *translated* (``ops=translate``): every ONNX node mapped to
  the ARK op with the same meaning, which only works when every node has one (an MLP of
  ``MatMul``/``Add``/``Relu``); anything else is refused with the op types and their counts.

Tensors have 1 to 4 dimensions in ARK: a scalar is ``[1]``, leading dimensions of a tensor of
more than 4 are merged (the buffer is contiguous; the original shape is in ``index.json``). ARK
has no int64, bool or float64: such tensors are written as byte views (``BYTE``, the last
dimension times the element size) with their ONNX type in ``index.json``; ``strict_dtypes``
refuses them instead.

Two layouts (``layout``): ``main``, what ARK's verifier reads today (a node has one ``Op``, a
tensor a ``PaddedShape``), and ``seed``, the May 2024 document (``Ops`` list, ``Pads`` of ones).
"""

from __future__ import annotations

__all__ = ["ARK_DTYPES", "ARK_INDEX_FORMAT", "ArkExporter", "TRANSLATED_OPS"]

import collections
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import ExportError, ExportUsageError
from onnx_ir_multidevice._proto.atomic import check_output_directory, staged_directory
from onnx_ir_multidevice.exporters._options import parse_choice, parse_dims, parse_flag
from onnx_ir_multidevice.exporters._stages import ExportStages, export_stages
from onnx_ir_multidevice.exporters.protocol import ExportResult
from onnx_ir_multidevice.graph.dtypes import dtype_bits, dtype_name, tensor_nbytes
from onnx_ir_multidevice.omny._schema import parse_configuration

ARK_INDEX_FORMAT = "onnx-ir-multidevice/ark"
"""The ``format`` of ``index.json``."""

_INDEX_VERSION = 1

_D = ir.DataType
ARK_DTYPES: Mapping[ir.DataType, str] = {
    _D.FLOAT: "FP32",
    _D.FLOAT16: "FP16",
    _D.BFLOAT16: "BF16",
    _D.INT32: "INT32",
    _D.UINT32: "UINT32",
    _D.INT8: "INT8",
    _D.UINT8: "UINT8",
}
"""ONNX types ARK has; any other is written as a ``BYTE`` view (or refused, ``strict_dtypes``)."""

_MAX_DIMS = 4

# ONNX op type -> ARK op type, for ``ops=translate``: only ops with the same meaning.
TRANSLATED_OPS: Mapping[str, str] = {
    "Add": "Add",
    "Sub": "Sub",
    "Mul": "Mul",
    "Div": "Div",
    "MatMul": "Matmul",
    "Relu": "Relu",
    "Sigmoid": "Sigmoid",
    "Exp": "Exp",
    "Sqrt": "Sqrt",
    "Transpose": "Transpose",
    "Identity": "Copy",
    "Cast": "Cast",
}
"""The ONNX ops ``ops=translate`` maps (default domain), and the ARK op each becomes."""

_SKELETON_NOTE = (
    "skeleton: the communication between ranks is exact; the compute of each stage is written "
    "as virtual Tensor ops named after the ONNX stage model that computes them "
    "(skeleton:<stage file>:<tensor>). Not executable by ARK by itself."
)
_TRANSLATE_NOTE = (
    "translated: every ONNX node is the ARK op of the same meaning; weights and graph inputs "
    "are virtual Tensor ops (weight:<name>, input:<name>) whose data comes from the split's "
    "stage models."
)


# ---------------------------------------------------------------------------------------------
# Tensors: ONNX shape and type -> ARK shape and type


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How one ONNX tensor is written in ARK."""

    name: str
    onnx_dtype: ir.DataType
    onnx_shape: tuple[int, ...]
    dtype: str
    shape: tuple[int, ...]
    byte_view: bool
    merged: bool

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.onnx_shape, self.onnx_dtype) or 0

    def describe(self) -> dict[str, Any]:
        return {
            "onnx_dtype": dtype_name(self.onnx_dtype),
            "shape": list(self.onnx_shape),
            "ark_dtype": self.dtype,
            "ark_shape": list(self.shape),
            "byte_view": self.byte_view,
            "merged_dims": self.merged,
        }


def _layout(stages: ExportStages, name: str) -> _Layout:
    """The ARK type and shape of the model's tensor ``name`` at the planning dims."""
    dtype = stages.dtype(name)
    shape = stages.shape(name)
    if any(d <= 0 for d in shape):
        raise ExportError(
            f"tensor {name!r} has the shape {list(shape)} at the planning dims; ARK tensors have "
            "positive dimensions only (an empty tensor cannot be written)"
        )
    ark = ARK_DTYPES.get(dtype)
    view = list(shape)
    if ark is None:
        try:
            bits = dtype_bits(dtype)
        except ValueError:
            raise ExportError(
                f"tensor {name!r} is of type {dtype_name(dtype)}, whose elements have no fixed "
                "size; ARK cannot hold it, not even as bytes"
            ) from None
        if bits % 8 == 0:
            view = [*view[:-1], view[-1] * (bits // 8)] if view else [bits // 8]
        else:  # packed sub-byte elements: the bytes, flat
            view = [tensor_nbytes(shape, dtype) or 1]
    if not view:
        view = [1]
    merged = len(view) > _MAX_DIMS
    if merged:
        view = [math.prod(view[: len(view) - _MAX_DIMS + 1]), *view[len(view) - _MAX_DIMS + 1 :]]
    return _Layout(
        name=name,
        onnx_dtype=dtype,
        onnx_shape=shape,
        dtype=ark or "BYTE",
        shape=tuple(view),
        byte_view=ark is None,
        merged=merged,
    )


# ---------------------------------------------------------------------------------------------
# One rank's model


@dataclasses.dataclass
class _Buffer:
    id: int
    rank: int
    send_tags: list[list[int]] = dataclasses.field(default_factory=list)
    recv_tags: list[list[int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Tensor:
    id: int
    layout: _Layout
    buffer: _Buffer


@dataclasses.dataclass(frozen=True)
class _Node:
    type: str
    name: str
    virtual: bool
    read: tuple[_Tensor, ...]
    write: tuple[_Tensor, ...]
    result: tuple[_Tensor, ...]
    args: Mapping[str, Any]


class _Rank:
    """The nodes, tensors and buffers of one rank file, serialized once every tag is known."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.nodes: list[_Node] = []
        self._tensors = 0
        self._buffers = 0

    def buffer(self, rank: int = -1) -> _Buffer:
        self._buffers += 1
        return _Buffer(self._buffers - 1, rank)

    def tensor(self, layout: _Layout, buffer: _Buffer | None = None) -> _Tensor:
        self._tensors += 1
        return _Tensor(self._tensors - 1, layout, buffer if buffer is not None else self.buffer())

    def copy(self, tensor: _Tensor) -> _Tensor:
        """A new tensor over the same buffer (what ARK ops return as their result)."""
        return self.tensor(tensor.layout, tensor.buffer)

    def add(
        self,
        op: str,
        name: str,
        *,
        virtual: bool = False,
        read: Sequence[_Tensor] = (),
        write: Sequence[_Tensor] = (),
        result: Sequence[_Tensor] = (),
        args: Mapping[str, Any] | None = None,
    ) -> None:
        self.nodes.append(
            _Node(op, name, virtual, tuple(read), tuple(write), tuple(result), dict(args or {}))
        )

    def tensor_names(self) -> dict[str, str]:
        """ARK tensor id -> the ONNX name it stands for, for every tensor of the file."""
        names: dict[int, str] = {}
        for node in self.nodes:
            for tensor in (*node.read, *node.write, *node.result):
                names[tensor.id] = tensor.layout.name
        return {str(i): names[i] for i in sorted(names)}

    def to_json(self, layout: str) -> dict[str, Any]:
        producer: dict[int, int] = {}
        for i, node in enumerate(self.nodes):
            for tensor in node.result:
                producer.setdefault(tensor.id, i)
        producers: list[set[int]] = [set() for _ in self.nodes]
        consumers: list[set[int]] = [set() for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for tensor in (*node.read, *node.write):
                j = producer.get(tensor.id)
                if j is not None and j != i:
                    producers[i].add(j)
                    consumers[j].add(i)
        nodes = []
        for i, node in enumerate(self.nodes):
            op = {
                "Type": node.type,
                "Name": node.name,
                "IsVirtual": node.virtual,
                "ReadTensors": [_tensor_json(t, layout) for t in node.read],
                "WriteTensors": [_tensor_json(t, layout) for t in node.write],
                "ResultTensors": [_tensor_json(t, layout) for t in node.result],
                "Args": dict(node.args),
            }
            entry: dict[str, Any] = {
                "Id": i,
                "ProducerNodeIds": sorted(producers[i]),
                "ConsumerNodeIds": sorted(consumers[i]),
            }
            if layout == "seed":
                entry["Ops"] = [op]
            else:
                entry["Op"] = op
            nodes.append(entry)
        return {"Rank": self.rank, "WorldSize": self.world_size, "Nodes": nodes}


def _buffer_json(buffer: _Buffer) -> dict[str, Any]:
    return {
        "Id": buffer.id,
        "Rank": buffer.rank,
        "SendTags": [list(t) for t in buffer.send_tags],
        "RecvTags": [list(t) for t in buffer.recv_tags],
    }


def _tensor_json(tensor: _Tensor, layout: str) -> dict[str, Any]:
    shape = list(tensor.layout.shape)
    if layout == "seed":
        return {
            "Id": tensor.id,
            "DataType": tensor.layout.dtype,
            "Buffer": _buffer_json(tensor.buffer),
            "Shape": shape,
            "Strides": shape,
            "Offsets": [0] * len(shape),
            "Pads": [1] * len(shape),
        }
    return {
        "Id": tensor.id,
        "DataType": tensor.layout.dtype,
        "Shape": shape,
        "Strides": shape,
        "Offsets": [0] * len(shape),
        "PaddedShape": shape,
        "Buffer": _buffer_json(tensor.buffer),
    }


# ---------------------------------------------------------------------------------------------
# Building the ranks


@dataclasses.dataclass(frozen=True)
class _Transfer:
    source: int
    destination: int
    layout: _Layout
    tag: int

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "tensor": self.layout.name,
            "tag": self.tag,
            "bytes": self.layout.nbytes,
            **self.layout.describe(),
        }


def _transfers(stages: ExportStages, layouts: Mapping[str, _Layout]) -> list[_Transfer]:
    """One transfer per (producer stage, tensor, consumer stage) of the manifest, tagged."""
    found: list[_Transfer] = []
    for entry in stages.manifest.stages:
        for output in entry.outputs:
            for destination in sorted(output.destinations):
                found.append(_Transfer(entry.index, destination, layouts[output.name], len(found)))
    return found


def _inputs_of_outputs(stage: ir.Model) -> dict[str, list[str]]:
    """For each output of a stage model, the stage inputs it is computed from, in input order."""
    graph = stage.graph
    position = {value: i for i, value in enumerate(graph.inputs)}
    memo: dict[ir.Value, frozenset[ir.Value]] = {}

    def sources(value: ir.Value) -> frozenset[ir.Value]:
        found = memo.get(value)
        if found is not None:
            return found
        stack = [value]
        seen: set[ir.Value] = set()
        result: set[ir.Value] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in position:
                result.add(current)
                continue
            producer = current.producer()
            if producer is None:
                continue
            stack.extend(v for v in producer.inputs if v is not None)
            for attribute in producer.attributes.values():  # outer-scope reads of bodies
                if attribute.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                    bodies = (
                        [attribute.as_graph()]
                        if attribute.type == ir.AttributeType.GRAPH
                        else list(attribute.as_graphs())
                    )
                    for body in bodies:
                        for inner in ir.traversal.RecursiveGraphIterator(body):
                            stack.extend(v for v in inner.inputs if v is not None)
        memo[value] = frozenset(result)
        return memo[value]

    order = {value.name: i for i, value in enumerate(graph.inputs)}
    return {
        output.name or "": sorted((v.name or "" for v in sources(output)), key=order.__getitem__)
        for output in graph.outputs
    }


def _skeleton(
    rank: _Rank,
    k: int,
    stages: ExportStages,
    layouts: Mapping[str, _Layout],
    local: dict[str, _Tensor],
) -> None:
    """One virtual Tensor op per stage output, reading the stage inputs it depends on."""
    entry = stages.manifest.stages[k]
    for output, inputs in _inputs_of_outputs(stages.stages[k]).items():
        result = rank.tensor(layouts[output])
        rank.add(
            "Tensor",
            f"skeleton:{entry.file}:{output}",
            virtual=True,
            read=[local[name] for name in inputs],
            result=[result],
        )
        local[output] = result


def _is_constant(node: ir.Node) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _unknown_op(node: ir.Node) -> str | None:
    """The label of ``node``'s op type when it has no ARK counterpart, else ``None``."""
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}::{node.op_type}"
    if node.op_type not in TRANSLATED_OPS and not _is_constant(node):
        return node.op_type
    return None


def _untranslatable(node: ir.Node, layouts: Mapping[str, _Layout]) -> str | None:
    """Why a node of a mapped op type is not one to one here (its tensors), or ``None``."""
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    for value in values:
        layout = layouts.get(value.name or "")
        if layout is None:
            return f"{node.op_type} (unnamed value)"
        if layout.byte_view:
            return f"{node.op_type} on {dtype_name(layout.onnx_dtype)}"
        if layout.merged:
            return f"{node.op_type} on a {len(layout.onnx_shape)}-D tensor"
    if node.op_type == "MatMul" and any(len(layouts[v.name].onnx_shape) < 2 for v in values):  # type: ignore[index]  # named by split
        return "MatMul on a 1-D tensor"
    return None


def _args(node: ir.Node, layouts: Mapping[str, _Layout]) -> dict[str, Any]:
    if node.op_type == "MatMul":
        return {"TransposeInput": {"BOOL": False}, "TransposeOther": {"BOOL": False}}
    if node.op_type == "Transpose":
        rank = len(layouts[node.inputs[0].name].shape)  # type: ignore[union-attr,index]  # a Transpose has a named input
        perm = node.attributes.get_ints("perm", list(reversed(range(rank))))
        return {"Permutation": {"DIMS": [int(p) for p in perm]}}
    return {}


def _translate(
    rank: _Rank,
    stage: ir.Model,
    layouts: Mapping[str, _Layout],
    local: dict[str, _Tensor],
) -> None:
    """Every node of the stage as its ARK op; weights and constants as virtual tensors."""
    for name in stage.graph.initializers:
        if name not in local:
            tensor = rank.tensor(layouts[name])
            rank.add("Tensor", f"weight:{name}", virtual=True, result=[tensor])
            local[name] = tensor
    for node in stage.graph:
        if _is_constant(node):
            name = node.outputs[0].name or ""
            tensor = rank.tensor(layouts[name])
            rank.add("Tensor", f"weight:{name}", virtual=True, result=[tensor])
            local[name] = tensor
            continue
        read = [local[v.name or ""] for v in node.inputs if v is not None]
        output = node.outputs[0]
        written = rank.tensor(layouts[output.name or ""])
        result = rank.copy(written)
        rank.add(
            TRANSLATED_OPS[node.op_type],
            node.name or output.name or node.op_type,
            read=read,
            write=[written],
            result=[result],
            args=_args(node, layouts),
        )
        local[output.name or ""] = result


def _check_translatable(stages: ExportStages, layouts: Mapping[str, _Layout] | None = None) -> None:
    """Refuse ``ops=translate`` when a node has no ARK op of the same meaning.

    Without ``layouts`` only the op types are checked (before any tensor is sized); with them,
    also the tensors of the mapped ops (ARK types, at most 4-D, ``MatMul`` operands of 2-D+).
    """
    refused: collections.Counter[str] = collections.Counter()
    total = 0
    for stage in stages.stages:
        for node in stage.graph:
            total += 1
            why = _unknown_op(node)
            if why is None and layouts is not None and not _is_constant(node):
                why = _untranslatable(node, layouts)
            if why is not None:
                refused[why] += 1
    if refused:
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(refused.items()))
        raise ExportError(
            f"ops=translate: {sum(refused.values())} of the {total} nodes of the stage models "
            f"have no one-to-one ARK op: {listed}. Translated: "
            f"{', '.join(sorted(TRANSLATED_OPS))} on ARK types "
            f"({', '.join(ARK_DTYPES.values())}), at most {_MAX_DIMS}-D. Use ops=skeleton (the "
            "default) to write the communication with the compute as virtual tensors"
        )


def _stage_values(stage: ir.Model) -> list[str]:
    names = [v.name or "" for v in stage.graph.inputs]
    names.extend(stage.graph.initializers)
    for node in stage.graph:
        names.extend(v.name or "" for v in node.outputs)
    return list(dict.fromkeys(n for n in names if n))


def _build(
    stages: ExportStages, ops: str, strict: bool
) -> tuple[list[_Rank], list[_Transfer], dict[str, _Layout]]:
    if ops == "translate":
        _check_translatable(stages)
    names: dict[str, None] = {}
    for k, stage in enumerate(stages.stages):
        entry = stages.manifest.stages[k]
        names.update(dict.fromkeys(entry.input_names))
        names.update(dict.fromkeys(entry.output_names))
        if ops == "translate":
            names.update(dict.fromkeys(_stage_values(stage)))
    layouts = {name: _layout(stages, name) for name in names}
    if strict:
        views = [layout for layout in layouts.values() if layout.byte_view]
        if views:
            listed = ", ".join(f"{v.name} ({dtype_name(v.onnx_dtype)})" for v in views[:8])
            raise ExportError(
                f"strict_dtypes: {len(views)} tensor(s) have a type ARK lacks and would be "
                f"written as byte views: {listed}{', ...' if len(views) > 8 else ''}"
            )
    if ops == "translate":
        _check_translatable(stages, layouts)
    transfers = _transfers(stages, layouts)
    world = stages.num_stages
    ranks = [_Rank(k, world) for k in range(world)]
    outgoing: dict[int, list[_Transfer]] = collections.defaultdict(list)
    incoming: dict[tuple[int, str], _Transfer] = {}
    for transfer in transfers:
        outgoing[transfer.source].append(transfer)
        incoming[(transfer.destination, transfer.layout.name)] = transfer
    for k, rank in enumerate(ranks):
        entry = stages.manifest.stages[k]
        local: dict[str, _Tensor] = {}
        for item in entry.inputs:
            name = item.name
            if item.is_graph_input:
                tensor = rank.tensor(layouts[name])
                rank.add("Tensor", f"input:{name}", virtual=True, result=[tensor])
                local[name] = tensor
                continue
            transfer = incoming[(k, name)]
            target = rank.tensor(layouts[name])
            target.buffer.recv_tags.append([transfer.source, transfer.tag])
            rank.add("Tensor", f"recv_buffer:{name}", virtual=True, result=[target])
            proxy = rank.tensor(layouts[name], rank.buffer(transfer.source))
            proxy.buffer.send_tags.append([-1, transfer.tag])
            received = rank.copy(target)
            rank.add(
                "Recv",
                f"recv:{name}:from_rank_{transfer.source}:tag_{transfer.tag}",
                read=[proxy],
                write=[target],
                result=[received],
            )
            local[name] = received
        if ops == "translate":
            _translate(rank, stages.stages[k], layouts, local)
        else:
            _skeleton(rank, k, stages, layouts, local)
        for transfer in outgoing[k]:
            name = transfer.layout.name
            source = local[name]
            source.buffer.send_tags.append([transfer.destination, transfer.tag])
            proxy = rank.tensor(layouts[name], rank.buffer(transfer.destination))
            proxy.buffer.recv_tags.append([-1, transfer.tag])
            sent = rank.copy(proxy)
            label = f"{name}:to_rank_{transfer.destination}:tag_{transfer.tag}"
            rank.add("Send", f"send:{label}", read=[source], write=[proxy], result=[sent])
            rank.add("SendDone", f"send_done:{label}", read=[sent], result=[rank.copy(sent)])
    return ranks, transfers, layouts


def _json(value: Any, indent: str = "") -> str:
    """JSON indented by two spaces, lists of numbers on one line (as ARK prints its files)."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {_json(v, inner)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "[" + ", ".join(json.dumps(v) for v in value) + "]"
        items = [inner + _json(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def _dump(document: Any) -> bytes:
    return (_json(document) + "\n").encode("utf-8")


class ArkExporter:
    """Exports a plan as ARK model files, one per rank (format ``ark``), and ``index.json``.

    See the module docstring. Options: ``layout`` (``main``: ARK's current verifier, default;
    ``seed``: the May 2024 document), ``ops`` (``skeleton``, default, or ``translate``),
    ``strict_dtypes`` (refuse tensors ARK has no type for instead of writing byte views),
    ``dims`` (planning dims the plan did not record) and ``configuration``.
    """

    name = "ark"
    description = (
        "ARK model files, rank_<k>.json per stage and index.json: the exact Send/Recv "
        "between ranks, the compute as a skeleton (or translated one to one)"
    )
    option_help: Mapping[str, str] = {
        "layout": "main (ARK's verifier today: Op, PaddedShape; default) or seed (the May 2024 "
        "document: Ops[], Pads)",
        "ops": "skeleton (default: the compute as virtual tensors, not executable) or translate "
        "(every node as its ARK op; refused, with the op counts, when one has none)",
        "strict_dtypes": "true: refuse tensors of types ARK lacks (int64, bool, float64...) "
        "instead of writing them as byte views",
        "dims": "planning dims the plan did not record, NAME=N[,NAME=N] (e.g. seq=128)",
        "configuration": "the .omny configuration index or IR v11 configuration name (default: "
        "the one with --shards shards)",
    }

    def export(
        self,
        model: ir.Model,
        destination: Path,
        *,
        shards: int | None,
        options: Mapping[str, Any],
        force: bool,
    ) -> ExportResult:
        """Write ``rank_<k>.json`` for every stage and ``index.json`` into ``destination``."""
        if shards is None:
            raise ExportUsageError(
                "the ark format needs the number of stages: pass shards=N",
                cli_message="the ark format needs the number of stages: pass --shards N",
            )
        layout = parse_choice(options.get("layout", "main"), "layout", ("main", "seed"))
        ops = parse_choice(options.get("ops", "skeleton"), "ops", ("skeleton", "translate"))
        strict = parse_flag(options.get("strict_dtypes", False), "strict_dtypes")
        configuration = parse_configuration(options.get("configuration"))
        dims = parse_dims(options.get("dims"))
        holds = "the ark format is a directory of rank files"
        check_output_directory(destination, force, holds=holds)
        stages = export_stages(model, shards, configuration=configuration, dims=dims)
        ranks, transfers, layouts = _build(stages, ops, strict)
        files = [f"rank_{rank.rank}.json" for rank in ranks]
        index = {
            "format": ARK_INDEX_FORMAT,
            "version": _INDEX_VERSION,
            "layout": layout,
            "ops": ops,
            "executable": ops == "translate",
            "note": _TRANSLATE_NOTE if ops == "translate" else _SKELETON_NOTE,
            "model": model.graph.name or "model",
            "world_size": len(ranks),
            "configuration": configuration,
            "planning_dims": dict(sorted(stages.dims.items())),
            "files": files,
            "ranks": [
                {
                    "rank": rank.rank,
                    "file": file,
                    "stage_file": entry.file,
                    "nodes": len(rank.nodes),
                    "inputs": [item.to_dict() for item in entry.inputs],
                    "outputs": [item.to_dict() for item in entry.outputs],
                }
                for rank, file, entry in zip(ranks, files, stages.manifest.stages, strict=True)
            ],
            "transfers": [t.describe() for t in transfers],
            "tensors": {file: rank.tensor_names() for rank, file in zip(ranks, files, strict=True)},
            "byte_views": {
                name: layout.describe() for name, layout in layouts.items() if layout.byte_view
            },
        }
        with staged_directory(destination, force, holds=holds) as folder:
            for rank, file in zip(ranks, files, strict=True):
                (folder / file).write_bytes(_dump(rank.to_json(layout)))
            (folder / "index.json").write_bytes(_dump(index))
        return ExportResult(
            format=self.name,
            destination=destination,
            files=(*(destination / f for f in files), destination / "index.json"),
            manifest=stages.manifest,
            details={
                "layout": layout,
                "ops": ops,
                "world_size": len(ranks),
                "transfers": len(transfers),
                "byte_views": sorted(n for n, lay in layouts.items() if lay.byte_view),
                "planning_dims": dict(sorted(stages.dims.items())),
            },
        )
