"""Writing a v2 container: laying the sections out, and writing them back byte for byte."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from onnx_ir_multidevice.omny.container._fit import model_fits_container, unfit_model_reason
from onnx_ir_multidevice.omny.container._layout import (
    _FIELDS,
    _SECTIONS,
    _U32_MAX,
    _U64_MAX,
    HEADER_SIZE,
    MAGIC,
    MAX_FILE_SIZE,
    VERSION,
    Container,
    OmnyContainerError,
)
from onnx_ir_multidevice.omny.container._read import _check_overlaps, _parse_manifest

# --------------------------------------------------------------------------- writing


def _is_nan(value: Any) -> bool:
    """Whether ``value`` is a float NaN (which JSON documents may hold)."""
    return isinstance(value, float) and math.isnan(value)


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
            stack.extend(zip(x, y, strict=True))
        elif x != y and not (_is_nan(x) and _is_nan(y)):  # NaN equals NaN here
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
    _check_fields(container)
    _check_extents(container)
    _check_manifest(container)
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


def _check_fields(container: Container) -> None:
    """Every header field fits its integer; the kept header is 256 bytes."""
    if not 0 <= container.version <= _U32_MAX:
        raise _fail(container, "header.version", f"{container.version} does not fit a u32")
    for name in ("flags", *(f for _, o, s in _SECTIONS for f in (o, s))):
        value = getattr(container, name)
        if not 0 <= value <= _U64_MAX:
            raise _fail(container, f"header.{name}", f"{value} does not fit a u64")
    if len(container.header) != HEADER_SIZE:
        raise _fail(
            container, "header", f"{len(container.header)} bytes kept, the header is {HEADER_SIZE}"
        )


def _check_extents(container: Container) -> None:
    """Sections and kept regions: sizes match the data, after the header, no overlap.

    They also end within :data:`MAX_FILE_SIZE`.
    """
    extents = []
    for (name, offset_field, size_field), data in zip(
        _SECTIONS,
        (container.model_bytes, container.reserved, container.manifest_bytes),
        strict=True,
    ):
        offset = getattr(container, offset_field)
        size = getattr(container, size_field)
        if size != len(data):
            raise _fail(
                container,
                f"header.{size_field}",
                f"{size}, but the {name} section holds {len(data)} bytes",
            )
        if (size or name != "reserved" or offset) and offset < HEADER_SIZE:
            raise _fail(
                container, f"header.{offset_field}", f"offset {offset} is inside the header"
            )
        if size:
            extents.append((name, f"header.{offset_field}", offset, size))
    extents.extend(
        ("unreferenced", "unreferenced", offset, len(data))
        for offset, data in container.unreferenced
        if data
    )
    for _, _, offset, _ in extents:
        if offset < HEADER_SIZE:
            raise _fail(
                container, "unreferenced", f"a kept region starts at {offset}, inside the header"
            )
    _check_overlaps(extents, container.source)
    if container.end > MAX_FILE_SIZE:
        raise _fail(
            container,
            "header",
            f"the sections end at byte {container.end}, over the {MAX_FILE_SIZE}-byte limit of "
            "a container",
        )


def _check_manifest(container: Container) -> None:
    """:attr:`~Container.manifest` is what :attr:`~Container.manifest_bytes` holds."""
    parsed = _parse_manifest(container.manifest_bytes, container.source)
    if not _same_json(parsed, container.manifest):
        raise _fail(
            container,
            "manifest",
            "the parsed manifest differs from the manifest bytes; build a new container with "
            "build_container() to change the manifest",
        )


def _fail(container: Container, path: str, reason: str) -> OmnyContainerError:
    return OmnyContainerError(path, reason, source=container.source)
