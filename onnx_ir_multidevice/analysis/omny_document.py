"""The one builder of ``.omny`` documents from a graph, used by the planner and the reverse pass.

:func:`~onnx_ir_multidevice.planner.planning.plan` (cuts chosen by the memory model) and
:class:`~onnx_ir_multidevice.passes.reverse.StagesToOmnyPass` (cuts read from hand-set
pipeline stages) both describe their result as graph objects -- the cut tensors of each
configuration and the bytes of each stage -- and this module writes the document. Rules:

* **Tensors** (``inputs``, ``outputs``, cut points): the value's name; its shape with ``-1``
  for every symbolic dimension (the IR shape, else the one ONNX shape inference gives at the
  planning dims, else ``()`` when even the rank is unknown); its dtype spelled by
  :func:`~onnx_ir_multidevice.graph.dtypes.dtype_name` (inferred when the IR has none,
  ``"undefined"`` when not known). ``inputs`` leaves out graph inputs that are initializers
  (default values of IR < 4 models).
* **Model**: the given name, else the graph name, else ``"model"``; the architecture guessed
  from the op types (:func:`guess_architecture`); ``total_params`` and ``total_size_mb``
  over every initializer and ``Constant`` tensor, those inside subgraph bodies included.
* **Cut points**: those used by at least one configuration, in pipeline order; a cut point
  of an existing document with the same tensor and node keeps its id, the others get
  ``cut_<n>`` with the smallest free ``n``. ``after_node`` is the cut tensor's producer.
* **Memory**: every ``*_mb`` figure is MiB rounded up, never under-reported
  (:func:`~onnx_ir_multidevice.analysis.memory_units.to_mib`); the memory of a stage or a
  shard is at least 1 MiB (:func:`memory_mb`: the spec requires positive figures). A cut point's
  ``shard_memory_mb`` is the stage from the previous listed cut (or the model start) to it,
  ``cumulative_memory_mb`` the running sum of those. ``max_shard_size_mb`` is the caller's
  limit, else the largest shard of any configuration; ``min_vram_mb`` is that plus the runtime
  headroom. With an existing document, its limits are kept and its shard counts widened.
* **Export info**: now (UTC), this package's version, ``source_framework="onnx"``, the onnx
  version and the model's default-domain opset.

It belongs to the analysis layer (a pure function of the graph and the caller's figures), so
that the planner and the passes, above it, both import it downward.

What the stage bytes *are* is the caller's: the planner gives the full memory model (weights,
peak activations, input/output buffers, at the planning dims); the reverse pass the weights
and constants each stage reads (it has no cut analysis to model activations with).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "StagedConfiguration",
    "build_metadata",
    "export_info",
    "guess_architecture",
    "memory_mb",
    "model_info",
    "tensor_info",
    "weights",
]

import dataclasses
import datetime
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._version import __version__
from onnx_ir_multidevice.analysis.memory_units import DEFAULT_HEADROOM, MIB, required_bytes, to_mib
from onnx_ir_multidevice.analysis.ops import ATTENTION_OPS
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.graph.dtypes import dtype_name
from onnx_ir_multidevice.graph.index import OP_TYPE_OF, node_subgraphs, nodes_with_subgraphs
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)


@dataclasses.dataclass(frozen=True)
class StagedConfiguration:
    """One shard configuration as graph objects, ready to be written.

    .. versionadded:: 0.1
    """

    cuts: tuple[ir.Value, ...]
    """The cut tensors in pipeline order: cut ``j`` ends stage ``j`` (``num_shards - 1``)."""

    stage_bytes: tuple[int, ...]
    """Memory of each stage in bytes, in pipeline order (``num_shards`` entries)."""

    @property
    def num_shards(self) -> int:
        """Number of stages."""
        return len(self.stage_bytes)


def memory_mb(nbytes: int) -> int:
    """Return a stage's memory in MiB: rounded up, at least 1 (the spec wants it positive)."""
    return max(1, to_mib(nbytes))


def tensor_info(value: ir.Value, sizes: ValueSizes) -> TensorInfo:
    """Describe a graph value as a ``.omny`` tensor (see the module docstring).

    Args:
        value: A value of the graph ``sizes`` measures.
        sizes: Shapes and dtypes at the planning dims (inferred where the IR has none).
    """
    return TensorInfo(
        name=value.name or "",
        shape=sizes.static_shape(value) or (),
        dtype=dtype_name(sizes.dtype(value)),
    )


def weights(graph: ir.Graph, sizes: ValueSizes) -> tuple[int, int]:
    """Return the bytes and element count of every initializer and ``Constant``, bodies included.

    An initializer whose size is unknown at the planning dims is left out.
    """
    nbytes = 0
    count = 0

    def visit(g: ir.Graph) -> None:
        nonlocal nbytes, count
        values = list(getattr(g.initializers, "data", g.initializers).values())
        prod = math.prod
        for shape, n in zip(map(sizes.shape, values), map(sizes.nbytes, values), strict=True):
            if shape is not None and n is not None:
                nbytes += n
                count += prod(shape)
        nodes = list(g)
        for node in compress(nodes, map("Constant".__eq__, map(OP_TYPE_OF, nodes))):
            if node.domain == "":
                attr = node.attributes.get("value")
                if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                    nbytes += attr.value.nbytes
                    count += attr.value.size
        for node in nodes_with_subgraphs(nodes):
            for body in node_subgraphs(node):
                visit(body)

    visit(graph)
    return nbytes, count


_CONV_OPS = frozenset({"Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "NhwcConv"})
"""Convolutions, float and quantized (``QLinearConv`` of a QOperator export)."""

_RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})

_CAUSAL_OPS = frozenset({"Trilu", "Less", "LessOrEqual"})

_MATMUL_OPS = frozenset({"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"})


def _op_counts(graph: ir.Graph) -> Counter[str]:
    """Op types of ``graph`` and of every subgraph in it (an ``If`` of a merged decoder)."""
    ops: Counter[str] = Counter(map(OP_TYPE_OF, graph))
    for node in nodes_with_subgraphs(list(graph)):
        for body in node_subgraphs(node):
            ops.update(_op_counts(body))
    return ops


def _conv2d(graph: ir.Graph) -> bool:
    """Whether a convolution reads a 4-D input (an image; a 1-D convolution reads 3-D audio)."""
    for node in graph:
        if node.op_type in _CONV_OPS and node.inputs and node.inputs[0] is not None:
            shape = node.inputs[0].shape
            if shape is not None and len(shape) == 4:
                return True
    return False


def _has_kv_cache(graph: ir.Graph) -> bool:
    """Whether the graph carries a KV cache: integer ids in, 4-D float past states in or out."""
    ids = any(v.dtype is not None and v.dtype.is_integer() for v in graph.inputs)
    states = [*graph.inputs, *graph.outputs]
    return ids and any(
        v.dtype is not None and v.dtype.is_floating_point() and len(v.shape or ()) == 4
        for v in states
    )


def guess_architecture(graph: ir.Graph) -> str:
    """Guess the ``.omny`` ``architecture`` from the op types of the graph and its subgraphs.

    Returns one of:

    * ``"cnn"``: convolutions (quantized ones included), no attention;
    * ``"vision_transformer"``: attention and an image (a convolution over a 4-D input, or a
      4-D float input and no integer input);
    * ``"transformer_decoder"``: attention with a KV cache (integer ids in, 4-D float past
      states in or out) or a causal mask (``Trilu``, or a ``Less``/``LessOrEqual`` of two
      computed positions or of a window of a square constant);
    * ``"transformer_encoder"``: other attention (an audio encoder's 1-D convolutions
      included);
    * ``"rnn"`` (``LSTM``/``GRU``/``RNN``), ``"mlp"`` (matrix products only) or
      ``"unknown"``.

    Attention is a ``Softmax`` between two ``MatMul`` s or a fused attention op
    (:data:`~onnx_ir_multidevice.analysis.ops.ATTENTION_OPS`).

    .. versionadded:: 0.1
    """
    ops = _op_counts(graph)
    attention = (ops["Softmax"] > 0 and ops["MatMul"] >= 2) or not ATTENTION_OPS.isdisjoint(ops)
    if attention:
        return _transformer_kind(graph, ops)
    if not _CONV_OPS.isdisjoint(ops):
        return "cnn"
    if not _RECURRENT_OPS.isdisjoint(ops):
        return "rnn"
    if not _MATMUL_OPS.isdisjoint(ops):
        return "mlp"
    return "unknown"


def _transformer_kind(graph: ir.Graph, ops: Counter[str]) -> str:
    """``vision_transformer``, ``transformer_decoder`` or ``transformer_encoder``."""
    kv_cache = _has_kv_cache(graph)
    integer_input = any(v.dtype is not None and v.dtype.is_integer() for v in graph.inputs)
    image_input = not integer_input and any(len(v.shape or ()) == 4 for v in graph.inputs)
    if not kv_cache and (image_input or _conv2d(graph)):
        return "vision_transformer"
    if kv_cache or (not _CAUSAL_OPS.isdisjoint(ops) and _causal_mask(graph)):
        return "transformer_decoder"
    return "transformer_encoder"


def _causal_mask(graph: ir.Graph) -> bool:
    """Whether the graph or a subgraph builds a causal mask.

    A ``Trilu``; or a ``Less``/``LessOrEqual`` of two computed positions (a query position
    against a key position) or of a window sliced from a square constant (GPT-2's ``bias``
    buffer). T5's relative-position buckets compare a computed distance with a constant: no
    mask.
    """
    for node in ir.traversal.RecursiveGraphIterator(graph):
        if node.op_type == "Trilu":
            return True
        if node.op_type not in _CAUSAL_OPS:
            continue
        if any(_square_window(v) for v in node.inputs) or all(
            v is not None and v.const_value is None and not _is_constant_node(v.producer())
            for v in node.inputs
        ):
            return True
    return False


def _is_constant_node(node: ir.Node | None) -> bool:
    return node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _square_window(value: ir.Value | None) -> bool:
    """Whether ``value`` is a ``Slice`` of a constant whose last two axes are equal."""
    producer = value.producer() if value is not None else None
    if producer is None or producer.op_type != "Slice" or not producer.inputs:
        return False
    source = producer.inputs[0]
    tensor = source.const_value if source is not None else None
    dims = tensor.shape.numpy() if tensor is not None else ()  # a tensor's shape is static
    return len(dims) >= 2 and dims[-1] == dims[-2] > 1


def model_info(
    model: ir.Model, sizes: ValueSizes, *, name: str | None = None, inference_memory_bytes: int
) -> ModelInfo:
    """Describe the model: name, architecture, parameters, sizes (see the module docstring).

    Args:
        model: The model.
        sizes: Sizes of its main graph at the planning dims.
        name: The model name (default: the graph name, else ``"model"``).
        inference_memory_bytes: Memory of the whole model run on one device, in bytes.
    """
    graph = model.graph
    weights_bytes, params = weights(graph, sizes)
    return ModelInfo(
        name=name or graph.name or "model",
        architecture=guess_architecture(graph),
        total_params=params,
        total_size_mb=to_mib(weights_bytes),
        inference_memory_mb=to_mib(inference_memory_bytes),
    )


def _export_moment() -> datetime.datetime:
    """``SOURCE_DATE_EPOCH`` when set to whole seconds (reproducible builds), else now (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    return datetime.datetime.now(datetime.timezone.utc)


def export_info(model: ir.Model) -> ExportInfo:
    """Who wrote the document and when: now (or ``SOURCE_DATE_EPOCH``), this package, from ONNX."""
    return ExportInfo(
        exported_at=_export_moment().strftime("%Y-%m-%dT%H:%M:%SZ"),
        exporter_version=__version__,
        source_framework="onnx",
        source_version=onnx.__version__,
        onnx_opset=model.opset_imports.get("", 0),
    )


def _after_node(value: ir.Value) -> str:
    producer = value.producer()
    return (producer.name or "") if producer is not None else ""


def _cut_ids(values: Iterable[ir.Value], existing: OmnyMetadata | None) -> dict[ir.Value, str]:
    """Ids of the listed cut values: kept from ``existing`` when the cut is the same."""
    values = list(values)
    old: dict[tuple[str | None, str], str] = (
        {}
        if existing is None
        else {(c.tensor_name, c.after_node): c.id for c in existing.cut_points}
    )
    ids: dict[ir.Value, str] = {}
    used: set[str] = set()
    for value in values:
        cut_id = old.get((value.name, _after_node(value)))
        if cut_id is not None and cut_id not in used:
            ids[value] = cut_id
            used.add(cut_id)
    counter = 1
    for value in values:
        if value in ids:
            continue
        while f"cut_{counter}" in used:
            counter += 1
        ids[value] = f"cut_{counter}"
        used.add(ids[value])
    return ids


def _sharding(
    configurations: tuple[ShardConfiguration, ...],
    *,
    max_shard_size_mb: int | None,
    headroom: float,
    existing: Sharding | None,
) -> Sharding:
    counts = sorted({c.num_shards for c in configurations})
    if existing is not None:
        return dataclasses.replace(
            existing,
            min_shards=min(existing.min_shards, counts[0]),
            max_shards=max(existing.max_shards, counts[-1]),
            allowed_shards=tuple(sorted(set(existing.allowed_shards).union(counts))),
            configurations=configurations,
        )
    largest = max(max(c.memory_per_shard_mb) for c in configurations)
    limit = largest if max_shard_size_mb is None else max_shard_size_mb
    return Sharding(
        min_vram_mb=to_mib(required_bytes(limit * MIB, headroom)),
        max_shard_size_mb=limit,
        min_shards=counts[0],
        max_shards=counts[-1],
        allowed_shards=tuple(counts),
        configurations=configurations,
    )


def build_metadata(
    model: ir.Model,
    configurations: Sequence[StagedConfiguration],
    cut_bytes: Mapping[ir.Value, int],
    *,
    sizes: ValueSizes,
    inference_memory_bytes: int,
    name: str | None = None,
    max_shard_size_mb: int | None = None,
    headroom: float = DEFAULT_HEADROOM,
    existing: OmnyMetadata | None = None,
) -> OmnyMetadata:
    """Write the ``.omny`` document of ``configurations`` (see the module docstring).

    Args:
        model: The model the configurations cut.
        configurations: The shard configurations, in document order (at least one).
        cut_bytes: Every cut tensor used by a configuration, in pipeline order, mapped to the
            bytes of the stage from the previous listed cut (or the model start) to it.
        sizes: Shapes and dtypes of the main graph at the planning dims.
        inference_memory_bytes: Memory of the whole model on one device, in bytes.
        name: The model name (default: the graph name, else ``"model"``).
        max_shard_size_mb: The shard limit asked for (default: the largest shard).
        headroom: Share of a device kept for the runtime, for ``min_vram_mb``.
        existing: The document already on the model: its cut point ids, sharding limits and
            every section other than ``cut_points`` and ``sharding`` are kept.

    Returns:
        The document.

    Raises:
        ValueError: If ``configurations`` is empty or uses a cut missing from ``cut_bytes``.
    """
    if not configurations:
        raise ValueError("a .omny document needs at least one shard configuration")
    ids = _cut_ids(cut_bytes, existing)
    cut_points = []
    cumulative = 0
    for value, nbytes in cut_bytes.items():
        info = tensor_info(value, sizes)
        shard_mb = memory_mb(nbytes)
        cumulative += shard_mb
        cut_points.append(
            CutPoint(
                id=ids[value],
                after_node=_after_node(value),
                tensor_name=info.name,
                shape=info.shape,
                dtype=info.dtype,
                cumulative_memory_mb=cumulative,
                shard_memory_mb=shard_mb,
            )
        )
    try:
        shard_configurations = tuple(
            ShardConfiguration(
                num_shards=c.num_shards,
                memory_per_shard_mb=tuple(map(memory_mb, c.stage_bytes)),
                cut_point_ids=tuple(ids[v] for v in c.cuts),
            )
            for c in configurations
        )
    except KeyError as exc:
        raise ValueError(f"cut tensor {exc.args[0].name!r} is missing from cut_bytes") from None
    sharding = _sharding(
        shard_configurations,
        max_shard_size_mb=max_shard_size_mb,
        headroom=headroom,
        existing=None if existing is None else existing.sharding,
    )
    if existing is not None:
        return dataclasses.replace(existing, cut_points=tuple(cut_points), sharding=sharding)
    graph = model.graph
    initializers = set(getattr(graph.initializers, "data", graph.initializers).values())
    return OmnyMetadata(
        model=model_info(model, sizes, name=name, inference_memory_bytes=inference_memory_bytes),
        inputs=tuple(tensor_info(v, sizes) for v in graph.inputs if v not in initializers),
        outputs=tuple(tensor_info(v, sizes) for v in graph.outputs),
        cut_points=tuple(cut_points),
        sharding=sharding,
        export_info=export_info(model),
    )
