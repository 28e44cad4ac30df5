"""The toolchain's input: a model file, or an archive holding one model and a configuration.

The OAAX entry point takes exactly two arguments, so options cannot be flags; they come from
the input:

* a model file (``.onnx``, a v1 ``.omny``, a v2 ``.omny`` container): default options, or the
  plan of an ``.omny`` file with exactly one configuration;
* an archive (``.zip``, ``.tar.gz`` / ``.tgz`` / ``.tar``, told by its magic bytes) holding
  exactly one model (a member ending in ``.onnx`` or ``.omny``) and at most one
  ``config.json`` (any folder); its other members (external data files, calibration data)
  are extracted beside the model.

Archives are read defensively: a member whose name is absolute, has a drive, a backslash or a
``..`` component, or that is not a regular file or a folder (a symbolic or hard link, a
device, a FIFO) refuses the whole archive before anything is extracted, and so do more than
:data:`MAX_MEMBERS` members or more than :data:`MAX_EXTRACTED_BYTES` of content. Members are
extracted by this module (never ``extractall``) into a private folder that the caller
chooses (the toolchain puts it inside the output directory and removes it afterwards).

The configuration (``config.json``), every key optional::

    {"shards": 3, "devices": ["4GiB", "4GiB", "4GiB"], "dims": {"batch": 1, "seq": 128},
     "relaxed": false}

``shards``: number of pipeline stages (default: the number of ``devices``, else the ``.omny``
input's configuration, else 2); ``devices``: memory of each device, in pipeline order (the
planner's ``devices``; an ``.omny`` input's configuration is kept only where each stage fits
its device with the planner's headroom, else a plan is made for the devices); ``dims``:
sizes of symbolic dimensions to plan and verify at; ``relaxed``: also cut where small side
activations cross. Any other key is refused (a typo would otherwise be ignored silently).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = [
    "CONFIG_NAME",
    "MAX_EXTRACTED_BYTES",
    "MAX_MEMBERS",
    "MODEL_SUFFIXES",
    "ToolchainConfig",
    "ToolchainInput",
    "parse_config",
    "read_input",
]

import dataclasses
import json
import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._regular_files import open_regular
from onnx_ir_multidevice.analysis.sizes import check_dims
from onnx_ir_multidevice.oaax.codes import ConversionError
from onnx_ir_multidevice.planner.devices import parse_size

CONFIG_NAME = "config.json"
"""Base name of the configuration member of an archive."""

MODEL_SUFFIXES = (".onnx", ".omny")
"""Suffixes of the model member of an archive."""

MAX_MEMBERS = 10_000
"""Most members an archive may have."""

MAX_EXTRACTED_BYTES = 16 * 2**30
"""Most bytes extracted from an archive (16 GiB: a large model with external data)."""

_CONFIG_KEYS = ("shards", "devices", "dims", "relaxed")
_ZIP_MAGIC = b"PK\x03\x04"
_EMPTY_ZIP_MAGIC = b"PK\x05\x06"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class ToolchainConfig:
    """Options of a conversion (from ``config.json``; every field optional)."""

    shards: int | None = None
    """Number of pipeline stages (``None``: the ``.omny`` input's configuration, else 2)."""

    devices: tuple[str, ...] | None = None
    """Memory of each device in pipeline order, as sizes (``"4GiB"``)."""

    dims: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Sizes of symbolic dimensions to plan and verify at (others are 1)."""

    relaxed: bool = False
    """Also cut where small side activations cross (relaxed cuts)."""

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON (for the log)."""
        return {
            "shards": self.shards,
            "devices": None if self.devices is None else list(self.devices),
            "dims": dict(self.dims),
            "relaxed": self.relaxed,
        }


@dataclasses.dataclass(frozen=True)
class ToolchainInput:
    """What the toolchain converts."""

    model_path: Path
    """The model file (inside the extraction folder for an archive)."""

    kind: str
    """``"model"``, ``"zip"`` or ``"tar"``."""

    config: ToolchainConfig
    """The options."""

    member: str | None = None
    """The model's name inside the archive."""

    config_member: str | None = None
    """The configuration's name inside the archive, if there is one."""

    members: int = 0
    """Number of files extracted from the archive."""


def _fail(code: str, message: str, **data: object) -> ConversionError:
    return ConversionError(code, "read", message, data)


def parse_config(data: bytes, source: str) -> ToolchainConfig:
    """Parse a ``config.json``.

    Args:
        data: The file's bytes.
        source: Its name, for messages.

    Returns:
        The configuration.

    Raises:
        ConversionError: ``OAAX105``: not a UTF-8 JSON object, an unknown key, or a value of
            the wrong type (the message names the key).
    """

    def bad(message: str) -> ConversionError:
        return _fail("OAAX105", f"{source}: {message}", Config=source)

    document = _config_document(data, bad)
    shards = _config_shards(document.get("shards"), bad)
    devices = _config_devices(document.get("devices"), shards, bad)
    dims = _config_dims(document.get("dims", {}), bad)
    relaxed = document.get("relaxed", False)
    if not isinstance(relaxed, bool):
        raise bad(f"relaxed must be true or false, got {relaxed!r}")
    return ToolchainConfig(shards=shards, devices=devices, dims=dims, relaxed=relaxed)


_Bad = Callable[[str], ConversionError]
"""Makes the ``OAAX105`` error of a configuration file from a message."""


def _config_document(data: bytes, bad: _Bad) -> dict[str, Any]:
    """The configuration as a JSON object with known keys only."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise bad(f"not a UTF-8 JSON document ({error})") from None
    if not isinstance(document, dict):
        raise bad('the configuration must be a JSON object, e.g. {"shards": 3}')
    unknown = sorted(set(document).difference(_CONFIG_KEYS))
    if unknown:
        raise bad(
            f"unknown {'key' if len(unknown) == 1 else 'keys'} {unknown}; the keys are "
            f"{list(_CONFIG_KEYS)}"
        )
    return document


def _config_shards(shards: Any, bad: _Bad) -> int | None:
    """``shards``: absent, or an integer from 1 to 64."""
    if shards is not None and (isinstance(shards, bool) or not isinstance(shards, int)):
        raise bad(f"shards must be a positive integer, got {shards!r}")
    if shards is not None and not 1 <= shards <= 64:
        raise bad(f"shards must be from 1 to 64, got {shards}")
    return shards


def _config_devices(devices: Any, shards: int | None, bad: _Bad) -> tuple[str, ...] | None:
    """``devices``: absent, or memory sizes (a list or a comma-separated string), >= shards."""
    if devices is None:
        return None
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
        raise bad(f'devices must be a list of memory sizes like ["4GiB", "4GiB"], got {devices!r}')
    for i, device in enumerate(devices):
        try:
            parse_size(device)
        except ValueError as error:
            raise bad(f"devices[{i}]: {error}") from None
    if shards is not None and len(devices) < shards:
        raise bad(
            f"devices gives {len(devices)} memory sizes for {shards} shards; give one per "
            "pipeline stage, in order (or leave shards out: it is then the number of devices)"
        )
    return tuple(devices)


def _config_dims(dims: Any, bad: _Bad) -> dict[str, int]:
    """``dims``: dimension names to positive integers, checked by the one dims validator."""
    if not isinstance(dims, dict) or not all(
        isinstance(k, str) and k and type(v) is int and v >= 1 for k, v in dims.items()
    ):
        raise bad(
            f'dims must map dimension names to positive integers, e.g. {{"seq": 128}}, got {dims!r}'
        )
    try:
        return dict(check_dims(dims))  # the bound of a recorded planning dim
    except ValueError as error:
        raise bad(f"dims: {error}") from None


# ---------------------------------------------------------------------------------------------
# Archive members


@dataclasses.dataclass(frozen=True)
class _Member:
    name: str
    """The member's normalised relative path (``a/b.onnx``)."""
    is_dir: bool
    size: int
    """Declared size in bytes."""
    handle: Any
    """The archive's own entry (``ZipInfo`` / ``TarInfo``)."""


def _safe_name(raw: str, archive: Path) -> str:
    """The member's relative path, or a refusal naming it."""

    def refuse(why: str) -> ConversionError:
        return _fail(
            "OAAX103", f"{archive}: member {raw!r} {why}; nothing was extracted", Member=raw
        )

    if not raw or "\x00" in raw:
        raise refuse("has an empty or invalid name")
    if "\\" in raw:
        raise refuse("has a backslash in its name (a Windows path)")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise refuse("has an absolute path")
    parts = [p for p in PurePosixPath(raw).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise refuse("escapes the archive with '..'")
    if not parts:
        raise refuse("has an empty name")
    return "/".join(parts)


def _zip_members(archive: Path, file: zipfile.ZipFile) -> Iterator[_Member]:
    for info in file.infolist():
        name = _safe_name(info.filename, archive)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if info.flag_bits & 0x1:
            raise _fail("OAAX103", f"{archive}: member {info.filename!r} is encrypted")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a regular file"
            raise _fail(
                "OAAX103", f"{archive}: member {info.filename!r} is {what}; nothing was extracted"
            )
        yield _Member(name, info.is_dir(), info.file_size, info)


def _tar_members(archive: Path, file: tarfile.TarFile) -> Iterator[_Member]:
    for info in file:
        name = _safe_name(info.name, archive)
        if info.issym() or info.islnk():
            raise _fail(
                "OAAX103",
                f"{archive}: member {info.name!r} is a link (to {info.linkname!r}); nothing was "
                "extracted",
            )
        if not (info.isreg() or info.isdir()):
            raise _fail(
                "OAAX103",
                f"{archive}: member {info.name!r} is a device, FIFO or other special file; "
                "nothing was extracted",
            )
        yield _Member(name, info.isdir(), info.size, info)


def _list_members(archive: Path, members: Iterator[_Member]) -> list[_Member]:
    listed: list[_Member] = []
    names: set[str] = set()
    total = 0
    for member in members:
        if len(listed) >= MAX_MEMBERS:
            raise _fail("OAAX103", f"{archive}: more than {MAX_MEMBERS} members")
        if not member.is_dir:
            if member.name in names:
                raise _fail("OAAX103", f"{archive}: member {member.name!r} appears twice")
            names.add(member.name)
            total += member.size
            if total > MAX_EXTRACTED_BYTES:
                raise _fail(
                    "OAAX103",
                    f"{archive}: its members hold more than {MAX_EXTRACTED_BYTES} bytes",
                )
        listed.append(member)
    return listed


def _copy_limited(source: IO[bytes], target: Path, limit: int) -> int:
    """Copy at most ``limit`` bytes; refuse a member larger than it declared."""
    written = 0
    with open(target, "xb") as out:
        while chunk := source.read(1 << 20):
            written += len(chunk)
            if written > limit:
                raise _fail("OAAX103", f"member {target.name!r} holds more bytes than it declares")
            out.write(chunk)
    return written


def _pick(archive: Path, members: list[_Member]) -> tuple[_Member, _Member | None]:
    files = [m for m in members if not m.is_dir]
    models = [m for m in files if m.name.lower().endswith(MODEL_SUFFIXES)]
    configs = [m for m in files if PurePosixPath(m.name).name == CONFIG_NAME]
    if len(models) != 1:
        found = ", ".join(m.name for m in models) or "none"
        raise _fail(
            "OAAX104",
            f"{archive}: an archive must hold exactly one model (.onnx or .omny); found {found}",
            Models=[m.name for m in models],
        )
    if len(configs) > 1:
        raise _fail(
            "OAAX105",
            f"{archive}: more than one {CONFIG_NAME}: {', '.join(m.name for m in configs)}",
        )
    return models[0], configs[0] if configs else None


def _extract(
    archive: Path, members: list[_Member], folder: Path, open_member: Any
) -> tuple[int, dict[str, bytes]]:
    """Extract the files under ``folder``; return their count and the config's bytes."""
    count = 0
    kept: dict[str, bytes] = {}
    for member in members:
        target = folder.joinpath(*member.name.split("/"))
        if member.is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_member(member.handle) as source:
            _copy_limited(source, target, member.size)
        count += 1
        if PurePosixPath(member.name).name == CONFIG_NAME:
            kept[member.name] = target.read_bytes()
    return count, kept


def _archive_kind(path: Path, head: bytes) -> str | None:
    name = path.name.lower()
    if head.startswith((_ZIP_MAGIC, _EMPTY_ZIP_MAGIC)) or name.endswith(".zip"):
        return "zip"
    if head.startswith(_GZIP_MAGIC) or name.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    return None


def read_input(path: str | os.PathLike, workdir: Path) -> ToolchainInput:
    """Read the toolchain's input: a model file, or an archive extracted under ``workdir``.

    Args:
        path: The input file.
        workdir: An empty folder for an archive's members (created on demand; the caller
            removes it).

    Returns:
        The model to convert and its options.

    Raises:
        ConversionError: ``OAAX101`` (unreadable), ``OAAX102`` (a damaged archive),
            ``OAAX103`` (a member escapes or is not a regular file), ``OAAX104`` (no model or
            several), ``OAAX105`` (a malformed configuration).
    """
    path = Path(path)
    if path.is_dir():
        raise _fail("OAAX101", f"{path}: is a directory; give a model file or an archive")
    if not path.exists():
        raise _fail("OAAX101", f"{path}: no such file")
    try:
        with open_regular(path, "model file or archive") as file:
            head = file.read(4)
    except OmnyIOError as error:  # a FIFO, a device...: refused before reading
        raise _fail("OAAX101", str(error)) from None
    except OSError as error:
        raise _fail("OAAX101", f"{path}: cannot be read ({error.strerror})") from None
    kind = _archive_kind(path, head)
    if kind is None:
        return ToolchainInput(path, "model", ToolchainConfig())
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as archive:
                members = _list_members(path, _zip_members(path, archive))
                model, config = _pick(path, members)
                workdir.mkdir(parents=True, exist_ok=True)
                count, kept = _extract(path, members, workdir, archive.open)
        else:
            with tarfile.open(path, "r:*") as archive:
                members = _list_members(path, _tar_members(path, archive))
                model, config = _pick(path, members)
                workdir.mkdir(parents=True, exist_ok=True)
                count, kept = _extract(path, members, workdir, archive.extractfile)
    except ConversionError:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as error:
        shutil.rmtree(workdir, ignore_errors=True)
        raise _fail(
            "OAAX102", f"{path}: not a readable {kind} archive ({error})", Input=str(path)
        ) from None
    options = ToolchainConfig() if config is None else parse_config(kept[config.name], config.name)
    return ToolchainInput(
        workdir.joinpath(*model.name.split("/")),
        kind,
        options,
        member=model.name,
        config_member=None if config is None else config.name,
        members=count,
    )
