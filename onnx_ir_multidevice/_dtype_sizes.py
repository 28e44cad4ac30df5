"""The size of ONNX data types: bits per element and bytes per dense tensor.

The size half of the dtype table (:mod:`~onnx_ir_multidevice.graph.dtypes`, which re-exports
both functions and holds the names). It sits in the lowest layer because the proto layer, which
is below ``graph``, checks external-data lengths with it: one formula for every byte count,
``(elements * bits + 7) // 8`` in integer arithmetic (onnx-ir's ``DataType.itemsize`` is a
float, ``0.5`` for the 4-bit types). ``STRING`` and ``UNDEFINED`` have no fixed size.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["dtype_bits", "tensor_nbytes"]

import math
from collections.abc import Iterable

import onnx_ir as ir

_NO_SIZE = frozenset({ir.DataType.UNDEFINED, ir.DataType.STRING})
_BITS: dict[ir.DataType, int] = {d: d.bitwidth for d in ir.DataType if d not in _NO_SIZE}


def dtype_bits(dtype: ir.DataType) -> int:
    """Return the width of one element of ``dtype`` in bits (4 for ``INT4``, 32 for ``FLOAT``).

    Raises:
        ValueError: For ``STRING`` and ``UNDEFINED``, which have no fixed size.
    """
    try:
        return _BITS[dtype]
    except KeyError:
        if dtype in _NO_SIZE:
            raise ValueError(f"{dtype.name.lower()} elements have no fixed size") from None
        return ir.DataType(dtype).bitwidth


def tensor_nbytes(shape: Iterable[int] | None, dtype: ir.DataType | None) -> int | None:
    """Return the bytes of a dense tensor: ``(elements * bits + 7) // 8``.

    Args:
        shape: Concrete dimensions (ints); ``None`` when not known.
        dtype: The element type; ``None`` when not known.

    Returns:
        The byte count, or ``None`` when the shape or dtype is unknown or the type has no
        fixed size (``STRING``, ``UNDEFINED``). Never a guess.

    Example:
        >>> import onnx_ir as ir
        >>> tensor_nbytes((3, 5), ir.DataType.INT4), tensor_nbytes((3, 5), ir.DataType.FLOAT)
        (8, 60)
    """
    if shape is None or dtype is None:
        return None
    bits = _BITS.get(dtype)
    if bits is None:
        if dtype in _NO_SIZE:
            return None
        bits = dtype_bits(dtype)
    return (math.prod(shape) * bits + 7) // 8
