"""The layout of a v2 container: header constants, :class:`Container` and its error.

Also the findings type, and the parse of the embedded model (:meth:`Container.model_proto`).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Literal, NamedTuple

import onnx

from onnx_ir_multidevice._errors import OmnyFormatError

MAGIC = b"OMNY"
"""The first four bytes of a v2 container."""

VERSION = 2
"""The only container version this module reads and writes."""

HEADER_SIZE = 256
"""Size of the header; sections start at or after this offset."""

MAX_MODEL_SIZE = 2**31 - 1
"""Largest serialized ``ModelProto`` a container can hold (protobuf's 2 GiB limit)."""

MAX_MANIFEST_SIZE = 64 * 1024 * 1024
"""Largest manifest accepted (the same bound as the ``.omny`` metadata JSON)."""

MAX_FILE_SIZE = 2**32
"""Largest file :func:`read_container` reads (4 GiB): a model, a manifest and room to spare."""

SIGNATURE_MAGIC = b"OSIG"
"""First four bytes of an upstream ``<file>.sig`` companion."""

SIGNATURE_SIZE = 74
"""Size of an upstream signature companion: magic, u16 version, u32 flags, 64-byte Ed25519."""

CONTAINER_META_KEY = "onnx_ir_multidevice.container"
"""Key of :attr:`onnx_ir.Model.meta` under which :func:`onnx_ir_multidevice.load` keeps the
:class:`Container` a model was read from (absent for a v1 file). Only
:func:`onnx_ir_multidevice.save_container` reads it; :func:`onnx_ir_multidevice.save` writes
v1 whatever it holds."""

METADATA_KEY = "omnynet_metadata"
MANIFEST_VERSION = "2.0"

# magic, version u32, flags u64, model offset/size, reserved offset/size, manifest offset/size
_FIELDS = struct.Struct("<4sIQQQQQQQ")
_PADDING = slice(_FIELDS.size, HEADER_SIZE)
_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1

# The sections: (name in messages, offset field, size field).
_SECTIONS = (
    ("model", "model_offset", "model_size"),
    ("reserved", "reserved_offset", "reserved_size"),
    ("manifest", "manifest_offset", "manifest_size"),
)


class OmnyContainerError(OmnyFormatError):
    """An ``.omny`` v2 container is malformed, or a model cannot be put into one.

    ``str(error)`` is ``"<source>: <path>: <reason>"``, e.g. ``tiny.omny: header.model_size:
    offset 256 + size 18446744073709551615 runs past the end of the file (1234 bytes); ...``.

    Attributes:
        path: The offending part: a header field (``header.model_offset``), ``header`` for
            the header as a whole, ``manifest``, ``model``, or ``metadata_props[...]`` plus
            a JSON path for the v1 metadata read by :func:`upgrade`.
        reason: What is wrong, without the source and path.
        source: The file (or ``"<bytes>"``) the container came from.
    """

    def __init__(self, path: str, reason: str, *, source: str | None = None) -> None:
        super().__init__(path, reason)
        self.source = source
        if source is not None:
            self.args = (f"{source}: {path}: {reason}",)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.path, self.reason, self.source))


def _rebuild_error(
    cls: type[OmnyContainerError], path: str, reason: str, source: str | None
) -> OmnyContainerError:
    return cls(path, reason, source=source)


@dataclasses.dataclass(frozen=True)
class Container:
    """A parsed ``.omny`` v2 container, every byte of it kept.

    Build one with :func:`parse_container`, :func:`read_container` or
    :func:`build_container`; write it with :func:`serialize_container`. To change a section,
    build a new container with :func:`build_container` (it lays the sections out again);
    :func:`dataclasses.replace` keeps the other fields as they are, so the offsets and sizes
    must then be kept consistent by hand (:func:`serialize_container` checks them).

    .. versionadded:: 0.1.0
    """

    version: int
    """Container version from the header (always 2 for a parsed container)."""

    flags: int
    """Header flags (u64). Upstream writes 0 and defines none; kept as read."""

    header: bytes
    """The 256 header bytes as read. Only the padding (bytes 64-255) is written back; the
    other header bytes are rebuilt from the fields."""

    model_offset: int
    """Offset of the serialized ``ModelProto``."""

    model_size: int
    """Size of the serialized ``ModelProto`` in bytes."""

    reserved_offset: int
    """Offset of the reserved section (0 with size 0: absent, as upstream writes it)."""

    reserved_size: int
    """Size of the reserved section."""

    reserved: bytes
    """The reserved section's bytes (once a bundled processor), kept uninterpreted."""

    manifest_offset: int
    """Offset of the manifest."""

    manifest_size: int
    """Size of the manifest in bytes."""

    manifest_bytes: bytes
    """The manifest exactly as stored (UTF-8 JSON)."""

    manifest: dict[str, Any] = dataclasses.field(hash=False)
    """The parsed manifest, keys in document order (a duplicate key keeps its last value and
    first position, as :func:`json.loads` does; :attr:`manifest_bytes` keeps both)."""

    model_bytes: bytes = dataclasses.field(repr=False)
    """The embedded serialized ``ModelProto`` (parse it with :meth:`model_proto`)."""

    unreferenced: tuple[tuple[int, bytes], ...] = ()
    """``(offset, bytes)`` of every region after the header that no section covers (gaps
    between sections, trailing data), in file order; kept so a rewrite is byte-identical."""

    source: str = dataclasses.field(default="<bytes>", compare=False)
    """Where the container came from (a path or ``"<bytes>"``), for messages."""

    @property
    def padding(self) -> bytes:
        """The header's padding, bytes 64 to 255 (zeros as upstream writes them)."""
        return self.header[_PADDING]

    @property
    def end(self) -> int:
        """Length of the serialized container: the end of its last section or kept region."""
        ends = [HEADER_SIZE]
        for name, offset_field, size_field in _SECTIONS:
            offset, size = getattr(self, offset_field), getattr(self, size_field)
            if name != "reserved" or offset or size:
                ends.append(offset + size)
        ends.extend(offset + len(data) for offset, data in self.unreferenced)
        return max(ends)

    def model_proto(self) -> onnx.ModelProto:
        """Parse the embedded model.

        Returns:
            A new :class:`onnx.ModelProto` (changing it does not change the container).

        Raises:
            OmnyContainerError: The model bytes are not a ``ModelProto`` with a graph.
        """
        return _parse_model(self.model_bytes, self.source)


class ContainerFinding(NamedTuple):
    """Something about a container a checker should report; not an error.

    .. versionadded:: 0.1.0
    """

    code: str
    """Stable short code, e.g. ``"flags-nonzero"``; the checker maps it to its own codes."""

    severity: Literal["error", "warning", "info"]
    """How serious it is."""

    message: str
    """What was found and what to do, naming the numbers."""

    location: str
    """Where: a header field (``header.flags``) or a manifest path
    (``manifest.input.tensor_names``)."""


def _parse_model(raw: bytes, source: str, path: str = "model") -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(raw)
    except Exception as error:  # DecodeError, and whatever else the protobuf backend raises
        raise OmnyContainerError(
            path,
            f"the {len(raw)} bytes are not an ONNX ModelProto (protobuf parse failed: {error})",
            source=source,
        ) from None
    if not proto.HasField("graph"):
        raise OmnyContainerError(
            path,
            f"the {len(raw)} bytes are not an ONNX model (the protobuf has no graph)",
            source=source,
        )
    return proto


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _graph_names(proto: onnx.ModelProto) -> tuple[list[str], list[str]]:
    initializers = {init.name for init in proto.graph.initializer}
    inputs = [v.name for v in proto.graph.input if v.name not in initializers]
    return inputs, [v.name for v in proto.graph.output]
