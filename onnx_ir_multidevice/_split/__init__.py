"""Split a planned model into one runnable ONNX model per pipeline stage, and write it.

* :mod:`~onnx_ir_multidevice._split.select` -- the stage of every node (from a ``.omny``
  configuration or an IR v11 annotation);
* :mod:`~onnx_ir_multidevice._split.build` -- the stage models (:func:`split`);
* :mod:`~onnx_ir_multidevice._split.manifest` -- ``manifest.json``, built and parsed;
* :mod:`~onnx_ir_multidevice._split.write` -- a split directory, written atomically
  (:func:`save_split`).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "GRAPH_INPUT",
    "GRAPH_OUTPUT",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "ManifestError",
    "ManifestInput",
    "ManifestOutput",
    "ManifestStage",
    "NUM_STAGES_KEY",
    "STAGE_INDEX_KEY",
    "build_manifest",
    "pipeline_configurations",
    "read_manifest",
    "resolve_stages",
    "save_split",
    "split",
    "split_at",
    "split_by_stages",
    "SplitManifest",
]

from onnx_ir_multidevice._split.build import (
    NUM_STAGES_KEY,
    STAGE_INDEX_KEY,
    split,
    split_at,
    split_by_stages,
)
from onnx_ir_multidevice._split.manifest import (
    GRAPH_INPUT,
    GRAPH_OUTPUT,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    Manifest,  # noqa: F401  (the former name of SplitManifest, not in __all__)
    ManifestError,
    ManifestInput,
    ManifestOutput,
    ManifestStage,
    SplitManifest,
    build_manifest,
    read_manifest,
)
from onnx_ir_multidevice._split.select import pipeline_configurations, resolve_stages
from onnx_ir_multidevice._split.write import save_split
from onnx_ir_multidevice._util import set_public_module

set_public_module(
    globals(),
    root={
        "ManifestError",
        "ManifestInput",
        "ManifestOutput",
        "ManifestStage",
        "SplitManifest",
        "build_manifest",
        "read_manifest",
        "save_split",
        "split",
        "split_at",
        "split_by_stages",
    },
)
