"""Shapes and byte sizes of values at the planning dims.

The planner measures tensors at concrete *planning dims*: a symbolic dimension such as
``"batch"`` or ``"seq"`` gets the integer the user gives for it. Rules:

* a symbol named in ``dims`` takes that value;
* a symbol that is the whole *first* dimension of a graph input and is not named in
  ``dims`` is the batch dimension and takes :data:`DEFAULT_BATCH` (1);
* any other symbol is *unbound*, and the size of every value that depends on it is unknown.
  Unknown sizes are reported as ``None``, never as zero.

Shapes and dtypes come from the shape layer,
:class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes` (the graph's own types, dim
expressions evaluated, and ONNX shape inference on a lightweight copy where the file states
too little). The graph is never modified.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH",
    "MAX_TENSOR_BYTES",
    "ValueSizes",
    "check_dims",
    "oversized_io",
    "planning_dims",
]

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import onnx_ir as ir

from onnx_ir_multidevice._errors import PlanError
from onnx_ir_multidevice.analysis.shapes import DEFAULT_BATCH, ValueShapes, batch_symbols
from onnx_ir_multidevice.graph.dtypes import dtype_name, stored_nbytes, tensor_nbytes
from onnx_ir_multidevice.omny.planning_dims import MAX_PLANNING_DIM

MAX_TENSOR_BYTES = 2**50
"""The largest tensor the package sizes: 2**50 bytes (1 PiB), far above any device's memory
and far below where sizes overflow the signed 64-bit integers of the memory model. A larger
one is a shape no device can hold (a dim of 2**62 in a damaged file, or planning dims far too
large): :class:`ValueSizes` refuses it, and ``check`` reports a graph input or output of such
a shape (``OMNY123``) and a cut tensor (``OMNY122``)."""


def _shape_text(shape: Iterable[object] | None) -> str:
    return "?" if shape is None else str([d if isinstance(d, int) else str(d) for d in shape])


def oversized_io(graph: ir.Graph) -> list[tuple[str, ir.Value, int, int]]:
    """Graph inputs and outputs whose *stated* static dims alone exceed :data:`MAX_TENSOR_BYTES`.

    Symbolic dims count as 1 (their sizes are the caller's); the element type's bits count
    as 8 when unknown. Linear in the number of inputs and outputs.

    Returns:
        ``(kind, value, axis of the largest dim, bytes)`` per such value, ``kind`` being
        ``"input"`` or ``"output"``.
    """
    found = []
    initializers = graph.initializers
    values = [("input", v) for v in graph.inputs if v.name not in initializers]
    values += [("output", v) for v in graph.outputs]
    for kind, value in values:
        if value.shape is None:
            continue
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in value.shape]
        nbytes = tensor_nbytes(dims, value.dtype)
        if nbytes is None:
            nbytes = tensor_nbytes(dims, ir.DataType.UINT8) or 0
        if nbytes > MAX_TENSOR_BYTES:
            axis = max(range(len(dims)), key=dims.__getitem__)
            found.append((kind, value, axis, nbytes))
    return found


def check_dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    """Return dims given by the user as a new ``dict`` of ``str`` to ``int``, after checking them.

    The one validator of dims, used by ``plan``, ``verify``, ``run``, the input generator and
    the exporters: any integer type is accepted (``numpy.int64`` included) and becomes an
    ``int``; a value must be from 1 to
    :data:`~onnx_ir_multidevice.omny.planning_dims.MAX_PLANNING_DIM` (a plan records its dims,
    and a larger value could not be read back).

    Raises:
        ValueError: If ``dims`` is not a mapping, a name is not a non-empty string, or a value
            is not an integer from 1 to ``MAX_PLANNING_DIM`` (the message names the dim).
    """
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise ValueError(f'dims must map dim names to sizes (e.g. {{"seq": 512}}), got {dims!r}')
    result: dict[str, int] = {}
    for name, size in dims.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"planning dim names must be non-empty strings, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise ValueError(
                f"planning dim {name!r} must be a positive integer, got {size!r} "
                '(e.g. dims={"seq": 512})'
            )
        if size > MAX_PLANNING_DIM:
            raise ValueError(
                f"planning dim {name!r} is {size}, over the largest planning dim "
                f"{MAX_PLANNING_DIM} (2**40); give the size the model will run at"
            )
        result[name] = int(size)
    return result


def planning_dims(graph: ir.Graph, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Return the binding of symbolic dimension names used to measure ``graph``.

    Args:
        graph: The main graph.
        dims: Values given by the user, e.g. ``{"batch": 4, "seq": 512}``.

    Returns:
        ``dims`` plus ``DEFAULT_BATCH`` for each batch symbol (the whole first dimension of a
        graph input, see :func:`~onnx_ir_multidevice.analysis.shapes.batch_symbols`) that
        ``dims`` does not name.

    Raises:
        ValueError: If a value in ``dims`` is not a positive integer.
    """
    result = check_dims(dims)
    for symbol in batch_symbols(graph):
        result.setdefault(symbol, DEFAULT_BATCH)
    return result


class ValueSizes:
    """Concrete shapes and byte sizes of the values of one graph at the planning dims.

    Build it once per graph; lookups are cached. Shapes and dtypes come from
    :attr:`shapes`, a :class:`~onnx_ir_multidevice.analysis.shapes.ValueShapes`.

    Args:
        graph: The main graph.
        dims: The planning dims given by the user.
        infer: Infer what the graph does not state (``False``: stated types only).
        index: The graph's :class:`~onnx_ir_multidevice.graph.index.GraphIndex`, if built.

    Attributes:
        dims: The planning dims used (see :func:`planning_dims`).
        shapes: The shape layer.
    """

    def __init__(
        self,
        graph: ir.Graph,
        dims: Mapping[str, int] | None = None,
        *,
        infer: bool = True,
        index: Any = None,
    ) -> None:
        self._graph = graph
        self.shapes = ValueShapes(graph, check_dims(dims), infer=infer, index=index)
        self.dims = self.shapes.dims
        self._nbytes_cache: dict[ir.Value, int | None] = {}
        self._estimate_cache: dict[ir.Value, int | None] = {}
        self._nbytes_by_key: dict[tuple[tuple[int, ...], ir.DataType], int | None] = {}

    @property
    def inferred(self) -> bool:
        """Whether shape inference ran."""
        return self.shapes.inferred

    @property
    def unbound(self) -> tuple[str, ...]:
        """The input symbols the planning dims leave unbound."""
        return self.shapes.unbound

    def dtype(self, value: ir.Value) -> ir.DataType | None:
        """Return the dtype of ``value`` (from the IR, else from inference), or ``None``."""
        dtype = value.dtype
        if dtype is not None:
            return dtype
        return self.shapes.dtype(value)

    def shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """Return the shape of ``value`` at the planning dims, or ``None`` if not known."""
        return self.shapes.shape(value)

    def _bytes(self, shape: tuple[int, ...] | None, value: ir.Value) -> int | None:
        if shape is None:
            return None
        dtype = value.dtype or self.shapes.dtype(value)
        if dtype is None:
            return None
        key = (shape, dtype)
        try:
            return self._nbytes_by_key[key]
        except KeyError:
            result = self._nbytes_by_key[key] = tensor_nbytes(shape, dtype)
            return result

    def nbytes(self, value: ir.Value) -> int | None:
        """Return the bytes ``value`` takes at the planning dims, or ``None`` if unknown."""
        try:
            return self._nbytes_cache[value]
        except KeyError:
            pass
        dtype, shape = self.shapes.dtype_and_shape(value)
        result = None
        if shape is not None and dtype is not None:
            key = (shape, dtype)
            try:
                result = self._nbytes_by_key[key]
            except KeyError:
                result = self._nbytes_by_key[key] = tensor_nbytes(shape, dtype)
        if result is None and value.shape is None:
            tensor = value.const_value
            if tensor is not None:
                result = stored_nbytes(tensor)
        if result is not None and result > MAX_TENSOR_BYTES:
            raise self._too_large(value, shape, dtype, result)
        self._nbytes_cache[value] = result
        return result

    def _too_large(
        self,
        value: ir.Value,
        shape: Iterable[object] | None,
        dtype: ir.DataType | None,
        nbytes: int,
    ) -> PlanError:
        """The error for a value no device can hold, naming where its size comes from."""
        where = f"{value.name!r} (shape {_shape_text(shape)}, {dtype_name(dtype)})"
        oversized = oversized_io(self._graph)
        if oversized:
            kind, io, axis, _ = oversized[0]
            assert io.shape is not None  # oversized_io reads stated shapes only
            cause = (
                f"graph {kind} {io.name!r} states dim {axis} = {io.shape[axis]}: write its real "
                "size in the model (or a symbolic dim, sized with --dim NAME=N)"
            )
        else:
            dims = ", ".join(f"{k}={v}" for k, v in self.dims.items()) or "none"
            cause = f"at the planning dims ({dims}): plan at smaller dims (--dim NAME=N)"
        return PlanError(
            f"value {where} takes {nbytes} bytes, more than any device holds (the limit is "
            f"{MAX_TENSOR_BYTES} bytes, 1 PiB); {cause}"
        )

    def estimate_nbytes(self, value: ir.Value) -> int | None:
        """Bytes at the probe dims (every symbol bound, unbound ones to example values).

        What the planner uses where a decision needs a size even for an unbound dim (the
        side activations of a relaxed cut); never reported as a memory figure.
        """
        try:
            return self._estimate_cache[value]
        except KeyError:
            pass
        result = self.nbytes(value)
        if result is None:
            result = self._bytes(self.shapes.estimate(value), value)
        self._estimate_cache[value] = result
        return result

    def static_shape(self, value: ir.Value) -> tuple[int, ...] | None:
        """Return the shape with ``-1`` for every symbolic dimension (the ``.omny`` way).

        ``None`` if the rank is not known.
        """
        symbolic = self.shapes.symbolic(value)
        if symbolic is None:
            return None
        return tuple(d if isinstance(d, int) else -1 for d in symbolic)
