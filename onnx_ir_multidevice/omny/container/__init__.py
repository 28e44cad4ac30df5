"""The ``.omny`` v2 container: a 256-byte header, the serialized ONNX model, a JSON manifest.

Layout (integers little-endian, no checksum, no alignment), as the upstream writer lays it
out:

======  ======  ===================  =====================================================
offset  size    field                value written upstream
======  ======  ===================  =====================================================
0       4       magic                ``OMNY``
4       4       version (u32)        2
8       8       flags (u64)          0
16      8       model offset (u64)   256
24      8       model size (u64)     length of the serialized ``ModelProto``
32      8       reserved offset      0 (the section once held a bundled processor)
40      8       reserved size        0
48      8       manifest offset      256 + model size
56      8       manifest size        length of the manifest
64      192     padding              zeros
======  ======  ===================  =====================================================

The manifest is ``json.dumps(manifest, indent=2)`` (ASCII). The plan lives in the embedded
model's ``metadata_props`` (``omnynet_version`` / ``omnynet_metadata``); the manifest is a
summary of it that may disagree (:func:`container_findings` says where).

Rules this module follows:

* **Detection by magic only.** ``OMNY`` at offset 0 is v2; anything else is a v1 file (a
  protobuf, which never starts with ``O``). Protobuf bytes are never sniffed.
* **Bounds first.** Every header field is checked against the file's length, and the
  sections against each other, before anything is sliced or parsed. Hostile input raises
  :class:`OmnyContainerError` naming the file, the field and the numbers; no
  ``struct.error``, ``MemoryError``, ``UnicodeDecodeError``, ``OverflowError``,
  ``RecursionError`` or protobuf ``DecodeError`` escapes.
* **Lossless.** :class:`Container` keeps the flags, the reserved section, the header's
  padding (zero or not), the manifest bytes verbatim and every byte of the file that no
  section covers (gaps, trailing data). :func:`serialize_container` rebuilds the header from
  the fields and puts every section and kept region back at its offset, so a parsed container
  written back is byte-identical to its source. Such oddities are reported by
  :func:`container_findings`, never "fixed" silently.
* **Upgrade like upstream.** :func:`upgrade` turns a v1 file into exactly the bytes the
  upstream ``upgrade`` writes (see its docstring for how each manifest value is derived).

Self-contained: only the standard library, ``onnx``, ``onnx_ir`` and
:mod:`onnx_ir_multidevice._errors` are imported.

One private module per concept, every name importable from here:

* ``_layout`` -- the header constants, :class:`Container`, :class:`OmnyContainerError`,
  :class:`ContainerFinding`;
* ``_read`` -- :func:`detect`, the header and section checks, :func:`parse_container`,
  :func:`read_container`;
* ``_write`` -- :func:`build_container`, :func:`serialize_container`;
* ``_fit`` -- :func:`model_fits_container`, :func:`uses_external_data`,
  :func:`unfit_model_reason`;
* ``_v1`` -- :func:`upgrade`, :func:`replace_model`, :func:`downgrade` (v1 files);
* ``_findings`` -- :func:`container_findings`;
* ``_signature`` -- :func:`signature_path`, :func:`stale_signature_message`.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

__all__ = [
    "CONTAINER_META_KEY",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_FILE_SIZE",
    "MAX_MANIFEST_SIZE",
    "MAX_MODEL_SIZE",
    "SIGNATURE_MAGIC",
    "SIGNATURE_SIZE",
    "VERSION",
    "Container",
    "ContainerFinding",
    "OmnyContainerError",
    "build_container",
    "container_findings",
    "detect",
    "downgrade",
    "model_fits_container",
    "parse_container",
    "read_container",
    "replace_model",
    "serialize_container",
    "signature_path",
    "stale_signature_message",
    "unfit_model_reason",
    "upgrade",
    "uses_external_data",
]

from onnx_ir_multidevice._util import set_public_module
from onnx_ir_multidevice.omny.container._findings import (
    container_findings,
)
from onnx_ir_multidevice.omny.container._fit import (
    model_fits_container,
    unfit_model_reason,
    uses_external_data,
)
from onnx_ir_multidevice.omny.container._layout import (
    CONTAINER_META_KEY,
    HEADER_SIZE,
    MAGIC,
    MAX_FILE_SIZE,
    MAX_MANIFEST_SIZE,
    MAX_MODEL_SIZE,
    SIGNATURE_MAGIC,
    SIGNATURE_SIZE,
    VERSION,
    Container,
    ContainerFinding,
    OmnyContainerError,
)
from onnx_ir_multidevice.omny.container._read import (
    detect,
    parse_container,
    read_container,
)
from onnx_ir_multidevice.omny.container._signature import (
    signature_path,
    stale_signature_message,
)
from onnx_ir_multidevice.omny.container._v1 import (
    downgrade,
    replace_model,
    upgrade,
)
from onnx_ir_multidevice.omny.container._write import (
    build_container,
    serialize_container,
)

set_public_module(globals())
