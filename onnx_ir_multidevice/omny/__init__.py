"""The ``.omny`` format: its metadata as frozen dataclasses, read and written on a model.

An ``.omny`` file is an ONNX model with two entries in ``ModelProto.metadata_props``:
``omnynet_version`` and ``omnynet_metadata`` (the JSON document, :class:`OmnyMetadata`).
This layer knows JSON and the ``metadata_props`` of a model, nothing about graphs.

* :class:`OmnyMetadata` and its parts (:class:`CutPoint`, :class:`ShardConfiguration`...) --
  the lossless JSON engine (:meth:`OmnyMetadata.from_json` / :meth:`OmnyMetadata.to_json`);
* :func:`read` / :func:`write` -- the metadata on an :class:`onnx_ir.Model`;
* :func:`read_planning_dims` / :func:`write_planning_dims` -- the symbolic-dim values a plan
  was made at, recorded in an entry of this package beside the ``.omny`` metadata;
* :func:`read_tensor_parallel` / :func:`write_tensor_parallel` -- the tensor-parallel degree
  of each stage (:class:`TensorParallelRecord`), an entry of this package beside the metadata;
* :mod:`~onnx_ir_multidevice.omny.container` -- the ``.omny`` v2 binary container.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    # Reading and writing on a model
    "PLANNING_DIMS_KEY",
    "PRODUCER_NAME",
    "read",
    "read_planning_dims",
    "write",
    "write_planning_dims",
    "TENSOR_PARALLEL_KEY",
    "TensorParallelConfiguration",
    "TensorParallelRecord",
    "TensorParallelStage",
    "read_tensor_parallel",
    "write_tensor_parallel",
    # The schema
    "MAX_DOCUMENT_SIZE",
    "MAX_NESTING_DEPTH",
    "OMNY_FORMAT_VERSION",
    "OMNY_METADATA_KEY",
    "OMNY_VERSION_KEY",
    "CutPoint",
    "ExportInfo",
    "ModelInfo",
    "OmnyMetadata",
    "ShardConfiguration",
    "Sharding",
    "TensorInfo",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.omny._props import PRODUCER_NAME, read, write
from onnx_ir_multidevice.omny._schema import (
    MAX_DOCUMENT_SIZE,
    MAX_NESTING_DEPTH,
    OMNY_FORMAT_VERSION,
    OMNY_METADATA_KEY,
    OMNY_VERSION_KEY,
    CutPoint,
    ExportInfo,
    ModelInfo,
    OmnyMetadata,
    ShardConfiguration,
    Sharding,
    TensorInfo,
)
from onnx_ir_multidevice.omny.planning_dims import (
    PLANNING_DIMS_KEY,
    read_planning_dims,
    write_planning_dims,
)
from onnx_ir_multidevice.omny.tensor_parallel_record import (
    TENSOR_PARALLEL_KEY,
    TensorParallelConfiguration,
    TensorParallelRecord,
    TensorParallelStage,
    read_tensor_parallel,
    write_tensor_parallel,
)

set_public_module(
    globals(),
    root={
        "CutPoint",
        "ExportInfo",
        "ModelInfo",
        "OmnyMetadata",
        "ShardConfiguration",
        "Sharding",
        "TensorInfo",
    },
)
