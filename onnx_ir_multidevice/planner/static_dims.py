"""Pin a model's symbolic dims to numbers, for runtimes that allocate fixed buffers.

The ``.omny`` specification wants fixed-size tensors at every cut (only the batch may be
dynamic). A model exported with symbolic ``batch``/``seq`` dims runs correctly with dynamic
cuts (``omny check`` warns), but a fixed-buffer runtime needs them pinned:
:func:`pin_dims` does what onnxruntime's ``make_dynamic_shape_fixed`` tool does for one
input, for every symbol at once, *and* writes the inferred shape of every main-graph value,
so that no value is left with a dynamic dim. ``plan(..., static=True)`` (``omny plan
--static``) pins the model before planning it: every cut of the plan then has a static
shape.

Dims not given are pinned at the example values of
:func:`~onnx_ir_multidevice.analysis.shapes.example_dims` (batch 1, 128 tokens, 224 x 224
images...). Values whose shape even inference cannot tell keep their type as it is.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["pin_dims"]

from collections.abc import Mapping

import onnx_ir as ir

from onnx_ir_multidevice.analysis.shapes import ValueShapes, example_dims
from onnx_ir_multidevice.graph.index import GraphIndex


def pin_dims(model: ir.Model, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Replace every symbolic dim of ``model``'s main graph by a number, in place.

    Graph inputs get their dims evaluated at the binding (``32*h32`` with ``h32=20``:
    640); every node output and graph output whose shape the shape layer knows at the
    binding gets it (and its dtype, when the file had none).

    Args:
        model: The model (modified in place).
        dims: Values of the input symbols; the others take example values.

    Returns:
        The binding used (every input symbol).

    .. versionadded:: 0.1
    """
    graph = model.graph
    binding = example_dims(graph, dims)
    shapes = ValueShapes(graph, binding, index=GraphIndex.build(graph))
    values: dict[ir.Value, None] = dict.fromkeys(graph.inputs)
    for node in graph:
        values.update(dict.fromkeys(node.outputs))
    values.update(dict.fromkeys(graph.outputs))
    pinned: list[tuple[ir.Value, tuple[int, ...], ir.DataType | None]] = []
    for value in values:  # every lookup first: the layer reads the graph as it was
        shape = shapes.shape(value)
        if shape is not None:
            pinned.append((value, shape, shapes.dtype(value)))
    for value, shape, dtype in pinned:
        value.shape = ir.Shape(shape)
        if value.type is None and dtype is not None:
            value.type = ir.TensorType(dtype)
    return binding
