"""The one table of ONNX data types: their ``.omny`` spelling and their size in bits.

Every part of the package that writes, reads or compares a dtype name (the planner, the
reverse pass, the checker, ``omny inspect``) uses :func:`dtype_name` and
:func:`dtype_from_name`; every byte count of a tensor uses :func:`tensor_nbytes`. Two spellings
of one type made the checker refuse a float8 cut that the planner had written.

Spelling rules (:func:`dtype_name`), one name for every :class:`onnx_ir.DataType` member:

* the NumPy name where NumPy has the type: ``float32``, ``float64``, ``float16``, ``int8`` ...
  ``uint64``, ``bool``, ``complex64``, ``complex128``;
* the `ml_dtypes <https://github.com/jax-ml/ml_dtypes>`_ name for the types NumPy lacks (what
  ``np.dtype(dtype.numpy()).name`` gives with onnx-ir): ``bfloat16``, ``float8_e4m3fn``,
  ``float8_e4m3fnuz``, ``float8_e5m2``, ``float8_e5m2fnuz``, ``float8_e8m0fnu``,
  ``float4_e2m1fn``, ``float6_e2m3fn``, ``float6_e3m2fn``, ``int4``, ``uint4``, ``int2``,
  ``uint2``;
* ``string`` for ``STRING`` (NumPy would say ``object``);
* ``undefined`` for ``UNDEFINED`` and for an unknown dtype (``None``): never a guess.

Reading (:func:`dtype_from_name`) also accepts the spellings that earlier versions of this
package wrote, so existing files still check: the lower-case onnx-ir enum names of the types
above without a NumPy name (``float8e4m3fn``, ``float8e4m3fnuz``, ``float8e5m2``,
``float8e5m2fnuz``, ``float8e8m0``, ``float4e2m1``, ``float6e2m3``, ``float6e3m2``, written by
the planner) and ``unknown`` (written by the reverse pass for a value without a dtype).

Sizes: :func:`dtype_bits` is the width of one element and :func:`tensor_nbytes` the bytes of
a tensor, ``(elements * bits + 7) // 8`` in integer arithmetic (onnx-ir's
``DataType.itemsize`` is a float, ``0.5`` for the 4-bit types). ``STRING`` and ``UNDEFINED``
have no fixed size. Both live in :mod:`onnx_ir_multidevice._dtype_sizes`, in the lowest layer,
so that the proto layer (below this one) measures external data with the same formula.

Kinds: :data:`INTEGER_DTYPES` are the whole-byte integer types, whose values stay integers
through a ``Cast`` among them and through arithmetic; :data:`INTEGER_OR_BOOL_DTYPES` adds
``BOOL``, for what only stores small values (a mask read by shape computations). ``BOOL`` is
not in the first: ``Cast`` to ``BOOL`` maps every non-zero value to 1.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "INTEGER_DTYPES",
    "INTEGER_OR_BOOL_DTYPES",
    "dtype_bits",
    "dtype_from_name",
    "dtype_name",
    "stored_nbytes",
    "tensor_nbytes",
]

import onnx_ir as ir

from onnx_ir_multidevice._dtype_sizes import dtype_bits, tensor_nbytes

# Public here (the proto layer below imports them from their private home): show them so.
dtype_bits.__module__ = tensor_nbytes.__module__ = __name__

_D = ir.DataType

_NAMES: dict[ir.DataType, str] = {
    _D.UNDEFINED: "undefined",
    _D.FLOAT: "float32",
    _D.UINT8: "uint8",
    _D.INT8: "int8",
    _D.UINT16: "uint16",
    _D.INT16: "int16",
    _D.INT32: "int32",
    _D.INT64: "int64",
    _D.STRING: "string",
    _D.BOOL: "bool",
    _D.FLOAT16: "float16",
    _D.DOUBLE: "float64",
    _D.UINT32: "uint32",
    _D.UINT64: "uint64",
    _D.COMPLEX64: "complex64",
    _D.COMPLEX128: "complex128",
    _D.BFLOAT16: "bfloat16",
    _D.FLOAT8E4M3FN: "float8_e4m3fn",
    _D.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    _D.FLOAT8E5M2: "float8_e5m2",
    _D.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    _D.UINT4: "uint4",
    _D.INT4: "int4",
    _D.FLOAT4E2M1: "float4_e2m1fn",
    _D.FLOAT8E8M0: "float8_e8m0fnu",
    _D.UINT2: "uint2",
    _D.INT2: "int2",
    _D.FLOAT6E2M3: "float6_e2m3fn",
    _D.FLOAT6E3M2: "float6_e3m2fn",
}
"""Every :class:`onnx_ir.DataType` member (onnx-ir 1.1) and its ``.omny`` spelling."""

_BY_NAME: dict[str, ir.DataType | None] = {name: dtype for dtype, name in _NAMES.items()}
_BY_NAME["undefined"] = None
_LEGACY: dict[str, ir.DataType | None] = {
    "float8e4m3fn": _D.FLOAT8E4M3FN,
    "float8e4m3fnuz": _D.FLOAT8E4M3FNUZ,
    "float8e5m2": _D.FLOAT8E5M2,
    "float8e5m2fnuz": _D.FLOAT8E5M2FNUZ,
    "float8e8m0": _D.FLOAT8E8M0,
    "float4e2m1": _D.FLOAT4E2M1,
    "float6e2m3": _D.FLOAT6E2M3,
    "float6e3m2": _D.FLOAT6E3M2,
    "unknown": None,
}
"""Spellings written by earlier versions (the planner, the reverse pass), accepted on reading."""

INTEGER_DTYPES: frozenset[ir.DataType] = frozenset(
    {_D.INT8, _D.INT16, _D.INT32, _D.INT64, _D.UINT8, _D.UINT16, _D.UINT32, _D.UINT64}
)
"""The whole-byte integer types (not ``BOOL``, not the packed 4- and 2-bit types): their
values are integers that ``Cast`` among them and integer arithmetic keep."""

INTEGER_OR_BOOL_DTYPES: frozenset[ir.DataType] = INTEGER_DTYPES | {_D.BOOL}
""":data:`INTEGER_DTYPES` and ``BOOL``: the types whose small tensors the shape layer keeps as
data (shape vectors, axes, masks)."""


def dtype_name(dtype: ir.DataType | None) -> str:
    """Return the ``.omny`` spelling of an ONNX data type (see the module docstring).

    Args:
        dtype: The data type; ``None`` when it is not known.

    Returns:
        ``"float32"``, ``"int64"``, ``"float8_e4m3fn"``...; ``"undefined"`` for ``None``
        and :attr:`onnx_ir.DataType.UNDEFINED`.

    Example:
        >>> import onnx_ir as ir
        >>> dtype_name(ir.DataType.FLOAT), dtype_name(ir.DataType.FLOAT8E4M3FN)
        ('float32', 'float8_e4m3fn')
    """
    if dtype is None:
        return "undefined"
    try:
        return _NAMES[dtype]
    except KeyError:  # a member added by a later onnx-ir: its own lower-case name
        return ir.DataType(dtype).name.lower()


def dtype_from_name(name: str) -> ir.DataType | None:
    """Return the data type a ``.omny`` dtype name stands for (the inverse of :func:`dtype_name`).

    Also accepts the older spellings listed in the module docstring.

    Args:
        name: A dtype name as written in a ``.omny`` document.

    Returns:
        The data type, or ``None`` for ``"undefined"`` (and the older ``"unknown"``).

    Raises:
        ValueError: If ``name`` spells no ONNX data type.

    Example:
        >>> dtype_from_name("float8_e4m3fn"), dtype_from_name("float8e4m3fn")
        (<DataType.FLOAT8E4M3FN: 17>, <DataType.FLOAT8E4M3FN: 17>)
    """
    for table in (_BY_NAME, _LEGACY):
        if name in table:
            return table[name]
    raise ValueError(
        f"{name!r} is not an ONNX data type name; expected one of "
        f"{', '.join(repr(n) for n in sorted(_BY_NAME))}"
    )


def stored_nbytes(tensor: ir.TensorProtocol) -> int | None:
    """Return the bytes a tensor's data takes, or ``None`` when its element type has no size.

    onnx-ir's ``nbytes`` raises ``TypeError`` for an element type without a bit width
    (``UNDEFINED``, which ONNX forbids but a damaged file can hold); callers that only
    describe or budget a model treat such a tensor as of unknown size.
    """
    try:
        return tensor.nbytes
    except TypeError:
        return None
