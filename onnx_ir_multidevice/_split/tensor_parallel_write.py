"""Writing the stages of a tensor-parallel split: per-rank segment files and weight slices.

:func:`~onnx_ir_multidevice.save_split` calls :func:`write_tensor_parallel_stage` for every
stage the model's tensor-parallel record gives a degree above 1. Rank ``k`` of stage ``i``
gets one model file per segment (``stage_<i>.rank_<k>.segment_<s>.onnx``) and one weight
file (``stage_<i>.rank_<k>.onnx.data``) that all its segments read. Weights are written
slice by slice from numpy views of the source arrays (which may be memory-mapped external
data): a weight is never copied whole, only chunks of a rank's slice. Once a slice is
written, the pages of a memory map it was read from are dropped from this process's resident
set (``madvise(MADV_DONTNEED)``; they stay in the page cache), so splitting a model whose
weights are external data does not grow the resident size by the weights it reads.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["rank_data_file", "segment_file", "write_tensor_parallel_stage"]

import dataclasses
import mmap
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx_ir as ir

from onnx_ir_multidevice._split.manifest import (
    ManifestCollective,
    ManifestRank,
    ManifestStage,
    ManifestTensorParallel,
)
from onnx_ir_multidevice._split.tensor_parallel import split_tensor_parallel
from onnx_ir_multidevice.omny.tensor_parallel_record import TensorParallelStage

_CHUNK = 1 << 22
"""Bytes written per ``write`` call at most (a chunk of a slice, copied when not contiguous)."""

_ALIGN = 64
"""Offset alignment of each tensor in a rank's data file."""

_PACKED = {
    ir.DataType.INT4,
    ir.DataType.UINT4,
    ir.DataType.FLOAT4E2M1,
}
"""Sub-byte types: their numpy arrays are unpacked, so their bytes come from ``tobytes``."""


def segment_file(stage: int, rank: int, segment: int) -> str:
    """File name of segment ``segment`` of rank ``rank`` of stage ``stage``."""
    return f"stage_{stage}.rank_{rank}.segment_{segment}.onnx"


def rank_data_file(stage: int, rank: int) -> str:
    """File name of the weights of rank ``rank`` of stage ``stage``."""
    return f"stage_{stage}.rank_{rank}.onnx.data"


def _write_array(file: BinaryIO, tensor: ir.TensorProtocol) -> None:
    """Write ``tensor``'s bytes (little-endian, as ONNX external data) chunk by chunk."""
    if tensor.dtype in _PACKED or tensor.dtype == ir.DataType.STRING:
        file.write(tensor.tobytes())
        return
    array = tensor.numpy()  # a view: of the source's buffer, of a memory map, of a slice
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if array.ndim == 0 or array.size == 0:
        file.write(array.tobytes())
        return
    row = max(1, array[0].nbytes)
    step = max(1, _CHUNK // row)
    for start in range(0, array.shape[0], step):
        chunk = np.ascontiguousarray(array[start : start + step])  # a copy only if strided
        file.write(chunk.reshape(-1).view(np.uint8).data)
    _drop_mapped_pages(array)


def _drop_mapped_pages(array: np.ndarray) -> None:
    """Drop the resident pages of the memory map ``array`` is a view of, if any.

    onnx-ir maps an external tensor's file with :class:`mmap.mmap`; the pages a slice read
    stay in the process's resident set until the map is closed. ``MADV_DONTNEED`` releases
    them (a read-only file map: the next read faults them in again from the page cache).
    """
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    advise = getattr(mmap, "MADV_DONTNEED", None)
    if isinstance(base, mmap.mmap) and advise is not None and not base.closed:
        base.madvise(advise)


def _externalize(
    model: ir.Model,
    folder: Path,
    data: str,
    file: BinaryIO,
    written: dict[int, tuple[int, int]],
    threshold: int,
) -> None:
    """Write the main graph's initializers over ``threshold`` bytes to ``file``, in place."""
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None:
            continue
        if tensor.dtype == ir.DataType.STRING or tensor.nbytes <= threshold:
            if isinstance(tensor, ir.ExternalTensor):  # embedded: a segment reads no other file
                value.const_value = ir.Tensor(
                    np.array(tensor.numpy()), dtype=tensor.dtype, name=value.name or ""
                )
            continue
        key = id(tensor)
        if key not in written:
            offset = file.tell()
            pad = -offset % _ALIGN
            if pad:
                file.write(b"\0" * pad)
                offset += pad
            _write_array(file, tensor)
            written[key] = (offset, file.tell() - offset)
        offset, length = written[key]
        value.const_value = ir.ExternalTensor(
            data,
            offset,
            length,
            tensor.dtype,
            shape=ir.Shape(tensor.shape.numpy()),
            name=value.name or "",
            base_dir=folder,
        )


def write_tensor_parallel_stage(
    stage_model: ir.Model,
    entry: ManifestStage,
    record: TensorParallelStage,
    folder: Path,
    *,
    dims: Mapping[str, int] | None,
    external_data_threshold: int,
) -> ManifestStage:
    """Split one stage model over ``record.degree`` ranks and write its files to ``folder``.

    Args:
        stage_model: The stage's model (its weights are sliced, not copied whole).
        entry: The stage's manifest entry (inputs and outputs of the whole stage).
        record: The stage's entry of the tensor-parallel record (degree and devices).
        folder: The directory being written.
        dims: The planning dims the regions are found at (the record's).
        external_data_threshold: Size in bytes above which a weight goes to the rank's data
            file.

    Returns:
        ``entry`` with its :attr:`~ManifestStage.tensor_parallel` description, or ``entry``
        unchanged when no region is found at that degree (the caller writes the stage whole;
        a :class:`UserWarning` says why).
    """
    result = split_tensor_parallel(stage_model, record.degree, dims=dims)
    if result.degree == 1:
        # Said, not dropped silently: the record asked for more devices than the split uses.
        warnings.warn(
            f"stage {entry.index} is written whole, not over the {record.degree} devices "
            f"the tensor-parallel record gives it: {result.reason}; plan the model again "
            "(`omny plan --tensor-parallel N`) for a degree that finds regions",
            UserWarning,
            stacklevel=2,
        )
        return entry
    index = entry.index
    ranks = []
    for rank, segments in enumerate(result.segments):
        files = [segment_file(index, rank, s) for s in range(len(segments))]
        data = rank_data_file(index, rank)
        written: dict[int, tuple[int, int]] = {}
        with open(folder / data, "wb") as handle:
            for segment, name in zip(segments, files, strict=True):
                _externalize(segment, folder, data, handle, written, external_data_threshold)
                ir.save(segment, folder / name)
        external: tuple[str, ...] = (data,)
        if not written:
            (folder / data).unlink()
            external = ()
        ranks.append(ManifestRank(rank, record.devices[rank], tuple(files), external))
    steps = tuple(tuple(ManifestCollective(**c.to_dict()) for c in step) for step in result.steps)
    parallel = ManifestTensorParallel(record.degree, record.devices, tuple(ranks), steps)
    return dataclasses.replace(
        entry, file=ranks[0].segments[0], external_data=(), tensor_parallel=parallel
    )
