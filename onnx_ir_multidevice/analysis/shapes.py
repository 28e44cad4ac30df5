"""Dtypes and shapes of the main graph's values, at the planning dims, whatever the file states.

Real exports state little: TorchScript and ``onnx.helper`` models carry no ``value_info``,
dynamo exports write dims as expressions of their own symbols (``16*s39``), Paddle writes a
``dim_value`` of ``-1`` and a ``dim_param`` of ``"?"``. :class:`ValueShapes` answers, for
every value of a main graph, without modifying the model:

* its **dtype** and **rank**;
* its **shape at the planning dims** (:meth:`ValueShapes.shape`): ``None`` when a dimension
  depends on a symbol the caller did not bind (then the size is unknown, never guessed);
* its **symbolic shape** (:meth:`ValueShapes.symbolic`): an ``int`` for a static dimension,
  a name or an expression (``"seq"``, ``"past_seq + seq"``) for a symbolic one when it is
  known, ``None`` for a dynamic dimension without a name: where ``.omny`` writes ``-1``;
* an **estimate** of its shape (:meth:`ValueShapes.estimate`) at the *probe dims*: the
  planning dims completed by :func:`example_dims`.

**Input symbols.** The symbols of a model are the names its graph inputs' dimensions are
made of: a ``dim_param`` that is a name (``"seq"``), the names inside an expression
(``"32*h32"``: ``h32``), and, for a dimension with no usable name (no ``dim_param``, a
``dim_value`` of ``-1``, a ``dim_param`` such as ``"?"`` that is not an expression), the
synthetic name ``"<input>[<axis>]"`` (``"x[2]"``), which ``--dim`` accepts like any other.
:func:`input_symbols` lists them; a graph input's first dimension, when it is a symbol, is the
batch (:func:`batch_symbols`, planned at 1 unless bound).

**Sources, merged.** A value whose stated shape (``value_info``, or the graph input or
output's type) has only static dims and expressions of input symbols is taken as stated,
expressions evaluated by :mod:`~onnx_ir_multidevice.analysis.dim_expressions`. Any other
value (no type, no shape, a dim of an exporter-internal symbol such as ``s39``, a stale
``unk__3``) gets its dtype and shape from ONNX shape inference with data propagation
(``onnx.shape_inference.infer_shapes(..., data_prop=True)``, C++), run on a *lightweight
copy* of the main graph: large initializers and ``Constant`` tensors become typed graph
inputs (no weight is serialized), small integer ones stay as data so that ``Reshape``,
``Expand`` and ``Slice`` targets computed from ``Shape`` come out concrete; every input
dimension is bound to a number. Inference runs at two bindings, lazily:

1. the *probe dims* (planning dims plus :func:`example_dims` for the unbound symbols): the
   estimates, and the shapes at the planning dims when every symbol is bound;
2. the probe dims doubled (every symbol ``x 2``, which keeps the relations between symbols
   such as ``mask_len = past + seq`` and divisibility such as ``height % 32``): a dimension
   equal in both runs is static, one that changes is symbolic, named after the input symbol
   whose value it takes in both runs when that symbol is the only one with that value.

When a symbol is unbound, a value's size at the planning dims is known only if each of its
dimensions is static or exactly a bound symbol (conservative: a size that might depend on an
unbound symbol is unknown, so totals stay lower bounds).

Bodies of ``If``/``Loop``/``Scan`` nodes keep their own types; only main-graph values are
described.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_SAMPLES",
    "DEFAULT_SEQUENCE",
    "ValueShapes",
    "batch_symbols",
    "dims_conflict_message",
    "evaluate_dims",
    "example_dims",
    "input_symbols",
    "normalize_dims",
    "synthetic_name",
    "unknown_dim_names",
]

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import onnx
import onnx_ir as ir

from onnx_ir_multidevice.analysis.dim_expressions import DimExpression, parse_dim
from onnx_ir_multidevice.analysis.element_types import element_types
from onnx_ir_multidevice.analysis.shape_data import evaluate_cone, shape_cone
from onnx_ir_multidevice.analysis.shape_propagation import Propagation
from onnx_ir_multidevice.graph.dtypes import INTEGER_OR_BOOL_DTYPES as _INTEGER_TYPES
from onnx_ir_multidevice.graph.fingerprint import GraphCache
from onnx_ir_multidevice.graph.index import AnalysisError, GraphIndex

DEFAULT_BATCH = 1
"""Planning value of a graph input's symbolic first (batch) dimension when none is given."""

DEFAULT_SEQUENCE = 128
"""Example length of a sequence dimension (tokens, frames): the total length with a cache."""

DEFAULT_SAMPLES = 512
"""Example length of a waveform input ``[batch, samples]`` (a float input of rank 2)."""

DEFAULT_IMAGE_SIZE = 224
"""Example height and width of an image input (``[batch, channels, H, W]``)."""

# Data propagation needs the values of small integer tensors (Reshape targets, axes...);
# anything larger becomes a typed input of the lightweight copy.
_KEEP_INT_ELEMENTS = 1024
_KEEP_ANY_ELEMENTS = 64
_INJECT_ELEMENTS = 4096  # computed shape tensors given to inference as constants
_MAX_RERUNS = 6  # inference reruns when computed shape tensors unlock more
_SCALE = 2  # the second inference binding: every symbol times this
_THIRD = 3  # the binding that confirms a static dim of an inferred type (see symbolic())
_PAST_WORDS = ("past", "cache", "memory")

Dim = int | DimExpression
"""A normalized input dimension: a static size or an expression (possibly one symbol)."""


def _symbol(name: str) -> DimExpression:
    return DimExpression(name, frozenset((name,)), ("name", name))


def synthetic_name(input_name: str, axis: int) -> str:
    """The name of an input dimension that has none: ``"<input>[<axis>]"``."""
    return f"{input_name}[{axis}]"


def normalize_dims(input_name: str, dims: Iterable[Any]) -> tuple[Dim, ...]:
    """Return the dims of graph input ``input_name`` as static sizes and expressions.

    ``dims`` holds onnx-ir dims (``int`` or :class:`onnx_ir.SymbolicDim`) or plain ones
    (``int``, ``str`` or ``None``). A negative size, a missing name and a name that is not an
    expression (``"?"``) become the synthetic symbol ``"<input>[<axis>]"``.
    """
    result: list[Dim] = []
    for axis, dim in enumerate(dims):
        if isinstance(dim, DimExpression):
            result.append(dim)
            continue
        if isinstance(dim, ir.SymbolicDim):
            dim = dim.value  # noqa: PLW2901  # a symbolic dim is read as its value
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
            result.append(int(dim) if dim >= 0 else _symbol(synthetic_name(input_name, axis)))
            continue
        parsed = parse_dim(dim) if isinstance(dim, str) else None
        result.append(parsed if parsed is not None else _symbol(synthetic_name(input_name, axis)))
    return tuple(result)


def _signature(graph: ir.Graph) -> dict[str, tuple[Dim, ...] | None]:
    """Normalized dims of each graph input a caller feeds (initializers left out)."""
    initializers = graph.initializers
    return {
        value.name or "": None
        if value.shape is None
        else normalize_dims(value.name or "", value.shape)
        for value in graph.inputs
        if value.name not in initializers
    }


def _as_signature(
    source: ir.Graph | Mapping[str, Sequence[Any] | None],
) -> dict[str, tuple[Dim, ...] | None]:
    if isinstance(source, ir.Graph):
        return _signature(source)
    return {
        name: None if dims is None else normalize_dims(name, dims) for name, dims in source.items()
    }


def input_symbols(
    source: ir.Graph | Mapping[str, Sequence[Any] | None],
) -> dict[str, list[tuple[str, int]]]:
    """The symbols of the graph inputs, each with the ``(input, axis)`` pairs that carry it.

    Args:
        source: A main graph, or ``{input name: dims}`` (dims as :func:`normalize_dims` takes).

    Returns:
        ``{symbol: [(input name, axis), ...]}`` in order of first appearance.
    """
    found: dict[str, list[tuple[str, int]]] = {}
    for name, dims in _as_signature(source).items():
        for axis, dim in enumerate(dims or ()):
            if isinstance(dim, DimExpression):
                for symbol in sorted(dim.names):
                    found.setdefault(symbol, []).append((name, axis))
    return found


def batch_symbols(source: ir.Graph | Mapping[str, Sequence[Any] | None]) -> list[str]:
    """The symbols that are the whole first dimension of a graph input (the batch)."""
    found: dict[str, None] = {}
    for dims in _as_signature(source).values():
        if dims and isinstance(dims[0], DimExpression) and dims[0].is_symbol:
            found[dims[0].text] = None
    return list(found)


def unknown_dim_names(
    source: ir.Graph | Mapping[str, Sequence[Any] | None], names: Iterable[str]
) -> list[str]:
    """The ``names`` that are not symbols of the graph inputs (see :func:`input_symbols`)."""
    symbols = input_symbols(source)
    return [name for name in names if name not in symbols]


def _is_image_axis(dims: Sequence[Dim], axis: int) -> bool:
    """Whether ``axis`` is the height or width of an ``[N, C, H, W]`` image input."""
    return (
        len(dims) == 4
        and axis in (2, 3)
        and isinstance(dims[1], int)
        and dims[1] in (1, 3, 4)
        and not isinstance(dims[2], int)
        and not isinstance(dims[3], int)
    )


def _solve(expression: DimExpression, symbol: str, target: int, bound: Mapping[str, int]) -> int:
    """The value of ``symbol`` (1 to 4096) that brings ``expression`` closest to ``target``."""
    best, best_gap = 1, None
    bindings = dict(bound)
    for candidate in range(1, 4097):
        bindings[symbol] = candidate
        value = expression.evaluate(bindings)
        if value is None or value <= 0:
            continue
        gap = abs(value - target)
        if best_gap is None or gap < best_gap:
            best, best_gap = candidate, gap
        if value > 2 * target:
            break
    return best


def example_dims(
    source: ir.Graph | Mapping[str, Sequence[Any] | None],
    dims: Mapping[str, int] | None = None,
    *,
    float_inputs: Iterable[str] | None = None,
) -> dict[str, int]:
    """Complete ``dims`` with example values that look like real data for the other symbols.

    The rules, in order, for each unbound symbol of the graph inputs:

    * the whole first dimension of an input (the batch): :data:`DEFAULT_BATCH` (1);
    * the height or width of an image input ``[N, C, H, W]`` (``C`` of 1 to 4):
      :data:`DEFAULT_IMAGE_SIZE` (224); a dimension written as an expression of the symbol
      (``32*h32``) gets the value that brings it closest (``h32 = 7``);
    * a symbol whose name says it is a cache (``past``, ``cache``, ``memory``): the cached
      length, :data:`DEFAULT_SEQUENCE` minus the new tokens;
    * the second dim of a floating-point input of rank 2 (``[batch, samples]``: a waveform):
      :data:`DEFAULT_SAMPLES` (512);
    * any other symbol: a sequence of :data:`DEFAULT_SEQUENCE` (128) tokens, or 1 new token
      when the model also takes a cache (a decoding step with 127 cached tokens: a mask over
      ``past + new`` then has 128).

    Args:
        source: A main graph, or ``{input name: dims}``.
        dims: Values already chosen (kept as they are).
        float_inputs: Names of the floating-point inputs, when ``source`` is not a graph
            (a graph tells them itself).

    Returns:
        A value for every symbol of :func:`input_symbols`, ``dims`` included.
    """
    signature = _as_signature(source)
    symbols = input_symbols(signature)
    result = dict(dims or {})
    batches = set(batch_symbols(signature))
    has_cache = any(any(word in symbol.lower() for word in _PAST_WORDS) for symbol in symbols)
    new_tokens = 1 if has_cache else DEFAULT_SEQUENCE
    if isinstance(source, ir.Graph):
        floats = {
            v.name for v in source.inputs if v.dtype is not None and v.dtype.is_floating_point()
        }
    else:
        floats = set(float_inputs or ())
    for symbol, places in symbols.items():
        if symbol in result:
            continue
        if symbol in batches:
            result[symbol] = DEFAULT_BATCH
            continue
        if any(word in symbol.lower() for word in _PAST_WORDS):
            result[symbol] = DEFAULT_SEQUENCE - 1 if has_cache else DEFAULT_SEQUENCE
            continue
        image = next(
            ((name, axis) for name, axis in places if _is_image_axis(signature[name] or (), axis)),
            None,
        )
        if image is not None:
            dim = signature[image[0]][image[1]]  # type: ignore[index]  # the image axis exists
            assert isinstance(dim, DimExpression)
            if dim.is_symbol:
                result[symbol] = DEFAULT_IMAGE_SIZE
            else:
                result[symbol] = _solve(dim, symbol, DEFAULT_IMAGE_SIZE, result)
            continue
        if any(
            axis == 1 and name in floats and len(signature[name] or ()) == 2
            for name, axis in places
        ):
            result[symbol] = DEFAULT_SAMPLES
        elif has_cache and _only_in_masks(symbol, places):
            result[symbol] = DEFAULT_SEQUENCE
        else:
            result[symbol] = new_tokens
    return result


def _only_in_masks(symbol: str, places: Sequence[tuple[str, int]]) -> bool:
    """Whether every input carrying ``symbol`` is a mask (its length spans cache + new)."""
    del symbol
    return all("mask" in name.lower() for name, _ in places)


def evaluate_dims(dims: Sequence[Dim], bindings: Mapping[str, int]) -> tuple[int, ...] | None:
    """The concrete shape of normalized ``dims`` at ``bindings`` (``None`` if not all known)."""
    result = []
    for dim in dims:
        if isinstance(dim, int):
            result.append(dim)
            continue
        value = dim.evaluate(bindings)
        if value is None or value < 0:
            return None
        result.append(value)
    return tuple(result)


# ---------------------------------------------------------------------------------------------
# What a value's own type states


@dataclasses.dataclass(frozen=True)
class _Stated:
    """A value's stated shape when every dim is static or an expression of input symbols."""

    dims: tuple[Dim, ...]
    names: frozenset[str]


_UNSET: Any = object()


def _stated(value: ir.Value, symbols: Mapping[str, Any]) -> _Stated | None:
    shape = value.shape
    if shape is None:
        tensor = value.const_value
        if tensor is not None:
            return _Stated(tuple(tensor.shape.dims), frozenset())  # type: ignore[arg-type]  # a tensor's dims are ints
        return None
    dims: list[Dim] = []
    names: set[str] = set()
    for dim in shape.dims:
        if type(dim) is int:
            if dim < 0:
                return None
            dims.append(dim)
            continue
        text = dim.value  # type: ignore[union-attr]  # not an int: a SymbolicDim
        parsed = parse_dim(text) if text else None
        if parsed is None or not parsed.names <= symbols.keys():
            return None
        dims.append(parsed)
        names |= parsed.names
    return _Stated(tuple(dims), frozenset(names))


def _loop_initial(value: ir.Value) -> ir.Value | None:
    """The initial value of a ``Loop``'s loop-carried output ``value`` (``None`` otherwise)."""
    node = value.producer()
    if node is None or node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
        return None
    index = value.index()
    if index is None or index >= len(node.inputs) - 2:
        return None
    return node.inputs[2 + index]


def _from_bodies(
    value: ir.Value, rank_of: Callable[[ir.Value], int | None]
) -> tuple[ir.DataType | None, tuple[int | None, ...]] | None:
    """Dtype and dims of an ``If``/``Loop``/``Scan`` output from what its bodies state.

    ONNX inference gives up on an ``If`` whose branches it cannot infer; their stated output
    types still tell the rank (when the branches agree) and the static dims they share. A
    ``Loop``'s loop-carried outputs are its body's outputs ``1..N`` (a ``Scan``'s state
    outputs, ``0..N-1``); a scan output has one more (leading, dynamic) dim.
    """
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    index = value.index()
    if index is None:
        return None
    if node.op_type == "If":
        branches = [node.attributes.get(k) for k in ("then_branch", "else_branch")]
        outputs = [b.value.outputs[index] for b in branches if b is not None]
        extra = 0
    elif node.op_type == "Loop":
        body = node.attributes.get("body")
        if body is None:
            return None
        carried = len(node.inputs) - 2
        outputs = [body.value.outputs[1 + index]]
        extra = 0 if index < carried else 1
    elif node.op_type == "Scan":
        body = node.attributes.get("body")
        scans = node.attributes.get("num_scan_inputs")
        if body is None or scans is None:
            return None
        states = len(node.inputs) - scans.as_int()
        outputs = [body.value.outputs[index]]
        extra = 0 if index < states else 1
    else:
        return None
    shapes = [o.shape for o in outputs]
    if node.op_type == "Loop" and extra == 0 and shapes[0] is None:
        initial = node.inputs[2 + index]  # a loop-carried value keeps its initial rank
        rank = None if initial is None else rank_of(initial)
        if rank is not None:
            return outputs[0].dtype, (None,) * rank
    if not shapes or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return None
    dims: list[int | None] = [None] * extra
    for axis in range(len(shapes[0])):
        sizes = {s[axis] if isinstance(s[axis], int) and s[axis] >= 0 else None for s in shapes}
        dims.append(sizes.pop() if len(sizes) == 1 else None)
    dtypes = {o.dtype for o in outputs} - {None}
    return (dtypes.pop() if len(dtypes) == 1 else None), tuple(dims)


# ---------------------------------------------------------------------------------------------
# The lightweight copy and ONNX shape inference


@dataclasses.dataclass
class _Run:
    """The result of one inference run: ``{name: (elem_type, dims or None)}``, parsed lazily."""

    infos: dict[str, onnx.ValueInfoProto]
    parsed: dict[str, tuple[int, tuple[int | None, ...] | None]] = dataclasses.field(
        default_factory=dict
    )

    def get(self, key: str) -> tuple[int, tuple[int | None, ...] | None] | None:
        try:
            return self.parsed[key]
        except KeyError:
            pass
        info = self.infos.get(key)
        if info is None:
            result = None
        else:
            tensor_type = info.type.tensor_type
            shape = None
            if tensor_type.HasField("shape"):
                shape = tuple(
                    d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                    for d in tensor_type.shape.dim
                )
            result = (tensor_type.elem_type, shape)
        self.parsed[key] = result  # type: ignore[assignment]  # None is cached too
        return result


def _keep_as_data(tensor: ir.TensorProtocol) -> bool:
    count = tensor.size
    if count <= _KEEP_ANY_ELEMENTS:
        return True
    return count <= _KEEP_INT_ELEMENTS and tensor.dtype in _INTEGER_TYPES


_CONFLICT_WORDS = (
    "Incompatible dimensions",
    "Inferred shape and existing shape differ",
    "dimension mismatch",
    "Dimension mismatch",
)
"""Words of ONNX inference errors that say input shapes contradict each other."""

_NODE_ERROR = re.compile(r"\(op_type:[^,]*, node name: ([^)]*)\): (.*?)(?= \(op_type:|$)")
"""One node's part of an ONNX inference error: ``(op_type:Add, node name: add_pos): ...``."""


class _LightGraph:
    """A ``ModelProto`` of the main graph without its weights, built once, run many times."""

    def __init__(self, graph: ir.Graph, index: GraphIndex, keys: Mapping[ir.Value, str]) -> None:
        self.keys = keys
        proto = onnx.ModelProto()
        proto.ir_version = max(onnx.IR_VERSION_2019_3_18, 10)
        for domain, version in graph.opset_imports.items():
            opset = proto.opset_import.add()
            opset.domain = "" if domain == "ai.onnx" else domain
            opset.version = version
        g = proto.graph
        g.name = "omny_shapes"
        self.inputs: list[tuple[int, tuple[Dim, ...]]] = []
        self.input_dims: dict[ir.Value, tuple[Dim, ...]] = {}
        initializers = graph.initializers
        for value in graph.inputs:
            if value.name in initializers:
                continue
            info = g.input.add()
            info.name = keys[value]
            dims = None if value.shape is None else normalize_dims(value.name or "", value.shape)
            _set_type(info, value.dtype, None if dims is None else len(dims))
            if dims is not None:
                self.inputs.append((len(g.input) - 1, dims))
                self.input_dims[value] = dims
        serialize_tensor_into = ir.serde.serialize_tensor_into
        written: set[ir.Value] = set()
        for value in index.external:
            if value in written or value.producer() is not None:
                continue
            tensor = value.const_value
            if tensor is None or value.name not in initializers:
                continue  # a graph input (written above) or an outer-scope value
            written.add(value)
            if _keep_as_data(tensor):
                serialize_tensor_into(g.initializer.add(), tensor)
                g.initializer[-1].name = keys[value]
            else:
                info = g.input.add()
                info.name = keys[value]
                _set_shape(info, tensor.dtype, tuple(tensor.shape.dims))  # type: ignore[arg-type]  # a tensor's dims are ints
        serialize_attribute_into = ir.serde.serialize_attribute_into
        self.node_position: dict[ir.Node, int] = {}
        self.cone = shape_cone(index.nodes)
        for node in index.nodes:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.outputs:
                attr = node.attributes.get("value")
                if (
                    isinstance(attr, ir.Attr)
                    and attr.type == ir.AttributeType.TENSOR
                    and not _keep_as_data(attr.value)
                ):
                    info = g.input.add()
                    info.name = keys[node.outputs[0]]
                    tensor = attr.value
                    _set_shape(info, tensor.dtype, tuple(tensor.shape.dims))
                    continue
            if node.domain == "com.microsoft" and _write_surrogate(g, node, keys):
                continue
            self.node_position[node] = len(g.node)
            node_proto = g.node.add()
            node_proto.op_type = node.op_type
            if node.name:  # named in inference errors (see conflict())
                node_proto.name = node.name
            if node.domain:
                node_proto.domain = node.domain
            if node.overload:
                node_proto.overload = node.overload
            node_proto.input.extend(
                ["" if v is None else keys.get(v, v.name or "") for v in node.inputs]
            )
            node_proto.output.extend([keys[v] for v in node.outputs])
            for attr in node.attributes.values():
                if not attr.is_ref():
                    serialize_attribute_into(node_proto.attribute.add(), from_=attr)
        for value in graph.outputs:
            info = g.output.add()
            info.name = keys.get(value, value.name or "")
        self.proto = proto

    def run(
        self,
        bindings: Mapping[str, int],
        stated: Callable[[ir.Value, Mapping[str, int]], tuple[int, ...] | None],
    ) -> _Run:
        """Infer at ``bindings``, shape arithmetic computed first (see :mod:`.shape_data`).

        ``stated`` gives the shape a value's own type states at ``bindings`` (or ``None``).
        The shape tensors computable before inference are injected as constants; when
        inference makes more of them computable (``Shape`` of an activation), it runs again
        (at most :data:`_MAX_RERUNS` times more).
        """

        def before(value: ir.Value) -> tuple[int, ...] | None:
            dims = self.input_dims.get(value)
            if dims is not None:
                return evaluate_dims(dims, bindings)
            return stated(value, bindings)

        folded = evaluate_cone(self.cone, before) if self.cone else {}
        result = self._infer(bindings, folded)
        for _ in range(_MAX_RERUNS):
            if not self.cone:
                break

            def after(
                value: ir.Value, result: _Run = result, keys: Mapping[ir.Value, str] = self.keys
            ) -> tuple[int, ...] | None:
                found = before(value)
                if found is not None:
                    return found
                key = keys.get(value)
                entry = None if key is None else result.get(key)
                if entry is None or entry[1] is None or None in entry[1]:
                    return None
                return entry[1]  # type: ignore[return-value]  # None ruled out above

            more = evaluate_cone(self.cone, after, known=folded)
            if len(more) <= len(folded):
                break
            folded = more
            result = self._infer(bindings, folded)
        return result

    def _pinned(self, bindings: Mapping[str, int]) -> onnx.ModelProto:
        """A copy of :attr:`proto` whose inputs have their sizes at ``bindings``."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        inputs = proto.graph.input
        for position, dims in self.inputs:
            shape_dims = inputs[position].type.tensor_type.shape.dim
            for axis, dim in enumerate(dims):
                size = dim if isinstance(dim, int) else dim.evaluate(bindings)
                if size is not None and size >= 0:
                    shape_dims[axis].dim_value = size
        return proto

    def conflict(
        self,
        bindings: Mapping[str, int],
        stated: Callable[[ir.Value, Mapping[str, int]], tuple[int, ...] | None],
    ) -> tuple[str, str] | None:
        """Where ONNX shape inference finds shapes that cannot go together at ``bindings``.

        Strict inference (with data propagation) of the weightless graph: an operator whose
        input shapes contradict each other there (``Add`` of 512 positions and a 256-row
        table) is a model onnxruntime refuses to load at those sizes. Other inference
        failures (an op without a schema...) say nothing about the sizes and are ignored.
        The shape tensors computable before inference are injected first, as :meth:`run`
        does (``stated`` as there).

        Returns:
            ``(node name, ONNX's message)``, the name ``""`` for an unnamed node; or ``None``.
        """

        def before(value: ir.Value) -> tuple[int, ...] | None:
            dims = self.input_dims.get(value)
            return evaluate_dims(dims, bindings) if dims is not None else stated(value, bindings)

        folded = evaluate_cone(self.cone, before) if self.cone else {}
        try:
            onnx.shape_inference.infer_shapes(
                self._inferable(bindings, folded),
                check_type=False,
                strict_mode=True,
                data_prop=True,
            )
        except onnx.shape_inference.InferenceError as error:
            message = " ".join(str(error).split())
            for match in _NODE_ERROR.finditer(message):  # one per failing node: the first
                if any(words in match.group(2) for words in _CONFLICT_WORDS):
                    return match.group(1).strip(), match.group(2).strip()
            return None
        except Exception:  # noqa: BLE001 (inference cannot run: nothing is known)
            return None
        return None

    def _inferable(
        self, bindings: Mapping[str, int], folded: Mapping[ir.Value, np.ndarray]
    ) -> onnx.ModelProto:
        """:meth:`_pinned`, with the ``folded`` shape tensors injected as initializers."""
        proto = self._pinned(bindings)
        graph = proto.graph
        keys = self.keys
        for value, array in folded.items():
            producer = value.producer()
            node_at = None if producer is None else self.node_position.get(producer)
            if node_at is None or array.size > _INJECT_ELEMENTS:
                continue
            key = keys[value]
            outputs = graph.node[node_at].output
            outputs[list(outputs).index(key)] = f"{key}__omny_folded"
            tensor = onnx.numpy_helper.from_array(np.array(array, order="C"), key)
            graph.initializer.append(tensor)
        return proto

    def _infer(self, bindings: Mapping[str, int], folded: Mapping[ir.Value, np.ndarray]) -> _Run:
        proto = self._inferable(bindings, folded)
        try:
            inferred = onnx.shape_inference.infer_shapes(
                proto, check_type=False, strict_mode=False, data_prop=True
            )
        except Exception:  # noqa: BLE001 (inference refuses the graph: shapes stay unknown)
            return _Run({})
        graph = inferred.graph
        infos = {info.name: info for info in graph.value_info}
        for info in (*graph.output, *graph.input):
            if info.type.HasField("tensor_type"):
                infos.setdefault(info.name, info)
        for tensor in graph.initializer:
            if tensor.name not in infos:
                infos[tensor.name] = onnx.helper.make_tensor_value_info(
                    tensor.name, tensor.data_type, list(tensor.dims)
                )
        return _Run(infos)


# onnxruntime's com.microsoft ops have no ONNX schema, so ONNX inference stops at them. For
# shapes and dtypes only, each is written as the standard op it shapes like:
# op -> (standard op, which inputs, which attributes to keep).
_SURROGATES: dict[str, tuple[str, Callable[[int], Sequence[int]], tuple[str, ...]]] = {
    "QLinearAdd": ("Add", lambda n: (0, 3), ()),
    "QLinearMul": ("Mul", lambda n: (0, 3), ()),
    "QLinearSigmoid": ("Identity", lambda n: (0,), ()),
    "QLinearLeakyRelu": ("Identity", lambda n: (0,), ()),
    "QLinearSoftmax": ("Identity", lambda n: (0,), ()),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", lambda n: (0,), ()),
    "QLinearAveragePool": (
        "AveragePool",
        lambda n: (0,),
        ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"),
    ),
    "QLinearConcat": ("Concat", lambda n: range(2, n, 3), ("axis",)),
    "QLinearConv": (
        "QLinearConv",
        range,
        ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
    ),
    "FusedConv": (
        "Conv",
        lambda n: range(min(n, 3)),
        ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
    ),
    "QGemm": ("Gemm", lambda n: (0, 3), ("transA", "transB")),
    "MatMulIntegerToFloat": ("MatMul", lambda n: (0, 1), ()),
    "DynamicQuantizeMatMul": ("MatMul", lambda n: (0, 1), ()),
    "Gelu": ("Identity", lambda n: (0,), ()),
    "FastGelu": ("Identity", lambda n: (0,), ()),
    "BiasGelu": ("Identity", lambda n: (0,), ()),
    "QuickGelu": ("Identity", lambda n: (0,), ()),
    "SkipLayerNormalization": ("Identity", lambda n: (0,), ()),
}


def _surrogate_dtype(node: ir.Node) -> ir.DataType | None:
    """The output dtype of a surrogate whose standard op would give another one."""
    op = node.op_type
    if op == "QGemm":  # quantized output when y_scale is given, typed by y_zero_point
        if len(node.inputs) > 8 and node.inputs[8] is not None:
            return node.inputs[8].dtype or ir.DataType.UINT8
        return ir.DataType.UINT8 if len(node.inputs) > 7 and node.inputs[7] else ir.DataType.FLOAT
    if op == "MatMulIntegerToFloat":
        scale = node.inputs[2] if len(node.inputs) > 2 else None
        return (scale.dtype if scale is not None else None) or ir.DataType.FLOAT
    return None


def _write_surrogate(g: onnx.GraphProto, node: ir.Node, keys: Mapping[ir.Value, str]) -> bool:
    """Write ``node`` (com.microsoft) as the standard op it shapes like; ``False`` if none."""
    found = _SURROGATES.get(node.op_type)
    channels_last = node.attributes.get("channels_last")
    if found is None or not node.outputs or (channels_last is not None and channels_last.value):
        return False
    op_type, slots, kept = found
    inputs = node.inputs
    names = []
    for slot in slots(len(inputs)):
        value = inputs[slot] if slot < len(inputs) else None
        names.append("" if value is None else keys.get(value, value.name or ""))
    output = keys[node.outputs[0]]
    dtype = _surrogate_dtype(node)
    proto = g.node.add()
    proto.op_type = op_type
    proto.input.extend(names)
    proto.output.append(output if dtype is None else f"{output}__omny_surrogate")
    for name in kept:
        attr = node.attributes.get(name)
        if attr is not None and not attr.is_ref():
            ir.serde.serialize_attribute_into(proto.attribute.add(), from_=attr)
    if dtype is not None:
        cast = g.node.add()
        cast.op_type = "Cast"
        cast.input.append(f"{output}__omny_surrogate")
        cast.output.append(output)
        cast.attribute.append(onnx.helper.make_attribute("to", int(dtype)))
    return True


def _set_type(info: onnx.ValueInfoProto, dtype: ir.DataType | None, rank: int | None) -> None:
    tensor_type = info.type.tensor_type
    tensor_type.elem_type = int(dtype) if dtype is not None else 0
    if rank is not None:
        shape = tensor_type.shape
        for _ in range(rank):
            shape.dim.add()


def _set_shape(info: onnx.ValueInfoProto, dtype: ir.DataType, dims: Sequence[int]) -> None:
    tensor_type = info.type.tensor_type
    tensor_type.elem_type = int(dtype)
    shape = tensor_type.shape
    for size in dims:
        shape.dim.add().dim_value = size


def _value_keys(graph: ir.Graph, index: GraphIndex) -> dict[ir.Value, str]:
    """A unique name for every main-graph value (its own when unique and not empty)."""
    values: list[ir.Value] = list(graph.inputs)
    values.extend(index.external)
    for node in index.nodes:
        values.extend(node.outputs)
    counts: dict[str, int] = {}
    for value in dict.fromkeys(values):
        name = value.name or ""
        counts[name] = counts.get(name, 0) + 1
    keys: dict[ir.Value, str] = {}
    for i, value in enumerate(dict.fromkeys(values)):
        name = value.name or ""
        keys[value] = name if name and counts[name] == 1 else f"__omny_value_{i}"
    return keys


# ---------------------------------------------------------------------------------------------
# The shape layer


@dataclasses.dataclass(frozen=True)
class _Info:
    """What is known of one value."""

    dtype: ir.DataType | None
    rank: int | None
    planning: tuple[int, ...] | None
    estimate: tuple[int, ...] | None
    symbolic: tuple[int | str | None, ...] | None


def dims_conflict_message(
    graph: ir.Graph, dims: Mapping[str, int], node_name: str, reason: str
) -> str:
    """Say that the model cannot take the planning ``dims``: the planner's and ``OMNY124``'s words.

    ``node_name`` and ``reason`` are what :meth:`ValueShapes.conflict` found.
    """
    node = next((n for n in graph if node_name and n.name == node_name), None)
    where = f"node {node_name!r} ({node.op_type})" if node is not None else "a node"
    at = ", ".join(f"{k}={v}" for k, v in sorted(dims.items())) or "the sizes the model pins"
    return (
        f"the model cannot take the planning dims ({at}): at {where} the input shapes "
        f"contradict each other (ONNX shape inference: {reason}); onnxruntime refuses to load "
        "or run it at these sizes. Plan at sizes the model takes (e.g. no more positions than "
        "its position table has)"
    )


class ValueShapes:
    """Dtypes and shapes of the values of a main graph (see the module docstring).

    Build it once per graph and planning dims; every lookup is cached. The graph is never
    modified.

    Args:
        graph: The main graph.
        dims: The planning dims: values of input symbols (:func:`input_symbols`). A batch
            symbol not given is planned at :data:`DEFAULT_BATCH`.
        infer: Run ONNX shape inference where the graph states too little (``False``: only
            the stated types are used).
        index: The :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``graph``, when
            already built (it gives the topological order inference needs).
        focus: The values the caller will ask about, when only a few: the fast propagation
            then walks only the nodes they are computed from (a checker looking at the cut
            tensors of a large graph). Other values are still answered, more slowly.

    Attributes:
        dims: The planning dims: ``dims`` plus the batch defaults.
        probe_dims: :attr:`dims` completed by :func:`example_dims` (every symbol bound).
        symbols: :func:`input_symbols` of the graph.
        unbound: The symbols :attr:`dims` does not bind.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        graph: ir.Graph,
        dims: Mapping[str, int] | None = None,
        *,
        infer: bool = True,
        index: GraphIndex | None = None,
        focus: Iterable[ir.Value] | None = None,
    ) -> None:
        self.graph = graph
        self._focus = None if focus is None else list(focus)
        signature = _signature(graph)
        self.symbols = input_symbols(signature)
        bound = dict(dims or {})
        for symbol in batch_symbols(signature):
            bound.setdefault(symbol, DEFAULT_BATCH)
        self.dims = bound
        self.probe_dims = example_dims(signature, bound)
        self.unbound = tuple(s for s in self.symbols if s not in bound)
        self._infer = infer
        self._index = index
        self._cache: dict[ir.Value, _Info] = {}
        self._static: dict[tuple, _Info] = {}  # by (dtype, static dims): shared answers
        self._light: _LightGraph | None = None
        self._keys: dict[ir.Value, str] | None = None
        self._runs: dict[int, _Run] = {}
        self._checked: set[ir.Value] = set()
        self._fast: Any = _UNSET
        self._propagation: Propagation | None = None
        self._walked = bytearray()
        self._same: dict[tuple, _Info] = {}
        self._dtypes: Mapping[ir.Value, ir.DataType] | None = None
        self._probe_values: dict[int, list[str]] = {}
        for symbol, value in self.probe_dims.items():
            self._probe_values.setdefault(value, []).append(symbol)

    @classmethod
    def cached(
        cls,
        graph: ir.Graph,
        dims: Mapping[str, int] | None = None,
        *,
        index: GraphIndex | None = None,
        focus: Iterable[ir.Value] | None = None,
    ) -> ValueShapes:
        """The shapes of ``graph`` at ``dims``, computed once and kept while it is unchanged.

        Kept in the graph's :class:`~onnx_ir_multidevice.graph.fingerprint.GraphCache` (the
        one of ``index``, when it came from
        :meth:`~onnx_ir_multidevice.graph.index.GraphIndex.for_model`): the checker gate of
        ``annotate()`` and a later ``check()`` of the same model share one propagation, and
        any change to the graph in between starts a new one. ``focus`` only says where the
        first walk stops (see the class); every value is answered whatever the focus was.

        Args:
            graph: The main graph.
            dims: The planning dims.
            index: The graph's index, when already built.
            focus: The values the caller will ask about, when only a few.

        .. versionadded:: 0.1
        """
        cache = getattr(index, "cache", None)
        if cache is None or index is None or index.graph is not graph:
            cache = GraphCache.of(graph)
        key = (cls, tuple(sorted((name, int(size)) for name, size in (dims or {}).items())))
        return cache.get(key, lambda: cls(graph, dims, index=index, focus=focus))

    # -- inference ----------------------------------------------------------------------------

    @property
    def inferred(self) -> bool:
        """Whether shape inference ran (some value needed it)."""
        return bool(self._runs)

    def _light_graph(self) -> _LightGraph | None:
        """The weightless graph inference runs on, built once (``None`` for a cycle)."""
        if self._light is None:
            index = self._index
            if index is None:
                try:
                    index = GraphIndex.build(self.graph)
                except Exception:  # noqa: BLE001 (a cycle: no inference)
                    return None
            self._keys = _value_keys(self.graph, index)
            self._light = _LightGraph(self.graph, index, self._keys)
        return self._light

    def conflict(self) -> tuple[str, str] | None:
        """A node whose input shapes contradict each other at the planning dims, if any.

        Only when :attr:`dims` binds every symbol (example values prove nothing about the
        sizes a user chose). ONNX strict shape inference of the weightless graph, as
        onnxruntime runs it when it loads the model (see ``_LightGraph.conflict``).

        Returns:
            ``(node name, ONNX's message)``, or ``None`` when nothing contradicts.
        """
        if self.unbound:
            return None
        light = self._light_graph()
        return None if light is None else light.conflict(self.probe_dims, self._stated_at)

    def _run(self, scale: int) -> _Run:
        run = self._runs.get(scale)
        if run is not None:
            return run
        if self._light_graph() is None:
            self._runs[scale] = _Run({})
            return self._runs[scale]
        assert self._light is not None
        bindings = {s: v * scale for s, v in self.probe_dims.items()}
        run = self._runs[scale] = self._light.run(bindings, self._stated_at)
        return run

    def _stated_at(self, value: ir.Value, bindings: Mapping[str, int]) -> tuple[int, ...] | None:
        tensor = value.const_value
        if tensor is not None:
            return tuple(tensor.shape.dims)  # type: ignore[arg-type]  # a tensor's dims are ints
        stated = _stated(value, self.symbols)
        return None if stated is None else evaluate_dims(stated.dims, bindings)

    def _propagated(self) -> Mapping[ir.Value, tuple[ir.DataType, tuple]] | None:
        """The fast propagation (:mod:`.shape_propagation`): the focus's cone, or the graph.

        ``None`` when it does not cover that part of the graph (then ONNX inference answers).
        Values outside what it walked are added later by :meth:`_fast_entry`.
        """
        if self._fast is not _UNSET:
            return self._fast
        self._fast = None
        index = self._index
        if index is None:
            try:
                index = self._index = GraphIndex.build(self.graph)
            except Exception:  # noqa: BLE001 (a cycle: no inference)
                return None
        scaled = {s: v * _SCALE for s, v in self.probe_dims.items()}
        inputs = {}
        initializers = self.graph.initializers
        for value in self.graph.inputs:
            if value.name in initializers:
                continue
            if value.shape is None or value.dtype is None:
                return None
            duals: list[int | tuple[int, int]] = []
            for dim in normalize_dims(value.name or "", value.shape):
                if isinstance(dim, int):
                    duals.append(dim)
                    continue
                p, q = dim.evaluate(self.probe_dims), dim.evaluate(scaled)
                if p is None or q is None:
                    return None
                duals.append(p if p == q else (p, q))
            inputs[value] = (value.dtype, tuple(duals))
        propagation = Propagation(inputs)
        self._walked = bytearray(len(index.nodes))
        if self._focus is None:
            nodes: Sequence[ir.Node] = index.nodes
            self._walked[:] = b"\x01" * len(nodes)
        else:
            nodes = self._cone(self._focus)
        self._focus = None
        if not propagation.run(nodes):
            return None
        self._propagation = propagation
        self._fast = propagation.result
        if len(nodes) == len(index.nodes):  # the whole graph: every value will be asked
            self._fill(0)
        return self._fast

    def _cone(self, values: Iterable[ir.Value]) -> list[ir.Node]:
        """The nodes ``values`` are computed from that the propagation has not walked yet.

        Marks them walked; topological order. Costs the size of what it returns.
        """
        index = self._index
        assert index is not None
        position, reads, walked = index.position, index.reads, self._walked
        n = len(walked)
        found: list[int] = []
        stack = [position.get(v.producer()) for v in values]  # type: ignore[arg-type]
        while stack:
            i = stack.pop()
            if i is None or i >= n or walked[i]:
                continue
            walked[i] = 1
            found.append(i)
            stack.extend(reads[i])
        found.sort()
        nodes = index.nodes
        return [nodes[i] for i in found]

    def _fill(self, start: int) -> None:
        """Answer every untyped value the propagation found from position ``start`` on."""
        fast = self._fast
        assert fast is not None
        assert fast is not _UNSET
        cache, same, from_fast = self._cache, self._same, self._from_fast
        items = iter(fast.items())
        if start:
            items = itertools.islice(items, start, None)
        for value, key in items:
            if value.shape is not None or value.type is not None or value in cache:
                continue
            info = same.get(key)
            cache[value] = info if info is not None else from_fast(key)

    def _from_fast(self, key: tuple[ir.DataType, tuple]) -> _Info:
        """What a fast propagation record ``(dtype, duals)`` says (shared by equal records)."""
        info = self._same.get(key)
        if info is None:
            dtype, duals = key
            if all(type(d) is int for d in duals):
                info = _Info(dtype, len(duals), duals, duals, duals)
            else:
                probe_dims = tuple(d if type(d) is int else d[0] for d in duals)
                scaled_dims = tuple(d if type(d) is int else d[1] for d in duals)
                info = self._classify(dtype, probe_dims, scaled_dims)
            self._same[key] = info
        return info

    def _fast_entry(self, value: ir.Value) -> tuple[ir.DataType, tuple] | None:
        """What the fast propagation says of ``value``, walking its cone first if needed."""
        fast = self._propagated()
        if fast is None:
            return None
        entry = fast.get(value)
        if entry is not None or self._propagation is None:
            return entry
        nodes = self._cone((value,))
        if nodes:
            start = len(fast)
            self._propagation.run(nodes)  # what it finds before a node it cannot cover counts
            self._fill(start)
            entry = fast.get(value)
        return entry

    def _inferred(
        self, value: ir.Value, scale: int
    ) -> tuple[int, tuple[int | None, ...] | None] | None:
        run = self._run(scale)
        assert self._keys is not None
        key = self._keys.get(value)
        return None if key is None else run.get(key)

    # -- lookups --------------------------------------------------------------------------------

    def _info(self, value: ir.Value) -> _Info:
        try:
            return self._cache[value]
        except KeyError:
            pass
        info = self._compute(value)
        if info.dtype is None:
            # Dtypes do not depend on dims: where inference fails at the probe dims (a model
            # invalid there), the element type still follows from the graph.
            dtype = self._element_types().get(value)
            if dtype is not None:
                info = dataclasses.replace(info, dtype=dtype)
        self._cache[value] = info
        return info

    def _element_types(self) -> Mapping[ir.Value, ir.DataType]:
        """:func:`~.element_types.element_types` of the graph, computed once."""
        found = self._dtypes
        if found is None:
            index = self._index
            try:
                if index is None:
                    index = self._index = GraphIndex.build(self.graph)
                found = element_types(self.graph, index=index)
            except AnalysisError:  # a cycle: no propagation
                found = {}
            self._dtypes = found
        return found

    def _compute(self, value: ir.Value) -> _Info:
        dtype = value.dtype
        tensor = value.const_value
        if tensor is not None and dtype is not None:
            shape = value.shape
            if shape is not None:  # a typed initializer: its stated shape when static
                dims: tuple[Any, ...] = shape.dims  # here ints or symbols; below ints or None
                key = (dtype, dims)
                info = self._static.get(key)
                if info is not None:
                    return info
                if all(type(d) is int and d >= 0 for d in dims):
                    info = self._static[key] = _Info(dtype, len(dims), dims, dims, dims)
                    return info
        producer = value.producer()
        if tensor is None and producer is not None and producer.op_type == "Constant":
            attr = producer.attributes.get("value")
            if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                tensor = attr.value
        if dtype is None and tensor is not None:
            dtype = tensor.dtype
        if tensor is not None and value.shape is None:
            dims = tuple(tensor.shape.dims)
            return _Info(dtype, len(dims), dims, dims, dims)
        stated: _Stated | None
        if value.is_graph_input() and not value.is_initializer():
            shape = value.shape
            stated = (
                None
                if shape is None
                else _Stated(normalize_dims(value.name or "", shape), frozenset())
            )
        else:
            stated = _stated(value, self.symbols)
        if stated is not None and (dtype is not None or not self._infer):
            return self._from_stated(dtype, stated.dims)
        if not self._infer or (producer is not None and producer.graph is not self.graph):
            return self._declared_only(value, dtype)
        entry = self._fast_entry(value)
        if entry is not None:
            fast_dtype, duals = entry
            if stated is not None:
                return self._from_stated(dtype or fast_dtype, stated.dims)
            if dtype is None or dtype == fast_dtype:
                return self._from_fast(entry)
            probe_dims: tuple[int | None, ...] | None
            probe_dims = tuple(d if type(d) is int else d[0] for d in duals)
            scaled_dims = tuple(d if type(d) is int else d[1] for d in duals)
            return self._classify(dtype or fast_dtype, probe_dims, scaled_dims)
        probe = self._inferred(value, 1)
        if probe is None:
            if stated is not None:
                return self._from_stated(dtype, stated.dims)
            return self._declared_only(value, dtype)
        elem_type, probe_dims = probe
        if dtype is None and elem_type:
            dtype = ir.DataType(elem_type)
        if stated is not None:
            return self._from_stated(dtype, stated.dims)
        if probe_dims is None:
            initial = _loop_initial(value)
            if initial is not None:  # a loop-carried state keeps its initial shape (an RNN)
                first = self._info(initial)
                if first.rank is not None:
                    return dataclasses.replace(first, dtype=dtype or first.dtype)
            body = _from_bodies(value, self.rank)
            if body is not None:
                body_dtype, dims = body
                return _Info(dtype or body_dtype, len(dims), None, None, dims)
            return self._declared_only(value, dtype)
        if not self.symbols:
            estimate = None if None in probe_dims else cast("tuple[int, ...]", probe_dims)
            return _Info(dtype, len(probe_dims), estimate, estimate, probe_dims)
        scaled = self._inferred(value, _SCALE)
        return self._classify(dtype, probe_dims, scaled[1] if scaled is not None else None)

    def _classify(
        self,
        dtype: ir.DataType | None,
        probe_dims: tuple[int | None, ...],
        scaled_dims: tuple[int | None, ...] | None,
    ) -> _Info:
        """What the dims at the probe and doubled bindings say (see the module docstring)."""
        estimate = None if None in probe_dims else cast("tuple[int, ...]", probe_dims)
        symbolic: list[int | str | None] = []
        known = True
        for axis, size in enumerate(probe_dims):
            other = (
                scaled_dims[axis]
                if scaled_dims is not None and len(scaled_dims) == len(probe_dims)
                else None
            )
            if size is not None and other == size:
                symbolic.append(size)
                continue
            name = None
            if size is not None and other == size * _SCALE:
                candidates = self._probe_values.get(size, ())
                if len(candidates) == 1:
                    name = candidates[0]
            symbolic.append(name)
            if name is None or name not in self.dims:
                known = False
        planning = estimate if (known or not self.unbound) else None
        return _Info(dtype, len(probe_dims), planning, estimate, tuple(symbolic))

    def _from_stated(self, dtype: ir.DataType | None, dims: tuple[Dim, ...]) -> _Info:
        symbolic = tuple(d if isinstance(d, int) else d.text for d in dims)
        return _Info(
            dtype,
            len(dims),
            evaluate_dims(dims, self.dims),
            evaluate_dims(dims, self.probe_dims),
            symbolic,
        )

    @staticmethod
    def _declared_only(value: ir.Value, dtype: ir.DataType | None) -> _Info:
        shape = value.shape
        if shape is None:
            return _Info(dtype, None, None, None, None)
        symbolic = tuple(d if type(d) is int and d >= 0 else None for d in shape.dims)
        return _Info(dtype, len(symbolic), None, None, symbolic)

    def dtype(self, value: ir.Value) -> ir.DataType | None:
        """The dtype of ``value`` (stated, else inferred), or ``None``."""
        dtype = value.dtype
        if dtype is not None:
            return dtype
        return self._info(value).dtype

    def rank(self, value: ir.Value) -> int | None:
        """The rank of ``value``, or ``None`` when not even that is known."""
        return self._info(value).rank

    def shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """The shape at the planning dims; ``None`` when unknown or depending on an unbound dim."""
        return self._info(value).planning

    def dtype_and_shape(self, value: ir.Value) -> tuple[ir.DataType | None, tuple[int, ...] | None]:
        """:meth:`dtype` and :meth:`shape` of ``value`` in one lookup."""
        info = self._info(value)
        dtype = value.dtype
        return (info.dtype if dtype is None else dtype), info.planning

    def estimate(self, value: ir.Value) -> tuple[int, ...] | None:
        """The shape at :attr:`probe_dims` (every symbol bound); ``None`` if not inferable."""
        return self._info(value).estimate

    def symbolic(self, value: ir.Value) -> tuple[int | str | None, ...] | None:
        """The dims: static sizes, names or expressions of symbolic dims, or ``None``.

        ``None`` stands for a dynamic dim without a name; the whole result is ``None`` when
        the rank is unknown.

        A dim that ONNX inference found equal at the probe and doubled bindings is checked at
        a third one (every symbol times 3) before it is called static, when the value's type
        is inferred, not stated: a size such as ``floor((samples - 256) / 128) + 1`` (a
        strided ``Conv`` over audio) is the same at 128 and 256 samples but not at 384, and a
        stage input written with a wrong static dim is refused by onnxruntime at run time.
        """
        info = self._info(value)
        symbolic = info.symbolic
        if (
            symbolic is None
            or not self._runs  # the fast propagation answered: its arithmetic is exact
            or (self._propagation is not None and value in self._propagation.result)
            or not self.symbols
            or value.shape is not None
            or value in self._checked
            or not any(isinstance(d, int) for d in symbolic)
        ):
            return symbolic
        self._checked.add(value)
        third = self._inferred(value, _THIRD)
        dims = third[1] if third is not None else None
        if dims is None or len(dims) != len(symbolic) or info.estimate is None:
            return symbolic
        checked = tuple(
            None if isinstance(d, int) and size is not None and size != d else d
            for d, size in zip(symbolic, dims, strict=False)
        )
        if checked != symbolic:
            planning = None if self.unbound else info.planning
            self._cache[value] = dataclasses.replace(info, symbolic=checked, planning=planning)
        return checked

    def onnx_shape(self, value: ir.Value) -> ir.Shape | None:
        """:meth:`symbolic` as an :class:`onnx_ir.Shape` (names as ``dim_param``)."""
        symbolic = self.symbolic(value)
        if symbolic is None:
            return None
        return ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(d) for d in symbolic])
