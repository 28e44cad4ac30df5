"""Pure graph analysis for multi-device planning: tensor classes, stages, boundaries, shapes.

Functions here take an :class:`onnx_ir.Graph` and return plain data; they do no I/O and never
modify the graph.

:func:`build_metadata` writes the ``.omny`` document of a graph's stages: the one builder, used
by the planner and by :class:`~onnx_ir_multidevice.passes.StagesToOmnyPass`.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    # uses
    "AnalysisError",
    "GraphIndex",
    "graph_uses",
    "node_subgraphs",
    "node_uses",
    "topological_order",
    "value_consumers",
    # tensor classes
    "DEFAULT_INDEX_TABLE_BYTES",
    "DEFAULT_LARGE_CONSTANT_BYTES",
    "HEAVY_OPS",
    "INDEX_TABLE_DTYPES",
    "NONDETERMINISTIC_OPS",
    "TensorClass",
    "classify_values",
    "default_classes",
    # stages
    "StageAssignmentError",
    "assign_stages",
    "stages_from_annotations",
    # boundaries
    "Boundary",
    "boundary_crossings",
    "boundary_problem",
    "edge_violations",
    # cut points
    "DEFAULT_SIDE_LIMIT_BYTES",
    "CutAnalysis",
    "CutCandidate",
    "analyse_cut_points",
    "find_cut_points",
    "narrowest_crossing",
    # element types
    "element_types",
    # precision
    "TOLERANCES",
    "arithmetic_family",
    "default_tolerance",
    # shapes
    "DimExpression",
    "ValueShapes",
    "example_dims",
    "input_symbols",
    "parse_dim",
    # sizes
    "ValueSizes",
    # .omny documents
    "StagedConfiguration",
    "build_metadata",
    # tensor parallelism
    "AttributeRewrite",
    "BiasOnce",
    "Collective",
    "Partial",
    "Region",
    "Replicated",
    "RuleResult",
    "ShapeRewrite",
    "ShardingContext",
    "Split",
    "VocabMask",
    "WeightSlice",
    "find_regions",
    "region_specs",
    "replicated_spec",
    "split_spec",
    "stage_regions",
    "propagate",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.analysis.boundaries import (
    Boundary,
    boundary_crossings,
    boundary_problem,
    edge_violations,
)
from onnx_ir_multidevice.analysis.cut_points import (
    DEFAULT_SIDE_LIMIT_BYTES,
    CutAnalysis,
    CutCandidate,
    analyse_cut_points,
    find_cut_points,
    narrowest_crossing,
)
from onnx_ir_multidevice.analysis.dim_expressions import DimExpression, parse_dim
from onnx_ir_multidevice.analysis.element_types import element_types
from onnx_ir_multidevice.analysis.omny_document import StagedConfiguration, build_metadata
from onnx_ir_multidevice.analysis.precision import (
    TOLERANCES,
    arithmetic_family,
    default_tolerance,
)
from onnx_ir_multidevice.analysis.shapes import ValueShapes, example_dims, input_symbols
from onnx_ir_multidevice.analysis.sharding import (
    AttributeRewrite,
    BiasOnce,
    Partial,
    Replicated,
    RuleResult,
    ShapeRewrite,
    ShardingContext,
    Split,
    VocabMask,
    WeightSlice,
    propagate,
)
from onnx_ir_multidevice.analysis.sizes import ValueSizes
from onnx_ir_multidevice.analysis.stages import (
    StageAssignmentError,
    assign_stages,
    stages_from_annotations,
)
from onnx_ir_multidevice.analysis.tensor_classes import (
    DEFAULT_INDEX_TABLE_BYTES,
    DEFAULT_LARGE_CONSTANT_BYTES,
    HEAVY_OPS,
    INDEX_TABLE_DTYPES,
    NONDETERMINISTIC_OPS,
    TensorClass,
    classify_values,
    default_classes,
)
from onnx_ir_multidevice.analysis.tensor_parallel import Collective, Region, find_regions
from onnx_ir_multidevice.analysis.tensor_parallel_specs import (
    region_specs,
    replicated_spec,
    split_spec,
    stage_regions,
)
from onnx_ir_multidevice.graph.index import (
    AnalysisError,
    GraphIndex,
    graph_uses,
    node_subgraphs,
    node_uses,
    topological_order,
    value_consumers,
)

set_public_module(globals())
