"""``OMNY124``: the planning dims must be sizes the model can take.

A plan is made at planning dims (``omny plan --dim seq=512``, recorded in the file, or pinned
in the model by ``--static``). A model built for at most 256 positions (a 256-row position
table added to 512 token embeddings) passes every other rule, and onnxruntime refuses to load
it at those sizes. This rule runs ONNX strict shape inference of the weightless graph at the
planning dims (:meth:`~onnx_ir_multidevice.analysis.shapes.ValueShapes.conflict`) and
reports the node whose input shapes contradict each other. Only a model with a plan or
recorded planning dims is looked at, and only when the dims bind every input symbol.

.. versionadded:: 0.2
"""

from __future__ import annotations

__all__ = ["check_planning_dims"]

import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError
from onnx_ir_multidevice.analysis.shapes import ValueShapes, dims_conflict_message
from onnx_ir_multidevice.checker.diagnostics import Diagnostic, make
from onnx_ir_multidevice.graph.index import GraphIndex
from onnx_ir_multidevice.omny.planning_dims import PLANNING_DIMS_KEY, read_planning_dims

_PLAN_KEYS = ("omnynet_metadata", PLANNING_DIMS_KEY)
"""``metadata_props`` entries that say the model was planned."""


def check_planning_dims(
    model: ir.Model, diagnostics: list[Diagnostic], index: GraphIndex | None
) -> None:
    """Append ``OMNY124`` when the model cannot take its planning dims.

    Args:
        model: The model (not modified).
        diagnostics: Where the finding goes.
        index: A :class:`~onnx_ir_multidevice.graph.index.GraphIndex` of ``model.graph``, or
            ``None`` (a graph with a cycle: nothing is inferred).
    """
    if index is None or not any(key in model.metadata_props for key in _PLAN_KEYS):
        return
    try:
        dims = read_planning_dims(model) or {}
    except OmnyFormatError:  # reported by the format rules
        return
    found = ValueShapes(model.graph, dims, index=index).conflict()
    if found is None:
        return
    name, reason = found
    node = next((n for n in model.graph if name and n.name == name), None)
    diagnostics.append(
        make(
            "OMNY124",
            dims_conflict_message(model.graph, dims, name, reason),
            f"node:{name}" if node is not None else "model",
        )
    )
