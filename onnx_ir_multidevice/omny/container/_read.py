"""Reading a v2 container: detection by magic, the header checked, the sections parsed."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._regular_files import open_regular
from onnx_ir_multidevice.omny.container._layout import (
    _FIELDS,
    _SECTIONS,
    HEADER_SIZE,
    MAGIC,
    MAX_FILE_SIZE,
    MAX_MANIFEST_SIZE,
    MAX_MODEL_SIZE,
    VERSION,
    Container,
    OmnyContainerError,
    _json_type,
    _parse_model,
)

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
    fields = _unpack_header(header, file_size, source)
    extents = _section_extents(fields, file_size, source)
    _check_section_limits(fields, source)
    _check_overlaps(extents, source)
    return fields


def _unpack_header(header: bytes, file_size: int, source: str) -> _Header:
    """The header's fields, once its magic, length and version are checked."""
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
    return fields


def _section_extents(
    fields: _Header, file_size: int, source: str
) -> list[tuple[str, str, int, int]]:
    """Each present section as ``(name, offset field, offset, size)``, within the file."""
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
    return extents


def _check_section_limits(fields: _Header, source: str) -> None:
    """The model and the manifest are no larger than a container can hold."""
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


def _check_overlaps(extents: Sequence[tuple[str, str, int, int]], source: str) -> None:
    ordered = sorted(extents, key=lambda extent: (extent[2], extent[2] + extent[3]))
    for (name_a, _, offset_a, size_a), (name_b, path_b, offset_b, size_b) in itertools.pairwise(
        ordered
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
