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

import dataclasses
import json
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyFormatError, OmnyIOError
from onnx_ir_multidevice._regular_files import open_regular
from onnx_ir_multidevice._util import plural

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
        for name, offset, size in _SECTIONS:
            offset, size = getattr(self, offset), getattr(self, size)
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


# --------------------------------------------------------------------------- detection


def detect(data: bytes | bytearray | memoryview | str | os.PathLike) -> Literal["v1", "v2"]:
    """Tell a v2 container from a v1 file, by magic only.

    Args:
        data: The file's bytes (only the first four are looked at), or its path.

    Returns:
        ``"v2"`` when the data starts with ``OMNY``, else ``"v1"`` (a protobuf file; it is
        not parsed here, so a damaged or empty file is also ``"v1"`` and fails when loaded).

    Raises:
        OmnyIOError: ``data`` is a path that cannot be read.
        TypeError: ``data`` is neither bytes-like nor a path.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        head = bytes(data[:4])
    elif isinstance(data, (str, os.PathLike)):
        path = Path(data)
        try:
            with open_regular(path) as file:
                head = file.read(4)
        except OSError as error:
            if isinstance(error, OmnyIOError):
                raise
            raise OmnyIOError(f"{path}: cannot be read ({error.strerror})") from error
    else:
        raise TypeError(f"detect() takes bytes or a path, not {type(data).__name__}")
    return "v2" if head == MAGIC else "v1"


# --------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True)
class _Header:
    version: int
    flags: int
    model_offset: int
    model_size: int
    reserved_offset: int
    reserved_size: int
    manifest_offset: int
    manifest_size: int


def _check_header(header: bytes, file_size: int, source: str) -> _Header:
    """Check every header field against the file size; nothing is sliced or allocated."""
    truncated = OmnyContainerError(
        "header",
        f"the file is {file_size} bytes, shorter than the {HEADER_SIZE}-byte header; it is "
        "truncated",
        source=source,
    )
    if len(header) < len(MAGIC) and MAGIC.startswith(header):
        raise truncated
    if header[:4] != MAGIC:
        raise OmnyContainerError(
            "header.magic",
            f"the file starts with {bytes(header[:4])!r}, not {MAGIC!r}; it is not an .omny "
            "v2 container (a v1 .omny file is a plain ONNX protobuf: load it as one)",
            source=source,
        )
    if file_size < HEADER_SIZE:
        raise truncated
    _magic, version, flags, *layout = _FIELDS.unpack_from(header)
    fields = _Header(version, flags, *layout)
    if version != VERSION:
        raise OmnyContainerError(
            "header.version",
            f"version {version} is not supported (only {VERSION}); the file was written by a "
            "newer or unknown writer",
            source=source,
        )
    extents: list[tuple[str, str, int, int]] = []
    for name, offset_field, size_field in _SECTIONS:
        offset = getattr(fields, offset_field)
        size = getattr(fields, size_field)
        if name == "reserved" and offset == 0 and size == 0:
            continue  # absent, as upstream writes it
        if offset < HEADER_SIZE:
            raise OmnyContainerError(
                f"header.{offset_field}",
                f"offset {offset} points inside the {HEADER_SIZE}-byte header; the header is "
                "damaged",
                source=source,
            )
        if offset > file_size:
            raise OmnyContainerError(
                f"header.{offset_field}",
                f"offset {offset} is past the end of the file ({file_size} bytes); the file "
                "is truncated or the header is damaged",
                source=source,
            )
        if size > file_size - offset:
            raise OmnyContainerError(
                f"header.{size_field}",
                f"offset {offset} + size {size} runs past the end of the file ({file_size} "
                "bytes); the file is truncated or the header is damaged",
                source=source,
            )
        if size:
            extents.append((name, f"header.{offset_field}", offset, size))
    if fields.model_size > MAX_MODEL_SIZE:
        raise OmnyContainerError(
            "header.model_size",
            f"size {fields.model_size} is 2 GiB or more; a serialized ModelProto cannot be "
            "that large (the header is damaged)",
            source=source,
        )
    if fields.manifest_size > MAX_MANIFEST_SIZE:
        raise OmnyContainerError(
            "header.manifest_size",
            f"size {fields.manifest_size} exceeds the {MAX_MANIFEST_SIZE}-byte manifest limit; "
            "the header is damaged",
            source=source,
        )
    _check_overlaps(extents, source)
    return fields


def _check_overlaps(extents: Sequence[tuple[str, str, int, int]], source: str) -> None:
    ordered = sorted(extents, key=lambda extent: (extent[2], extent[2] + extent[3]))
    for (name_a, _, offset_a, size_a), (name_b, path_b, offset_b, size_b) in zip(
        ordered, ordered[1:]
    ):
        if offset_b < offset_a + size_a:
            raise OmnyContainerError(
                path_b,
                f"the {name_b} section [{offset_b}, {offset_b + size_b}) overlaps the {name_a} "
                f"section [{offset_a}, {offset_a + size_a}); the header is damaged",
                source=source,
            )


def _parse_manifest(raw: bytes, source: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise OmnyContainerError(
            "manifest",
            f"not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start} of the "
            f"{len(raw)}-byte section)",
            source=source,
        ) from None
    try:
        manifest = json.loads(text)
    except RecursionError:
        raise OmnyContainerError(
            "manifest", "not JSON (nested too deeply to parse)", source=source
        ) from None
    except ValueError as error:  # JSONDecodeError, or an integer too long to convert
        raise OmnyContainerError("manifest", f"not JSON ({error})", source=source) from None
    if not isinstance(manifest, dict):
        raise OmnyContainerError(
            "manifest",
            f"the JSON is {_json_type(manifest)}, not an object",
            source=source,
        )
    return manifest


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


def _unreferenced(
    header: _Header, file_size: int, data: bytes | memoryview
) -> tuple[tuple[int, bytes], ...]:
    extents = sorted(
        (getattr(header, offset), getattr(header, size))
        for _, offset, size in _SECTIONS
        if getattr(header, size)
    )
    regions = []
    cursor = HEADER_SIZE
    for offset, size in [*extents, (file_size, 0)]:
        if offset > cursor:
            regions.append((cursor, bytes(data[cursor:offset])))
        cursor = max(cursor, offset + size)
    return tuple(regions)


def parse_container(
    data: bytes | bytearray | memoryview, *, source: str = "<bytes>", check_model: bool = True
) -> Container:
    """Parse an ``.omny`` v2 container.

    Args:
        data: The whole file.
        source: What to call the file in messages (a path, or ``"<bytes>"``).
        check_model: Parse the embedded model to check it is a ``ModelProto`` with a graph
            (default). ``False`` skips that parse (for callers that parse it next anyway).

    Returns:
        The container; :func:`serialize_container` gives ``data`` back byte for byte.

    Raises:
        OmnyContainerError: The data is truncated, has the wrong magic or version, a header
            offset or size is out of bounds (inside the header, past the end of the file,
            2 GiB or more for the model, over :data:`MAX_MANIFEST_SIZE` for the manifest),
            sections overlap, the manifest is not a UTF-8 JSON object, or the model is not
            an ONNX ``ModelProto`` with a graph. ``path`` names the field.
        TypeError: ``data`` is not bytes-like.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"parse_container() takes bytes, not {type(data).__name__}")
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    file_size = len(view)
    header_bytes = bytes(view[:HEADER_SIZE])
    fields = _check_header(header_bytes, file_size, source)
    manifest_bytes = bytes(
        view[fields.manifest_offset : fields.manifest_offset + fields.manifest_size]
    )
    manifest = _parse_manifest(manifest_bytes, source)
    model_bytes = bytes(view[fields.model_offset : fields.model_offset + fields.model_size])
    if check_model:
        _parse_model(model_bytes, source)
    return Container(
        version=fields.version,
        flags=fields.flags,
        header=header_bytes,
        model_offset=fields.model_offset,
        model_size=fields.model_size,
        reserved_offset=fields.reserved_offset,
        reserved_size=fields.reserved_size,
        reserved=bytes(
            view[fields.reserved_offset : fields.reserved_offset + fields.reserved_size]
        ),
        manifest_offset=fields.manifest_offset,
        manifest_size=fields.manifest_size,
        manifest_bytes=manifest_bytes,
        manifest=manifest,
        model_bytes=model_bytes,
        unreferenced=_unreferenced(fields, file_size, view),
        source=source,
    )


def read_container(path: str | os.PathLike, *, check_model: bool = True) -> Container:
    """Read an ``.omny`` v2 container from a file.

    The header is read and checked against the file's size first; the rest of the file is
    read only if every field is in bounds.

    Args:
        path: The file.
        check_model: See :func:`parse_container`.

    Returns:
        The container, with ``source`` set to ``path``.

    Raises:
        OmnyIOError: The file is missing, a directory or unreadable.
        OmnyContainerError: See :func:`parse_container`; also a file over
            :data:`MAX_FILE_SIZE`.
    """
    path = Path(path)
    source = str(path)
    try:
        with open_regular(path, "container") as file:
            file_size = os.fstat(file.fileno()).st_size
            _check_header(file.read(HEADER_SIZE), file_size, source)
            if file_size > MAX_FILE_SIZE:
                raise OmnyContainerError(
                    "header",
                    f"the file is {file_size} bytes, over the {MAX_FILE_SIZE}-byte limit of a "
                    "container (a 2 GiB model and its manifest)",
                    source=source,
                )
            file.seek(0)
            data = file.read()
    except OmnyIOError:  # not a regular file (a FIFO, a device, a directory) or missing
        raise
    except IsADirectoryError as error:
        raise OmnyIOError(f"{path}: is a directory, not an .omny file") from error
    except FileNotFoundError as error:
        raise OmnyIOError(f"{path}: no such file; check the path") from error
    except OSError as error:
        raise OmnyIOError(f"{path}: cannot be read ({error.strerror})") from error
    return parse_container(data, source=source, check_model=check_model)


# --------------------------------------------------------------------------- writing


def _same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal, key order and ``1`` vs ``1.0`` vs ``True`` included.

    Iterative, so a manifest nested as deeply as :func:`json.loads` accepts compares fine.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[key], y[key]) for key in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif x != y and not (x != x and y != y):  # NaN equals NaN here
            return False
    return True


def _manifest_text(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2)


def build_container(
    model_bytes: bytes,
    manifest: Mapping[str, Any] | bytes,
    *,
    flags: int = 0,
    reserved: bytes = b"",
    padding: bytes = bytes(HEADER_SIZE - _FIELDS.size),
    source: str = "<bytes>",
) -> Container:
    """Lay out a new container the way upstream does.

    The model goes right after the header, then the reserved section (offset and size 0 when
    empty, as upstream writes it), then the manifest.

    Args:
        model_bytes: The serialized ``ModelProto``, embedded verbatim.
        manifest: The manifest: a mapping, written as ``json.dumps(manifest, indent=2)``
            (ASCII, upstream's form), or bytes stored verbatim.
        flags: Header flags (u64).
        reserved: The reserved section's bytes.
        padding: The header's 192 padding bytes.
        source: What to call the container in messages.

    Returns:
        The container (not checked further: the model is not parsed).

    Raises:
        OmnyContainerError: A value does not fit its header field, the model is 2 GiB or
            more, or ``manifest`` bytes are not a UTF-8 JSON object.
    """
    if isinstance(manifest, (bytes, bytearray)):
        manifest_bytes = bytes(manifest)
    else:
        manifest_bytes = _manifest_text(manifest).encode("utf-8")
    if not model_fits_container(len(model_bytes)):
        raise OmnyContainerError(
            "model", unfit_model_reason(n_bytes=len(model_bytes)) or "", source=source
        )
    if not 0 <= flags <= _U64_MAX:
        raise OmnyContainerError("header.flags", f"{flags} does not fit a u64", source=source)
    if len(padding) != HEADER_SIZE - _FIELDS.size:
        raise OmnyContainerError(
            "header.padding",
            f"{len(padding)} bytes given, the padding is {HEADER_SIZE - _FIELDS.size}",
            source=source,
        )
    model_offset = HEADER_SIZE
    cursor = model_offset + len(model_bytes)
    reserved_offset = cursor if reserved else 0
    cursor += len(reserved)
    manifest_offset = cursor
    header = _FIELDS.pack(
        MAGIC,
        VERSION,
        flags,
        model_offset,
        len(model_bytes),
        reserved_offset,
        len(reserved),
        manifest_offset,
        len(manifest_bytes),
    ) + bytes(padding)
    return Container(
        version=VERSION,
        flags=flags,
        header=header,
        model_offset=model_offset,
        model_size=len(model_bytes),
        reserved_offset=reserved_offset,
        reserved_size=len(reserved),
        reserved=bytes(reserved),
        manifest_offset=manifest_offset,
        manifest_size=len(manifest_bytes),
        manifest_bytes=manifest_bytes,
        manifest=_parse_manifest(manifest_bytes, source),
        model_bytes=bytes(model_bytes),
        source=source,
    )


def serialize_container(container: Container) -> bytes:
    """Write a container: the header rebuilt from the fields, every section at its offset.

    The header's padding, the reserved section and the :attr:`~Container.unreferenced`
    regions are written back byte for byte, so a parsed container that was not changed
    serializes to the bytes it was parsed from.

    Args:
        container: The container.

    Returns:
        The file's bytes.

    Raises:
        OmnyContainerError: The fields are inconsistent: a value does not fit its header
            field, a size differs from its section's length, a section starts inside the
            header or overlaps another, or :attr:`~Container.manifest` is not what
            :attr:`~Container.manifest_bytes` holds (change the manifest with
            :func:`build_container`).
    """
    source = container.source

    def fail(path: str, reason: str) -> OmnyContainerError:
        return OmnyContainerError(path, reason, source=source)

    if not 0 <= container.version <= _U32_MAX:
        raise fail("header.version", f"{container.version} does not fit a u32")
    for name in ("flags", *(f for _, o, s in _SECTIONS for f in (o, s))):
        value = getattr(container, name)
        if not 0 <= value <= _U64_MAX:
            raise fail(f"header.{name}", f"{value} does not fit a u64")
    if len(container.header) != HEADER_SIZE:
        raise fail("header", f"{len(container.header)} bytes kept, the header is {HEADER_SIZE}")
    extents = []
    for (name, offset_field, size_field), data in zip(
        _SECTIONS, (container.model_bytes, container.reserved, container.manifest_bytes)
    ):
        offset = getattr(container, offset_field)
        size = getattr(container, size_field)
        if size != len(data):
            raise fail(
                f"header.{size_field}",
                f"{size}, but the {name} section holds {len(data)} bytes",
            )
        if (size or name != "reserved" or offset) and offset < HEADER_SIZE:
            raise fail(f"header.{offset_field}", f"offset {offset} is inside the header")
        if size:
            extents.append((name, f"header.{offset_field}", offset, size))
    extents.extend(
        ("unreferenced", "unreferenced", offset, len(data))
        for offset, data in container.unreferenced
        if data
    )
    for _, _, offset, _ in extents:
        if offset < HEADER_SIZE:
            raise fail("unreferenced", f"a kept region starts at {offset}, inside the header")
    _check_overlaps(extents, source)
    if container.end > MAX_FILE_SIZE:
        raise fail(
            "header",
            f"the sections end at byte {container.end}, over the {MAX_FILE_SIZE}-byte limit of "
            "a container",
        )
    if not _same_json(_parse_manifest(container.manifest_bytes, source), container.manifest):
        raise fail(
            "manifest",
            "the parsed manifest differs from the manifest bytes; build a new container with "
            "build_container() to change the manifest",
        )
    out = bytearray(container.end)
    out[:HEADER_SIZE] = container.header
    _FIELDS.pack_into(
        out,
        0,
        MAGIC,
        container.version,
        container.flags,
        container.model_offset,
        container.model_size,
        container.reserved_offset,
        container.reserved_size,
        container.manifest_offset,
        container.manifest_size,
    )
    for offset, data in (
        (container.model_offset, container.model_bytes),
        (container.reserved_offset, container.reserved),
        (container.manifest_offset, container.manifest_bytes),
        *container.unreferenced,
    ):
        out[offset : offset + len(data)] = data
    return bytes(out)


# --------------------------------------------------------------------------- size guard


def model_fits_container(n_bytes: int) -> bool:
    """Whether a serialized ``ModelProto`` of ``n_bytes`` fits one container.

    Args:
        n_bytes: Size of the serialized model (``ModelProto.ByteSize()``).

    Returns:
        ``True`` below 2 GiB (protobuf's limit; a container has no external data).
    """
    return 0 <= n_bytes <= MAX_MODEL_SIZE


def _iter_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _iter_attribute_tensors(node.attribute)


def _iter_attribute_tensors(
    attributes: Sequence[onnx.AttributeProto],
) -> Iterator[onnx.TensorProto]:
    for attribute in attributes:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("sparse_tensor"):
            yield attribute.sparse_tensor.values
            yield attribute.sparse_tensor.indices
        for sparse in attribute.sparse_tensors:
            yield sparse.values
            yield sparse.indices
        if attribute.HasField("g"):
            yield from _iter_tensors(attribute.g)
        for graph in attribute.graphs:
            yield from _iter_tensors(graph)


def uses_external_data(model: onnx.ModelProto | ir.Model) -> bool:
    """Whether any tensor of a model is stored in an external data file.

    Args:
        model: A model proto (initializers, sparse initializers and tensor attributes of
            every graph, subgraph and function are looked at) or an onnx-ir model (the
            initializers of every graph).

    Returns:
        ``True`` if one is; such a model cannot go into a container as it is.
    """
    if isinstance(model, ir.Model):
        return any(
            isinstance(value.const_value, ir.ExternalTensor)
            for graph in model.graphs()
            for value in graph.initializers.values()
        )
    tensors = [*_iter_tensors(model.graph)]
    for function in model.functions:
        for node in function.node:
            tensors.extend(_iter_attribute_tensors(node.attribute))
    return any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in tensors)


def unfit_model_reason(*, n_bytes: int | None = None, external_data: bool = False) -> str | None:
    """Say why a model cannot be written as one container, before anything is written.

    Args:
        n_bytes: Size of the serialized model, if known (``ModelProto.ByteSize()``).
        external_data: Whether the model keeps tensors in external files
            (:func:`uses_external_data`).

    Returns:
        ``None`` when it fits, else a message to show the user (what and what to do).
    """
    if external_data:
        return (
            "the model keeps tensors in external data files; an .omny v2 container holds one "
            "self-contained ModelProto: write a v1 .omny (ONNX with external data) instead"
        )
    if n_bytes is not None and not model_fits_container(n_bytes):
        return (
            f"the serialized model is {n_bytes} bytes, 2 GiB or more; an .omny v2 container "
            "holds one ModelProto, which protobuf limits to 2 GiB: write a v1 .omny with "
            "external data instead"
        )
    return None


# --------------------------------------------------------------------------- upgrade


# Defaults of the reference writer's v1 dataclasses for keys a v1 document may leave out
# (the same as onnx_ir_multidevice.omny._schema's); None marks a required key.
_V1_MODEL = {
    "name": None,
    "architecture": "unknown",
    "total_params": 0,
    "total_size_mb": 0,
    "inference_memory_mb": 0,
}
_V1_SHARDING = {
    "min_vram_mb": 1500,
    "max_shard_size_mb": 1200,
    "min_shards": 2,
    "max_shards": 8,
    "allowed_shards": [2, 4],
}
_V1_EXPORT_INFO = {"exporter_version": "0.1.0", "source_framework": "pytorch", "onnx_opset": 17}

# What upstream writes for manifest keys that have no counterpart in the v1 metadata.
_NO_V1_HOME_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("model", "task"): "",
    ("processor", "processor_type"): "none",
    ("processor", "processor_id"): None,
    ("processor", "processor_version"): None,
    ("input", "input_type"): "image",
    ("input", "input_format"): "base64",
    ("output", "output_type"): "raw",
    ("output", "output_format"): "json",
}
# Manifest keys whose value the v1 metadata holds (its own copy is the truth).
_V1_HOMES: dict[str, frozenset[str]] = {
    "model": frozenset(_V1_MODEL),
    "input": frozenset({"tensor_names"}),
    "output": frozenset({"tensor_names"}),
    "sharding": frozenset(_V1_SHARDING),
    "export_info": frozenset(_V1_EXPORT_INFO),
}
_MISSING = object()
_OBJECT_SECTIONS = ("model", "processor", "input", "output", "sharding", "export_info")


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


class _V1Reader:
    """Read fields of the v1 metadata JSON the way upstream's dataclasses see them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.prefix = f"metadata_props[{METADATA_KEY}]"

    def fail(self, path: str, reason: str) -> OmnyContainerError:
        return OmnyContainerError(f"{self.prefix}.{path}", reason, source=self.source)

    def obj(self, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = parent.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_json_type(value)}")
        return value

    def fields(
        self, obj: Mapping[str, Any], defaults: Mapping[str, Any], path: str
    ) -> dict[str, Any]:
        out = {}
        for key, default in defaults.items():
            if key not in obj and default is None:
                raise self.fail(f"{path}.{key}", "missing; upstream cannot upgrade without it")
            out[key] = obj.get(key, default)
        return out

    def names(self, document: Mapping[str, Any], key: str) -> list[Any]:
        items = document.get(key, [])
        if not isinstance(items, list):
            raise self.fail(key, f"expected an array, got {_json_type(items)}")
        names = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", f"expected an object, got {_json_type(item)}")
            if "name" not in item:
                raise self.fail(f"{key}[{i}].name", "missing; upstream cannot upgrade without it")
            names.append(item["name"])
        return names


def _v1_metadata(proto: onnx.ModelProto, source: str) -> dict[str, Any]:
    # Upstream reads the first omnynet_metadata entry, and only if it is not empty.
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    path = f"metadata_props[{METADATA_KEY}]"
    if not text:
        raise OmnyContainerError(
            path,
            "missing or empty; the file is a plain ONNX model, not a v1 .omny: plan it first "
            "(`omny plan`)",
            source=source,
        )
    try:
        document = json.loads(text)
    except RecursionError:
        raise OmnyContainerError(path, "not JSON (nested too deeply)", source=source) from None
    except ValueError as error:
        raise OmnyContainerError(path, f"not JSON ({error})", source=source) from None
    if not isinstance(document, dict):
        raise OmnyContainerError(
            path, f"the JSON is {_json_type(document)}, not an object", source=source
        )
    return document


def _manifest_from_v1(
    document: Mapping[str, Any],
    *,
    task: str,
    processor_type: str,
    processor_id: str | None,
    source: str,
) -> dict[str, Any]:
    read = _V1Reader(source)
    model = read.fields(read.obj(document, "model", "model"), _V1_MODEL, "model")
    sharding = read.fields(read.obj(document, "sharding", "sharding"), _V1_SHARDING, "sharding")
    export_info = read.fields(
        read.obj(document, "export_info", "export_info"), _V1_EXPORT_INFO, "export_info"
    )
    return {
        "version": MANIFEST_VERSION,
        "model": {
            "name": model["name"],
            "architecture": model["architecture"],
            "task": task,
            "total_params": model["total_params"],
            "total_size_mb": model["total_size_mb"],
            "inference_memory_mb": model["inference_memory_mb"],
        },
        "processor": {
            "processor_type": processor_type,
            "processor_id": processor_id,
            "processor_version": None,
        },
        "input": {
            "input_type": "image",
            "input_format": "base64",
            "tensor_names": read.names(document, "inputs"),
        },
        "output": {
            "output_type": "raw",
            "output_format": "json",
            "tensor_names": read.names(document, "outputs"),
        },
        "sharding": sharding,
        "export_info": export_info,
    }


def upgrade(
    v1_model_bytes: bytes,
    *,
    task: str = "",
    processor_type: str = "none",
    processor_id: str | None = None,
    source: str = "<bytes>",
) -> bytes:
    """Convert a v1 ``.omny`` file into a v2 container, exactly as upstream ``upgrade`` does.

    Upstream parses the v1 file with ``onnx.load``, builds the manifest from the
    ``omnynet_metadata`` JSON and writes the model back with ``SerializeToString()``; this
    function does the same, so the result equals upstream's byte for byte:

    * the embedded model is the parsed v1 proto re-serialized: every ``metadata_props``
      entry (the plan included), the producer and the graph are kept as they are. For a
      file written by protobuf itself (any ONNX writer) this is the input, verbatim;
    * the manifest is ``json.dumps(indent=2)`` (ASCII) of, in this order: ``version``
      ``"2.0"``; ``model`` with ``name``, ``architecture``, ``total_params``,
      ``total_size_mb``, ``inference_memory_mb`` copied from the v1 ``model`` object (JSON
      values as they are, not recomputed) and ``task`` from the argument; ``processor``
      from the arguments with ``processor_version`` null; ``input`` / ``output`` with
      upstream's fixed ``"image"``/``"base64"`` and ``"raw"``/``"json"`` (even for a text
      model) and the ``name`` of each v1 ``inputs`` / ``outputs`` entry; ``sharding`` with
      only ``min_vram_mb``, ``max_shard_size_mb``, ``min_shards``, ``max_shards``,
      ``allowed_shards`` (no cut points, no configurations); ``export_info`` with only
      ``exporter_version``, ``source_framework``, ``onnx_opset`` (``exported_at`` and
      ``source_version`` are dropped). No ``preprocess`` / ``postprocess``;
    * a key missing from the v1 document takes the reference writer's v1 default; the
      header has flags 0, no reserved section, zero padding.

    Args:
        v1_model_bytes: The v1 file: an ONNX ``ModelProto`` whose ``metadata_props`` hold
            ``omnynet_metadata``.
        task: ``model.task`` of the manifest (upstream's ``--task``).
        processor_type: ``processor.processor_type`` (``"none"`` or ``"native"``).
        processor_id: ``processor.processor_id`` (a native processor, e.g. ``"clip"``).
        source: What to call the input in messages.

    Returns:
        The v2 container's bytes.

    Raises:
        OmnyContainerError: The input is already a v2 container, is not an ONNX model, has
            no (or unreadable) ``omnynet_metadata``, lacks a key upstream requires
            (``model.name``, the ``name`` of an input or output), keeps tensors in external
            data files, or is too large for a container.
    """
    if detect(v1_model_bytes) == "v2":
        raise OmnyContainerError(
            "header.magic", "already an .omny v2 container; nothing to upgrade", source=source
        )
    proto = _parse_model(bytes(v1_model_bytes), source)
    reason = unfit_model_reason(n_bytes=proto.ByteSize(), external_data=uses_external_data(proto))
    if reason is not None:
        raise OmnyContainerError("model", reason, source=source)
    manifest = _manifest_from_v1(
        _v1_metadata(proto, source),
        task=task,
        processor_type=processor_type,
        processor_id=processor_id,
        source=source,
    )
    return serialize_container(build_container(proto.SerializeToString(), manifest, source=source))


# --------------------------------------------------------------------------- replace


def _merge_section(old: Mapping[str, Any], new: Mapping[str, Any], section: str) -> dict[str, Any]:
    """``old``'s keys in their order, those with a v1 home taken from ``new``; then ``new``'s."""
    merged = {
        sub: new[sub] if _has_v1_home(section, sub) and sub in new else value
        for sub, value in old.items()
    }
    merged.update((sub, value) for sub, value in new.items() if sub not in merged)
    return merged


def _manifest_for(old: Mapping[str, Any], proto: onnx.ModelProto, source: str) -> dict[str, Any]:
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    if not text:  # no plan: the old manifest, with the graph's tensor names
        manifest = json.loads(json.dumps(old))
        for side, names in zip(("input", "output"), _graph_names(proto)):
            if isinstance(manifest.get(side), dict):
                manifest[side]["tensor_names"] = names
        return manifest
    new = _manifest_from_v1(
        _v1_metadata(proto, source), task="", processor_type="none", processor_id=None,
        source=source,
    )  # fmt: skip
    merged: dict[str, Any] = {}
    for key, value in old.items():
        if key not in new:  # preprocess, postprocess, unknown keys: no v1 home, kept
            merged[key] = value
        elif isinstance(value, dict) and isinstance(new[key], dict):
            merged[key] = _merge_section(value, new[key], key)
        else:
            merged[key] = new[key]
    merged.update((key, value) for key, value in new.items() if key not in merged)
    return merged


def replace_model(container: Container, model_bytes: bytes) -> Container:
    """A container like ``container`` that holds another (changed) model.

    What the new model's plan says wins; what only the manifest can hold is kept:

    * with a plan (``omnynet_metadata``) in the new model, the manifest values that have a v1
      counterpart (model figures, tensor names, sharding limits, export info) are derived
      from it as :func:`upgrade` derives them; the others (``model.task``, ``processor``,
      ``input.input_type``... , ``preprocess``, ``postprocess``, unknown keys) keep their
      old values, in the old manifest's key order;
    * without a plan, the old manifest is kept, with ``input.tensor_names`` and
      ``output.tensor_names`` set to the new model's graph inputs and outputs;
    * the header's flags and padding and the reserved section are kept; bytes that no section
      covered (:attr:`Container.unreferenced`) are dropped, the sections laid out again as
      :func:`build_container` lays them out.

    Args:
        container: The container the model was read from.
        model_bytes: The new serialized ``ModelProto``.

    Returns:
        The new container (``container`` itself is not changed).

    Raises:
        OmnyContainerError: The bytes are not an ONNX model, it keeps tensors in external
            data files or is 2 GiB or more, or its plan lacks a key :func:`upgrade` needs.
    """
    source = container.source
    proto = _parse_model(bytes(model_bytes), source)
    reason = unfit_model_reason(n_bytes=len(model_bytes), external_data=uses_external_data(proto))
    if reason is not None:
        raise OmnyContainerError("model", reason, source=source)
    return build_container(
        bytes(model_bytes),
        _manifest_for(container.manifest, proto, source),
        flags=container.flags,
        reserved=container.reserved,
        padding=container.padding,
        source=source,
    )


# --------------------------------------------------------------------------- downgrade


def _embedded_plan(container: Container) -> dict[str, Any] | None:
    """The embedded model's v1 metadata, or ``None`` when absent or unreadable."""
    proto = container.model_proto()
    text = next((p.value for p in proto.metadata_props if p.key == METADATA_KEY), "")
    if not text:
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _has_v1_home(section: str, key: str | None) -> bool:
    return key is not None and key in _V1_HOMES.get(section, frozenset())


def downgrade(container: Container, *, include_defaults: bool = False) -> tuple[bytes, list[str]]:
    """Turn a v2 container back into a v1 file.

    The v1 file is the embedded model, verbatim: its ``metadata_props`` already hold the
    plan (upstream ``upgrade`` keeps them), which is the truth the manifest summarises. A
    container written by upstream ``export-v2`` embeds a model without a plan; its v1 file
    is then a plain ONNX model.

    Args:
        container: The container.
        include_defaults: Also list manifest keys without a v1 counterpart whose value is
            what upstream ``upgrade`` writes by default (``model.task`` ``""``,
            ``processor`` none/null/null, ``input_type`` ``"image"``, ``input_format``
            ``"base64"``, ``output_type`` ``"raw"``, ``output_format`` ``"json"``). Off by
            default, so a v1 → v2 → v1 round trip reports nothing.

    Returns:
        ``(v1_bytes, dropped)``: the v1 file, and the manifest keys whose information the v1
        file cannot hold, as paths (``processor.processor_id``, ``preprocess``), in manifest
        order: keys without a v1 counterpart (``model.task``, ``processor``,
        ``input.input_type``..., ``preprocess``, ``postprocess``, unknown keys), and every
        key but ``version`` when the embedded model has no plan. The caller should warn.
    """
    plan = _embedded_plan(container)
    dropped: list[str] = []
    for key, value in container.manifest.items():
        if key == "version":
            continue
        if key in _OBJECT_SECTIONS and isinstance(value, dict):
            for sub, sub_value in value.items():
                if plan is not None and _has_v1_home(key, sub):
                    continue
                default = _NO_V1_HOME_DEFAULTS.get((key, sub), _MISSING)
                if (
                    not include_defaults
                    and type(sub_value) is type(default)
                    and sub_value == default
                ):
                    continue
                dropped.append(f"{key}.{sub}")
        else:
            dropped.append(key)
    return container.model_bytes, dropped


# --------------------------------------------------------------------------- findings


def _brief(value: Any, limit: int = 120) -> str:
    """``repr`` of a JSON value for a message, cut at ``limit`` characters."""
    try:
        text = repr(value)
    except RecursionError:
        return "<a deeply nested value>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _plan_sharding(plan: Any) -> tuple[Any, list[Any] | None]:
    """``(allowed_shards, [num_shards of each configuration])`` of a plan, where readable.

    ``plan`` is the v1 JSON document (a mapping) or an object with ``sharding.allowed_shards``
    and ``sharding.configurations[i].num_shards`` attributes (``_format.OmnyMetadata``).
    """
    if isinstance(plan, Mapping):
        sharding = plan.get("sharding")
        if not isinstance(sharding, Mapping):
            return None, None
        allowed = sharding.get("allowed_shards")
        configurations = sharding.get("configurations")
        if not isinstance(configurations, list):
            return allowed, None
        nums = [c.get("num_shards") if isinstance(c, Mapping) else None for c in configurations]
        return allowed, nums
    sharding = getattr(plan, "sharding", None)
    allowed = getattr(sharding, "allowed_shards", None)
    configurations = getattr(sharding, "configurations", None)
    if configurations is None:
        return allowed, None
    return allowed, [getattr(c, "num_shards", None) for c in configurations]


def _manifest_get(manifest: Mapping[str, Any], *keys: str) -> Any:
    value: Any = manifest
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _graph_names(proto: onnx.ModelProto) -> tuple[list[str], list[str]]:
    initializers = {init.name for init in proto.graph.initializer}
    inputs = [v.name for v in proto.graph.input if v.name not in initializers]
    return inputs, [v.name for v in proto.graph.output]


def _names_finding(
    manifest: Mapping[str, Any], side: str, graph_names: list[str]
) -> ContainerFinding | None:
    location = f"manifest.{side}.tensor_names"
    names = _manifest_get(manifest, side, "tensor_names")
    if names is _MISSING:
        return ContainerFinding(
            f"manifest-{side}s",
            "warning",
            f"the manifest has no {side}.tensor_names; the model's graph {side}s are "
            f"{_brief(graph_names)}",
            location,
        )
    if names == graph_names:
        return None
    if isinstance(names, list) and sorted(map(str, names)) == sorted(graph_names):
        detail = "the same names in another order"
    else:
        detail = "different names"
    return ContainerFinding(
        f"manifest-{side}s",
        "warning",
        f"the manifest lists {side} tensors {_brief(names)} but the model's graph {side}s are "
        f"{_brief(graph_names)} ({detail}); the embedded model is the truth: regenerate the "
        "manifest",
        location,
    )


def container_findings(
    container: Container, plan_metadata: Mapping[str, Any] | Any | None = None
) -> list[ContainerFinding]:
    """What a checker should report about a container: oddities kept, disagreements found.

    Args:
        container: The container.
        plan_metadata: The plan to compare the manifest with: the v1 metadata JSON (a
            mapping) or a parsed ``OmnyMetadata``. ``None`` reads it from the embedded
            model's ``omnynet_metadata`` (no plan comparison when absent or unreadable).

    Returns:
        Findings in a stable order: ``flags-nonzero``, ``reserved-section``,
        ``padding-nonzero``, ``unreferenced-bytes`` (header and layout; all warnings, the
        bytes are kept), ``manifest-version``, ``manifest-inputs``, ``manifest-outputs``
        (manifest vs the model's graph inputs, initializers excluded, and outputs),
        ``manifest-allowed-shards`` (manifest vs the plan's ``allowed_shards``),
        ``manifest-configurations`` (a plan configuration's ``num_shards`` the manifest's
        ``allowed_shards`` does not allow).
    """
    findings: list[ContainerFinding] = []
    if container.flags:
        findings.append(
            ContainerFinding(
                "flags-nonzero",
                "warning",
                f"header flags are 0x{container.flags:016x}; no flag is defined (upstream "
                "writes 0 and ignores them), so they are kept but not understood",
                "header.flags",
            )
        )
    if container.reserved_size or container.reserved_offset:
        findings.append(
            ContainerFinding(
                "reserved-section",
                "warning",
                f"the reserved section holds {container.reserved_size} bytes at offset "
                f"{container.reserved_offset} (upstream writes offset 0, size 0; it once held "
                "a bundled processor); kept, not interpreted",
                "header.reserved_offset",
            )
        )
    nonzero = [i for i, byte in enumerate(container.padding) if byte]
    if nonzero:
        findings.append(
            ContainerFinding(
                "padding-nonzero",
                "warning",
                f"{plural(len(nonzero), 'padding byte')} of the header "
                f"{'is' if len(nonzero) == 1 else 'are'} not zero (first at offset "
                f"{_FIELDS.size + nonzero[0]}); kept as they are",
                "header.padding",
            )
        )
    for offset, data in container.unreferenced:
        findings.append(
            ContainerFinding(
                "unreferenced-bytes",
                "warning",
                f"{len(data)} bytes at offset {offset} belong to no section (a gap or trailing "
                "data); kept as they are",
                f"file[{offset}:{offset + len(data)}]",
            )
        )
    manifest = container.manifest
    version = manifest.get("version", _MISSING)
    if version != MANIFEST_VERSION:
        shown = "missing" if version is _MISSING else _brief(version)
        findings.append(
            ContainerFinding(
                "manifest-version",
                "warning",
                f"the manifest version is {shown}, not {MANIFEST_VERSION!r}",
                "manifest.version",
            )
        )
    proto = container.model_proto()
    graph_inputs, graph_outputs = _graph_names(proto)
    for side, names in (("input", graph_inputs), ("output", graph_outputs)):
        finding = _names_finding(manifest, side, names)
        if finding is not None:
            findings.append(finding)
    if plan_metadata is None:
        plan_metadata = _embedded_plan(container)
    if plan_metadata is not None:
        findings.extend(_sharding_findings(manifest, plan_metadata))
    return findings


def _sharding_findings(manifest: Mapping[str, Any], plan: Any) -> list[ContainerFinding]:
    findings = []
    location = "manifest.sharding.allowed_shards"
    manifest_allowed = _manifest_get(manifest, "sharding", "allowed_shards")
    plan_allowed, nums = _plan_sharding(plan)
    if plan_allowed is not None and not isinstance(plan_allowed, list):
        plan_allowed = list(plan_allowed)  # a tuple from OmnyMetadata
    if manifest_allowed is _MISSING:
        findings.append(
            ContainerFinding(
                "manifest-allowed-shards",
                "warning",
                "the manifest has no sharding.allowed_shards; the plan allows "
                f"{_brief(plan_allowed)}",
                location,
            )
        )
        return findings
    if plan_allowed is not None and manifest_allowed != plan_allowed:
        findings.append(
            ContainerFinding(
                "manifest-allowed-shards",
                "warning",
                f"the manifest allows {_brief(manifest_allowed)} shards but the plan allows "
                f"{_brief(plan_allowed)}; the plan is the truth: regenerate the manifest",
                location,
            )
        )
    if nums is not None and isinstance(manifest_allowed, list):
        missing = [n for n in nums if n not in manifest_allowed]
        if missing:
            findings.append(
                ContainerFinding(
                    "manifest-configurations",
                    "warning",
                    f"the plan has configurations of {_brief(missing)} shards that the manifest's "
                    f"allowed_shards {_brief(manifest_allowed)} does not allow; readers that trust "
                    "the manifest will not offer them",
                    location,
                )
            )
    return findings


# --------------------------------------------------------------------------- signatures


def signature_path(path: str | os.PathLike) -> Path | None:
    """The upstream signature companion of a file, if there is one.

    Upstream signs a file with ``<file>.sig`` (74 bytes: ``OSIG``, u16 version 1, u32 flags
    0, an Ed25519 signature over the SHA-256 of the whole file). Any rewrite of the file
    invalidates it; the caller should warn (:func:`stale_signature_message`).

    Args:
        path: The ``.omny`` file.

    Returns:
        ``Path("<file>.sig")`` when that file exists, else ``None``.
    """
    candidate = Path(f"{os.fspath(path)}.sig")
    return candidate if candidate.is_file() else None


def stale_signature_message(path: str | os.PathLike, signature: str | os.PathLike) -> str:
    """The warning to show after rewriting a signed file.

    Args:
        path: The rewritten file.
        signature: Its companion (from :func:`signature_path`).

    Returns:
        A one-line message for stderr.
    """
    return (
        f"{path}: rewritten, so its signature {signature} no longer verifies; sign the new "
        "file again with the upstream tool, or delete the stale signature"
    )
