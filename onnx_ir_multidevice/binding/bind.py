"""Bind ``.omny`` metadata to a model: names become the onnx-ir objects they refer to.

The ``.omny`` JSON refers to the graph by name: a cut point names the node it comes after
(``after_node``) and the tensor it cuts (``tensor_name``), a shard configuration names its
cut points by id, ``inputs`` / ``outputs`` name graph inputs and outputs. :func:`bind`
resolves every such name once, against dict indexes of the main graph, and returns a
:class:`BoundPlan` that holds the :class:`onnx_ir.Node` / :class:`onnx_ir.Value` objects.

As in onnx-ir's multi-device metadata, the objects are the source of truth:
:meth:`BoundPlan.to_metadata` derives the names back from ``node.name`` and ``value.name``,
so a rename in the IR follows into the metadata. When nothing was renamed it returns the
very same objects (the original :class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata` itself),
so the JSON is written back byte for byte.

A reference that does not resolve is never dropped: the spec entry keeps its names (written
back unchanged) and an :class:`UnresolvedReference` with the JSON path says what is wrong.
Resolution rules:

* ``cut_points[i].after_node``: the node of the *main graph* with that name; a node that
  exists only inside a control-flow body is unresolved (the spec forbids such cuts).
* ``cut_points[i].tensor_name``: the main-graph value (graph input, initializer or node
  output) with that name; it must be an output of ``after_node``.
* ``sharding.configurations[i].cut_point_ids[j]``: the cut point with that id (the first one
  when ids repeat).
* ``inputs[i].name`` / ``outputs[i].name``: the graph input / output with that name.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "BoundConfiguration",
    "BoundCutPoint",
    "BoundPlan",
    "BoundTensorInfo",
    "UnresolvedReference",
    "bind",
]

import dataclasses
from collections.abc import Iterable, Mapping

import onnx_ir as ir

from onnx_ir_multidevice._errors import BindingError
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    OmnyMetadata,
    ShardConfiguration,
    TensorInfo,
)


@dataclasses.dataclass(frozen=True)
class UnresolvedReference:
    """A name in the ``.omny`` metadata that does not resolve against the model.

    .. versionadded:: 0.1
    """

    kind: str
    """What the name should refer to: ``"node"``, ``"value"``, ``"cut_point"``, ``"input"``
    or ``"output"``."""

    json_path: str
    """Where the name is, e.g. ``cut_points[0].after_node`` or
    ``sharding.configurations[1].cut_point_ids[2]``."""

    name: str
    """The name as written in the metadata."""

    reason: str
    """Why it does not resolve, and what to do."""

    def __str__(self) -> str:
        return f"{self.json_path}: {self.kind} {self.name!r} {self.reason}"


@dataclasses.dataclass(frozen=True, eq=False)
class BoundCutPoint:
    """A cut point bound to the node it comes after and the value it cuts.

    .. versionadded:: 0.1
    """

    spec: CutPoint
    """The cut point as read from the metadata."""

    index: int
    """Position in ``cut_points`` (for JSON paths)."""

    node: ir.Node | None
    """The main-graph node named ``after_node``, or ``None`` when it does not resolve."""

    value: ir.Value | None
    """The main-graph value named ``tensor_name``, or ``None`` when it does not resolve."""

    resolved: bool
    """Whether both resolve and the value is an output of the node: a usable cut."""

    @property
    def id(self) -> str:
        """The cut point id."""
        return self.spec.id

    @property
    def json_path(self) -> str:
        """JSON path of the cut point, ``cut_points[i]``."""
        return f"cut_points[{self.index}]"

    def to_spec(self) -> CutPoint:
        """Return the cut point with names derived from the bound objects.

        Returns:
            ``spec`` itself when no name changed, else a copy with the new names.

        Raises:
            BindingError: If a bound node or value has lost its name.
        """
        after_node = _derived_name(self.node, self.spec.after_node, f"{self.json_path}.after_node")
        tensor_name = _derived_name(
            self.value, self.spec.tensor_name, f"{self.json_path}.tensor_name"
        )
        if after_node == self.spec.after_node and tensor_name == self.spec.tensor_name:
            return self.spec
        return dataclasses.replace(self.spec, after_node=after_node, tensor_name=tensor_name)


@dataclasses.dataclass(frozen=True, eq=False)
class BoundTensorInfo:
    """An ``inputs`` / ``outputs`` entry bound to the graph input or output it names.

    .. versionadded:: 0.1
    """

    spec: TensorInfo
    """The entry as read from the metadata."""

    json_path: str
    """``inputs[i]`` or ``outputs[i]``."""

    value: ir.Value | None
    """The graph input / output with that name, or ``None`` when it does not resolve."""

    def to_spec(self) -> TensorInfo:
        """Return the entry with its name derived from the bound value (``spec`` if same)."""
        name = _derived_name(self.value, self.spec.name, f"{self.json_path}.name")
        return self.spec if name == self.spec.name else dataclasses.replace(self.spec, name=name)


@dataclasses.dataclass(frozen=True, eq=False)
class BoundConfiguration:
    """A shard configuration with its cut points bound.

    .. versionadded:: 0.1
    """

    spec: ShardConfiguration
    """The configuration as read from the metadata."""

    index: int
    """Position in ``sharding.configurations``."""

    cut_points: tuple[BoundCutPoint | None, ...]
    """One entry per ``cut_point_ids`` entry; ``None`` where no cut point has the id."""

    @property
    def num_shards(self) -> int:
        """Number of shards (stages)."""
        return self.spec.num_shards

    @property
    def json_path(self) -> str:
        """JSON path of the configuration, ``sharding.configurations[i]``."""
        return f"sharding.configurations[{self.index}]"

    @property
    def resolved(self) -> bool:
        """Whether every cut point id is defined and every cut point resolves."""
        return all(cut is not None and cut.resolved for cut in self.cut_points)

    def cut_values(self) -> tuple[ir.Value, ...]:
        """Return the cut tensors in pipeline order, ready for stage assignment.

        Raises:
            BindingError: If a cut point id is undefined or a cut point does not resolve;
                the message names the JSON path.
        """
        values = []
        for j, cut in enumerate(self.cut_points):
            path = f"{self.json_path}.cut_point_ids[{j}]"
            if cut is None:
                raise BindingError(
                    f"{path}: no cut point has id {self.spec.cut_point_ids[j]!r}; define it "
                    "in cut_points or remove it from the configuration"
                )
            if not cut.resolved or cut.value is None:
                raise BindingError(
                    f"{path}: cut point {cut.id!r} ({cut.json_path}) does not resolve against "
                    "the model; fix its after_node / tensor_name"
                )
            values.append(cut.value)
        return tuple(values)


@dataclasses.dataclass(frozen=True, eq=False)
class BoundPlan:
    """``.omny`` metadata bound to a model.

    .. versionadded:: 0.1
    """

    model: ir.Model
    """The model the metadata is bound to."""

    metadata: OmnyMetadata
    """The metadata as read (the source of the spec entries)."""

    cut_points: tuple[BoundCutPoint, ...]
    """One per ``cut_points`` entry, in file order."""

    configurations: tuple[BoundConfiguration, ...]
    """One per ``sharding.configurations`` entry, in file order."""

    inputs: tuple[BoundTensorInfo, ...]
    """One per ``inputs`` entry."""

    outputs: tuple[BoundTensorInfo, ...]
    """One per ``outputs`` entry."""

    unresolved: tuple[UnresolvedReference, ...]
    """Every name that does not resolve, in document order."""

    def cut_point(self, cut_id: str) -> BoundCutPoint | None:
        """Return the cut point with id ``cut_id`` (the first when ids repeat), or ``None``."""
        return next((cut for cut in self.cut_points if cut.id == cut_id), None)

    def configuration_for(self, num_shards: int) -> BoundConfiguration | None:
        """Return the first configuration with ``num_shards`` shards, or ``None``."""
        return next((c for c in self.configurations if c.num_shards == num_shards), None)

    def to_metadata(self) -> OmnyMetadata:
        """Return the metadata with names derived from the bound IR objects.

        Unchanged entries are the very objects of :attr:`metadata`, and when no name changed
        the result is :attr:`metadata` itself, so its JSON is byte-identical. Unresolved
        entries keep their names.

        Raises:
            BindingError: If a bound node or value has lost its name (it could not be
                written back).
        """
        changes: dict[str, tuple] = {}
        for field, bound in (
            ("cut_points", self.cut_points),
            ("inputs", self.inputs),
            ("outputs", self.outputs),
        ):
            old = getattr(self.metadata, field)
            new = tuple(entry.to_spec() for entry in bound)
            if any(a is not b for a, b in zip(old, new)):
                changes[field] = new
        if not changes:
            return self.metadata
        return dataclasses.replace(self.metadata, **changes)


def _derived_name(obj: ir.Node | ir.Value | None, spec_name: str, path: str) -> str:
    if obj is None:
        return spec_name
    if not obj.name:
        what = "node" if isinstance(obj, ir.Node) else "value"
        raise BindingError(
            f"{path}: the bound {what} (was {spec_name!r}) has no name now; name it before "
            "writing the metadata"
        )
    return obj.name


class _GraphIndex:
    """Name indexes of a main graph.

    Main-graph names come from an analysis index; names inside control-flow bodies are only
    collected when a name does not resolve (to give a precise reason).
    """

    def __init__(
        self,
        graph: ir.Graph,
        index: GraphIndex | None = None,
        node_names: Iterable[str] | None = None,
        value_names: Iterable[str] | None = None,
    ) -> None:
        if index is None or index.graph is not graph:
            index = GraphIndex.build(graph)
        self.graph = graph
        # Only the names asked for are indexed (all of them when not given).
        self.nodes = index.node_names if node_names is None else index.nodes_named(node_names)
        self.values = index.value_names if value_names is None else index.values_named(value_names)
        self._inner: tuple[dict[str, ir.Node], set[str]] | None = None
        self.inputs = {v.name: v for v in reversed(graph.inputs) if v.name}
        self.outputs = {v.name: v for v in reversed(graph.outputs) if v.name}

    def _inner_names(self) -> tuple[dict[str, ir.Node], set[str]]:
        if self._inner is None:
            graph = self.graph
            inner_nodes: dict[str, ir.Node] = {}
            inner_values: set[str] = set()
            top = set(graph)
            for node in graph.all_nodes():
                if node in top:
                    continue
                if node.name:
                    inner_nodes.setdefault(node.name, node)
                inner_values.update(v.name for v in node.outputs if v.name)
            for body in graph.subgraphs():
                inner_values.update(v.name for v in body.inputs if v.name)
                inner_values.update(name for name in body.initializers if name)
            self._inner = (inner_nodes, inner_values)
        return self._inner

    @property
    def inner_nodes(self) -> dict[str, ir.Node]:
        """Node names that exist only inside control-flow bodies."""
        return self._inner_names()[0]

    @property
    def inner_values(self) -> set[str]:
        """Value names that exist only inside control-flow bodies."""
        return self._inner_names()[1]


def _label(node: ir.Node) -> str:
    return f"{node.name!r}" if node.name else f"<anonymous {node.op_type}>"


def _bind_node(
    index: _GraphIndex, name: str, path: str, unresolved: list[UnresolvedReference]
) -> ir.Node | None:
    found = index.nodes.get(name, [])
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        reason = f"is ambiguous: {len(found)} nodes of the main graph have this name"
    elif name in index.inner_nodes:
        body = index.inner_nodes[name].graph
        reason = (
            f"is inside the control-flow body {body.name if body else '?'!r}; a cut point "
            "must come after a node of the main graph (cut after the If/Loop/Scan node)"
        )
    else:
        reason = "is not a node of the main graph"
    unresolved.append(UnresolvedReference("node", path, name, reason))
    return None


def _bind_value(
    index: _GraphIndex, name: str, path: str, unresolved: list[UnresolvedReference]
) -> ir.Value | None:
    found = index.values.get(name, [])
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        reason = f"is ambiguous: {len(found)} values of the main graph have this name"
    elif name in index.inner_values:
        reason = "is a value inside a control-flow body; a cut must be a tensor of the main graph"
    else:
        reason = "is not a tensor of the main graph"
    unresolved.append(UnresolvedReference("value", path, name, reason))
    return None


def _bind_cut_point(
    index: _GraphIndex, spec: CutPoint, i: int, unresolved: list[UnresolvedReference]
) -> BoundCutPoint:
    path = f"cut_points[{i}]"
    node = _bind_node(index, spec.after_node, f"{path}.after_node", unresolved)
    value = _bind_value(index, spec.tensor_name, f"{path}.tensor_name", unresolved)
    resolved = node is not None and value is not None
    if resolved and value.producer() is not node:  # type: ignore[union-attr]
        producer = value.producer()  # type: ignore[union-attr]
        if producer is not None:
            source = f"an output of node {_label(producer)}"
        elif value.is_graph_input():  # type: ignore[union-attr]
            source = "a graph input"
        else:
            source = "an initializer"
        unresolved.append(
            UnresolvedReference(
                "value",
                f"{path}.tensor_name",
                spec.tensor_name,
                f"is {source}, not an output of after_node {spec.after_node!r}; "
                "name the node that produces the tensor",
            )
        )
        resolved = False
    return BoundCutPoint(spec=spec, index=i, node=node, value=value, resolved=resolved)


def _bind_tensor_infos(
    specs: Iterable[TensorInfo],
    by_name: Mapping[str, ir.Value],
    field: str,
    unresolved: list[UnresolvedReference],
) -> tuple[BoundTensorInfo, ...]:
    kind = field[:-1]  # "input" / "output"
    result = []
    for i, spec in enumerate(specs):
        path = f"{field}[{i}]"
        value = by_name.get(spec.name)
        if value is None:
            unresolved.append(
                UnresolvedReference(
                    kind, f"{path}.name", spec.name, f"is not a graph {kind} of the model"
                )
            )
        result.append(BoundTensorInfo(spec=spec, json_path=path, value=value))
    return tuple(result)


def _check_arguments(model: object, metadata: object) -> None:
    """Raise a ``TypeError`` that says what to pass when an argument has the wrong type."""
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"bind() takes an onnx_ir.Model as model, not {type(model).__name__}; load a file "
            "with onnx_ir_multidevice.load(path) and convert an onnx.ModelProto with "
            "onnx_ir.from_proto(proto)"
        )
    if not isinstance(metadata, OmnyMetadata):
        hint = (
            " (omny.read(model) returns None when the model has no .omny metadata: create it "
            "with onnx_ir_multidevice.plan(model) or `omny plan`)"
            if metadata is None
            else ""
        )
        raise TypeError(
            f"bind() takes an OmnyMetadata as metadata, not {type(metadata).__name__}; read "
            "it with onnx_ir_multidevice.omny.read(model) or parse JSON text with "
            f"OmnyMetadata.from_json(text){hint}"
        )


def bind(model: ir.Model, metadata: OmnyMetadata, *, index: GraphIndex | None = None) -> BoundPlan:
    """Bind ``.omny`` metadata to ``model``.

    Never raises on content: every name that does not resolve is listed in
    :attr:`BoundPlan.unresolved` (with its JSON path) and kept as written.

    Unlike :func:`~onnx_ir_multidevice.annotate`, ``bind`` does not load files: the bound
    objects belong to the model passed in, so pass the model you will work on, e.g.
    ``model = onnx_ir_multidevice.load(path)`` and ``bind(model, omny.read(model))``.

    Args:
        model: The model the metadata describes, an :class:`onnx_ir.Model` (load a file with
            :func:`onnx_ir_multidevice.load`).
        metadata: The parsed metadata, an
            :class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata` (from
            :func:`onnx_ir_multidevice.omny.read` or ``OmnyMetadata.from_json``).
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``
            to take the name indexes from (built when not given or for another graph).

    Returns:
        The bound plan. The model is not modified.

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model` (e.g. a path or an
            ``onnx.ModelProto``) or ``metadata`` is not an ``OmnyMetadata`` (e.g. ``None``,
            what ``omny.read`` returns for a model without ``.omny`` metadata).
    """
    _check_arguments(model, metadata)
    graph = model.graph
    index = _GraphIndex(
        graph,
        index,
        node_names=[cut.after_node for cut in metadata.cut_points],
        value_names=[cut.tensor_name for cut in metadata.cut_points],
    )
    unresolved: list[UnresolvedReference] = []
    inputs = _bind_tensor_infos(metadata.inputs, index.inputs, "inputs", unresolved)
    outputs = _bind_tensor_infos(metadata.outputs, index.outputs, "outputs", unresolved)
    cut_points = tuple(
        _bind_cut_point(index, spec, i, unresolved) for i, spec in enumerate(metadata.cut_points)
    )
    by_id: dict[str, BoundCutPoint] = {}
    for cut in cut_points:
        by_id.setdefault(cut.id, cut)
    configurations = []
    for i, spec in enumerate(metadata.sharding.configurations):
        bound: list[BoundCutPoint | None] = []
        for j, cut_id in enumerate(spec.cut_point_ids):
            cut = by_id.get(cut_id)
            if cut is None:
                unresolved.append(
                    UnresolvedReference(
                        "cut_point",
                        f"sharding.configurations[{i}].cut_point_ids[{j}]",
                        cut_id,
                        "is not the id of any entry of cut_points; define the cut point or "
                        "remove the id",
                    )
                )
            bound.append(cut)
        configurations.append(BoundConfiguration(spec=spec, index=i, cut_points=tuple(bound)))
    return BoundPlan(
        model=model,
        metadata=metadata,
        cut_points=cut_points,
        configurations=tuple(configurations),
        inputs=inputs,
        outputs=outputs,
        unresolved=tuple(unresolved),
    )
