"""Bind ``.omny`` metadata to a model: names become the onnx-ir objects they refer to.

The ``.omny`` JSON refers to the graph by name: a cut point names the node it comes after
(``after_node``) and the tensor it cuts (``tensor_name``), a shard configuration names its
cut points by id, ``inputs`` / ``outputs`` name graph inputs and outputs. :func:`bind`
resolves every such name once, against the name lookups of the main graph's
:class:`~onnx_ir_multidevice.graph.index.GraphIndex`, and returns a :class:`BoundPlan` that
holds the :class:`onnx_ir.Node` / :class:`onnx_ir.Value` objects.

``bind`` is the package's one cut resolver: the checker, :func:`~onnx_ir_multidevice.split`
and :func:`~onnx_ir_multidevice.annotate` all take their cut values from its result, so they
give one verdict on every file. Each :class:`UnresolvedReference` carries the diagnostic
code that the checker reports for it, and :meth:`BoundConfiguration.cut_values` raises a
:class:`~onnx_ir_multidevice._errors.BindingError` with that code and message.

As in onnx-ir's multi-device metadata, the objects are the source of truth:
:meth:`BoundPlan.to_metadata` derives the names back from ``node.name`` and ``value.name``,
so a rename in the IR follows into the metadata. When nothing was renamed it returns the
very same objects (the original :class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata` itself),
so the JSON is written back byte for byte.

A reference that does not resolve is never dropped: the spec entry keeps its names (written
back unchanged) and an :class:`UnresolvedReference` with the JSON path says what is wrong.
Resolution rules (with the code of each failure):

* ``cut_points[i].after_node``: the one node of the *main graph* with that name, which must
  have exactly one output (``OMNY113``). No such node: ``OMNY110``; a node that exists only
  inside a control-flow body: ``OMNY117`` (the spec forbids such cuts); several nodes of that
  name: ``OMNY119`` (ambiguous).
* ``cut_points[i].tensor_name``: the one main-graph value (graph input, initializer or node
  output) with that name (``OMNY111`` none, ``OMNY117`` only inside a body, ``OMNY119``
  several); it must be an output of ``after_node`` (``OMNY112``).
* ``cut_points[i].id``: unique; a second cut point with the same id is ``OMNY118``, and a
  configuration that lists that id does not resolve.
* ``sharding.configurations[i].cut_point_ids[j]``: the cut point with that id (the first one
  when ids repeat); none: ``OMNY132``; an id listed twice in a configuration: ``OMNY139``.
* ``inputs[i].name`` / ``outputs[i].name``: the graph input / output with that name
  (``OMNY138``).

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
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import BindingError
from onnx_ir_multidevice.graph.index import AnalysisError, GraphIndex
from onnx_ir_multidevice.omny._props import read as read_omny
from onnx_ir_multidevice.omny._schema import (
    CutPoint,
    OmnyMetadata,
    ShardConfiguration,
    TensorInfo,
)

#: At most this many names listed in one reason.
_MAX_NAMES = 8


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

    code: str
    """The diagnostic code the checker reports for it (``OMNY110``...; see
    :data:`~onnx_ir_multidevice.checker.diagnostics.CODES`)."""

    @property
    def message(self) -> str:
        """The problem in one sentence, without the JSON path: the checker's message."""
        return f"{self.kind} {self.name!r} {self.reason}"

    def __str__(self) -> str:
        return f"{self.json_path}: {self.message}"


def _binding_error(path: str, what: str, problems: Sequence[UnresolvedReference]) -> BindingError:
    """The error :meth:`BoundConfiguration.cut_values` raises: every problem, with its code."""
    details = "; ".join(f"{p} [{p.code}]" for p in problems)
    return BindingError(f"{path}: {what}: {details}", code=problems[0].code)


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
    """Whether both resolve, the node has one output and the value is that output, and the
    id is unique: a usable cut."""

    problems: tuple[UnresolvedReference, ...] = ()
    """Why it is not usable: its entries of :attr:`BoundPlan.unresolved` (empty when
    :attr:`resolved`)."""

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

    problems: tuple[tuple[int, UnresolvedReference], ...] = ()
    """The ``cut_point_ids`` entries that do not name one usable cut point by themselves, as
    ``(j, reference)``: an undefined id (``OMNY132``), an id listed twice (``OMNY139``), an id
    that two cut points have (``OMNY118``, the reference of the second definition)."""

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
        """Whether every cut point id names one usable cut point."""
        return not self.problems and all(
            cut is not None and cut.resolved for cut in self.cut_points
        )

    def cut_values(self) -> tuple[ir.Value, ...]:
        """Return the cut tensors in the listed order, ready for stage assignment.

        Raises:
            BindingError: If a cut point id is undefined, repeated or ambiguous, or a cut
                point does not resolve; the message names the JSON paths and holds the
                checker's message of each problem, and ``code`` is the checker's code.
        """
        problems: dict[int, list[UnresolvedReference]] = {}
        for j, reference in self.problems:
            problems.setdefault(j, []).append(reference)
        values = []
        for j, cut in enumerate(self.cut_points):
            path = f"{self.json_path}.cut_point_ids[{j}]"
            cut_id = self.spec.cut_point_ids[j]
            if j in problems or cut is None:
                raise _binding_error(path, f"cut point id {cut_id!r} is not usable", problems[j])
            if not cut.resolved or cut.value is None:
                raise _binding_error(
                    path,
                    f"cut point {cut.id!r} ({cut.json_path}) does not resolve against the model",
                    cut.problems,
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
        """Return the first configuration with ``num_shards`` shards, or ``None``.

        As every other choice of a configuration:
        :meth:`~onnx_ir_multidevice.omny.Sharding.configuration_index`.
        """
        position = self.metadata.sharding.configuration_index(num_shards)
        return None if position is None else self.configurations[position]

    def to_metadata(self) -> OmnyMetadata:
        """Return the metadata with names derived from the bound IR objects.

        Unchanged entries are the very objects of :attr:`metadata`, and when no name changed
        the result is :attr:`metadata` itself, so its JSON is byte-identical. Unresolved
        entries keep their names.

        Raises:
            BindingError: If a bound node or value has lost its name (it could not be
                written back).
        """
        changes: dict[str, Any] = {}
        for field, bound in (
            ("cut_points", self.cut_points),
            ("inputs", self.inputs),
            ("outputs", self.outputs),
        ):
            old = getattr(self.metadata, field)
            new = tuple(entry.to_spec() for entry in bound)
            if len(old) != len(new) or any(a is not b for a, b in zip(old, new, strict=True)):
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


def _names(items: Iterable[str]) -> str:
    items = list(items)
    shown = ", ".join(items[:_MAX_NAMES])
    return shown + (f" and {len(items) - _MAX_NAMES} more" if len(items) > _MAX_NAMES else "")


class _Resolver:
    """The names one :func:`bind` call looks up, from the graph index of the main graph."""

    def __init__(self, index: GraphIndex, metadata: OmnyMetadata) -> None:
        self.index = index
        cut_points = metadata.cut_points
        # Only the names asked for are looked up.
        self.nodes = index.nodes_named(cut.after_node for cut in cut_points)
        self.values = index.values_named(cut.tensor_name for cut in cut_points)

    def node_label(self, node: ir.Node) -> str:
        """``#<position> (<op_type>)``: a node among others of the same name."""
        return f"#{self.index.graph_positions[node]} ({node.op_type})"

    def value_label(self, value: ir.Value) -> str:
        """Where a main-graph value comes from, for a message."""
        producer = value.producer()
        if producer is not None:
            return f"output of node {self.node_label(producer)}"
        if value.is_graph_input():
            return "a graph input"
        return "an initializer"


def _node_name(node: ir.Node) -> str:
    return f"{node.name!r}" if node.name else f"<anonymous {node.op_type}>"


def _bind_node(
    resolver: _Resolver, name: str, path: str, problems: list[UnresolvedReference]
) -> ir.Node | None:
    found = resolver.nodes.get(name, [])
    if len(found) == 1:
        node = found[0]
        if len(node.outputs) != 1:
            problems.append(
                UnresolvedReference(
                    "node",
                    path,
                    name,
                    f"has {len(node.outputs)} outputs; a cut needs a node with exactly one "
                    "output tensor",
                    "OMNY113",
                )
            )
        return node
    if len(found) > 1:
        code = "OMNY119"
        reason = (
            f"is ambiguous: {len(found)} nodes of the main graph have this name "
            f"({_names(map(resolver.node_label, found))}); give them unique names (omny plan "
            "does; in Python, onnx_ir.passes.common.NameFixPass) and point after_node at one"
        )
    elif name in resolver.index.inner_node_names:
        code = "OMNY117"
        body = resolver.index.inner_node_names[name].graph
        reason = (
            f"is inside the control-flow body {body.name if body else '?'!r}; a cut point "
            "must come after a node of the main graph (cut after the If/Loop/Scan node)"
        )
    else:
        code = "OMNY110"
        reason = (
            "is not a node of the main graph (renamed or removed?); point after_node at an "
            "existing node"
        )
    problems.append(UnresolvedReference("node", path, name, reason, code))
    return None


def _bind_value(
    resolver: _Resolver, name: str, path: str, problems: list[UnresolvedReference]
) -> ir.Value | None:
    found = resolver.values.get(name, [])
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        code = "OMNY119"
        reason = (
            f"is ambiguous: {len(found)} values of the main graph have this name "
            f"({_names(map(resolver.value_label, found))}); give them unique names (omny plan "
            "does; in Python, onnx_ir.passes.common.NameFixPass) and point tensor_name at one"
        )
    elif name in resolver.index.inner_value_names:
        code = "OMNY117"
        reason = (
            "is a value inside a control-flow body; a cut must be a tensor of the main graph "
            "(cut an output of the If/Loop/Scan node)"
        )
    else:
        code = "OMNY111"
        reason = "is not a tensor of the main graph; point tensor_name at the output of after_node"
    problems.append(UnresolvedReference("value", path, name, reason, code))
    return None


def _bind_cut_point(
    resolver: _Resolver, spec: CutPoint, i: int, first: BoundCutPoint | None
) -> BoundCutPoint:
    path = f"cut_points[{i}]"
    problems: list[UnresolvedReference] = []
    if first is not None:
        problems.append(
            UnresolvedReference(
                "cut_point",
                f"{path}.id",
                spec.id,
                f"is defined twice (first at {first.json_path}); give each cut point a unique id",
                "OMNY118",
            )
        )
    node = _bind_node(resolver, spec.after_node, f"{path}.after_node", problems)
    value = _bind_value(resolver, spec.tensor_name, f"{path}.tensor_name", problems)
    if node is not None and value is not None and value.producer() is not node:
        producer = value.producer()
        if producer is not None:
            source = f"an output of node {_node_name(producer)}"
        elif value.is_graph_input():
            source = "a graph input"
        else:
            source = "an initializer"
        outputs = _names(repr(v.name) for v in node.outputs)
        problems.append(
            UnresolvedReference(
                "value",
                f"{path}.tensor_name",
                spec.tensor_name,
                f"is {source}, not an output of after_node {spec.after_node!r} (its outputs: "
                f"{outputs}); name the node that produces the tensor",
                "OMNY112",
            )
        )
    return BoundCutPoint(
        spec=spec,
        index=i,
        node=node,
        value=value,
        resolved=not problems,
        problems=tuple(problems),
    )


def _bind_tensor_infos(
    specs: Iterable[TensorInfo],
    graph_values: Sequence[ir.Value],
    field: str,
    unresolved: list[UnresolvedReference],
) -> tuple[BoundTensorInfo, ...]:
    kind = field[:-1]  # "input" / "output"
    by_name = {v.name: v for v in reversed(graph_values) if v.name}
    result = []
    for i, spec in enumerate(specs):
        path = f"{field}[{i}]"
        value = by_name.get(spec.name)
        if value is None:
            unresolved.append(
                UnresolvedReference(
                    kind,
                    f"{path}.name",
                    spec.name,
                    f"is not a graph {kind} (graph {field}: "
                    f"{_names(sorted(repr(n) for n in by_name))}); update the metadata",
                    "OMNY138",
                )
            )
        result.append(BoundTensorInfo(spec=spec, json_path=path, value=value))
    return tuple(result)


def _bind_configuration(
    spec: ShardConfiguration,
    i: int,
    by_id: Mapping[str, BoundCutPoint],
    duplicated: Mapping[str, UnresolvedReference],
    unresolved: list[UnresolvedReference],
) -> BoundConfiguration:
    bound: list[BoundCutPoint | None] = []
    problems: list[tuple[int, UnresolvedReference]] = []
    listed: dict[str, int] = {}
    for j, cut_id in enumerate(spec.cut_point_ids):
        path = f"sharding.configurations[{i}].cut_point_ids[{j}]"
        cut = by_id.get(cut_id)
        reference = None
        if cut is None:
            reference = UnresolvedReference(
                "cut_point",
                path,
                cut_id,
                f"is not the id of any entry of cut_points (defined: "
                f"{_names(sorted(repr(d) for d in by_id))}); define the cut point or remove "
                "the id",
                "OMNY132",
            )
        elif cut_id in listed:
            reference = UnresolvedReference(
                "cut_point",
                path,
                cut_id,
                f"is listed twice in this configuration (also at cut_point_ids"
                f"[{listed[cut_id]}]); list each cut point once",
                "OMNY139",
            )
        listed.setdefault(cut_id, j)
        if reference is not None:
            unresolved.append(reference)
            problems.append((j, reference))
        elif cut_id in duplicated:
            problems.append((j, duplicated[cut_id]))  # reported once, at the cut point
        bound.append(cut)
    return BoundConfiguration(spec=spec, index=i, cut_points=tuple(bound), problems=tuple(problems))


def _check_arguments(model: object, metadata: object) -> None:
    """Raise a ``TypeError`` that says what to pass when an argument has the wrong type."""
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"bind() takes an onnx_ir.Model or a path as model, not {type(model).__name__}; "
            "convert an onnx.ModelProto with onnx_ir.from_proto(proto)"
        )
    if metadata is not None and not isinstance(metadata, OmnyMetadata):
        raise TypeError(
            f"bind() takes an OmnyMetadata as metadata, not {type(metadata).__name__}; read "
            "it with onnx_ir_multidevice.omny.read(model), parse JSON text with "
            "OmnyMetadata.from_json(text), or leave it out to bind the model's own"
        )


def _graph_index(graph: ir.Graph, index: GraphIndex | None) -> GraphIndex:
    if index is not None and index.graph is graph:
        return index
    try:
        return GraphIndex.build(graph)
    except AnalysisError:
        # A cycle (reported by the checker as OMNY101): the names still resolve.
        return GraphIndex._build_unsorted(graph)


def bind(
    model: ir.Model | str | os.PathLike,
    metadata: OmnyMetadata | None = None,
    *,
    index: GraphIndex | None = None,
) -> BoundPlan:
    """Bind ``.omny`` metadata to ``model``.

    Never raises on content: every name that does not resolve is listed in
    :attr:`BoundPlan.unresolved` (with its JSON path and diagnostic code) and kept as
    written.

    The bound objects belong to the model bound: pass the model you will work on, e.g.
    ``model = onnx_ir_multidevice.load(path)`` and ``bind(model)``. Given a path, ``bind``
    loads the file into a new model (as :func:`~onnx_ir_multidevice.plan`,
    :func:`~onnx_ir_multidevice.annotate` and :func:`~onnx_ir_multidevice.check` do), which
    is :attr:`BoundPlan.model`.

    Args:
        model: The model the metadata describes: an :class:`onnx_ir.Model`, or the path of
            a ``.onnx`` / ``.omny`` file (``str`` or ``os.PathLike``, loaded with
            :func:`onnx_ir_multidevice.load`; the file is not modified).
        metadata: The parsed metadata, an
            :class:`~onnx_ir_multidevice.omny._schema.OmnyMetadata` (from
            :func:`onnx_ir_multidevice.omny.read` or ``OmnyMetadata.from_json``). ``None``
            (the default): the model's own, ``omny.read(model)``.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``
            to take the name lookups from (built when not given or for another graph).

    Returns:
        The bound plan. The model is not modified.

    Raises:
        BindingError: ``metadata`` is ``None`` and the model has no ``.omny`` metadata.
        OmnyIOError: ``model`` is a path that cannot be loaded (see
            :func:`onnx_ir_multidevice.load`).
        TypeError: ``model`` is not an :class:`onnx_ir.Model` or a path (e.g. an
            ``onnx.ModelProto``) or ``metadata`` is not an ``OmnyMetadata`` (e.g. JSON text).

    .. versionchanged:: 0.2
        ``model`` may be a path, and ``metadata`` defaults to the model's own.
    """
    if isinstance(model, (str, os.PathLike)):
        from onnx_ir_multidevice._proto.files import load  # lazy: only for a path

        model = load(model)
    _check_arguments(model, metadata)
    if metadata is None:
        metadata = read_omny(model)
        if metadata is None:
            raise BindingError(
                "bind(): the model has no .omny metadata (omny.read(model) returns None): "
                "create it with onnx_ir_multidevice.plan(model) or `omny plan`, or pass the "
                "metadata"
            )
    graph = model.graph
    resolver = _Resolver(_graph_index(graph, index), metadata)
    unresolved: list[UnresolvedReference] = []
    inputs = _bind_tensor_infos(metadata.inputs, graph.inputs, "inputs", unresolved)
    outputs = _bind_tensor_infos(metadata.outputs, graph.outputs, "outputs", unresolved)
    by_id: dict[str, BoundCutPoint] = {}
    duplicated: dict[str, UnresolvedReference] = {}
    cut_points = []
    for i, spec in enumerate(metadata.cut_points):
        first = by_id.get(spec.id)
        cut = _bind_cut_point(resolver, spec, i, first)
        cut_points.append(cut)
        unresolved.extend(cut.problems)
        if first is None:
            by_id[spec.id] = cut
        else:
            duplicated.setdefault(spec.id, cut.problems[0])
    configurations = tuple(
        _bind_configuration(spec, i, by_id, duplicated, unresolved)
        for i, spec in enumerate(metadata.sharding.configurations)
    )
    return BoundPlan(
        model=model,
        metadata=metadata,
        cut_points=tuple(cut_points),
        configurations=configurations,
        inputs=inputs,
        outputs=outputs,
        unresolved=tuple(unresolved),
    )
