"""``OMNY3xx``: the pipeline, as annotated in the IR and as the ``.omny`` plan gives it.

No edge from a later stage to an earlier one (outer-scope reads of subgraph bodies
included), stages contiguous from 0 and within the devices, annotated stages that agree with
the ``.omny`` plan; for the plan itself: cut points that order into a pipeline, no empty
stage, no stage whose results nothing reads, and the tensors crossing each boundary (an error
when a strict cut carries more than one activation). One graph walk per configuration.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["check_pipeline"]

import contextlib
import operator
from collections.abc import Iterable, Mapping, Sequence

import onnx_ir as ir

from onnx_ir_multidevice._util import plural
from onnx_ir_multidevice.analysis.boundaries import Boundary, boundary_crossings, edge_violations
from onnx_ir_multidevice.analysis.stages import (
    annotated_stage_list,
    assign_stages,
    precompute_stages,
)
from onnx_ir_multidevice.analysis.tensor_classes import TensorClass
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX
from onnx_ir_multidevice.checker.device_rules import MAX_STAGE
from onnx_ir_multidevice.checker.diagnostics import (
    Diagnostic,
    Severity,
    configuration_location,
    make,
    node_location,
    value_location,
)
from onnx_ir_multidevice.checker.format_rules import PlanConfiguration
from onnx_ir_multidevice.graph.index import (
    AnalysisError,
    CutListCache,
    GraphIndex,
    ResultKey,
    holds_subgraphs,
    node_subgraphs,
)

#: At most this many diagnostics of one code for one configuration; then a summary line.
_MAX_PER_RULE = 20
#: At most this many names listed in one message.
_MAX_NAMES = 8
_ENTRIES = operator.attrgetter("device_configurations")
#: The boundary crossings of the default stages of each cut list, kept on the graph's index
#: (shared between the checker gate of ``annotate()`` and a later ``check``).
_BOUNDARIES: ResultKey[CutListCache[Sequence[Boundary]]] = ResultKey("checker.boundaries")


def check_pipeline(
    model: ir.Model,
    plan: list[PlanConfiguration],
    diagnostics: list[Diagnostic],
    *,
    relaxed_cuts: bool = False,
    index: GraphIndex | None = None,
    entries_list: Sequence[Sequence[ir.NodeDeviceConfiguration]] | None = None,
) -> None:
    """Run the OMNY3xx rules on ``model``, appending to ``diagnostics``.

    Args:
        model: The model (not modified).
        plan: The ``.omny`` configurations the format rules resolved.
        diagnostics: Where the findings go.
        relaxed_cuts: Whether ``OMNY320`` is a warning instead of an error.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``
            (built when needed if ``None``).
        entries_list: Each main-graph node's ``device_configurations`` in graph order,
            when already read.

    Raises:
        AnalysisError: If the graph has a cycle.
    """
    _PipelineRules(model, relaxed_cuts, diagnostics, index, entries_list).run(plan)


def _names(items: Iterable[str | None], limit: int = _MAX_NAMES) -> str:
    items = list(items)
    shown = ", ".join(repr(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _stages(numbers: list[int]) -> str:
    """``stage 2`` or ``stages [1, 3]``."""
    return f"stage {numbers[0]}" if len(numbers) == 1 else f"stages {numbers}"


def _have(items: list) -> str:
    return "has" if len(items) == 1 else "have"


def _is(items: list) -> str:
    return "is" if len(items) == 1 else "are"


def _node_label(node: ir.Node) -> str:
    return node.name or f"<unnamed {node.op_type}>"


class _PipelineRules:
    """Runs the OMNY3xx rules on one model, sharing indexes between rules."""

    def __init__(
        self,
        model: ir.Model,
        relaxed_cuts: bool,
        diagnostics: list[Diagnostic],
        index: GraphIndex | None = None,
        entries_list: Sequence[Sequence[ir.NodeDeviceConfiguration]] | None = None,
    ):
        self.model = model
        self.graph = model.graph
        self.relaxed_cuts = relaxed_cuts
        # Each main-graph node's device_configurations in graph order, read once per check.
        self._entries_list = entries_list
        self.out = diagnostics
        self._index = index
        self._bodies: list[tuple[ir.Node, list[ir.Graph]]] | None = None

    # -- shared lazily built indexes --

    @property
    def index(self) -> GraphIndex:
        """The analysis index of the main graph (raises AnalysisError on a cycle)."""
        if self._index is None:
            self._index = GraphIndex.for_model(self.model)
        return self._index

    @property
    def bodies(self) -> list[tuple[ir.Node, list[ir.Graph]]]:
        """The main-graph nodes that hold subgraphs, with their bodies."""
        if self._bodies is None:
            if self._index is not None:
                self._bodies = [(node, list(found)) for node, found in self._index.bodies]
            else:
                self._bodies = []
                for node in self.graph:
                    if holds_subgraphs(node):
                        self._bodies.append((node, list(node_subgraphs(node))))
        return self._bodies

    def run(self, plan: list[PlanConfiguration]) -> None:
        cut_lists = [entry.cuts for entry in plan if entry.cuts is not None]
        if len(cut_lists) > 1:
            # Every configuration's stages in one graph walk (cached on the index).
            with contextlib.suppress(AnalysisError):  # reported by _plan_stages
                precompute_stages(self.graph, cut_lists, index=self.index)
        for planned in plan:
            if planned.cuts is not None:
                self._plan_stages(planned)
        by_name = {entry.name: entry for entry in plan}
        annotated: set[str] = set()
        seen_names: set[str] = set()
        for configuration in self.model.device_configurations:
            if not configuration.name or configuration.name in seen_names:
                continue  # reported as OMNY202 / OMNY212
            seen_names.add(configuration.name)
            entry = by_name.get(configuration.name)
            if entry is None and configuration.name.startswith(OMNY_CONFIGURATION_PREFIX):
                self.out.append(
                    make(
                        "OMNY313",
                        f"configuration {configuration.name!r} has the omny/ prefix but the "
                        ".omny plan has no such configuration (stale annotation); run "
                        "`omny annotate` again or strip it",
                        configuration_location(configuration.name),
                    )
                )
            if self._check_annotation(configuration, entry):
                annotated.add(configuration.name)
        for entry in plan:
            if entry.name not in annotated:
                self.out.append(
                    make(
                        "OMNY312",
                        f"configuration {entry.index} ({plural(entry.num_shards, 'shard')}) is not "
                        f"annotated in the IR; `omny annotate` would add it as {entry.name!r}",
                        f"sharding.configurations[{entry.index}]",
                    )
                )

    def _plan_stages(self, entry: PlanConfiguration) -> None:
        path = f"sharding.configurations[{entry.index}]"
        assert entry.cuts is not None
        try:
            stages = assign_stages(self.graph, entry.cuts, index=self.index)
        except AnalysisError as error:
            self.out.append(
                make(
                    "OMNY322",
                    f"the cut points of configuration {entry.index} do not form a pipeline: "
                    f"{error}",
                    f"{path}.cut_point_ids",
                )
            )
            return
        entry.stages = stages
        used = set(stages.values())
        empty = [s for s in range(entry.num_shards) if s not in used]
        if empty:
            self.out.append(
                make(
                    "OMNY323",
                    f"configuration {entry.index}: {_stages(empty)} would have no node (two "
                    "cuts with nothing between them?); move or remove a cut",
                    f"{path}.cut_point_ids",
                )
            )
        # The same plan gives the same boundaries: cached on the index (shared with the
        # checker gate of annotate()).
        # (num_shards is len(cuts) + 1 here: a configuration has cuts only then.)
        cache = self.index.memo(_BOUNDARIES, CutListCache)
        boundaries = cache.get(entry.cuts)
        if boundaries is None:
            boundaries = boundary_crossings(
                self.graph, stages, num_stages=entry.num_shards, index=self.index
            )
            cache.put(entry.cuts, boundaries)
        for boundary in boundaries:
            location = f"{path}.cut_point_ids[{boundary.index}]"
            activations = boundary.activations
            if len(activations) > 1:
                self.out.append(
                    make(
                        "OMNY320",
                        f"{len(activations)} activations cross boundary {boundary.index} "
                        f"(stage {boundary.index} -> {boundary.index + 1}): "
                        f"{_names(v.name for v in activations)}; a strict cut carries exactly "
                        "one. Move the cut, or accept relaxed cuts (--relaxed)",
                        location,
                        Severity.WARNING if self.relaxed_cuts else None,
                    )
                )
            self.out.append(_crossing_info(entry.name, boundary, location))
        idle = [
            s for s in _idle_stages(self.graph, stages, boundaries, entry.num_shards) if s in used
        ]
        if idle:
            self.out.append(
                make(
                    "OMNY324",
                    f"configuration {entry.index}: {_stages(idle)} would produce nothing that a "
                    "later stage or the graph outputs read (what crosses their boundary is "
                    "recomputed downstream); cut at an activation instead",
                    f"{path}.cut_point_ids",
                )
            )

    def _check_annotation(
        self, configuration: ir.ModelConfiguration, entry: PlanConfiguration | None
    ) -> bool:
        """Check one configuration's stages; return whether it has any."""
        nodes = self._index.graph_nodes if self._index is not None else tuple(self.graph)
        if self._entries_list is None or len(self._entries_list) != len(nodes):
            self._entries_list = list(map(_ENTRIES, nodes))
        stage_list = annotated_stage_list(nodes, configuration, entries_list=self._entries_list)
        has_none = None in stage_list
        plan_stages = entry.stages if entry is not None else None
        index = self._index
        if (
            not has_none
            and plan_stages is not None
            and index is not None
            and index.in_graph_order
            and len(plan_stages) == len(stage_list)
            and list(plan_stages.values()) == stage_list
        ):
            # The plan's stages (keyed in topological = graph order), as annotate() writes
            # them: the same dict serves.
            stages: dict[ir.Node, int | None] = plan_stages  # type: ignore[assignment]  # dict is invariant
        else:
            stages = dict(zip(nodes, stage_list, strict=True))
        if stages is plan_stages:
            staged: dict[ir.Node, int] = plan_stages  # stages in range
        elif (
            not has_none
            and stage_list
            and min(stage_list) >= 0  # type: ignore[type-var, operator]  # no None (has_none)
            and max(stage_list) <= MAX_STAGE  # type: ignore[type-var, operator]  # no None (has_none)
        ):
            staged = stages  # type: ignore[assignment]  # no None (has_none)
        else:
            staged = {n: s for n, s in stages.items() if s is not None and 0 <= s <= MAX_STAGE}
        if self.bodies:
            self._check_subgraph_stages(configuration, stages)
        if not staged:
            return False
        name = configuration.name
        location = configuration_location(name)
        missing = [n for n, s in stages.items() if s is None] if has_none else []
        if missing:
            self.out.append(
                make(
                    "OMNY301",
                    f"{plural(len(missing), 'main-graph node')} {_have(missing)} no stage in "
                    f"{name!r} "
                    f"({_names(_node_label(n) for n in missing)}); every node needs one",
                    location,
                )
            )
        violations = 0
        # Same keys and equal stages (a dict comparison).
        same_as_plan = (
            not missing
            and plan_stages is not None
            and (staged is plan_stages or plan_stages == staged)
        )
        # The plan's stages never run backwards: only other stagings need the edge walk.
        edges = () if same_as_plan else self._edge_violations(staged)
        for producer, consumer, value in edges:
            violations += 1
            if violations <= _MAX_PER_RULE:
                self.out.append(
                    make(
                        "OMNY300",
                        f"in {name!r}, node {_node_label(consumer)!r} (stage "
                        f"{staged[consumer]}) reads {value.name!r} from node "
                        f"{_node_label(producer)!r} (stage {staged[producer]}); a value must "
                        "be produced at the same or an earlier stage",
                        node_location(consumer),
                    )
                )
        if violations > _MAX_PER_RULE:
            self.out.append(
                make(
                    "OMNY300",
                    f"... and {violations - _MAX_PER_RULE} more backward edges in {name!r}",
                    location,
                )
            )
        self._check_stage_numbers(configuration, staged)
        if entry is not None:
            self._compare_with_plan(configuration, entry, staged, same_as_plan=same_as_plan)
        elif not missing and not violations:
            num_stages = max(staged.values()) + 1
            for boundary in boundary_crossings(
                self.graph, staged, num_stages=num_stages, index=self.index
            ):
                self.out.append(_crossing_info(name, boundary, location))
        return True

    def _edge_violations(
        self, staged: Mapping[ir.Node, int]
    ) -> Iterable[tuple[ir.Node, ir.Node, ir.Value]]:
        try:
            index = self.index
        except AnalysisError:  # a cycle: walk the graph's own uses instead
            return edge_violations(self.graph, staged)
        return edge_violations(self.graph, staged, index=index)

    def _check_stage_numbers(
        self, configuration: ir.ModelConfiguration, staged: Mapping[ir.Node, int]
    ) -> None:
        name = configuration.name
        location = configuration_location(name)
        used = set(staged.values())
        largest = max(used)
        gaps = [s for s in range(min(largest + 1, configuration.num_devices)) if s not in used]
        if gaps:
            self.out.append(
                make(
                    "OMNY302",
                    f"{'stage' if len(gaps) == 1 else 'stages'} {_names(map(str, gaps))} of "
                    f"{name!r} {_have(gaps)} no node but later "
                    "stages do; number stages contiguously from 0",
                    location,
                )
            )
        if largest >= configuration.num_devices:
            beyond = sum(1 for s in staged.values() if s >= configuration.num_devices)
            self.out.append(
                make(
                    "OMNY303",
                    f"{plural(beyond, 'node')} of {name!r} {'is' if beyond == 1 else 'are'} at "
                    f"stage >= num_devices="
                    f"{configuration.num_devices} (largest stage {largest}); stage k runs on "
                    "device k, so add devices or merge stages",
                    location,
                )
            )
        elif largest + 1 < configuration.num_devices:
            self.out.append(
                make(
                    "OMNY304",
                    f"{name!r} uses {plural(largest + 1, 'stage')} on {configuration.num_devices} "
                    "devices; the last devices stay idle",
                    location,
                )
            )

    def _check_subgraph_stages(
        self, configuration: ir.ModelConfiguration, stages: Mapping[ir.Node, int | None]
    ) -> None:
        for parent, bodies in self.bodies:
            parent_stage = stages.get(parent)
            for body in bodies:
                for inner in body.all_nodes():
                    for item in inner.device_configurations:
                        if (
                            item.configuration is configuration
                            and item.pipeline_stage is not None
                            and item.pipeline_stage != parent_stage
                        ):
                            self.out.append(
                                make(
                                    "OMNY305",
                                    f"node {_node_label(inner)!r} inside "
                                    f"{_node_label(parent)!r} has stage {item.pipeline_stage} "
                                    f"in {configuration.name!r} but its parent has "
                                    f"{parent_stage}; subgraph nodes run with their parent, "
                                    "remove their stage",
                                    node_location(inner),
                                )
                            )

    def _compare_with_plan(
        self,
        configuration: ir.ModelConfiguration,
        entry: PlanConfiguration,
        staged: Mapping[ir.Node, int],
        *,
        same_as_plan: bool = False,
    ) -> None:
        name = configuration.name
        location = configuration_location(name)
        if configuration.num_devices != entry.num_shards:
            self.out.append(
                make(
                    "OMNY313",
                    f"{name!r} has num_devices={configuration.num_devices} but .omny "
                    f"configuration {entry.index} has {plural(entry.num_shards, 'shard')}; run "
                    "`omny annotate` again",
                    location,
                )
            )
        if entry.cuts is None or entry.stages is None:
            return
        contradicted = False
        for j, value in enumerate(entry.cuts):
            producer = value.producer()
            producer_stage = staged.get(producer) if producer is not None else None
            late_consumers = [c for c in value.consumers() if c in staged and staged[c] <= j]
            if (producer_stage is not None and producer_stage > j) or late_consumers:
                contradicted = True
                self.out.append(
                    make(
                        "OMNY310",
                        f"in {name!r}, cut {j} {value.name!r} must be produced at stage <= {j} "
                        f"and read at stages > {j}, but its producer is at stage "
                        f"{producer_stage} and {plural(len(late_consumers), 'consumer')} at stage "
                        f"<= {j}; re-annotate from the plan",
                        value_location(value),
                    )
                )
        if contradicted or same_as_plan:
            return
        differing = [n for n, s in entry.stages.items() if staged.get(n, s) != s]
        if differing:
            self.out.append(
                make(
                    "OMNY311",
                    f"{plural(len(differing), 'node')} of {name!r} {_is(differing)} not at the "
                    "stage the plan's cut "
                    f"points give ({_names(_node_label(n) for n in differing)}); re-annotate "
                    "if that is not intended",
                    location,
                )
            )


def _idle_stages(
    graph: ir.Graph,
    stages: Mapping[ir.Node, int],
    boundaries: Sequence[Boundary],
    num_stages: int,
) -> list[int]:
    """The stages whose results nothing reads: no graph output, no activation to a later stage.

    The split's rule: replicable values crossing a boundary are recomputed by the stages that
    read them, so they are no output of the stage that computes them.
    """
    produces = [False] * num_stages
    for value in graph.outputs:
        producer = value.producer()
        if producer is not None:
            stage = stages.get(producer)
            if stage is not None:
                produces[stage] = True
        elif not value.is_graph_input():
            produces[-1] = True  # an initializer output: the last stage returns it
    for boundary in boundaries:
        for value in boundary.activations:
            producer = value.producer()
            stage = stages.get(producer) if producer is not None else None
            if stage is not None:
                produces[stage] = True
    return [s for s, produced in enumerate(produces) if not produced]


def _crossing_info(name: str, boundary: Boundary, location: str) -> Diagnostic:
    by_class: dict[TensorClass, list[str]] = {}
    for value, value_class in boundary.tensors:
        by_class.setdefault(value_class, []).append(value.name or "<unnamed>")
    parts = [
        f"{len(names)} {value_class.value} ({_names(names)})"
        for value_class, names in sorted(by_class.items(), key=lambda kv: kv[0].value)
    ]
    return make(
        "OMNY321",
        f"{name!r} boundary {boundary.index} (stage {boundary.index} -> "
        f"{boundary.index + 1}): " + ("; ".join(parts) if parts else "nothing crosses"),
        location,
    )
