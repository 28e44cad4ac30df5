"""``annotate()``: turn a model's ``.omny`` plan into IR v11 multi-device annotations.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["annotate"]

import contextlib
import operator
import os
import re
from collections.abc import Collection, Iterator, Sequence

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import CheckError
from onnx_ir_multidevice._proto.convert import from_proto
from onnx_ir_multidevice._proto.files import load
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.binding.bind import BoundPlan
from onnx_ir_multidevice.binding.naming import OMNY_CONFIGURATION_PREFIX
from onnx_ir_multidevice.checker import core as _check
from onnx_ir_multidevice.checker.diagnostics import CODES, Diagnostic, Severity
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.passes.annotation import AnnotatePass, DeviceNames, validate_options
from onnx_ir_multidevice.passes.strip import strip_configurations

_CONFIGURATION_PATH = re.compile(r"sharding\.configurations\[(\d+)\]")
_CUT_PATH = re.compile(r"cut_points\[(\d+)\]")


def annotate(
    model: ir.Model | onnx.ModelProto | str | os.PathLike,
    *,
    configurations: Collection[int] | None = None,
    device_names: Sequence[str] | DeviceNames | None = None,
    check: bool = True,
    relaxed_cuts: bool = False,
    index: GraphIndex | None = None,
) -> ir.Model:
    """Annotate a model with the pipeline stages and cut-tensor placements of its ``.omny`` plan.

    Each selected ``.omny`` shard configuration becomes an :class:`onnx_ir.ModelConfiguration`
    named ``omny/<n>-shards`` (``omny/<n>-shards#1`` for a second one with ``n`` shards...),
    every main-graph node gets its ``pipeline_stage``, and each cut tensor gets placement-only
    sharding specs (see :mod:`onnx_ir_multidevice.passes.annotation`). Annotating twice changes
    nothing the second time. ``ir_version`` is raised to 11 when lower.

    Args:
        model: An :class:`onnx_ir.Model`, annotated in place and returned; the path of a
            ``.onnx`` / ``.omny`` file, loaded into a new model (the file is not modified:
            save the result yourself); or an :class:`onnx.ModelProto`, converted into a new
            model (the proto is not modified).
        configurations: Shard counts to annotate (``{2, 4}``); default: every configuration.
        device_names: Device names: a sequence, of which an ``n``-shard configuration takes
            the first ``n``, or a mapping from shard count to names. Default: none (an
            existing configuration keeps its names).
        check: Run the checker first and raise :class:`CheckError` on errors that concern
            what is annotated: the plan's format rules, the cut points and configurations
            selected, and the model's IR v11 fields. Errors in configurations that are not
            selected do not block, nor do those of an earlier ``omny/`` annotation that this
            call rewrites.
        relaxed_cuts: Accept cuts that several activations cross (see ``OMNY320``).
        index: A :class:`~onnx_ir_multidevice.graph.GraphIndex` of the model's main
            graph (``GraphIndex.for_model(model)``), to share the graph analysis with a later
            :func:`~onnx_ir_multidevice.check` of the same model (annotating does not
            change the graph, so the index stays valid). Built here when not given.

    Returns:
        The annotated model.

    Raises:
        CheckError: ``check`` is true and the checker found errors (listed in the error).
        BindingError: The model has no ``.omny`` metadata, ``configurations`` names a shard
            count the plan lacks, or a selected configuration does not resolve.
        OmnyIOError: ``model`` is a path that cannot be read.
        ValueError: ``index`` was built for another graph.
        TypeError: ``configurations`` is not a collection of shard counts, or
            ``device_names`` is not a sequence (or mapping) of strings.

    .. versionadded:: 0.1
    """
    configurations = validate_options(configurations, device_names)
    ir_model = _as_model(model)
    with gc_paused():
        if index is None:
            index = GraphIndex.for_model(ir_model)
        else:
            index.check_graph(ir_model.graph)
        _annotate_model(ir_model, configurations, device_names, check, relaxed_cuts, index)
    return ir_model


def _annotate_model(
    ir_model: ir.Model,
    configurations: Collection[int] | None,
    device_names: Sequence[str] | DeviceNames | None,
    check: bool,
    relaxed_cuts: bool,
    index: GraphIndex,
) -> None:
    if check:
        # Every diagnostic (no limit per code): which ones block depends on their locations.
        # Checked without the omny/ annotations, which AnnotatePass rewrites: their errors
        # (a broken device count, entries naming an undeclared omny/ configuration...) sit
        # on nodes and must not block the call that repairs them.
        with _without_omny_annotations(ir_model, index.graph_nodes):
            report = _check.run_check(
                ir_model,
                relaxed_cuts=relaxed_cuts,
                onnx_checker=False,
                index=index,
                max_per_code=None,
            )
        errors = _blocking_errors(report.diagnostics, report.plan, configurations)
        if errors:
            raise CheckError(errors)
    AnnotatePass(configurations, device_names, index=index)(ir_model)


@contextlib.contextmanager
def _without_omny_annotations(model: ir.Model, graph_nodes: Sequence[ir.Node]) -> Iterator[None]:
    """Hide the model's ``omny/`` configurations and their node entries meanwhile.

    ``graph_nodes``: the main graph's nodes (``GraphIndex.graph_nodes``). When the model
    declares no ``omny/`` configuration and no main-graph node names one, nothing is hidden
    (what :func:`strip_configurations` would remove then) and no node is walked again: the
    usual case of a model annotated for the first time, on the hot path of ``annotate()``.
    """
    if not any(map(_is_omny, model.device_configurations)) and not any(
        entry.configuration is not None and _is_omny(entry.configuration)
        for entries in {id(e): e for e in map(_NODE_ENTRIES, graph_nodes) if e}.values()
        for entry in entries
    ):
        yield
        return
    saved_configurations = model.device_configurations
    nodes = list(model.graph.all_nodes())
    for function in model.functions.values():
        nodes.extend(function.all_nodes())
    saved = [(node, node.device_configurations) for node in nodes if node.device_configurations]
    strip_configurations(model, _is_omny)
    try:
        yield
    finally:
        model.device_configurations = saved_configurations
        for node, entries in saved:
            node.device_configurations = entries


def _is_omny(configuration: ir.ModelConfiguration) -> bool:
    return configuration.name.startswith(OMNY_CONFIGURATION_PREFIX)


_NODE_ENTRIES = operator.attrgetter("device_configurations")


def _as_model(model: ir.Model | onnx.ModelProto | str | os.PathLike) -> ir.Model:
    if isinstance(model, ir.Model):
        return model
    if isinstance(model, onnx.ModelProto):
        return from_proto(model)
    if isinstance(model, (str, os.PathLike)):
        return load(model)
    raise TypeError(
        f"annotate() takes an onnx_ir.Model, an onnx.ModelProto or a path, not "
        f"{type(model).__name__}"
    )


def _blocking_errors(
    diagnostics: Sequence[Diagnostic],
    plan: BoundPlan | None,
    configurations: Collection[int] | None,
) -> list[Diagnostic]:
    """Keep the errors that concern the selected configurations (see :func:`annotate`).

    An error blocks unless its code is registered as not blocking annotate
    (:attr:`~onnx_ir_multidevice.checker.CodeInfo.blocks_annotate`: the rules about an existing
    pipeline annotation, which this call rewrites), it concerns an ``omny/`` configuration, or
    it concerns a configuration or cut point that is not selected.

    ``plan`` is the model's plan as the checker bound it (``None`` without a readable plan).
    """
    selected_indexes: set[int] | None = None
    used_cuts: set[int] | None = None
    if configurations is not None and plan is not None:
        selected = [c for c in plan.configurations if c.num_shards in configurations]
        selected_indexes = {c.index for c in selected}
        ids = {cut_id for c in selected for cut_id in c.spec.cut_point_ids}
        used_cuts = {cut.index for cut in plan.cut_points if cut.id in ids}
    blocking = []
    for diagnostic in diagnostics:
        if diagnostic.severity is not Severity.ERROR:
            continue
        if not CODES[diagnostic.code].blocks_annotate:
            continue  # about an existing annotation, which this call rewrites
        if diagnostic.location.startswith(f"configuration:{OMNY_CONFIGURATION_PREFIX}"):
            continue
        match = _CONFIGURATION_PATH.match(diagnostic.location)
        if match and selected_indexes is not None and int(match[1]) not in selected_indexes:
            continue
        match = _CUT_PATH.match(diagnostic.location)
        if match and used_cuts is not None and int(match[1]) not in used_cuts:
            continue
        blocking.append(diagnostic)
    return blocking
