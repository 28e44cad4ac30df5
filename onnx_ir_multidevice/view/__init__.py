"""The plan drawn on the graph: node-data overlays for Google's Model Explorer.

:func:`node_data` gives, for one configuration of a planned (``.omny``) or annotated (IR v11)
model, the node data Model Explorer shows beside the graph: per main-graph node its pipeline
stage (one colour per stage), its device, its stage's share of the memory and of the compute,
the sharding of its weight under a tensor-parallel plan, and the values that cross a cut.
:func:`write_node_data` writes one file per configuration. The JSON follows Model Explorer's
node-data format (``model_explorer.node_data_builder``); building it needs no Model Explorer,
only viewing it does (the ``view`` extra, ``omny view``).
"""

from __future__ import annotations

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.view.node_data import (
    NodeDataFile,
    graph_id,
    node_data,
    node_ids,
    write_node_data,
)
from onnx_ir_multidevice.view.viewer import Overlay, prepare

__all__ = [
    "NodeDataFile",
    "Overlay",
    "graph_id",
    "node_data",
    "node_ids",
    "prepare",
    "write_node_data",
]

set_public_module(globals())
