"""Memory model of pipeline stages (``ARCHITECTURE.md``, "Memory numbers").

A stage's memory, at the planning dims, is the sum of

* **weights**: the initializers and ``Constant`` tensors its nodes read, directly or through
  the replicable (constant-derived) computations it recomputes (a transposed or cast weight
  counts its source weight). A weight read by two stages counts in both.
* **activations**: the peak, over the stage's nodes in the planning order (a topological
  schedule), of the activations alive at once. An activation lives from its producer to its
  last reader, so the cut tensor received from the previous stage is alive from the stage's
  first node and the one sent to the next stage until its last node.
* **input/output buffers**: the graph inputs it reads, the cheap input-derived values
  (masks, position ids) it recomputes, and the graph outputs it produces (held until the
  pipeline ends).

What onnxruntime itself holds on top, measured on CPU (``docs/memory_accuracy.md``,
``benchmarks/memory_accuracy.py``), is :attr:`StageMemory.runtime_bytes`; the stage's
predicted resident memory is :attr:`StageMemory.resident_bytes`:

* a fixed cost per session, :data:`RUNTIME_OVERHEAD_BYTES` (the session's own structures,
  its thread pool and the code pages of the kernels it runs), plus
  :data:`RUNTIME_NODE_BYTES` per node (kernel objects, execution plan) and
  :data:`RUNTIME_OP_TYPE_BYTES` per distinct op type (kernel registrations and code first
  run);
* *reordered convolution weights*: onnxruntime's graph optimizer rewrites each constant
  ``Conv`` weight into its blocked channel layout (NCHWc) as a new tensor, and folds a
  following ``BatchNormalization`` into it as another new tensor; the weight read from the
  file stays resident beside them (:attr:`StageMemory.reordered_bytes`);
* *float16 upcasts*: onnxruntime's CPU provider has float16 kernels only for ops that move
  data (``_FLOAT16_CPU_OPS``); around any other op on float16 tensors it inserts casts
  and computes in float32, so such a value counts twice (:attr:`StageMemory.upcast_bytes`);
* *pre-packing*: while a session is created, onnxruntime's CPU kernels copy each constant
  weight of a MatMul, Gemm, Conv or recurrent layer into their own layout
  (:data:`PREPACKED_WEIGHT_INPUTS`) and release the original, so the largest such weight is
  held twice for a moment
  (:attr:`StageMemory.prepack_bytes`). No activation exists yet at that time: the stage
  needs the larger of the pre-packing copy and its activations plus buffers;
* *memory-mapped tables*: onnxruntime maps a model's external data file into memory and
  leaves a weight there unless a kernel pre-packs it; a table read only by ``Gather``
  (an embedding) becomes resident only around the rows read at the planning dims (up to
  2 MiB per row: the kernel maps the page-cache folio around a fault), the rest stays on disk
  (:attr:`StageMemory.mapped_bytes`, subtracted);
* *convolution workspace*: onnxruntime runs a CPU convolution in a blocked channel layout
  (NCHWc) or through a working buffer, so while the largest convolution of a stage runs, a
  copy of its input and output exists besides the activations
  (:attr:`StageMemory.workspace_bytes`).

The ``.omny`` shard memory (:attr:`StageMemory.total_bytes`) leaves these out, as the spec
does: they are what the headroom is for. The device must also keep *headroom* for the runtime
(arena, kernels' workspace): :attr:`StageMemory.required_bytes` is ``total / (1 - headroom)``,
so a 1200 MiB stage with the default 20 % needs a 1500 MiB device (the ``.omny`` spec's
1.2 GB shard / 1.5 GB VRAM).

A size that is not known at the planning dims is left out of the sums and *named* in
:attr:`StageMemory.unknown`; the totals are then lower bounds. MiB figures are rounded up.

The model is built once over the *segments* between consecutive chain cuts
(:attr:`~onnx_ir_multidevice.analysis.cut_points.CutAnalysis.chain`); a stage is a run of
segments ``[i, j)``. Additive parts are prefix sums, the activation peak a sparse-table range
maximum and weights shared between segments an explicit short list, so
:meth:`MemoryModel.total_bytes` answers a whole array of stages at once in
O(len * (1 + shared weights)).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_HEADROOM",
    "MIB",
    "PREPACKED_WEIGHT_INPUTS",
    "RUNTIME_NODE_BYTES",
    "RUNTIME_OP_TYPE_BYTES",
    "RUNTIME_OVERHEAD_BYTES",
    "MemoryModel",
    "StageMemory",
    "format_bytes",
    "required_bytes",
    "to_mib",
    "usable_bytes",
]

import bisect
import dataclasses
import math
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import chain, compress, repeat

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._util import format_bytes
from onnx_ir_multidevice.analysis.cut_points import CutAnalysis
from onnx_ir_multidevice.analysis.memory_units import (
    DEFAULT_HEADROOM,
    MIB,
    required_bytes,
    to_mib,
    usable_bytes,
)
from onnx_ir_multidevice.analysis.memory_units import headroom_fraction as _fraction
from onnx_ir_multidevice.analysis.ops import CONV_OPS, RECURRENT_OPS
from onnx_ir_multidevice.analysis.sparse_table import SparseTable
from onnx_ir_multidevice.analysis.sparse_table import floor_log2 as _floor_log2  # noqa: F401  (planner.partition)
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass
from onnx_ir_multidevice.graph.index import OP_TYPE_OF, node_subgraphs
from onnx_ir_multidevice.planner.flops import nodes_flops

PREPACKED_WEIGHT_INPUTS: Mapping[str, tuple[int, ...]] = {
    **dict.fromkeys(("MatMul", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat"), (1,)),
    **dict.fromkeys(("DynamicQuantizeMatMul", "MatMulNBits", "MatMulBnb4"), (1,)),
    "QLinearMatMul": (3,),
    **dict.fromkeys(("Gemm", "FusedGemm"), (1,)),
    "QGemm": (3,),
    **dict.fromkeys(("Conv", "FusedConv", "ConvInteger", "ConvTranspose"), (1,)),
    "QLinearConv": (3,),
    **dict.fromkeys(RECURRENT_OPS, (1, 2)),
    **dict.fromkeys(("Attention", "QAttention"), (1,)),
}
"""Inputs that onnxruntime's CPU kernels *pre-pack* when they are constant: while the session
is created, the kernel copies the weight into its own layout (MLAS packed GEMM panels,
reordered convolution filters), then the original is released. Keyed by op type (any
domain), the indices of the weight inputs."""

RUNTIME_OVERHEAD_BYTES = 11 * MIB
"""Resident memory an onnxruntime CPU session of a model with no weight adds to a process,
created and run once: 10.8 to 10.9 MiB measured for a one-``Add`` model with onnxruntime 1.32
on Linux x86-64 (median of 5 child processes, arena on or off), of which about 8.5 MiB are
code pages of the library that the session touches; 11.1 MiB fitted over the corpus stages.
Re-derive it with ``python benchmarks/memory_accuracy.py --derive``."""

_OUTPUTS = operator.attrgetter("outputs")
_PRODUCER = operator.methodcaller("producer")
_DENSE_SHARED = 1 << 22  # at most this many entries in the table of shared items
_ROW_RESIDENT_BYTES = 2 * MIB
"""What reading one row of a memory-mapped table may make resident, at most: the kernel maps
the page-cache folio around a faulting page, up to 2 MiB (a PMD) with large folios (Linux 6.x,
ext4). Measured on Linux 6.18: 1.5 MiB per row for a data file still in the page cache from
buffered writes (``save_split`` of an in-memory model), 64 KiB (``fault_around_bytes``) for
one written by ``save_split`` from external data or read cold. The bound is taken, so as never
to under-predict."""

RUNTIME_NODE_BYTES = 8 * 1024
"""Resident memory onnxruntime adds per node of a stage (its kernel object, its entries in
the execution plan). With :data:`RUNTIME_OP_TYPE_BYTES`, fitted by least squares over the
corpus stages whose sizes are all known and whose tensors are below 3 MiB (390 stages of 36
models, ``benchmarks/memory_accuracy.py``: 4 to 5 KiB per node and 43 to 53 KiB per op type,
residual 0.6 MiB rms), rounded up. A single cost per node (40 KiB, fitted on a few models
made of real layers) over-predicted the exports made mostly of shape arithmetic (600-node
stages of TorchScript and Optimum exports) by up to 80 %."""

RUNTIME_OP_TYPE_BYTES = 64 * 1024
"""Resident memory onnxruntime adds per distinct op type of a stage (the kernel's
registration and the code and data it touches the first time it runs); see
:data:`RUNTIME_NODE_BYTES`."""


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """Memory of one stage at the planning dims (see the module docstring).

    .. versionadded:: 0.1
    """

    weights_bytes: int
    """Initializers and constants read, replicable sources included."""

    activations_bytes: int
    """Peak of the activations alive at once."""

    io_bytes: int
    """Graph inputs and cheap input-derived values read, graph outputs produced."""

    headroom: float = DEFAULT_HEADROOM
    """Share of the device kept for the runtime."""

    unknown: tuple[str, ...] = ()
    """Names of values whose size is unknown (left out: the totals are lower bounds)."""

    prepack_bytes: int = 0
    """Largest weight onnxruntime's CPU kernels pre-pack (held twice while the session is
    created; see the module docstring)."""

    runtime_bytes: int = 0
    """What onnxruntime holds on top of :attr:`total_bytes`: its fixed cost per session, per
    node and per op type, the reordered convolution weights, and the larger of the
    convolution workspace and the pre-packing copy's excess over the activations and
    buffers."""

    mapped_bytes: int = 0
    """Weight bytes onnxruntime leaves untouched in the memory-mapped external data file:
    the rows of ``Gather``-only tables that are not read at the planning dims."""

    workspace_bytes: int = 0
    """Largest input plus output of a convolution of the stage: the copies onnxruntime's
    CPU convolutions make while they run (part of :attr:`runtime_bytes`)."""

    reordered_bytes: int = 0
    """Constant convolution weights onnxruntime holds again, rewritten by its graph
    optimizer: once in the blocked channel layout (NCHWc), once more when a
    ``BatchNormalization`` is folded into the weight (part of :attr:`runtime_bytes`)."""

    upcast_bytes: int = 0
    """Growth of the activation peak when the float16 values of ops with no float16 CPU
    kernel count as float32: onnxruntime casts around such ops (part of
    :attr:`runtime_bytes`)."""

    @property
    def total_bytes(self) -> int:
        """Weights + peak activations + buffers: the ``.omny`` shard memory."""
        return self.weights_bytes + self.activations_bytes + self.io_bytes

    @property
    def resident_bytes(self) -> int:
        """Predicted resident memory of the stage's onnxruntime CPU session, created and run once.

        That is :attr:`total_bytes` + :attr:`runtime_bytes` - :attr:`mapped_bytes`, for a
        stage whose weights are in an external data file, as
        :func:`~onnx_ir_multidevice.save_split` writes them.
        """
        return self.total_bytes + self.runtime_bytes - self.mapped_bytes

    @property
    def required_bytes(self) -> int:
        """Device memory needed: :attr:`total_bytes` plus the runtime headroom."""
        return required_bytes(self.total_bytes, self.headroom)

    @property
    def total_mb(self) -> int:
        """:attr:`total_bytes` in MiB, rounded up."""
        return to_mib(self.total_bytes)

    @property
    def required_mb(self) -> int:
        """:attr:`required_bytes` in MiB, rounded up."""
        return to_mib(self.required_bytes)

    @property
    def complete(self) -> bool:
        """Whether every size was known (the totals are exact, not lower bounds)."""
        return not self.unknown


class MemoryModel:
    """Memory (and FLOPs) of every stage ``[i, j)`` of segments along the planning chain.

    Segment ``s`` holds the nodes of :attr:`CutAnalysis.order` between chain boundary
    ``s - 1`` and ``s`` (segment 0 starts at the first node, the last ends at the last).

    Args:
        analysis: The cut-point analysis of the graph.
        headroom: Share of device memory kept for the runtime, in ``[0, 1)``.
        runtime_bytes: onnxruntime's fixed cost per session (:data:`RUNTIME_OVERHEAD_BYTES`).
        node_bytes: onnxruntime's cost per node (:data:`RUNTIME_NODE_BYTES`).
        op_type_bytes: onnxruntime's cost per distinct op type (:data:`RUNTIME_OP_TYPE_BYTES`).

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        analysis: CutAnalysis,
        *,
        headroom: float = DEFAULT_HEADROOM,
        runtime_bytes: int = RUNTIME_OVERHEAD_BYTES,
        node_bytes: int = RUNTIME_NODE_BYTES,
        op_type_bytes: int = RUNTIME_OP_TYPE_BYTES,
    ) -> None:
        _fraction(headroom)
        self.analysis = analysis
        self.headroom = headroom
        self.runtime_bytes = runtime_bytes
        self.node_bytes = node_bytes
        self.op_type_bytes = op_type_bytes
        self.sizes = analysis.sizes
        self._initializers = set(analysis.graph.initializers.values())
        self._replicable = set(analysis.replicable_nodes)
        order = analysis.order
        self.starts = (0, *analysis.boundaries)
        self.ends = (*analysis.boundaries, len(order))
        self.num_segments = len(self.starts)
        segment_of = np.zeros(len(order), dtype=np.int64)
        for s, (a, b) in enumerate(zip(self.starts, self.ends, strict=True)):
            segment_of[a:b] = s
        self._segment_of = segment_of
        self._position = dict(
            zip(order, range(len(order)), strict=True)
        )  # node -> index in the order
        self._op_types: list[str] | None = None
        self._unknown: list[dict[str, None]] = [{} for _ in range(self.num_segments)]
        #: The values whose size is unknown, by the name :attr:`StageMemory.unknown` gives.
        self.unknown_values: dict[str, ir.Value] = {}
        self._weights = np.zeros(self.num_segments, dtype=np.int64)
        self._io = np.zeros(self.num_segments, dtype=np.int64)
        self._shared: list[tuple[int, bool, np.ndarray]] = []  # bytes, is_weight, segments
        self._shared_first: np.ndarray | None = None  # see _count_items
        self._stages: dict[tuple[int, int], StageMemory] = {}  # stage(i, j), immutable
        self._shared_bytes = np.zeros(0, dtype=np.int64)
        self._shared_weight = np.zeros(0, dtype=bool)
        self._count_items()
        self._count_activations()
        self._flops = np.zeros(self.num_segments, dtype=np.int64)
        self.unknown_flops: tuple[str, ...] = self._count_flops()
        self._prefix_weights = np.concatenate([[0], np.cumsum(self._weights)])
        self._prefix_io = np.concatenate([[0], np.cumsum(self._io)])
        self._prefix_additive = self._prefix_weights + self._prefix_io
        self._prefix_flops = np.concatenate([[0], np.cumsum(self._flops)])
        self._peak_table = SparseTable(self._peak, "max")
        self._upcast_table = SparseTable(self._peak_upcast, "max")
        self._prepack_table = SparseTable(self._count_prepacked(), "max")
        self._workspace_table = SparseTable(self._count_workspace(), "max")
        self._prefix_mapped = np.concatenate([[0], np.cumsum(self._count_mapped())])
        self._op_masks, body_nodes = self._count_op_types()
        self._prefix_nodes = np.concatenate(
            [[0], np.cumsum(np.asarray(self.ends) - np.asarray(self.starts) + body_nodes)]
        )
        self._prefix_reordered = np.concatenate([[0], np.cumsum(self._count_reordered())])
        self._with_unknown = [s for s, names in enumerate(self._unknown) if names]

    # -- construction -----------------------------------------------------------------------

    def _nbytes(self, value: ir.Value) -> int | None:
        n = self.sizes.nbytes(value)
        if n is None:
            producer = value.producer()
            if producer is not None and producer.op_type == "Constant":
                attr = producer.attributes.get("value")
                if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.TENSOR:
                    return attr.value.nbytes
        return n

    def _count_items(self) -> None:
        """Weights and buffers: which segments read each, then additive or shared.

        Four steps: what a stage holds to read each value (:class:`_HeldItems`), which
        segments read each item, each item's bytes added to its one segment or kept as
        shared, and the graph outputs, held by their producing stage.
        """
        held = _HeldItems(self.analysis, self._nbytes)
        if held.with_bodies is not None and not held.with_bodies:
            item_segments = self._item_segments_flat(held)
        else:
            item_segments = self._item_segments(held)
        self._add_items(item_segments, held)
        self._index_shared()
        self._count_graph_outputs()

    def _item_segments_flat(self, held: _HeldItems) -> dict[ir.Value, set[int]]:
        """The segments reading each item, when no node of the graph holds a subgraph.

        :meth:`_item_segments` over one flat list of reads (no body constants come in between).
        """
        item_segments: dict[ir.Value, set[int]] = {}
        uses = self.analysis.uses
        uses_list = list(map(uses.__getitem__, self.analysis.order))
        reads = list(chain.from_iterable(uses_list))
        read_segments = chain.from_iterable(
            map(repeat, self._segment_of.tolist(), map(len, uses_list))
        )
        get = item_segments.get
        replicable, value_items = held.replicable, held.value_items
        for value, producer, segment in zip(
            reads, map(_PRODUCER, reads), read_segments, strict=True
        ):
            if producer is None:  # a weight or a graph input
                segments = get(value)
                if segments is None:
                    item_segments[value] = {segment}
                else:
                    segments.add(segment)
            elif producer in replicable:
                for item in value_items(value)[0]:
                    _add_segment(item_segments, item, segment)
        return item_segments

    def _item_segments(self, held: _HeldItems) -> dict[ir.Value, set[int]]:
        """The segments reading each item: weights, graph inputs, and body constants."""
        item_segments: dict[ir.Value, set[int]] = {}
        uses = self.analysis.uses
        segment_of = self._segment_of.tolist()
        for position, node in enumerate(self.analysis.order):
            segment = segment_of[position]
            for value in uses[node]:
                for item in held.read_items(value):
                    _add_segment(item_segments, item, segment)
            if held.has_bodies(node):
                for body in node_subgraphs(node):
                    for item in _body_constants(body):
                        _add_segment(item_segments, item, segment)
        return item_segments

    def _add_items(self, item_segments: Mapping[ir.Value, set[int]], held: _HeldItems) -> None:
        """Add each item's bytes to its segment, or keep it as shared.

        An item one segment reads adds to that segment's weights or I/O; one that several
        read is shared (counted once by any stage holding one of its segments).
        """
        weights = [0] * self.num_segments  # Python ints, added to the arrays once below
        io = [0] * self.num_segments
        for item, segments in item_segments.items():
            n = self._nbytes(item)
            if n is None:
                self._note_unknown(item, segments)
                continue
            is_weight = held.is_weight(item)
            if len(segments) == 1:
                (s,) = segments
                if is_weight:
                    weights[s] += n
                else:
                    io[s] += n
            else:
                # Sorted segments, then a sentinel no stage end reaches.
                ordered = np.array([*sorted(segments), self.num_segments + 1], dtype=np.int64)
                self._shared.append((n, is_weight, ordered))
        self._weights += np.asarray(weights, dtype=np.int64)
        self._io += np.asarray(io, dtype=np.int64)

    def _index_shared(self) -> None:
        """The dense table of shared items, when it is small enough (:data:`_DENSE_SHARED`).

        The first segment at or after each i (the sentinel when none), for any i: one row per
        shared item, so that a query is a few array operations for all items.
        """
        if not self._shared or len(self._shared) * (self.num_segments + 1) > _DENSE_SHARED:
            return
        starts = np.arange(self.num_segments + 1)
        self._shared_first = np.stack(
            [ordered.take(np.searchsorted(ordered, starts)) for _, _, ordered in self._shared]
        )
        self._shared_bytes = np.array([n for n, _, _ in self._shared], dtype=np.int64)
        self._shared_weight = np.array([w for _, w, _ in self._shared], dtype=bool)

    def _count_graph_outputs(self) -> None:
        """Graph outputs are held by the stage producing them until the pipeline ends."""
        position_of = self._position
        for value in self.analysis.graph.outputs:
            producer = value.producer()
            if producer is None or producer not in position_of:
                continue
            s = int(self._segment_of[position_of[producer]])
            n = self._nbytes(value)
            if n is None:
                self._note_unknown(value, (s,))
            else:
                self._io[s] += n

    def _note_unknown(self, value: ir.Value, segments: Iterable[int]) -> None:
        """Record that ``value``, held by ``segments``, has an unknown size."""
        name = value.name or "<unnamed>"
        for s in segments:
            self._unknown[s][name] = None
        self.unknown_values[name] = value

    def _count_activations(self) -> None:
        """Peak live activation bytes of each segment, one sweep over the planning order.

        Also the peak with float16 values counted twice where onnxruntime upcasts them
        (:data:`_FLOAT16_CPU_OPS`).
        """
        made, values, ends, amounts = self._known_lifetimes(*self._lifetimes())
        order = self.analysis.order
        delta = np.zeros(len(order) + 1, dtype=np.int64)
        if amounts:
            weights = np.asarray(amounts, dtype=np.int64)
            np.add.at(delta, np.asarray(made, dtype=np.int64), weights)
            np.add.at(delta, np.asarray(ends, dtype=np.int64) + 1, -weights)
        self._peak = self._segment_peaks(delta)
        # float16 values computed by an op with no float16 CPU kernel: onnxruntime casts
        # around the op and computes in float32, so the value counts twice its bytes.
        dtype = self.sizes.dtype
        float16 = ir.DataType.FLOAT16
        extra = [
            (made[k], ends[k], amounts[k])
            for k, value in enumerate(values)
            if dtype(value) == float16 and order[made[k]].op_type not in _FLOAT16_CPU_OPS
        ]
        self._peak_upcast = self._peak
        if extra:
            for start, end, n in extra:
                delta[start] += n
                delta[end + 1] -= n
            self._peak_upcast = self._segment_peaks(delta)

    def _lifetimes(self) -> tuple[list[int], list[ir.Value], list[int], list[int | None]]:
        """Each node output of the order: made at, value, last read at, bytes (or ``None``)."""
        order = self.analysis.order
        uses = self.analysis.uses
        # Position of the last reader of each value (later readers overwrite earlier ones);
        # only node outputs are looked up, so other values read do no harm.
        uses_list = list(map(uses.__getitem__, order))
        last_read = dict(
            zip(
                chain.from_iterable(uses_list),
                chain.from_iterable(map(repeat, range(len(order)), map(len, uses_list))),
                strict=True,
            )
        )
        outputs = self._order_outputs()
        made = [i for i, values in enumerate(outputs) for _ in values]
        values = list(chain.from_iterable(outputs))
        ends = list(map(last_read.get, values, made))
        amounts = list(map(self.sizes.nbytes, values))
        return made, values, ends, amounts

    def _known_lifetimes(
        self,
        made: list[int],
        values: list[ir.Value],
        ends: list[int],
        amounts: list[int | None],
    ) -> tuple[list[int], list[ir.Value], list[int], list[int]]:
        """The lifetimes whose size is known; the others are noted unknown where they live.

        A ``Constant``'s output is sized by its own tensor (:meth:`_nbytes`).
        """
        if None not in amounts:
            return made, values, ends, [n for n in amounts if n is not None]
        op_types = self._order_op_types()
        segment_of = self._segment_of.tolist()
        for k in [k for k, n in enumerate(amounts) if n is None]:
            i = made[k]
            if op_types[i] == "Constant":
                amounts[k] = self._nbytes(values[k])
                if amounts[k] is not None:
                    continue
            self._note_unknown(values[k], range(segment_of[i], segment_of[ends[k]] + 1))
        known = [k for k, n in enumerate(amounts) if n is not None]
        return (
            [made[k] for k in known],
            [values[k] for k in known],
            [ends[k] for k in known],
            [n for n in amounts if n is not None],
        )

    def _segment_peaks(self, delta: np.ndarray) -> np.ndarray:
        """Peak of each segment of the live bytes whose changes along the order are ``delta``."""
        live = np.cumsum(delta[:-1])
        peak = np.zeros(self.num_segments, dtype=np.int64)
        starts = np.asarray(self.starts, dtype=np.int64)
        nonempty = starts < np.asarray(self.ends, dtype=np.int64)
        if nonempty.any():
            peak[nonempty] = np.maximum.reduceat(live, starts[nonempty])
        return peak

    def _count_prepacked(self) -> np.ndarray:
        """Largest pre-packed weight of each segment.

        That is a weight, or a value computed from weights only (a transposed weight), read at
        a :data:`PREPACKED_WEIGHT_INPUTS` input.
        """
        prepack = np.zeros(self.num_segments, dtype=np.int64)
        analysis = self.analysis
        initializers = _initializer_set(analysis)
        replicable = set(analysis.replicable_nodes)
        from_weights: dict[ir.Node, bool] = {}

        def is_weight(value: ir.Value) -> bool:
            producer = value.producer()
            if producer is None:
                return value in initializers or value.const_value is not None
            if producer not in replicable:
                return False  # an activation
            if producer not in from_weights:
                from_weights[producer] = all(
                    v in initializers or v.const_value is not None for v in _cone_sources(producer)
                )
            return from_weights[producer]

        segment_of = self._segment_of
        order = analysis.order
        for position in self._positions_of(PREPACKED_WEIGHT_INPUTS):
            node = order[position]
            indices = PREPACKED_WEIGHT_INPUTS[node.op_type]
            for index in indices:
                value = node.inputs[index] if index < len(node.inputs) else None
                if value is None or not is_weight(value):
                    continue
                n = self._nbytes(value)
                s = int(segment_of[position])
                if n is not None and n > prepack[s]:
                    prepack[s] = n
        return prepack

    def _order_op_types(self) -> list[str]:
        """The op type of each node of the planning order (from the index when there is one)."""
        if self._op_types is None:
            analysis = self.analysis
            if analysis.index is not None and analysis.order_positions:
                by_position = analysis.index.op_types
                self._op_types = list(map(by_position.__getitem__, analysis.order_positions))
            else:
                self._op_types = list(map(OP_TYPE_OF, analysis.order))
        return self._op_types

    def _order_outputs(self) -> list[Sequence[ir.Value]]:
        """The outputs of each node of the planning order (from the index when there is one)."""
        analysis = self.analysis
        if analysis.index is not None and analysis.order_positions:
            by_position = analysis.index.outputs_at
            return list(map(by_position.__getitem__, analysis.order_positions))
        return list(map(_OUTPUTS, analysis.order))

    def _positions_of(self, op_types: Collection[str]) -> list[int]:
        """Positions in the planning order of the nodes whose op type is in ``op_types``."""
        types = self._order_op_types()
        return list(compress(range(len(types)), map(op_types.__contains__, types)))

    def _count_workspace(self) -> np.ndarray:
        """Largest input plus output of a convolution (:data:`CONV_OPS`) of each segment."""
        workspace = np.zeros(self.num_segments, dtype=np.int64)
        segment_of = self._segment_of
        order = self.analysis.order
        for position in self._positions_of(CONV_OPS):
            node = order[position]
            if not node.inputs or node.inputs[0] is None:
                continue
            sizes = [self._nbytes(node.inputs[0]), self._nbytes(node.outputs[0])]
            if None in sizes:
                continue
            s = int(segment_of[position])
            workspace[s] = max(workspace[s], sum(sizes))  # type: ignore[arg-type]  # None in sizes: skipped above
        return workspace

    def _count_mapped(self) -> np.ndarray:
        """Untouched bytes of each segment's ``Gather``-only tables (see the module docstring).

        A table counts when every reader is a ``Gather`` on axis 0 taking it as data, all in
        one segment; the rows read are the index elements at the planning dims, each
        making up to :data:`_ROW_RESIDENT_BYTES` resident.
        """
        mapped = np.zeros(self.num_segments, dtype=np.int64)
        analysis = self.analysis
        order = analysis.order
        # Only a table read by some Gather of the planning order can count: start from those.
        position = {
            order[k]: k for k, op in enumerate(self._order_op_types()) if op == "Gather"
        }  # a use that is no Gather of the order means no mapping: only these positions count
        if not position:
            return mapped
        initializers = _plain(analysis.graph.initializers)
        tables = {node.inputs[0] for node in position if node.inputs}
        for value in initializers.values():
            if value in tables:
                found = self._mapped_table(value, position)
                if found is not None:
                    segment, untouched = found
                    mapped[segment] += untouched
        return mapped

    def _mapped_table(
        self, value: ir.Value, position: Mapping[ir.Node, int]
    ) -> tuple[int, int] | None:
        """The segment of a ``Gather``-only table and its untouched bytes, else ``None``.

        Args:
            value: An initializer some ``Gather`` of the planning order reads.
            position: Each ``Gather`` of the planning order -> its position in the order.
        """
        tensor = value.const_value
        shape: Sequence[int] = tensor.shape.numpy() if tensor is not None else ()
        if tensor is None or len(shape) < 1 or shape[0] < 1:
            return None
        uses = value.uses()
        if not uses:
            return None
        touched, segments = 0, set()
        row_bytes = tensor.nbytes // shape[0]
        for node, index in uses:
            axis = node.attributes.get_int("axis", 0) if node.op_type == "Gather" else None
            indices = node.inputs[1] if axis == 0 and index == 0 and len(node.inputs) > 1 else None
            rows = None if indices is None else self.sizes.shape(indices)
            if rows is None or node not in position:
                return None
            touched += math.prod(rows) * max(row_bytes, _ROW_RESIDENT_BYTES)
            segments.add(int(self._segment_of[position[node]]))
        if len(segments) != 1:
            return None
        return segments.pop(), max(0, tensor.nbytes - touched)

    def _count_reordered(self) -> np.ndarray:
        """Reordered convolution weight bytes of each segment (see the module docstring).

        A constant float weight of a ``Conv`` counts once (its NCHWc copy), twice when the
        convolution's only reader is a ``BatchNormalization`` (the folded copy too).
        """
        reordered = np.zeros(self.num_segments, dtype=np.int64)
        segment_of = self._segment_of
        for position, node in enumerate(self.analysis.order):
            if node.op_type not in _REORDERED_CONV_OPS or len(node.inputs) < 2:
                continue
            weight = node.inputs[1]
            if weight is None or self.sizes.dtype(weight) not in _FLOAT_TYPES:
                continue
            if not self._constant(weight):
                continue
            n = self._nbytes(weight)
            if n is None:
                continue
            readers = node.outputs[0].uses() if node.outputs else ()
            folded = len(readers) == 1 and next(iter(readers))[0].op_type == "BatchNormalization"
            reordered[int(segment_of[position])] += n * (2 if folded else 1)
        return reordered

    def _constant(self, value: ir.Value) -> bool:
        """Whether ``value`` is a weight or computed from weights only."""
        producer = value.producer()
        if producer is None:
            return value.const_value is not None or value in self._initializers
        if producer not in self._replicable:
            return False
        return all(
            v.const_value is not None or v in self._initializers for v in _cone_sources(producer)
        )

    def _count_op_types(self) -> tuple[list[int], np.ndarray]:
        """Op types of each segment (a bit mask) and nodes of its ``If``/``Loop``/``Scan`` bodies.

        onnxruntime makes a kernel for each node of a body too.
        """
        bits: dict[tuple[str, str], int] = {}
        masks = [0] * self.num_segments
        body_nodes = np.zeros(self.num_segments, dtype=np.int64)
        segment_of = self._segment_of.tolist()
        index = self.analysis.index
        with_bodies = None if index is None else {node for node, _ in index.bodies}
        for position, node in enumerate(self.analysis.order):
            s = segment_of[position]
            masks[s] |= bits.setdefault((node.domain, node.op_type), 1 << len(bits))
            if (node in with_bodies) if with_bodies is not None else bool(node.attributes):
                for inner in _body_nodes(node):
                    masks[s] |= bits.setdefault((inner.domain, inner.op_type), 1 << len(bits))
                    body_nodes[s] += 1
        return masks, body_nodes

    def _count_flops(self) -> tuple[str, ...]:
        """FLOPs per segment, and the nodes whose count the planning dims leave unknown.

        Those are counted at the probe dims, so that the cuts still balance compute.
        """
        unknown = []
        flops = [0] * self.num_segments
        segment_of = self._segment_of.tolist()
        order = self.analysis.order
        index = self.analysis.index
        with_bodies = None if index is None else {node for node, _ in index.bodies}
        op_types = self._order_op_types()
        counts = nodes_flops(order, self.sizes, with_bodies, op_types)
        missing = [i for i, count in enumerate(counts) if count is None]
        if missing:  # counted at the probe dims, to choose cuts (one call for all of them)
            estimates = nodes_flops(
                [order[i] for i in missing],
                self.sizes,
                with_bodies,
                [op_types[i] for i in missing],
                estimate=True,
            )
            for i, count in zip(missing, estimates, strict=True):
                node = order[i]
                unknown.append(node.name or node.op_type)
                counts[i] = count
        for i, count in enumerate(counts):
            if count is not None:
                flops[segment_of[i]] += count
        self._flops += np.asarray(flops, dtype=np.int64)
        return tuple(unknown)

    # -- queries ----------------------------------------------------------------------------

    def _shared_sum(self, i: np.ndarray, j: np.ndarray, weights: bool | None) -> np.ndarray:
        if self._shared_first is not None:
            first, amounts = self._shared_first, self._shared_bytes
            if weights is not None:
                keep = self._shared_weight == weights
                first, amounts = first[keep], amounts[keep]
            # Counted when the first segment at or after ``i`` comes before ``j``.
            return amounts @ (first[:, i] < j)
        total = np.zeros(len(i), dtype=np.int64)
        for n, is_weight, segments in self._shared:
            if weights is not None and is_weight != weights:
                continue
            # The first segment at or after ``i`` (a sentinel past every ``j`` when none).
            first = segments.take(np.searchsorted(segments, i))
            total += (first < j) * n
        return total

    def total_bytes(self, i: Iterable[int], j: Iterable[int]) -> np.ndarray:
        """:attr:`StageMemory.total_bytes` of the stages ``[i[k], j[k])``, vectorized.

        Args:
            i: First segment of each stage.
            j: One past the last segment of each stage (``j > i``).
        """
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        total = self._prefix_additive[j] - self._prefix_additive[i]
        total += self._peak_table.query(i, j)
        if self._shared:
            total += self._shared_sum(i, j, None)
        return total

    def flops(self, i: Iterable[int], j: Iterable[int]) -> np.ndarray:
        """Estimated FLOPs of the stages ``[i[k], j[k])``, vectorized."""
        i = np.asarray(i, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        return self._prefix_flops[j] - self._prefix_flops[i]

    def stage(self, i: int, j: int) -> StageMemory:
        """The memory of the stage made of segments ``[i, j)``, broken down.

        Raises:
            ValueError: If not ``0 <= i < j <= num_segments``.
        """
        if not 0 <= i < j <= self.num_segments:
            raise ValueError(
                f"a stage is a non-empty run of segments [i, j) with 0 <= i < j <= "
                f"{self.num_segments}, got [{i}, {j})"
            )
        cached = self._stages.get((i, j))
        if cached is not None:
            return cached
        a, b = np.array([i]), np.array([j])
        weights = int(self._prefix_weights[j] - self._prefix_weights[i])
        weights += int(self._shared_sum(a, b, True)[0])
        io = int(self._prefix_io[j] - self._prefix_io[i]) + int(self._shared_sum(a, b, False)[0])
        with_unknown = self._with_unknown
        segments = with_unknown[
            bisect.bisect_left(with_unknown, i) : bisect.bisect_left(with_unknown, j)
        ]
        unknown = dict.fromkeys(chain.from_iterable(map(self._unknown.__getitem__, segments)))
        activations = int(self._peak_table.query(a, b)[0])
        prepack = int(self._prepack_table.query(a, b)[0])
        nodes = int(self._prefix_nodes[j] - self._prefix_nodes[i])
        mask = 0
        for s in range(i, j):
            mask |= self._op_masks[s]
        op_types = bin(mask).count("1")
        workspace = int(self._workspace_table.query(a, b)[0])
        reordered = int(self._prefix_reordered[j] - self._prefix_reordered[i])
        upcast = int(self._upcast_table.query(a, b)[0]) - activations
        runtime = self.runtime_bytes + nodes * self.node_bytes + op_types * self.op_type_bytes
        runtime += reordered + upcast + max(workspace, prepack - activations - io)
        mapped = int(self._prefix_mapped[j] - self._prefix_mapped[i])
        stage = self._stages[(i, j)] = StageMemory(
            weights_bytes=weights,
            activations_bytes=activations,
            io_bytes=io,
            headroom=self.headroom,
            unknown=tuple(unknown),
            prepack_bytes=prepack,
            runtime_bytes=runtime,
            mapped_bytes=mapped,
            workspace_bytes=workspace,
            reordered_bytes=reordered,
            upcast_bytes=upcast,
        )
        return stage

    def whole(self) -> StageMemory:
        """The memory of the whole model run as one stage."""
        return self.stage(0, self.num_segments)

    def segment_of(self, node: ir.Node) -> int | None:
        """The segment holding ``node``.

        ``None`` for a replicable node (which no segment owns) or a node of another graph.
        """
        position = self._position.get(node)
        return None if position is None else int(self._segment_of[position])


_REORDERED_CONV_OPS = frozenset({"Conv", "FusedConv"})
"""Convolutions whose constant weight onnxruntime's NCHWc optimizer rewrites (float only)."""

_FLOAT_TYPES = frozenset({ir.DataType.FLOAT})

_FLOAT16_CPU_OPS = frozenset(
    {"Cast", "CastLike", "Concat", "Expand", "Flatten", "Gather", "GatherElements", "Identity",
     "Reshape", "Shape", "Slice", "Split", "Squeeze", "Tile", "Transpose", "Unsqueeze",
     "Constant", "ConstantOfShape", "If", "Loop", "Scan"}
)  # fmt: skip
"""Op types onnxruntime's CPU provider runs on float16 tensors as they are (moving data, not
computing with it); for every other op it inserts casts to and from float32."""


class _HeldItems:
    """What a stage holds to read a value: the weights and graph inputs it is computed from.

    A replicable node is recomputed by each stage reading it, so a stage reading its output
    holds the node's own sources instead. A value computed from a graph input is itself held
    (a buffer); so is a value larger than what it is computed from (``ConstantOfShape``,
    ``Expand``, ``Tile``...), which onnxruntime holds folded or computed.

    Args:
        analysis: The cut-point analysis of the graph.
        nbytes: The byte size of a value, ``None`` when unknown.
    """

    def __init__(self, analysis: CutAnalysis, nbytes: Callable[[ir.Value], int | None]) -> None:
        self.initializers = _initializer_set(analysis)
        self.replicable = set(analysis.replicable_nodes)
        self.classes = analysis.classes
        index = analysis.index
        #: The nodes holding a subgraph (``None`` without an index: any node with attributes).
        self.with_bodies = None if index is None else {node for node, _ in index.bodies}
        self._nbytes = nbytes
        self._uses = analysis.uses
        #: Replicable node -> the items its reads need, and whether a graph input is among them.
        self.memo: dict[ir.Node, tuple[frozenset[ir.Value], bool]] = {}
        for node in analysis.replicable_nodes:  # topological: sources before users
            self.memo[node] = self._node_items(node)

    def has_bodies(self, node: ir.Node) -> bool:
        """Whether ``node`` may hold a subgraph (``If``, ``Loop``, ``Scan``...)."""
        if self.with_bodies is not None:
            return node in self.with_bodies
        return bool(node.attributes)

    def value_items(self, value: ir.Value) -> tuple[frozenset[ir.Value], bool]:
        """Items a stage holds to have ``value``, and whether a graph input is among them."""
        producer = value.producer()
        if producer is None:
            if value in self.initializers or value.const_value is not None:
                return frozenset((value,)), False
            return frozenset((value,)), True  # a graph input
        if producer not in self.replicable:
            return frozenset(), False  # an activation: counted by liveness
        items, from_input = self.memo[producer]
        if not producer.inputs or not items:
            return items | {value}, False  # a Constant-like source: the value is a weight
        if not from_input and _generates(producer, value, self._nbytes):
            return items | {value}, False
        return (items | {value} if from_input else items), from_input

    def read_items(self, value: ir.Value) -> Iterable[ir.Value]:
        """Items a stage holds to read ``value`` (none for an activation)."""
        producer = value.producer()
        if producer is None:
            return (value,)  # a weight or a graph input
        if producer in self.replicable:
            return self.value_items(value)[0]
        return ()  # an activation: counted by liveness

    def is_weight(self, item: ir.Value) -> bool:
        """Whether ``item`` is a weight (constant-derived), rather than a buffer."""
        producer = item.producer()
        if producer is not None and producer in self.memo:
            # A replicable node output: a weight when constant-derived, else a buffer.
            return not self.memo[producer][1]
        # (A Constant inside an If/Loop body is produced by no main-graph node: a weight.)
        return item in self.initializers or self.classes.get(item) is not TensorClass.FORWARDED

    def _node_items(self, node: ir.Node) -> tuple[frozenset[ir.Value], bool]:
        items: set[ir.Value] = set()
        from_input = False
        for value in self._uses[node]:
            producer = value.producer()
            if producer is not None and producer not in self.replicable:
                continue  # an activation: counted by liveness
            inner, flag = self.value_items(value)
            items |= inner
            from_input |= flag
        if self.has_bodies(node):
            for body in node_subgraphs(node):
                items.update(_body_constants(body))
        return frozenset(items), from_input


def _add_segment(item_segments: dict[ir.Value, set[int]], item: ir.Value, segment: int) -> None:
    """Add ``segment`` to the segments reading ``item``."""
    segments = item_segments.get(item)
    if segments is None:
        item_segments[item] = {segment}
    else:
        segments.add(segment)


def _generates(
    producer: ir.Node, value: ir.Value, nbytes: Callable[[ir.Value], int | None]
) -> bool:
    """Whether ``value`` is larger than all of ``producer``'s inputs together."""
    n = nbytes(value)
    if n is None:
        return False
    sizes = [0 if v is None else nbytes(v) for v in producer.inputs]
    return None not in sizes and n > sum(s or 0 for s in sizes)


def _plain(mapping: Mapping) -> Mapping:
    """The plain ``dict`` behind onnx-ir's ``UserDict`` containers (iterating it is fast)."""
    return getattr(mapping, "data", mapping)


def _initializer_set(analysis: CutAnalysis) -> frozenset[ir.Value]:
    """The main graph's initializers, as a set (the index's when there is one)."""
    if analysis.index is not None:
        return analysis.index.initializer_set
    return frozenset(_plain(analysis.graph.initializers).values())


def _cone_sources(node: ir.Node) -> Iterable[ir.Value]:
    """The values without a producer that ``node`` is computed from (transitively)."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        for value in current.inputs:
            if value is None or value in seen:
                continue
            seen.add(value)
            producer = value.producer()
            if producer is None:
                yield value
            else:
                stack.append(producer)


def _body_nodes(node: ir.Node) -> Iterable[ir.Node]:
    """The nodes of ``node``'s bodies, nested bodies included."""
    for body in node_subgraphs(node):
        for inner in body:
            yield inner
            yield from _body_nodes(inner)


def _body_constants(body: ir.Graph) -> Iterable[ir.Value]:
    """Initializers and ``Constant`` outputs inside a body (nested bodies included)."""
    yield from body.initializers.values()
    for node in body:
        if node.op_type == "Constant" and node.domain == "":
            yield from node.outputs
        for inner in node_subgraphs(node):
            yield from _body_constants(inner)
