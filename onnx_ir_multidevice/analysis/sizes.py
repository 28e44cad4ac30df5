"""Shapes and byte sizes of values at the planning dims.

The planner measures tensors at concrete *planning dims*: a symbolic dimension such as
``"batch"`` or ``"seq"`` gets the integer the user gives for it. Rules:

* a symbolic dimension named in ``dims`` takes that value;
* a symbolic dimension that is the *first* dimension of a graph input and is not named in
  ``dims`` is the batch dimension and takes :data:`DEFAULT_BATCH` (1);
* any other symbolic or unnamed dimension is unknown, and so is the size of every value that
  has one. Unknown sizes are reported as ``None``, never as zero.

Values of the main graph without a dtype or a shape get them from ONNX shape inference, run
on a serialized copy of the graph whose graph inputs carry the planning dims (so inferred
shapes come out concrete). The graph is never modified.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH",
    "ValueSizes",
    "check_dims",
    "planning_dims",
]

from collections.abc import Mapping
from typing import Any

import onnx
import onnx_ir as ir

from onnx_ir_multidevice.graph.dtypes import tensor_nbytes

DEFAULT_BATCH = 1
"""Value of a graph input's unnamed-by-the-user symbolic first (batch) dimension."""

_MISSING: Any = object()


def check_dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    """Return planning dims given by the user as a new ``dict``, after checking them.

    Raises:
        ValueError: If a value is not a positive integer.
    """
    result: dict[str, int] = {}
    for name, size in (dims or {}).items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(
                f"planning dim {name!r} must be a positive integer, got {size!r} "
                "(e.g. dims={'seq': 512})"
            )
        result[str(name)] = size
    return result


def planning_dims(graph: ir.Graph, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Return the binding of symbolic dimension names used to measure ``graph``.

    Args:
        graph: The main graph.
        dims: Values given by the user, e.g. ``{"batch": 4, "seq": 512}``.

    Returns:
        ``dims`` plus ``DEFAULT_BATCH`` for the symbolic first dimension of each graph input
        that ``dims`` does not name.

    Raises:
        ValueError: If a value in ``dims`` is not a positive integer.
    """
    result = check_dims(dims)
    for value in graph.inputs:
        shape = value.shape
        if shape is None or shape.rank() == 0:
            continue
        first = shape[0]
        if isinstance(first, ir.SymbolicDim) and first.value is not None:
            result.setdefault(first.value, DEFAULT_BATCH)
    return result


def _concrete(shape: ir.Shape | None, dims: Mapping[str, int]) -> tuple[int, ...] | None:
    if shape is None:
        return None
    values = shape.dims
    for dim in values:
        if type(dim) is not int:
            break
    else:  # the common case, fast
        return values  # type: ignore[return-value]
    get = dims.get
    result = [dim if type(dim) is int else get(dim.value) for dim in values]  # type: ignore[union-attr]
    return None if None in result else tuple(result)  # type: ignore[arg-type]


class ValueSizes:
    """Concrete shapes and byte sizes of the values of one graph at the planning dims.

    Build it once per graph; lookups are dictionary reads. Sizes of values missing a shape
    or dtype come from ONNX shape inference on a serialized copy (see the module docstring).

    Attributes:
        dims: The planning dims used (see :func:`planning_dims`).
        inferred: Whether shape inference was run.
    """

    def __init__(
        self,
        graph: ir.Graph,
        dims: Mapping[str, int] | None = None,
        *,
        infer: bool = True,
    ) -> None:
        self.dims = planning_dims(graph, dims)
        self._inferred: dict[str, tuple[tuple[int, ...] | None, ir.DataType | None]] = {}
        self._nbytes_cache: dict[ir.Value, int | None] = {}
        self._shape_cache: dict[ir.Value, tuple[int, ...] | None] = {}
        self._nbytes_by_key: dict[tuple[tuple[int, ...], ir.DataType], int | None] = {}
        self.inferred = False
        if infer and self._needs_inference(graph):
            self._infer(graph)

    @staticmethod
    def _needs_inference(graph: ir.Graph) -> bool:
        for node in graph:
            for value in node.outputs:
                if value.dtype is None or value.shape is None:
                    return True
        return False

    def _infer(self, graph: ir.Graph) -> None:
        """Run ONNX shape inference on a copy whose inputs carry the planning dims."""
        try:
            graph_proto = ir.serde.serialize_graph(graph)
        except Exception:  # an unserializable graph: leave the missing sizes unknown
            return
        for value_info in graph_proto.input:
            tensor_type = value_info.type.tensor_type
            for dim in tensor_type.shape.dim:
                if dim.HasField("dim_param") and dim.dim_param in self.dims:
                    dim.dim_value = self.dims[dim.dim_param]
        opsets = [onnx.helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()]
        model = onnx.helper.make_model(graph_proto, opset_imports=opsets)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:  # inference refuses the graph: the missing sizes stay unknown
            return
        self.inferred = True
        for value_info in inferred.graph.value_info:
            tensor_type = value_info.type.tensor_type
            if not value_info.type.HasField("tensor_type"):
                continue
            dtype = ir.DataType(tensor_type.elem_type) if tensor_type.elem_type else None
            shape: tuple[int, ...] | None = None
            if tensor_type.HasField("shape"):
                dims = []
                for dim in tensor_type.shape.dim:
                    if dim.HasField("dim_value"):
                        dims.append(dim.dim_value)
                    elif dim.HasField("dim_param") and dim.dim_param in self.dims:
                        dims.append(self.dims[dim.dim_param])
                    else:
                        break
                else:
                    shape = tuple(dims)
            self._inferred[value_info.name] = (shape, dtype)

    def dtype(self, value: ir.Value) -> ir.DataType | None:
        """Return the dtype of ``value`` (from the IR, else from inference), or ``None``."""
        if value.dtype is not None:
            return value.dtype
        if value.const_value is not None:
            return value.const_value.dtype
        return self._inferred.get(value.name or "", (None, None))[1]

    def shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """Return the shape of ``value`` at the planning dims, or ``None`` if not known."""
        try:
            return self._shape_cache[value]
        except KeyError:
            pass
        ir_shape = value.shape
        shape = None if ir_shape is None else _concrete(ir_shape, self.dims)
        if shape is None and value.const_value is not None:
            shape = tuple(value.const_value.shape.numpy())
        if shape is None:
            shape = self._inferred.get(value.name or "", (None, None))[0]
        self._shape_cache[value] = shape
        return shape

    def nbytes(self, value: ir.Value) -> int | None:
        """Return the bytes ``value`` takes at the planning dims, or ``None`` if unknown."""
        try:
            return self._nbytes_cache[value]
        except KeyError:
            pass
        # The value's own shape and dtype first: reading a lazily loaded tensor is slower.
        # Sizes are memoized by (shape, dtype): many values share them.
        shape = self._shape_cache.get(value, _MISSING)
        if shape is _MISSING:
            shape = self.shape(value)
        dtype = value.dtype
        result = None
        if shape is not None and dtype is not None:
            key = (shape, dtype)
            try:
                result = self._nbytes_by_key[key]
            except KeyError:
                result = self._nbytes_by_key[key] = tensor_nbytes(shape, dtype)
        if result is None:
            tensor = value.const_value
            if tensor is not None:
                result = tensor.nbytes
            else:
                result = tensor_nbytes(shape, self.dtype(value))
        self._nbytes_cache[value] = result
        return result

    def static_shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """Return the shape with ``-1`` for every symbolic dimension (the ``.omny`` way).

        Falls back to the inferred shape when the IR has none. ``None`` if the rank is not
        known.
        """
        if value.shape is not None:
            return tuple(d if isinstance(d, int) else -1 for d in value.shape)
        return self.shape(value)
