"""``OMNY225``-``OMNY226``: the tensor-parallel record and the annotations written from it.

* ``OMNY225``: the ``metadata_props`` entry ``onnx_ir_multidevice.tensor_parallel``
  (:class:`~onnx_ir_multidevice.omny.TensorParallelRecord`) is malformed (the location is the
  JSON path of the element), names a configuration the ``.omny`` plan does not have, or
  disagrees with it (``num_shards``), or with the annotated IR v11 configuration (fewer
  ``num_devices`` than its stages use).
* ``OMNY226``: a node of a tensor-parallel region, found again at the record's degree and dims
  (:func:`~onnx_ir_multidevice.analysis.tensor_parallel_specs.stage_regions`), lacks a sharding
  spec that :func:`~onnx_ir_multidevice.analysis.tensor_parallel_specs.region_specs` gives it
  or has it otherwise (another axis, shard count or devices). Only configurations that are
  annotated with specs are compared (a plan not yet annotated is ``OMNY312``'s business).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["check_tensor_parallel"]

from collections.abc import Sequence

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice.analysis.shapes import ValueShapes
from onnx_ir_multidevice.analysis.stages import stages_from_annotations
from onnx_ir_multidevice.analysis.tensor_parallel_specs import region_specs, stage_regions
from onnx_ir_multidevice.checker.diagnostics import (
    Diagnostic,
    make,
    node_location,
)
from onnx_ir_multidevice.checker.format_rules import PlanConfiguration
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    read_tensor_parallel,
)

_ENTRY = f"metadata_props[{TENSOR_PARALLEL_KEY}]"


def check_tensor_parallel(
    model: ir.Model,
    plan: Sequence[PlanConfiguration] | None,
    diagnostics: list[Diagnostic],
) -> None:
    """Check the tensor-parallel record of ``model`` and the specs annotated from it.

    Args:
        model: The model.
        plan: The ``.omny`` plan's configurations (``None`` without a readable plan).
        diagnostics: Where the findings go.
    """
    try:
        record = read_tensor_parallel(model)
    except OmnyFormatError as error:
        diagnostics.append(
            make(
                "OMNY225",
                f"{error.reason}; re-plan the model (`omny plan --tensor-parallel`)",
                error.path or _ENTRY,
            )
        )
        return
    if record is None:
        return
    by_name = {entry.name: entry for entry in plan or ()}
    annotated = {c.name: c for c in model.device_configurations}
    for i, parallel in enumerate(record.configurations):
        path = f"{_ENTRY}.configurations[{i}]"
        entry = by_name.get(parallel.name)
        if entry is None:
            known = sorted(by_name) or "none"
            diagnostics.append(
                make(
                    "OMNY225",
                    f"configuration {parallel.name!r} is not a configuration of the .omny plan "
                    f"(its configurations: {known}); re-plan the model",
                    f"{path}.name",
                )
            )
            continue
        if entry.num_shards != parallel.num_shards:
            diagnostics.append(
                make(
                    "OMNY225",
                    f"num_shards is {parallel.num_shards} but .omny configuration "
                    f"{parallel.name!r} has {entry.num_shards}; re-plan the model",
                    f"{path}.num_shards",
                )
            )
            continue
        configuration = annotated.get(parallel.name)
        if configuration is None:
            continue
        if configuration.num_devices < parallel.num_devices:
            diagnostics.append(
                make(
                    "OMNY225",
                    f"its stages use {parallel.num_devices} devices but configuration "
                    f"{parallel.name!r} has num_devices={configuration.num_devices}; run "
                    "`omny annotate` again",
                    f"{path}.stages",
                )
            )
            continue
        _check_specs(model, configuration, parallel, diagnostics)


def _check_specs(
    model: ir.Model,
    configuration: ir.ModelConfiguration,
    parallel: TensorParallelConfiguration,
    diagnostics: list[Diagnostic],
) -> None:
    graph = model.graph
    entries = {
        node: entry
        for node in graph
        for entry in node.device_configurations
        if entry.configuration is configuration
    }
    if not parallel.parallel or not any(e.sharding_specs for e in entries.values()):
        return
    stages = stages_from_annotations(graph, configuration)
    degrees = {e.stage: e.degree for e in parallel.stages}
    shapes = ValueShapes(graph, parallel.dims_dict)
    regions = stage_regions(model, stages, degrees, shapes=shapes)
    position = {node: i for i, node in enumerate(graph)}
    for stage, found in regions.items():
        devices = parallel.devices_of(stage)
        for region in found:
            for node, expected in region_specs(region, devices, shapes).items():
                entry = entries.get(node)
                actual = {
                    spec.value: spec
                    for spec in (entry.sharding_specs if entry is not None else ())
                    if spec.value is not None
                }
                for spec in expected:
                    assert spec.value is not None
                    written = actual.get(spec.value)
                    if written == spec:
                        continue
                    what = (
                        "has no sharding spec"
                        if written is None
                        else f"is annotated {_describe(written)}"
                    )
                    diagnostics.append(
                        make(
                            "OMNY226",
                            f"value {spec.value.name!r} {what} but the tensor-parallel region "
                            f"of stage {stage} (degree {len(devices)}) has it "
                            f"{_describe(spec)} under configuration {configuration.name!r}; "
                            "run `omny annotate` again",
                            node_location(node, position.get(node)),
                        )
                    )


def _describe(spec: ir.ShardingSpec) -> str:
    dims = ", ".join(
        f"axis {d.axis} in " + "x".join(str(s.num_shards) for s in d.simple_shardings)
        for d in spec.sharded_dims
    )
    groups = {g.key: g.value for g in spec.index_to_device_group_map}
    devices = [groups.get(d, d) for d in spec.device]
    return f"[{dims or 'replicated'}] on {devices}"
