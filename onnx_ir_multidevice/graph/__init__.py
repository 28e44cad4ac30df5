"""Graph infrastructure every analysis stands on.

* :class:`GraphIndex` -- the per-graph index (topological order, uses, value slots, name
  lookups) built once in O(N + E) and shared by binding, analysis, checker, passes and split,
  which keeps the analyses' results under keys they own (:class:`ResultKey`);
* :mod:`~onnx_ir_multidevice.graph.index` -- what a node reads (outer-scope captures of
  its bodies included);
* :mod:`~onnx_ir_multidevice.graph.preserve` -- replacing a value without losing its
  sharding specs (onnx-ir drops them).
* :mod:`~onnx_ir_multidevice.graph.dtypes` -- the one table of ONNX data types: their
  ``.omny`` spelling and their size in bits.
* :mod:`~onnx_ir_multidevice.graph.fingerprint` -- :class:`GraphFingerprint`, what the
  analyses read from a graph, and :class:`GraphCache`, their results kept while it is
  unchanged (the index and the shapes, shared by ``annotate()`` and a later ``check()``).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "AnalysisError",
    "CutListCache",
    "GraphCache",
    "GraphFingerprint",
    "GraphIndex",
    "ResultKey",
    "dtype_bits",
    "dtype_from_name",
    "dtype_name",
    "graph_uses",
    "holds_subgraphs",
    "move_sharding",
    "node_subgraphs",
    "node_uses",
    "replace_all_uses_preserving",
    "tensor_nbytes",
    "topological_order",
    "value_consumers",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.graph.dtypes import dtype_bits, dtype_from_name, dtype_name, tensor_nbytes
from onnx_ir_multidevice.graph.fingerprint import GraphCache, GraphFingerprint
from onnx_ir_multidevice.graph.index import (
    AnalysisError,
    CutListCache,
    GraphIndex,
    ResultKey,
    graph_uses,
    holds_subgraphs,
    node_subgraphs,
    node_uses,
    topological_order,
    value_consumers,
)
from onnx_ir_multidevice.graph.preserve import move_sharding, replace_all_uses_preserving

set_public_module(globals())
