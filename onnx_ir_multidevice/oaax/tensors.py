"""OAAX tensors: the runtime API's ``tensors_struct`` and its ``tensor_data_type`` enum, in Python.

The C header's struct has parallel arrays (``names``, ``data_types``, ``ranks``, ``shapes``,
``data``) of ``num_tensors`` entries; :class:`TensorsStruct` keeps that layout, with ``data``
holding each tensor's raw bytes (any bytes-like object, or a numpy array) in C order, and, for
``STRING`` tensors, a sequence of ``str``. :meth:`TensorsStruct.from_arrays` and
:meth:`TensorsStruct.to_arrays` convert from and to numpy; :meth:`TensorsStruct.validate`
checks the struct against what a model expects, before anything is queued.

The enum has no float16, bfloat16, complex, 4-bit or 8-bit float types: a model with such an
input or output cannot be served through OAAX (:func:`oaax_data_type` returns ``None``).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["TensorDataType", "TensorsStruct", "ir_data_type", "oaax_data_type"]

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir


class TensorDataType(enum.IntEnum):
    """``tensor_data_type`` of the OAAX runtime header (the values are the C enum's)."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13


_TO_IR = {
    TensorDataType.FLOAT: ir.DataType.FLOAT,
    TensorDataType.UINT8: ir.DataType.UINT8,
    TensorDataType.INT8: ir.DataType.INT8,
    TensorDataType.UINT16: ir.DataType.UINT16,
    TensorDataType.INT16: ir.DataType.INT16,
    TensorDataType.INT32: ir.DataType.INT32,
    TensorDataType.INT64: ir.DataType.INT64,
    TensorDataType.STRING: ir.DataType.STRING,
    TensorDataType.BOOL: ir.DataType.BOOL,
    TensorDataType.DOUBLE: ir.DataType.DOUBLE,
    TensorDataType.UINT32: ir.DataType.UINT32,
    TensorDataType.UINT64: ir.DataType.UINT64,
}
_FROM_IR = {value: key for key, value in _TO_IR.items()}


def ir_data_type(data_type: TensorDataType | int) -> ir.DataType:
    """The ONNX element type of an OAAX data type.

    Raises:
        ValueError: ``data_type`` is not a value of the enum.
    """
    return _TO_IR[TensorDataType(data_type)]


def oaax_data_type(dtype: ir.DataType | np.dtype | None) -> TensorDataType | None:
    """The OAAX data type of an ONNX element type or numpy dtype, or ``None`` if it has none.

    ``None`` for float16, bfloat16, complex, 4-bit and 8-bit float types (and for ``None``).
    """
    if dtype is None:
        return None
    if isinstance(dtype, ir.DataType):
        return _FROM_IR.get(dtype)
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return TensorDataType.STRING
    try:
        return _FROM_IR.get(ir.DataType.from_numpy(dtype))
    except TypeError:
        return None


def _numpy_dtype(data_type: TensorDataType) -> np.dtype:
    if data_type is TensorDataType.STRING:
        return np.dtype(object)
    return np.dtype(_TO_IR[data_type].numpy())


@dataclasses.dataclass
class TensorsStruct:
    """``tensors_struct``: ``num_tensors`` tensors as parallel lists.

    Attributes:
        num_tensors: Number of tensors; every list has this length.
        names: Tensor names (unique).
        data_types: :class:`TensorDataType` of each tensor (or its int value).
        ranks: Number of dimensions of each tensor.
        shapes: Dimensions of each tensor (``ranks[i]`` non-negative ints).
        data: Raw bytes of each tensor in C order (bytes-like or a numpy array; for
            ``STRING``, a sequence of ``str``).
    """

    num_tensors: int
    names: list[str]
    data_types: list[TensorDataType | int]
    ranks: list[int]
    shapes: list[Sequence[int]]
    data: list[Any]

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> TensorsStruct:
        """Build a struct from numpy arrays (raw bytes in C order).

        Raises:
            ValueError: An array's dtype has no OAAX data type (float16, bfloat16...).
        """
        names: list[str] = []
        types: list[TensorDataType | int] = []
        ranks: list[int] = []
        shapes: list[Sequence[int]] = []
        data: list[Any] = []
        for name, value in arrays.items():
            array = np.asarray(value)
            data_type = oaax_data_type(array.dtype)
            if data_type is None:
                raise ValueError(
                    f"tensor {name!r}: dtype {array.dtype} has no OAAX data type (the enum has "
                    "no float16, bfloat16, complex or 8-bit float)"
                )
            names.append(name)
            types.append(data_type)
            ranks.append(array.ndim)
            shapes.append(tuple(int(d) for d in array.shape))
            if data_type is TensorDataType.STRING:
                data.append([str(s) for s in array.reshape(-1).tolist()])
            else:
                data.append(np.ascontiguousarray(array).tobytes())
        return cls(len(names), names, types, ranks, shapes, data)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The tensors as numpy arrays by name (views of the bytes where possible).

        Raises:
            ValueError: The struct is inconsistent (see :meth:`validate`).
        """
        return self.validate()

    def validate(
        self,
        expected: Mapping[str, tuple[TensorDataType, Sequence[int | str | None] | None]]
        | None = None,
    ) -> dict[str, np.ndarray]:
        """Check the struct (and, given ``expected``, against a model's inputs); decode it.

        Args:
            expected: Name -> (data type, declared shape or ``None``) of every input a model
                reads; a declared dim that is an int must match, a symbolic one (a str or
                ``None``) takes any size.

        Returns:
            Name -> numpy array.

        Raises:
            ValueError: The lists' lengths differ from ``num_tensors``, a name is not a
                string, empty, repeated, missing or unknown, a data type is not in the enum
                or not the expected one, a rank differs from its shape's length or from the
                expected rank, a dim is negative or differs from a fixed declared dim, or a
                tensor's data does not hold ``prod(shape)`` elements.
        """
        n = self.num_tensors
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"num_tensors must be a non-negative int, got {n!r}")
        for field in ("names", "data_types", "ranks", "shapes", "data"):
            items = getattr(self, field)
            if not isinstance(items, Sequence) or len(items) != n:
                length = len(items) if isinstance(items, Sequence) else type(items).__name__
                raise ValueError(f"{field} has {length} entries, num_tensors is {n}")
        seen: set[str] = set()
        for i, name in enumerate(self.names):
            if not isinstance(name, str) or not name:
                raise ValueError(f"names[{i}] must be a non-empty string, got {name!r}")
            if name in seen:
                raise ValueError(f"tensor name {name!r} appears twice (names must be unique)")
            seen.add(name)
        if expected is not None:
            missing = [name for name in expected if name not in seen]
            unknown = [name for name in self.names if name not in expected]
            if missing or unknown:
                raise ValueError(
                    f"the model reads {list(expected)}; "
                    + "; ".join(
                        part
                        for part in (
                            f"missing {missing}" if missing else "",
                            f"unknown {unknown}" if unknown else "",
                        )
                        if part
                    )
                )
        arrays = {}
        for i, name in enumerate(self.names):
            arrays[name] = self._decode(i, name, None if expected is None else expected[name])
        return arrays

    def _decode(
        self,
        i: int,
        name: str,
        expected: tuple[TensorDataType, Sequence[int | str | None] | None] | None,
    ) -> np.ndarray:
        try:
            data_type = TensorDataType(self.data_types[i])
        except ValueError:
            raise ValueError(
                f"tensor {name!r}: data type {self.data_types[i]!r} is not an OAAX "
                f"tensor_data_type ({', '.join(f'{t.name} {t.value}' for t in TensorDataType)})"
            ) from None
        rank, shape = self.ranks[i], self.shapes[i]
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"tensor {name!r}: rank must be a non-negative int, got {rank!r}")
        if not isinstance(shape, Sequence) or len(shape) != rank:
            raise ValueError(f"tensor {name!r}: rank {rank} but shape {shape!r}")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"tensor {name!r}: dims must be non-negative ints, got {shape!r}")
        if expected is not None:
            want_type, want_shape = expected
            if data_type is not want_type:
                raise ValueError(
                    f"tensor {name!r}: data type {data_type.name} ({data_type.value}), the model "
                    f"expects {want_type.name} ({want_type.value})"
                )
            if want_shape is not None:
                if len(want_shape) != rank:
                    raise ValueError(
                        f"tensor {name!r}: rank {rank}, the model expects rank "
                        f"{len(want_shape)} ({list(want_shape)})"
                    )
                for axis, (got, want) in enumerate(zip(shape, want_shape, strict=True)):
                    if isinstance(want, int) and got != want:
                        raise ValueError(
                            f"tensor {name!r}: dim {axis} is {got}, the model fixes it at {want}"
                        )
        count = math.prod(shape)
        data = self.data[i]
        if data_type is TensorDataType.STRING:
            if isinstance(data, (str, bytes)) or not isinstance(data, (Sequence, np.ndarray)):
                raise ValueError(f"tensor {name!r}: STRING data must be a sequence of str")
            if len(data) != count:
                raise ValueError(
                    f"tensor {name!r}: {len(data)} strings for shape {list(shape)} ({count})"
                )
            return np.array(list(data), dtype=object).reshape(shape)
        dtype = _numpy_dtype(data_type)
        if isinstance(data, np.ndarray):
            if data.dtype != dtype or data.size != count:
                raise ValueError(
                    f"tensor {name!r}: array of {data.dtype} with {data.size} elements, expected "
                    f"{dtype} with {count}"
                )
            return np.ascontiguousarray(data).reshape(shape)
        try:
            buffer = memoryview(data).cast("B")
        except TypeError:
            raise ValueError(
                f"tensor {name!r}: data must be bytes-like or a numpy array, got "
                f"{type(data).__name__}"
            ) from None
        if buffer.nbytes != count * dtype.itemsize:
            raise ValueError(
                f"tensor {name!r}: {buffer.nbytes} bytes of data, shape {list(shape)} of "
                f"{data_type.name} needs {count * dtype.itemsize}"
            )
        return np.frombuffer(buffer, dtype=dtype).reshape(shape)
