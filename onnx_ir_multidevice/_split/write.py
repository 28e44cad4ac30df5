"""Writing a split to a directory, atomically.

The directory holds the stage files, their external data and ``manifest.json``.
"""

from __future__ import annotations

__all__ = ["save_split"]

import dataclasses
import os
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import ExternalDataError
from onnx_ir_multidevice._proto.atomic import check_output_directory, staged_directory
from onnx_ir_multidevice._proto.external import external_attributes_embedded, model_problems
from onnx_ir_multidevice._proto.write_errors import writes_to
from onnx_ir_multidevice._split.build import (
    _boundary_types,
    _build_stage_model,
    _plan_stages,
    _StagePlan,
)
from onnx_ir_multidevice._split.manifest import (
    ManifestStage,
    SplitManifest,
    _stage_file,
    build_manifest,
)
from onnx_ir_multidevice._split.select import (
    Configuration,
    _build_index,
    _resolve,
    pipeline_configurations,
)
from onnx_ir_multidevice._split.tensor_parallel import tensor_parallel_configuration
from onnx_ir_multidevice._split.tensor_parallel_write import write_tensor_parallel_stage
from onnx_ir_multidevice._util import gc_paused, require_model
from onnx_ir_multidevice.graph.index import holds_subgraphs
from onnx_ir_multidevice.omny._schema import OmnyMetadata
from onnx_ir_multidevice.omny.tensor_parallel_record import TensorParallelConfiguration

_HOLDS = "the split is a directory of stage files"
"""What a split directory is, for the message about an output path that is a file."""


def _with_data_file(entry: ManifestStage, folder: Path, data: str | None) -> ManifestStage:
    """``entry`` listing the stage's data file ``data`` when it was written with content.

    ``ir.save`` creates the data file even when no tensor went into it: an empty one is
    removed, so the stage lists no data file.
    """
    data_files: list[str] = []
    if data is not None and (folder / data).exists():
        if (folder / data).stat().st_size == 0:
            (folder / data).unlink()
        else:
            data_files.append(data)
    return dataclasses.replace(entry, external_data=tuple(data_files))


def _has_weights(stage: ir.Model) -> bool:
    """Whether ``stage`` holds a weight of at least one byte.

    The main graph is checked first, so a stage with weights is answered without walking
    its nodes.
    """
    for value in stage.graph.initializers.values():
        if value.const_value is not None and value.const_value.nbytes > 0:
            return True
    for graph in stage.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None and value.const_value.nbytes > 0:
                return True
    return False


@writes_to("outdir")  # a full disk or a file-size limit: OmnyIOError naming outdir
def save_split(
    model: ir.Model,
    outdir: str | os.PathLike,
    shards: int,
    *,
    configuration: Configuration = None,
    metadata: OmnyMetadata | None = None,
    force: bool = False,
    external_data_threshold: int = 1024,
) -> SplitManifest:
    """Split ``model`` and write ``stage_<i>.onnx`` files and ``manifest.json`` to ``outdir``.

    Every stage is self-contained: its weights larger than ``external_data_threshold`` bytes
    go to ``stage_<i>.onnx.data`` next to it, so a weight read by two stages (a tied
    embedding) is written once per stage. Weights the model holds as external data are
    copied file to file by the kernel (``copy_file_range``: no user-space buffer, a reflink
    on copy-on-write file systems); weights in memory are written from their buffers.
    Referencing the model's own data file instead is not possible: onnxruntime and onnx-ir
    refuse external data outside the model's folder or reached through a link.

    The files are written into a hidden sibling directory named after this process
    (``.<outdir name>.omny-<pid>-<hex>.tmp``) which is then renamed to ``outdir``, so
    ``outdir`` never holds a half-written split; such directories left by a killed writer are
    removed by the next split into the same folder. A new ``outdir`` gets the mode the umask
    gives; a replaced one keeps its mode. Tensor attributes (``Constant`` values) the model
    reads from external files are embedded in the stage files: a stage refers to no file but
    its own data file.

    Args:
        model: The model to split (not modified).
        outdir: Directory to create. It must not exist or be empty unless ``force``; its
            parent folder must exist (it is not created, as in
            :func:`~onnx_ir_multidevice.save`).
        shards: Number of stages.
        configuration: See :func:`split`.
        metadata: See :func:`split`.
        force: Replace a non-empty ``outdir``. Without it, an ``outdir`` that another writer
            fills while this one runs is left as it is (the new split is discarded and an
            :class:`~onnx_ir_multidevice.OmnyIOError` says so).
        external_data_threshold: Size in bytes above which a weight goes to the stage's
            external data file; smaller ones are embedded in the stage file.

    Returns:
        The manifest that was written (:meth:`~onnx_ir_multidevice.SplitManifest.to_dict`
        gives its JSON document).

    Raises:
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.
        SplitError: The model cannot be split so.
        OmnyIOError: ``outdir`` is a file, is not empty (without ``force``), its parent
            folder does not exist, or it cannot be written.
    """
    require_model(model, "save_split")
    target = Path(outdir).absolute()
    check_output_directory(target, force, holds=_HOLDS)
    problems = model_problems(model)
    if problems:
        raise ExternalDataError(f"{target} (the model being split)", problems)
    # The stage graphs and their protos are large acyclic object graphs: without the pause
    # the first save after the split pays a full collection of every cloned node. Tensor
    # attributes read from external files are embedded: each stage file stands alone.
    with gc_paused(), external_attributes_embedded(model):
        return _save_split(
            model, target, shards, configuration, metadata, external_data_threshold, force
        )


class _NotDirect(Exception):
    """A stage uses a feature :func:`_write_stage_direct` does not write as ``ir.save`` does."""


_QUANTIZATION_KEY = "quant_parameter_tensor_names"
"""``Value.meta`` key onnx-ir serializes as a ``quantization_annotation`` of the graph."""

_FUNCTION_VALUE_INFO_IR_VERSION = 10
"""Below this IR version onnx-ir writes function value infos into the main graph."""


def _direct_writable(model: ir.Model) -> bool:
    """Whether the stages of ``model`` can be written without cloning their nodes.

    Models whose function value infos go into the main graph (IR version < 10) are written
    through the stage models; the per-node conditions are checked while writing.
    """
    return not model.functions or model.ir_version >= _FUNCTION_VALUE_INFO_IR_VERSION


def _plain_subgraphs(node: ir.Node) -> bool:
    """Whether the bodies of ``node`` hold no initializer and no device configuration.

    Such a node serializes as its clone does (``ir.save`` would move body initializers to
    external data, and a split strips pipeline configurations inside bodies).
    """
    for attribute in node.attributes.values():
        if attribute.type == ir.AttributeType.GRAPH:
            graphs = [attribute.as_graph()]
        elif attribute.type == ir.AttributeType.GRAPHS:
            graphs = list(attribute.as_graphs())
        else:
            continue
        for graph in graphs:
            if graph.initializers:
                return False
            for inner in ir.traversal.RecursiveGraphIterator(graph):
                if inner.device_configurations or not _plain_subgraphs(inner):
                    return False
    return True


def _write_stage_direct(
    model: ir.Model,
    skeleton: ir.Model,
    plan: _StagePlan,
    path: Path,
    data: str | None,
    external_data_threshold: int,
    stripped: set[int],
) -> None:
    """Write one stage as ``ir.save(stage_model, ...)`` would, serializing the input nodes.

    ``skeleton`` is the stage model without nodes (:func:`_build_stage_model` with
    ``with_nodes=False``): its weights go to ``data`` exactly as ``ir.save`` moves them, then
    the nodes of the plan are serialized from the input model straight into the graph proto
    (no clone), with the value infos of their outputs that are not stage outputs, as
    ``onnx_ir.serde`` writes the cloned nodes, and the split's pipeline configurations
    stripped.

    Raises:
        _NotDirect: A node carries a quantization annotation or a body this writer does not
            reproduce; the caller writes the stage model instead.
    """
    if data is not None:
        skeleton = ir.external_data.unload_from_model(
            skeleton, path.parent, data, size_threshold_bytes=external_data_threshold
        )
    proto = ir.serde.serialize_model(skeleton)
    graph_proto = proto.graph
    node_protos = graph_proto.node
    value_infos = graph_proto.value_info
    outputs = plan.outputs
    ir_version = skeleton.ir_version  # lowered where the split's configurations were all
    serialize_node_into = ir.serde.serialize_node_into
    serialize_value_into = ir.serde.serialize_value_into
    keep_configurations = ir_version >= 11
    for node in plan.nodes:
        if holds_subgraphs(node) and not _plain_subgraphs(node):
            raise _NotDirect
        node_proto = node_protos.add()
        # The node's own configurations are written below (or not): onnx-ir, told the lowered
        # version, would drop them with one warning per node.
        serialize_node_into(
            node_proto,
            from_=node,
            model_ir_version=ir_version if holds_subgraphs(node) else None,
        )
        if node.device_configurations:
            del node_proto.device_configurations[:]
            if keep_configurations:
                for entry in node.device_configurations:
                    if entry.configuration is None or id(entry.configuration) not in stripped:
                        node_proto.device_configurations.add().CopyFrom(
                            ir.serde.serialize_node_device_configuration(entry)
                        )
        for output in node.outputs:
            if output.meta.get(_QUANTIZATION_KEY):
                raise _NotDirect
            if output in outputs or not output.name:
                continue
            if (
                output.type is None
                and output.shape is None
                and not output.metadata_props
                and not output.doc_string
            ):
                continue
            serialize_value_into(value_infos.add(), output)
    onnx.save(proto, path)


def _save_tensor_parallel(
    model: ir.Model,
    target: Path,
    plans: list[_StagePlan],
    typed: Any,
    stripped: set[int],
    parallel: TensorParallelConfiguration,
    external_data_threshold: int,
    force: bool,
) -> SplitManifest:
    """Write a split some of whose stages are tensor-parallel (the record gives the degree).

    A stage of degree 1 is written as :func:`ir.save` writes it; a stage of degree ``d > 1``
    as ``d`` ranks of segments (:func:`write_tensor_parallel_stage`).
    """
    shards = len(plans)
    stages = [
        _build_stage_model(model, plan, i, shards, stripped, typed=typed)
        for i, plan in enumerate(plans)
    ]
    files = [_stage_file(i) for i in range(shards)]
    manifest = build_manifest(model, stages, files=files)
    entries = []
    with staged_directory(target, force, holds=_HOLDS) as temporary:
        for i, (entry, stage, file) in enumerate(zip(manifest.stages, stages, files, strict=True)):
            record = parallel.stage(i)
            if record.degree > 1:
                written = write_tensor_parallel_stage(
                    stage,
                    entry,
                    record,
                    temporary,
                    dims=parallel.dims_dict,
                    external_data_threshold=external_data_threshold,
                )
                if written.tensor_parallel is not None:
                    entries.append(written)
                    continue
            data = f"{file}.data" if _has_weights(stage) else None
            if data is not None:
                ir.save(
                    stage,
                    temporary / file,
                    external_data=data,
                    size_threshold_bytes=external_data_threshold,
                )
            else:
                ir.save(stage, temporary / file)
            entries.append(_with_data_file(entry, temporary, data))
        manifest = dataclasses.replace(manifest, stages=tuple(entries))
        manifest.write(temporary)
    return manifest


def _save_split(
    model: ir.Model,
    target: Path,
    shards: int,
    configuration: Configuration,
    metadata: OmnyMetadata | None,
    external_data_threshold: int,
    force: bool,
) -> SplitManifest:
    index = _build_index(model.graph)
    stage_of = _resolve(index, model, shards, configuration, metadata)
    plans = _plan_stages(index, stage_of, shards)
    typed = _boundary_types(model, index, plans)
    stripped = {id(c) for c in pipeline_configurations(model.graph)}
    parallel = tensor_parallel_configuration(model, shards)
    if parallel is not None and parallel.parallel:
        return _save_tensor_parallel(
            model, target, plans, typed, stripped, parallel, external_data_threshold, force
        )
    direct = _direct_writable(model)
    # Without nodes when writing directly: build_manifest reads only the stage inputs/outputs.
    stages = [
        _build_stage_model(model, plan, i, shards, stripped, with_nodes=not direct, typed=typed)
        for i, plan in enumerate(plans)
    ]
    # A stage whose IR version was lowered below 10 writes its function value infos as a
    # model of that version does: through the stage model.
    direct = direct and all(_direct_writable(stage) for stage in stages)
    files = [_stage_file(i) for i in range(len(stages))]
    manifest = build_manifest(model, stages, files=files)
    entries = []
    with staged_directory(target, force, holds=_HOLDS) as temporary:
        for i, (entry, stage, file) in enumerate(zip(manifest.stages, stages, files, strict=True)):
            path = temporary / file
            data = f"{file}.data" if _has_weights(stage) else None
            if direct:
                try:
                    _write_stage_direct(
                        model, stage, plans[i], path, data, external_data_threshold, stripped
                    )
                except _NotDirect:
                    direct = False
            if not direct:
                if stage.graph.num_nodes() < len(plans[i].nodes):  # a skeleton
                    # The skeleton gives way to the whole stage model from here on.
                    stage = _build_stage_model(model, plans[i], i, shards, stripped, typed=typed)  # noqa: PLW2901
                    data = f"{file}.data" if _has_weights(stage) else None
                if data is not None:
                    ir.save(
                        stage,
                        path,
                        external_data=data,
                        size_threshold_bytes=external_data_threshold,
                    )
                else:
                    ir.save(stage, path)
            entries.append(_with_data_file(entry, temporary, data))
        manifest = dataclasses.replace(manifest, stages=tuple(entries))
        manifest.write(temporary)
    return manifest
