"""Split a model (or one pipeline stage's model) over the devices of a tensor-parallel group.

For ``degree`` devices (*ranks*) and the regions
:func:`~onnx_ir_multidevice.analysis.tensor_parallel.find_regions` finds, every rank gets a
copy of the model in which

* each region node reads rank ``k``'s slice of its weights (block-aware: a fused QKV weight is
  sliced in each of its blocks), its constant shapes and attributes rewritten (``Reshape``
  targets, ``num_heads``), and a bias added to a partial sum only on rank 0 (zeros elsewhere);
* a vocabulary-parallel ``Gather`` reads rank ``k``'s rows of its table, with its ids masked
  to them by a few nodes with per-rank constants (negative ids normalised, the other ids'
  rows zeroed: :class:`~onnx_ir_multidevice.analysis.sharding.VocabMask`);
* the value each collective makes whole is renamed ``<name>__tp_partial``; the readers that
  need the whole value (the nodes outside the region, the graph outputs) read ``<name>``;
* every node outside the regions is replicated.

Two forms come out of these rank models:

* **(b) rank models** (:func:`rank_models`): ``<name>`` is computed by a ``com.microsoft``
  ``AllReduce`` (or ``AllGather`` with ``axis`` and ``group_size``) node right after the
  partial's producer, the form onnxruntime's own multi-GPU inference runs with NCCL.
  onnxruntime's CPU build has no kernel for these ops: such a model is checked structurally
  here (``onnx.checker``) and runs only on a CUDA build with collectives enabled.
* **(a) segments** (:func:`split_tensor_parallel`): each rank model cut at its collectives;
  segment ``s`` holds the nodes that depend on ``s`` collectives, and step ``s`` (the
  collectives whose partials segment ``s`` produces) runs between segment ``s`` and ``s + 1``.
  The package's runtime runs segment ``s`` of all ranks concurrently, makes the partials whole
  in process (:meth:`TensorParallelCollective.combine`) and feeds ``<name>`` to every rank.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "MS_DOMAIN",
    "PARTIAL_SUFFIX",
    "TENSOR_PARALLEL_KEY",
    "TensorParallelCollective",
    "TensorParallelSplit",
    "rank_models",
    "split_tensor_parallel",
    "tensor_parallel_configuration",
    "tensor_parallel_degrees",
]

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, SplitError
from onnx_ir_multidevice._split.build import _boundary_types, _build_stage_model, _plan_stages
from onnx_ir_multidevice._split.select import _build_index
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sharding import (
    Replicated,
    Split,
    VocabMask,
    WeightSlice,
    constant_array,
)
from onnx_ir_multidevice.analysis.tensor_parallel import Region, find_regions
from onnx_ir_multidevice.binding.naming import configuration_name
from onnx_ir_multidevice.graph.index import holds_subgraphs
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    read_tensor_parallel,
)

MS_DOMAIN = "com.microsoft"
"""Domain of onnxruntime's collective ops ``AllReduce`` and ``AllGather``."""

PARTIAL_SUFFIX = "__tp_partial"
"""Suffix of the per-rank piece of a value a collective makes whole."""


@dataclasses.dataclass(frozen=True)
class TensorParallelCollective:
    """One collective between two segments: the ranks' pieces of a value made whole."""

    kind: str
    """``"AllReduce"`` (sum of the ranks' partial sums) or ``"AllGather"``."""

    value: str
    """Name of the whole value (what the next segments and the graph outputs read)."""

    partial: str
    """Name of each rank's piece (an output of the segment before the collective)."""

    axis: int = -1
    """``AllGather``: the axis the pieces are concatenated on (counted from the end when
    negative)."""

    blocks: int = 1
    """``AllGather``: how many equal blocks the axis is made of (each rank holds its slice of
    every block, as in a fused QKV projection)."""

    def combine(self, pieces: Sequence[np.ndarray], *, in_place: bool = False) -> np.ndarray:
        """The whole value from the ranks' pieces, in rank order.

        ``AllReduce`` sums them; ``AllGather`` concatenates them on :attr:`axis`, block by
        block when :attr:`blocks` > 1. With ``in_place`` an ``AllReduce`` sums into the first
        piece when it is a writable array (no copy; the runtime owns its pieces).
        """
        if self.kind == "AllReduce":
            first = pieces[0]
            if in_place and isinstance(first, np.ndarray) and first.flags.writeable:
                total = first
            else:
                total = np.array(first, copy=True)
            for piece in pieces[1:]:
                np.add(total, piece, out=total)
            return total
        axis = self.axis + pieces[0].ndim if self.axis < 0 else self.axis
        if self.blocks == 1:
            return np.concatenate(pieces, axis=axis)
        split = [np.split(np.asarray(p), self.blocks, axis=axis) for p in pieces]
        return np.concatenate(
            [split[rank][b] for b in range(self.blocks) for rank in range(len(pieces))], axis=axis
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the manifest."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> TensorParallelCollective:
        """Read :meth:`to_dict`'s object (``KeyError``/``TypeError`` when malformed)."""
        kind = document["kind"]
        if kind not in ("AllReduce", "AllGather"):
            raise TypeError(f"unknown collective kind {kind!r}")
        return cls(
            kind,
            str(document["value"]),
            str(document["partial"]),
            int(document.get("axis", -1)),
            int(document.get("blocks", 1)),
        )


@dataclasses.dataclass
class TensorParallelSplit:
    """A model split over the ranks of a tensor-parallel group, as segments (form a)."""

    degree: int
    """How many ranks (1: no region was found; :attr:`reason` says why)."""

    requested_degree: int
    """The degree asked for."""

    regions: list[Region]
    """The regions of the input model."""

    segments: list[list[ir.Model]]
    """``segments[rank][s]``: segment ``s`` of rank ``rank``, a runnable model."""

    steps: list[tuple[TensorParallelCollective, ...]]
    """``steps[s]``: the collectives run after segment ``s`` (one entry per segment)."""

    graph_inputs: tuple[str, ...]
    """The input model's graph inputs (a segment reads some of them)."""

    graph_outputs: tuple[str, ...]
    """The input model's graph outputs (read from rank 0 once the last step ran)."""

    reason: str | None = None
    """Why the split has no tensor parallelism (``None`` when it has)."""

    @property
    def num_segments(self) -> int:
        """Segments per rank."""
        return len(self.steps)

    @property
    def num_collectives(self) -> int:
        """Collectives per request."""
        return sum(len(step) for step in self.steps)

    def placement(self) -> str:
        """A few lines: which rank holds which slice of which weight."""
        if self.degree == 1:
            return f"no tensor parallelism: {self.reason}"
        head = f"{self.degree} ranks, {len(self.regions)} regions, {self.num_segments} segments"
        lines = [f"{head}, {self.num_collectives} collectives"]
        seen: set[tuple[str, int, int]] = set()
        for region in self.regions:
            for piece in region.weight_slices:
                key = (piece.value.name or "", piece.axis, piece.blocks)
                if key in seen:
                    continue
                seen.add(key)
                shape = piece.value.shape
                dims = [int(d) if isinstance(d, int) else 0 for d in shape] if shape else []
                ranges = []
                for rank in range(self.degree):
                    size = dims[piece.axis] // piece.blocks if dims else 0
                    step = size // self.degree
                    ranges.append(f"rank {rank}: [{rank * step}:{(rank + 1) * step}]")
                blocks = f" of each of {piece.blocks} blocks" if piece.blocks > 1 else ""
                where = ", ".join(ranges)
                lines.append(f"  {piece.value.name} {dims} axis {piece.axis}{blocks}: {where}")
        return "\n".join(lines)


def tensor_parallel_configuration(
    model: ir.Model, shards: int | None = None, configuration: str | None = None
) -> TensorParallelConfiguration | None:
    """The tensor-parallel configuration the model's record states for a split.

    Reads the ``metadata_props`` entry :data:`TENSOR_PARALLEL_KEY` with the strict typed
    reader (:func:`~onnx_ir_multidevice.omny.read_tensor_parallel`).

    Args:
        model: The planned model.
        shards: The pipeline stage count of the split: the record's entry for the
            ``.omny`` configuration a split of that many stages uses (the first with that
            count, named ``omny/<n>-shards``); ``None``: the record's first entry.
        configuration: The configuration's name (``omny/<n>-shards``), instead of ``shards``.

    Returns:
        The configuration, or ``None`` when the model has no record or none for that split.

    Raises:
        OmnyFormatError: The entry is malformed; ``path`` is the JSON path of the offending
            element. A split or a run refuses such a record rather than ignore it (``omny
            check`` reports it as OMNY225). So is an entry for the split whose ``num_shards``
            is not ``shards`` (its stages were planned for another split).
    """
    try:
        record = read_tensor_parallel(model)
    except OmnyFormatError as error:
        raise OmnyFormatError(
            error.path,
            f"{error.reason}; the tensor-parallel record is unreadable, so the model cannot be "
            "split or run by it (`omny check` reports it as OMNY225): plan the model again "
            "(`omny plan --tensor-parallel N`) or remove the entry",
        ) from error
    if record is None:
        return None
    if configuration is None and shards is not None:
        # The split of `shards` stages uses the first .omny configuration with that count
        # (Sharding.configuration_index), which annotate names omny/<n>-shards.
        configuration = configuration_name(shards)
    for i, entry in enumerate(record.configurations):
        if configuration is None or entry.name == configuration:
            if shards is not None and entry.num_shards != shards:
                # A hand-edited count: the stages and devices were planned for another split.
                raise OmnyFormatError(
                    f"metadata_props[{TENSOR_PARALLEL_KEY}].configurations[{i}].num_shards",
                    f"num_shards is {entry.num_shards} but the split has {shards} stages "
                    f"(configuration {entry.name!r}); the tensor-parallel record does not "
                    "describe this split (`omny check` reports it as OMNY225): plan the model "
                    "again (`omny plan --tensor-parallel N`) or correct the entry",
                )
            return entry
    return None


def tensor_parallel_degrees(
    model: ir.Model, shards: int | None = None, configuration: str | None = None
) -> dict[int, int]:
    """The tensor-parallel degree of each pipeline stage the model's record states.

    Arguments and errors as :func:`tensor_parallel_configuration` (a malformed record raises
    :class:`~onnx_ir_multidevice.OmnyFormatError`; it is not ignored).

    Returns:
        ``{stage: degree}`` for the stages with a degree above 1 (``{}``: no record).
    """
    chosen = tensor_parallel_configuration(model, shards, configuration)
    if chosen is None:
        return {}
    return {e.stage: e.degree for e in chosen.stages if e.degree > 1}


# ---------------------------------------------------------------------------------------------
# Rank models


def _view_slice(array: np.ndarray, piece: WeightSlice, rank: int) -> np.ndarray:
    """Rank ``rank``'s slice of ``array``: a view (no copy) when the axis is one block."""
    if piece.blocks > 1:
        return piece.take(array, rank)
    size = array.shape[piece.axis] // piece.degree
    index = [slice(None)] * array.ndim
    index[piece.axis] = slice(rank * size, (rank + 1) * size)
    return array[tuple(index)]


class _RankBuilder:
    """Builds the model of one rank from a clone of the input model."""

    def __init__(
        self, model: ir.Model, degree: int, rank: int, dims: Mapping[str, int] | None
    ) -> None:
        self.source = model
        self.dims = dims
        self._shapes: ValueShapes | None = None
        self.model = model.clone()
        self.graph = self.model.graph
        self.degree = degree
        self.rank = rank
        self.nodes = dict(zip(model.graph, self.graph, strict=True))
        self.names: set[str] = set()
        for value in (*self.graph.inputs, *self.graph.initializers.values()):
            self.names.add(value.name or "")
        for node in self.graph:
            self.names.update(v.name or "" for v in node.outputs)
        self.values = {v.name: v for v in self.graph.inputs}
        self.values.update(self.graph.initializers)
        for node in self.graph:
            self.values.update((v.name, v) for v in node.outputs if v.name)
        self.collectives: list[TensorParallelCollective] = []

    def shapes(self) -> ValueShapes:
        if self._shapes is None:
            self._shapes = ValueShapes(self.source.graph, self.dims)
        return self._shapes

    def unique(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self.names:
            candidate = f"{name}_{n}"
            n += 1
        self.names.add(candidate)
        return candidate

    def initializer(self, name: str, array: np.ndarray) -> ir.Value:
        name = self.unique(name)
        value = ir.Value(
            name=name,
            type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
            shape=ir.Shape(array.shape),
            const_value=ir.Tensor(array, name=name),
        )
        self.graph.register_initializer(value)
        return value

    def apply(self, regions: Sequence[Region], *, explicit: bool) -> None:
        suffix = f".tp{self.rank}of{self.degree}"
        sliced: dict[tuple[str, int, int], ir.Value] = {}
        for region in regions:
            for piece in region.weight_slices:
                assert piece.node is not None
                key = (piece.value.name or "", piece.axis, piece.blocks)
                new = sliced.get(key)
                if new is None and constant_array(piece.value) is None:
                    found = self._slice_input(piece, suffix)
                    if found is not None:
                        new = sliced[key] = found
                if new is None:
                    array = constant_array(piece.value)
                    if array is None:
                        raise SplitError(
                            f"weight {piece.value.name!r} read by node {piece.node.name!r} has "
                            "no constant value to slice; fold it into an initializer first"
                        )
                    new = self.initializer(
                        f"{piece.value.name}{suffix}", _view_slice(array, piece, self.rank)
                    )
                    sliced[key] = new
                node = self.nodes[piece.node]
                for i, value in enumerate(piece.node.inputs):
                    if value is piece.value:
                        node.replace_input_with(i, new)
            self._rewrite_shapes(region, suffix)
            for change in region.attribute_rewrites:
                self.nodes[change.node].attributes[change.name] = (
                    ir.AttrInt64(change.name, change.new)
                    if isinstance(change.new, int)
                    else ir.AttrInt64s(change.name, list(change.new))
                )
            if self.rank != 0:
                for once in region.bias_once:
                    bias = once.node.inputs[once.input_index]
                    array = constant_array(bias)
                    assert bias is not None
                    assert array is not None
                    zeros = self.initializer(f"{bias.name}.zeros", np.zeros_like(array))
                    self.nodes[once.node].replace_input_with(once.input_index, zeros)
            for mask in region.vocab_masks:
                self._mask_vocab(mask, suffix)
            self._clear_sharded_shapes(region)
            for collective in region.collectives:
                self._collective(region, collective, explicit=explicit)
        self._drop_dead()
        if explicit:
            self.graph.opset_imports.setdefault(MS_DOMAIN, 1)

    def _slice_input(self, piece: WeightSlice, suffix: str) -> ir.Value | None:
        """A graph input each rank reads one slice of (past keys/values by heads): a ``Slice``.

        ``None`` when ``piece`` is not a graph input (then it must be a constant).
        """
        value = self.values.get(piece.value.name or "")
        if value is None or value not in self.graph.inputs or piece.blocks != 1:
            return None
        shape = piece.value.shape
        size = shape[piece.axis] if shape is not None and len(shape) > piece.axis else None
        if not isinstance(size, int) or size % piece.degree:
            raise SplitError(
                f"graph input {piece.value.name!r} is sliced on axis {piece.axis} but that "
                "axis has no static size divisible by the degree"
            )
        step = size // piece.degree
        bounds = [
            self.initializer(f"{value.name}{suffix}.{what}", np.array([x], dtype=np.int64))
            for what, x in (
                ("starts", self.rank * step),
                ("ends", (self.rank + 1) * step),
                ("axes", piece.axis),
            )
        ]
        assert piece.node is not None
        node = ir.Node("", "Slice", [value, *bounds], name=self.unique(f"Slice_{value.name}"))
        node.outputs[0].name = self.unique(f"{value.name}{suffix}")
        node.outputs[0].type = value.type
        self.graph.insert_before(self.nodes[piece.node], node)
        return node.outputs[0]

    def _mask_vocab(self, mask: VocabMask, suffix: str) -> None:
        """Mask a vocabulary-parallel ``Gather``'s ids to this rank's rows (see VocabMask).

        Inserts ``Where(ids < 0, ids + V, ids) - offset`` (the local row), ``valid = local >=
        0 and local < V / d``, gathers ``Where(valid, local, 0)`` and zeroes the rows of the
        invalid ids with ``Where(Unsqueeze(valid, -1), rows, 0)``. The last node's output takes
        the ``Gather``'s output name (its readers and the collective read it).
        """
        gather = self.nodes[mask.node]
        ids = gather.inputs[1]
        out = gather.outputs[0]
        source = mask.node.inputs[1]
        assert ids is not None
        assert source is not None
        ids_type = ids.dtype or self.shapes().dtype(source)
        rows_type = out.dtype or self.shapes().dtype(mask.node.outputs[0])
        if ids_type is None or rows_type is None:
            raise SplitError(
                f"the ids or the output of the vocabulary-parallel Gather {mask.node.name!r} "
                "have no known dtype; give them a type (onnx shape inference) before splitting"
            )
        dtype = ids_type.numpy()
        stem = f"{mask.node.name or 'Gather'}.tp_vocab"

        def scalar(what: str, x: int, kind: np.dtype) -> ir.Value:
            return self.initializer(f"{stem}.{what}", np.array(x, dtype=kind))

        nodes: list[ir.Node] = []

        def add(op: str, inputs: list[ir.Value], what: str, **attrs: Any) -> ir.Value:
            attributes = [
                ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, v)
                for k, v in attrs.items()
            ]
            node = ir.Node("", op, inputs, attributes, name=self.unique(f"{stem}.{what}"))
            node.outputs[0].name = self.unique(f"{stem}.{what}{suffix}")
            nodes.append(node)
            return node.outputs[0]

        zero = scalar("zero", 0, dtype)
        negative = add("Less", [ids, zero], "negative")
        wrapped = add("Add", [ids, scalar("vocab", mask.vocab, dtype)], "wrapped")
        whole = add("Where", [negative, wrapped, ids], "ids")
        local = add("Sub", [whole, scalar("offset", mask.offset(self.rank), dtype)], "local")
        below = add("Less", [local, zero], "below")
        inside = add("Less", [local, scalar("rows", mask.rows, dtype)], "inside")
        valid = add("And", [add("Not", [below], "above"), inside], "valid")
        safe = add("Where", [valid, local, zero], "safe")
        if self.graph.opset_imports.get("", 1) >= 13:
            axes = self.initializer(f"{stem}.axes", np.array([-1], dtype=np.int64))
            column = add("Unsqueeze", [valid, axes], "column")
        else:
            column = add("Unsqueeze", [valid], "column", axes=[-1])
        self.graph.insert_before(gather, nodes)
        gather.replace_input_with(1, safe)
        # The mask takes over the Gather's output (its name, readers and graph outputs).
        name = out.name
        assert name
        masked_out = ir.Value(type=out.type)
        ir.convenience.replace_all_uses_with(out, masked_out)
        outputs = self.graph.outputs
        for j, value in enumerate(outputs):
            if value is out:
                outputs[j] = masked_out
        out.name = self.unique(f"{name}{suffix}.rows")
        masked_out.name = name
        nothing = self.initializer(f"{stem}.nothing", np.array(0, dtype=rows_type.numpy()))
        masked = ir.Node(
            "",
            "Where",
            [column, out, nothing],
            outputs=[masked_out],
            name=self.unique(f"{stem}.mask"),
        )
        self.values[name] = masked_out
        self.graph.insert_after(gather, masked)

    def _rewrite_shapes(self, region: Region, suffix: str) -> None:
        grouped: dict[tuple[ir.Node, int], list[Any]] = {}
        for rewrite in region.shape_rewrites:
            grouped.setdefault((rewrite.node, rewrite.input_index), []).append(rewrite)
        for (original, i), rewrites in grouped.items():
            node = self.nodes[original]
            value = original.inputs[i]
            assert value is not None
            array = constant_array(value) if all(r.constant for r in rewrites) else None
            if array is not None:
                array = np.array(array, copy=True)
                for rewrite in rewrites:
                    array[rewrite.position] = rewrite.new
                node.replace_input_with(i, self.initializer(f"{value.name}{suffix}", array))
                continue
            current = node.inputs[i]
            assert current is not None
            dtype = current.dtype.numpy() if current.dtype is not None else np.dtype(np.int64)
            indices = self.initializer(
                f"{value.name}.tp_positions",
                np.array([[r.position] for r in rewrites], dtype=np.int64),
            )
            updates = self.initializer(
                f"{value.name}.tp_entries", np.array([r.new for r in rewrites], dtype=dtype)
            )
            scatter = ir.Node(
                "",
                "ScatterND",
                [current, indices, updates],
                name=self.unique(f"{node.name}.tp_shape"),
            )
            scatter.outputs[0].name = self.unique(f"{value.name}{suffix}")
            scatter.outputs[0].type = current.type
            self.graph.insert_before(node, scatter)
            node.replace_input_with(i, scatter.outputs[0])

    def _clear_sharded_shapes(self, region: Region) -> None:
        """Per-rank pieces have other shapes than the whole model's annotations say."""
        for original in region.nodes:
            for value in original.outputs:
                if value is None or not value.name:
                    continue
                if not isinstance(region.states.get(value), Replicated):
                    self.values[value.name].shape = None

    def _collective(self, region: Region, collective: Any, *, explicit: bool) -> None:
        name = collective.value.name
        if collective.after is None or not name:
            raise SplitError(
                f"value {name!r} needs an {collective.kind} but is no node's output; "
                "tensor parallelism cannot start at a graph input"
            )
        partial = self.values[name]
        type_ = partial.type
        if type_ is None:
            dtype = self.shapes().dtype(collective.value)
            type_ = ir.TensorType(dtype) if dtype is not None else None
            partial.type = type_
        whole = ir.Value(
            name=name,
            type=type_,
            shape=collective.value.shape.copy() if collective.value.shape is not None else None,
        )
        partial.name = self.unique(f"{name}{PARTIAL_SUFFIX}")
        readers = {self.nodes[n]: n for n in region.nodes}
        for use in list(partial.uses()):
            original = readers.get(use.node)
            if original is not None and not isinstance(
                region.input_states[original][use.idx], Replicated
            ):
                continue  # a region node reading the piece
            use.node.replace_input_with(use.idx, whole)
        outputs = self.graph.outputs
        for j, value in enumerate(outputs):
            if value is partial:
                outputs[j] = whole
        state = collective.state
        axis, blocks = (state.axis, state.blocks) if isinstance(state, Split) else (-1, 1)
        self.collectives.append(
            TensorParallelCollective(collective.kind, name, partial.name, axis, blocks)
        )
        if not explicit:
            self.graph.inputs.append(whole)
            self.graph.outputs.append(partial)
            return
        # The partial's producer: the collective's node, or the mask after a masked lookup.
        producer = partial.producer() or self.nodes[collective.after]
        if collective.kind == "AllReduce":
            node = ir.Node(
                MS_DOMAIN,
                "AllReduce",
                [partial],
                outputs=[whole],
                name=self.unique(f"AllReduce_{name}"),
            )
            self.graph.insert_after(producer, node)
            return
        shape = collective.value.shape
        if shape is None:
            raise SplitError(
                f"value {name!r} needs an AllGather on axis {axis} but its rank is unknown; "
                "give it a shape (onnx shape inference) before splitting"
            )
        positive = axis + len(shape) if axis < 0 else axis
        attributes = [ir.AttrInt64("axis", positive), ir.AttrInt64("group_size", self.degree)]
        if blocks == 1:
            node = ir.Node(
                MS_DOMAIN, "AllGather", [partial], attributes, outputs=[whole],
                name=self.unique(f"AllGather_{name}"),
            )  # fmt: skip
            self.graph.insert_after(producer, node)
            return
        gather = ir.Node(
            MS_DOMAIN, "AllGather", [partial], attributes, name=self.unique(f"AllGather_{name}")
        )
        gather.outputs[0].name = self.unique(f"{name}__tp_gathered")
        pieces = self.degree * blocks
        split_attributes = [ir.AttrInt64("axis", positive)]
        if self.graph.opset_imports.get("", 1) >= 18:
            split_attributes.append(ir.AttrInt64("num_outputs", pieces))
        split = ir.Node("", "Split", [gather.outputs[0]], split_attributes, num_outputs=pieces)
        for n, out in enumerate(split.outputs):
            out.name = self.unique(f"{name}__tp_piece{n}")
        order = [split.outputs[r * blocks + b] for b in range(blocks) for r in range(self.degree)]
        concat = ir.Node("", "Concat", order, [ir.AttrInt64("axis", positive)], outputs=[whole])
        self.graph.insert_after(producer, [gather, split, concat])

    def _drop_dead(self) -> None:
        graph = self.graph
        outputs = set(graph.outputs)
        for node in reversed(list(graph)):
            if (
                node.op_type == "Constant"
                and not node.domain
                and all(not v.uses() and v not in outputs for v in node.outputs)
            ):
                graph.remove(node, safe=True)
        inputs = set(graph.inputs)
        for name, value in list(graph.initializers.items()):
            if not value.uses() and value not in outputs and value not in inputs:
                del graph.initializers[name]


def _regions(
    model: ir.Model, degree: int, dims: Mapping[str, int] | None
) -> tuple[list[Region], str | None]:
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise ValueError(f"degree must be a positive integer, got {degree!r}")
    if degree == 1:
        return [], "degree 1 asked for"
    regions = find_regions(model, degree, dims=dims, gather_outputs=True)
    if not regions:
        return [], (
            f"no tensor-parallel region found at degree {degree}: no MatMul/Gemm by a constant "
            f"weight whose output axis divides by {degree} starts a column-parallel region "
            "that a row-parallel one closes; the model runs whole on each stage's device"
        )
    return regions, None


def rank_models(
    model: ir.Model, degree: int, *, dims: Mapping[str, int] | None = None
) -> list[ir.Model]:
    """Form (b): one model per rank with ``com.microsoft`` ``AllReduce``/``AllGather`` nodes.

    onnxruntime runs such models with its NCCL collectives (a CUDA build with collectives,
    one process per rank); its CPU build has no kernel for these ops, so on CPU they are only
    checked structurally (``onnx.checker``). Weight slices are numpy views of the input
    model's tensors where the axis is one block (no copy).

    Args:
        model: The model, or one stage's model (not modified).
        degree: How many ranks.
        dims: The planning dims the regions are found at.

    Returns:
        ``degree`` models (one, the input's clone, when no region is found).

    Raises:
        ValueError: ``degree`` is not a positive integer.
        SplitError: A collective cannot be expressed (see the message).
    """
    require_model(model, "rank_models")
    regions, _ = _regions(model, degree, dims)
    if not regions:
        return [model.clone()]
    result = []
    for rank in range(degree):
        builder = _RankBuilder(model, degree, rank, dims)
        builder.apply(regions, explicit=True)
        result.append(builder.model)
    return result


def _segments(
    builder: _RankBuilder,
) -> tuple[list[ir.Model], list[tuple[TensorParallelCollective, ...]]]:
    """Cut a rank model (form a, collectives as graph inputs/outputs) at its collectives."""
    model = builder.model
    index = _build_index(model.graph)
    whole_of = {c.partial: c for c in builder.collectives}
    ready: dict[str, int] = {}  # whole value -> first segment that can read it
    level: dict[ir.Node, int] = {}
    step_of: dict[str, int] = {}
    for node in index.nodes:
        lv = 0
        for value in index.uses_of(node):
            producer = value.producer()
            if producer is not None and producer in level:
                lv = max(lv, level[producer])
            elif value.name in ready:
                lv = max(lv, ready[value.name])
        level[node] = lv
        for value in node.outputs:
            collective = whole_of.get(value.name or "")
            if collective is not None:
                ready[collective.value] = lv + 1
                step_of[collective.partial] = lv
    count = max(level.values(), default=0) + 1
    const = {v for v in model.graph.initializers.values() if v not in index.graph_input_positions}
    for node in index.nodes:
        if not holds_subgraphs(node) and all(v in const for v in index.uses_of(node)):
            const.update(node.outputs)
    replicable = {v for v in const if v.producer() is not None}
    plans = _plan_stages(index, level, count, replicable=replicable)
    typed = _boundary_types(model, index, plans)
    segments = [
        _build_stage_model(model, plan, i, count, set(), typed=typed)
        for i, plan in enumerate(plans)
    ]
    steps: list[list[TensorParallelCollective]] = [[] for _ in range(count)]
    for collective in builder.collectives:
        steps[step_of[collective.partial]].append(collective)
    return segments, [tuple(step) for step in steps]


def split_tensor_parallel(
    model: ir.Model,
    degree: int,
    *,
    dims: Mapping[str, int] | None = None,
    regions: Sequence[Region] | None = None,
) -> TensorParallelSplit:
    """Form (a): split ``model`` over ``degree`` ranks, as segments between collectives.

    Args:
        model: The model, or one pipeline stage's model (not modified).
        degree: How many ranks.
        dims: The planning dims the regions are found at (``find_regions``).
        regions: The regions, when already found (at ``degree``).

    Returns:
        The split; with no region found, one rank holding the whole model and
        :attr:`TensorParallelSplit.reason` saying why.

    Raises:
        ValueError: ``degree`` is not a positive integer.
        SplitError: A segment cannot be built (see the message).
    """
    require_model(model, "split_tensor_parallel")
    reason = None
    if regions is None:
        found, reason = _regions(model, degree, dims)
    else:
        found = list(regions)
    inputs = tuple(v.name or "" for v in model.graph.inputs)
    outputs = tuple(v.name or "" for v in model.graph.outputs)
    if not found:
        return TensorParallelSplit(1, degree, [], [[model]], [()], inputs, outputs, reason)
    segments: list[list[ir.Model]] = []
    steps: list[tuple[TensorParallelCollective, ...]] = []
    for rank in range(degree):
        builder = _RankBuilder(model, degree, rank, dims)
        builder.apply(found, explicit=False)
        pieces, steps = _segments(builder)
        segments.append(pieces)
    return TensorParallelSplit(degree, degree, found, segments, steps, inputs, outputs)
