"""``OMNY1xx``: the ``.omny`` format, its cut points and its shard configurations.

``omnynet_version`` and ``omnynet_metadata`` present and parseable; cut points that resolve
(through :func:`~onnx_ir_multidevice.binding.bind.bind`, the one cut resolver: the codes are
those its :class:`~onnx_ir_multidevice.binding.bind.UnresolvedReference` entries carry) to one
main-graph node and its single output, not inside control flow, with a shape fully defined
except the batch and the graph's dtype; positive memory numbers; at least one configuration,
each with ``num_shards - 1`` defined cut points, ``num_shards`` memory entries within
``max_shard_size_mb``, and a shard count consistent with ``allowed_shards`` / ``min_shards`` /
``max_shards``. Linear in the size of the model.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["PlanConfiguration", "check_format"]

import dataclasses

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice._util import format_bytes, plural
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.sizes import MAX_TENSOR_BYTES, oversized_io
from onnx_ir_multidevice.binding.bind import BoundConfiguration, BoundPlan, bind
from onnx_ir_multidevice.binding.naming import configuration_names
from onnx_ir_multidevice.checker.diagnostics import Diagnostic, make, value_location
from onnx_ir_multidevice.graph.dtypes import dtype_bits, dtype_from_name, dtype_name
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.omny._schema import (
    OMNY_FORMAT_VERSION,
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    CutPoint,
    OmnyMetadata,
    Sharding,
)
from onnx_ir_multidevice.omny.planning_dims import read_planning_dims


def _same_dtype(name: str, dtype: ir.DataType) -> bool:
    """Whether a document's dtype name (older spellings included) stands for ``dtype``."""
    try:
        return dtype_name(dtype_from_name(name)) == dtype_name(dtype)
    except ValueError:  # not a dtype name at all
        return False


@dataclasses.dataclass
class PlanConfiguration:
    """One ``.omny`` configuration, resolved against the graph (what the pipeline rules use)."""

    index: int
    """Position in ``sharding.configurations``."""

    num_shards: int
    """Number of shards."""

    name: str
    """Name of its IR configuration (``omny/<n>-shards``...)."""

    cuts: list[ir.Value] | None = None
    """Its cut tensors, when they all resolve (``None`` otherwise)."""

    stages: dict[ir.Node, int] | None = None
    """The stages its cuts give, once computed by the pipeline rules."""


def check_format(
    model: ir.Model, diagnostics: list[Diagnostic], index: GraphIndex | None = None
) -> tuple[BoundPlan | None, list[PlanConfiguration]]:
    """Run the OMNY1xx rules on ``model``, appending to ``diagnostics``.

    Args:
        model: The model (not modified).
        diagnostics: Where the findings go.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``, or
            ``None`` (a graph with a cycle).

    Returns:
        The plan bound to the model (``None`` without a readable plan) and its configurations,
        for the pipeline rules.
    """
    rules = _FormatRules(model, diagnostics, index)
    configurations = rules.run()
    return rules.plan, configurations


def check_io_sizes(model: ir.Model, diagnostics: list[Diagnostic]) -> None:
    """OMNY123: a graph input or output whose stated dims no device can hold (1 PiB).

    Such a shape (a dim of 2**62 in a damaged or hand-edited file) cannot be planned, split
    or run; it runs on plain models too, before any plan is read.
    """
    for kind, value, axis, nbytes in oversized_io(model.graph):
        assert value.shape is not None  # oversized_io reads stated shapes only
        diagnostics.append(
            make(
                "OMNY123",
                f"graph {kind} {value.name!r}: dim {axis} is {value.shape[axis]}, so the tensor "
                f"takes at least {format_bytes(nbytes)}, more than any device holds (the limit is "
                f"{format_bytes(MAX_TENSOR_BYTES)}); write its real size (or a symbolic dim)",
                value_location(value),
            )
        )


class _FormatRules:
    """Runs the OMNY1xx rules on one model."""

    def __init__(
        self, model: ir.Model, diagnostics: list[Diagnostic], index: GraphIndex | None
    ) -> None:
        self.model = model
        self.graph = model.graph
        self.out = diagnostics
        self._index = index
        #: The plan bound to the model (by the one cut resolver), once read.
        self.plan: BoundPlan | None = None
        self._shapes: ValueShapes | None = None

    def _typed(self, value: ir.Value) -> tuple[ir.Shape | None, ir.DataType | None]:
        """The shape and dtype of ``value``: stated, else from the shape layer (on a copy)."""
        shape, dtype = value.shape, value.dtype
        if shape is not None and dtype is not None:
            return shape, dtype
        if self._shapes is None:
            try:
                dims = read_planning_dims(self.model) or {}
            except OmnyFormatError:
                dims = {}
            # Only the cut tensors are asked about: walk only what they are computed from.
            cuts = self.plan.cut_points if self.plan else ()
            focus = [b.value for b in cuts if b.resolved and b.value is not None]
            self._shapes = ValueShapes.cached(self.graph, dims, index=self._index, focus=focus)
        if shape is None:
            shape = self._shapes.onnx_shape(value)
        if dtype is None:
            dtype = self._shapes.dtype(value)
        return shape, dtype

    def run(self) -> list[PlanConfiguration]:
        props = self.model.metadata_props
        version = props.get(OMNY_VERSION_KEY)
        text = props.get(OMNY_METADATA_KEY)
        if version is None and text is None:
            self.out.append(
                make(
                    "OMNY100",
                    "no omnynet_version / omnynet_metadata in metadata_props: a plain ONNX "
                    "model; only the IR v11 and pipeline checks ran",
                    "model",
                )
            )
            return []
        if version is None:
            self.out.append(
                make(
                    "OMNY102",
                    f"{OMNY_METADATA_KEY!r} is set but {OMNY_VERSION_KEY!r} is missing; add "
                    f"it with the format version ({OMNY_FORMAT_VERSION!r})",
                    f"metadata_props[{OMNY_VERSION_KEY}]",
                )
            )
        if text is None:
            self.out.append(
                make(
                    "OMNY103",
                    f"{OMNY_VERSION_KEY!r} is set but {OMNY_METADATA_KEY!r} is missing; the "
                    "model has no plan: run the planner or remove the version",
                    f"metadata_props[{OMNY_METADATA_KEY}]",
                )
            )
            return []
        try:
            metadata = OmnyMetadata.from_json(text)
        except OmnyFormatError as error:
            self.out.append(
                make(
                    "OMNY104",
                    f"omnynet_metadata is invalid: {error.reason}",
                    error.path or f"metadata_props[{OMNY_METADATA_KEY}]",
                )
            )
            return []
        if version is not None and version != metadata.version:
            self.out.append(
                make(
                    "OMNY107",
                    f"omnynet_version is {version!r} but the JSON document's version is "
                    f"{metadata.version!r}; readers refuse the plan until they agree: set "
                    "both to the format version the document follows",
                    "version",
                )
            )
        elif metadata.version != OMNY_FORMAT_VERSION:
            self.out.append(
                make(
                    "OMNY105",
                    f"format version {metadata.version!r}: this checker knows "
                    f"{OMNY_FORMAT_VERSION!r} only, so rules of another version are not "
                    "checked",
                    "version",
                )
            )
        plan = self.plan = bind(self.model, metadata, index=self._index)
        self._check_cut_points(plan)
        self._check_io(plan)
        return self._check_sharding(plan)

    def _check_io(self, plan: BoundPlan) -> None:
        for reference in plan.unresolved:
            if reference.kind in ("input", "output"):
                self.out.append(make(reference.code, reference.message, reference.json_path))

    def _check_cut_points(self, plan: BoundPlan) -> None:
        """Check every cut point: its references (from :func:`bind`), shape and memory."""
        seen_ids: set[str] = set()
        previous_cumulative: int | None = None
        for bound in plan.cut_points:
            for reference in bound.problems:
                self.out.append(make(reference.code, reference.message, reference.json_path))
            cut = bound.spec
            if cut.id in seen_ids:
                continue  # a second definition (OMNY118): its numbers are not the plan's
            seen_ids.add(cut.id)
            path = bound.json_path
            self._check_cut_shape(cut, path, bound.value if bound.resolved else None)
            self._check_cut_memory(cut, path, previous_cumulative)
            previous_cumulative = cut.cumulative_memory_mb

    def _check_cut_shape(self, cut: CutPoint, path: str, value: ir.Value | None) -> None:
        if not self._check_cut_sizes(cut, path):
            return
        for i, dim in enumerate(cut.shape):
            if i > 0 and dim < 0:
                self.out.append(
                    make(
                        "OMNY114",
                        f"cut point {cut.id!r}: dimension {i} is dynamic ({dim}); only the "
                        "batch (dimension 0) may be dynamic at a cut",
                        f"{path}.shape[{i}]",
                    )
                )
        if value is None:
            return
        shape, dtype = self._typed(value)
        if shape is None or dtype is None:
            missing = "shape" if shape is None else "dtype"
            self.out.append(
                make(
                    "OMNY115",
                    f"cut point {cut.id!r}: the {missing} of {value.name!r} is neither in the "
                    "graph nor inferable from it, so the metadata cannot be compared with it",
                    value_location(value),
                )
            )
        if shape is not None:
            dynamic = [i for i, d in enumerate(shape) if i > 0 and not isinstance(d, int)]
            if dynamic:
                self.out.append(
                    make(
                        "OMNY114",
                        f"cut point {cut.id!r}: tensor {value.name!r} has dynamic "
                        f"{'dimension' if len(dynamic) == 1 else 'dimensions'} {dynamic} in the "
                        f"graph ({shape}); it runs here, but the .omny spec wants fixed sizes "
                        "except the batch (fix them with --dim when planning)",
                        value_location(value),
                    )
                )
            graph_dims = [d if isinstance(d, int) else -1 for d in shape]
            mismatch = len(graph_dims) != len(cut.shape) or any(
                g >= 0 and c >= 0 and g != c for g, c in zip(graph_dims, cut.shape, strict=True)
            )
            if mismatch:
                self.out.append(
                    make(
                        "OMNY116",
                        f"cut point {cut.id!r}: shape {list(cut.shape)} in the metadata but "
                        f"{graph_dims} in the graph; update the metadata",
                        f"{path}.shape",
                    )
                )
        if dtype is not None and not _same_dtype(cut.dtype, dtype):
            self.out.append(
                make(
                    "OMNY116",
                    f"cut point {cut.id!r}: dtype {cut.dtype!r} in the metadata but "
                    f"{dtype_name(dtype)!r} in the graph; update the metadata",
                    f"{path}.dtype",
                )
            )

    def _check_cut_sizes(self, cut: CutPoint, path: str) -> bool:
        """OMNY122: the tensor's bytes at its fixed dims fit a device.

        The schema already refuses dims below -1 (``OMNY104``). Returns whether the shape
        passed (the other shape rules assume it did).
        """
        elements = 1
        for dim in cut.shape:
            elements *= max(dim, 1)
        try:
            dtype = dtype_from_name(cut.dtype)
            bits = 8 if dtype is None else dtype_bits(dtype)
        except ValueError:  # an unknown dtype name: OMNY116 says so when the graph knows it
            bits = 8
        if elements * bits > MAX_TENSOR_BYTES * 8:
            self.out.append(
                make(
                    "OMNY122",
                    f"cut point {cut.id!r}: shape {list(cut.shape)} of {cut.dtype} is "
                    f"{format_bytes(elements * bits // 8)}, more than any device holds (the limit "
                    f"is {format_bytes(MAX_TENSOR_BYTES)}); write the tensor's real shape",
                    f"{path}.shape",
                )
            )
            return False
        return True

    def _check_cut_memory(self, cut: CutPoint, path: str, previous_cumulative: int | None) -> None:
        for field in ("cumulative_memory_mb", "shard_memory_mb"):
            amount = getattr(cut, field)
            if amount <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"cut point {cut.id!r}: {field} is {amount}; memory estimates must be "
                        "positive (MiB, rounded up)",
                        f"{path}.{field}",
                    )
                )
        if cut.shard_memory_mb > cut.cumulative_memory_mb > 0:
            self.out.append(
                make(
                    "OMNY121",
                    f"cut point {cut.id!r}: shard_memory_mb ({cut.shard_memory_mb}) exceeds "
                    f"cumulative_memory_mb ({cut.cumulative_memory_mb})",
                    f"{path}.shard_memory_mb",
                )
            )
        if previous_cumulative is not None and cut.cumulative_memory_mb < previous_cumulative:
            self.out.append(
                make(
                    "OMNY121",
                    f"cut point {cut.id!r}: cumulative_memory_mb ({cut.cumulative_memory_mb}) "
                    f"is below the previous cut's ({previous_cumulative}); list cut points in "
                    "pipeline order with a running total",
                    f"{path}.cumulative_memory_mb",
                )
            )

    def _check_sharding(self, plan: BoundPlan) -> list[PlanConfiguration]:
        sharding = plan.metadata.sharding
        self._check_limits(sharding)
        if not sharding.configurations:
            self.out.append(
                make(
                    "OMNY130",
                    "no shard configuration is defined; add at least one to "
                    "sharding.configurations (the planner writes them)",
                    "sharding.configurations",
                )
            )
        names = configuration_names(sharding.configurations)
        entries: list[PlanConfiguration] = []
        for bound in plan.configurations:
            entry = PlanConfiguration(bound.index, bound.num_shards, names[bound.index])
            entry.cuts = self._check_configuration(bound, sharding)
            entries.append(entry)
        return entries

    def _check_limits(self, sharding: Sharding) -> None:
        for field in ("min_vram_mb", "max_shard_size_mb"):
            if getattr(sharding, field) <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"{field} is {getattr(sharding, field)}; it must be positive",
                        f"sharding.{field}",
                    )
                )
        if sharding.max_shard_size_mb > sharding.min_vram_mb > 0:
            self.out.append(
                make(
                    "OMNY137",
                    f"max_shard_size_mb ({sharding.max_shard_size_mb}) exceeds min_vram_mb "
                    f"({sharding.min_vram_mb}): a shard may not fit a device with the minimum "
                    "VRAM; the spec keeps about 20% headroom",
                    "sharding.max_shard_size_mb",
                )
            )
        if sharding.min_shards > sharding.max_shards:
            self.out.append(
                make(
                    "OMNY135",
                    f"min_shards ({sharding.min_shards}) exceeds max_shards "
                    f"({sharding.max_shards})",
                    "sharding.min_shards",
                )
            )
        for a, count in enumerate(sharding.allowed_shards):
            if not sharding.min_shards <= count <= sharding.max_shards:
                self.out.append(
                    make(
                        "OMNY135",
                        f"allowed shard count {count} is outside [min_shards, max_shards] = "
                        f"[{sharding.min_shards}, {sharding.max_shards}]",
                        f"sharding.allowed_shards[{a}]",
                    )
                )

    def _check_configuration(
        self, bound: BoundConfiguration, sharding: Sharding
    ) -> list[ir.Value] | None:
        """Check one configuration; return its cut values when they all resolve."""
        configuration = bound.spec
        path = bound.json_path
        n = configuration.num_shards
        if n < 1:
            self.out.append(
                make("OMNY135", f"num_shards is {n}; it must be >= 1", f"{path}.num_shards")
            )
        elif not sharding.min_shards <= n <= sharding.max_shards:
            self.out.append(
                make(
                    "OMNY135",
                    f"num_shards {n} is outside [min_shards, max_shards] = "
                    f"[{sharding.min_shards}, {sharding.max_shards}]",
                    f"{path}.num_shards",
                )
            )
        if n not in sharding.allowed_shards:
            self.out.append(
                make(
                    "OMNY134",
                    f"num_shards {n} is not in allowed_shards {list(sharding.allowed_shards)}; "
                    "add it there or remove the configuration",
                    f"{path}.num_shards",
                )
            )
        ids = configuration.cut_point_ids
        if len(ids) != n - 1:
            self.out.append(
                make(
                    "OMNY131",
                    f"{plural(n, 'shard')} need {plural(n - 1, 'cut point')} but {len(ids)} "
                    f"{'is' if len(ids) == 1 else 'are'} listed",
                    f"{path}.cut_point_ids",
                )
            )
        for _, reference in bound.problems:
            if reference.json_path.startswith(path):  # OMNY118 is reported at the cut point
                self.out.append(make(reference.code, reference.message, reference.json_path))
        memory = configuration.memory_per_shard_mb
        if len(memory) != n:
            self.out.append(
                make(
                    "OMNY133",
                    f"memory_per_shard_mb has {len(memory)} entries for {n} shards; give one "
                    "per shard",
                    f"{path}.memory_per_shard_mb",
                )
            )
        for s, amount in enumerate(memory):
            location = f"{path}.memory_per_shard_mb[{s}]"
            if amount <= 0:
                self.out.append(
                    make(
                        "OMNY120",
                        f"shard {s} memory is {amount} MiB; it must be positive",
                        location,
                    )
                )
            elif amount > sharding.max_shard_size_mb:
                self.out.append(
                    make(
                        "OMNY136",
                        f"shard {s} needs {amount} MiB, more than max_shard_size_mb "
                        f"({sharding.max_shard_size_mb}); use more shards or move the cuts",
                        location,
                    )
                )
        if len(ids) != n - 1 or not bound.resolved:
            return None
        return list(bound.cut_values())
