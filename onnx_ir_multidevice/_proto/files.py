"""Load and save ``.onnx`` / ``.omny`` models: lossless, atomic, external data kept in the folder.

**Loading** parses the protobuf, checks every external data reference against the model's
folder (:mod:`~onnx_ir_multidevice._proto.external`: relative, inside the folder, a regular
file, offsets and lengths in range), checks the data files against the record :func:`save`
wrote, converts the proto with :func:`onnx_ir_multidevice.from_proto` (which keeps what
onnx-ir alone would lose on the way back, and refuses what it cannot keep) and points the
external tensors at the model's folder, as an absolute path: the model stays valid when the
working directory changes. It holds the folder's lock shared meanwhile (a save commits under
it exclusively), and maps the data files it checked, so the weights read later are theirs.
A model reached through a symbolic link reads its data next to the file the link points to.
Python's garbage collector is paused while the IR is built and while it is serialised: on
large graphs onnx-ir otherwise spends a large share of its time in collections that find
nothing to free.

**Saving** is atomic. The model and its data file are written into a staging folder next to
the destination (``.<name>.omny-<pid>-<hex>.tmp``, see
:mod:`~onnx_ir_multidevice._proto.atomic`) and flushed to disk. The data file is then moved
to a name *no existing file has* (claimed by creating it exclusively), and the model file is
renamed over the destination last: that one rename is the commit. A crash (even SIGKILL or a
power cut) before it leaves the old model and its old data untouched; after it, the new model
with its new data. The commit (the renames and the removal of the data it replaced) holds the
folder's lock (``flock``), so concurrent saves and loads in one folder see one commit at a
time.

**What a save deletes** (the ownership rule): only what it wrote itself (its staging folder,
the data name it claimed when it fails) and, once committed, the data files *the model it
replaced owned*: those that model file references and its data record lists as written by
the save that wrote it (read from that model file under the lock). Never the model file,
never a data file of another model in the folder (two models may each be saved with
``external_data="weights.data"``: the second gets ``weights.<8 hex>.data`` and the first
keeps its weights), never a data file a model refers to in place (``"owned": false``), never
the data of a model this package did not write (an exporter's ``model.onnx.data`` stays when
``model.onnx`` is saved over with other weights: remove it by hand if nothing uses it).

A crash can leave the staging folder and the claimed data name; the next save into that
folder removes them once the writer's lock on its staging folder is free (the writer is
gone, in whatever PID namespace), except a claimed data file that the model file it was
saved as now references (the writer died after its commit).

The data file's name is ``<model file name>.data`` (or the name passed as ``external_data``)
when no such file exists; when one does (the model is saved over itself with other weights,
or another model uses the name), the new data goes to ``<stem>.<8 hex digits><suffix>``
instead (e.g. ``m.onnx.1f2e3d4c.data``). Saving a model in place with changed weights
therefore alternates between the two names; with unchanged weights it refers to its data
file in place (below).

The model records the size, CRC-32, modification time and inode of its data file (a
``metadata_props`` entry of ours,
:data:`~onnx_ir_multidevice._proto.external.DATA_RECORD_KEY`); :func:`load` and ``omny check``
compare them, so a data file replaced after the fact is reported instead of read. The check
costs a ``stat`` per data file while the file is the one written; it reads the file (CRC-32)
only when its modification time or inode differ (a copied folder), or with
``load(path, verify_data=True)``.

Modes and links: a file replaced keeps its permission bits (its data file gets the same);
a new file gets the mode the umask gives, as ``open`` would. Saving onto a symbolic link
writes through it: the file it points to is replaced, the link stays, and the data file goes
next to the file pointed to.

External data rules of :func:`save` (``external_data=None``, the default):

* **in place**: if the model is saved into the folder it was loaded from, and every
  initializer of ``size_threshold_bytes`` or more is still read from a data file of that
  folder that :func:`load` opened (the weights were not replaced in memory, and the file was
  not replaced on disk since), and no *other* model of ours owns those files, the saved
  model refers to them where they are (same names, same offsets) and no data is written:
  ``omny plan model.onnx -o model.omny`` adds its metadata without a second copy of the
  weights. The record lists borrowed files as *not owned* (``"owned": false``): no later
  save over the saved model removes them, and the saved model depends on them (keep them
  next to it; a change to them is reported by :func:`load`). Saved over the model that owns
  them, the new model owns them in turn. Their CRC-32 is taken from the record they were
  loaded with while they are unchanged, else read once;
* otherwise, if any initializer of the model lives in an external file (the model was loaded
  with external data), or the initializers total 2 GiB or more (the protobuf limit), all
  initializers of ``size_threshold_bytes`` or more are written to a data file next to the
  saved model (named as above; a copy, written from the mapped weights), and the model
  references it by that relative name. Data is never referenced from another folder, so the
  saved model stays valid when the source folder disappears (onnx-ir's ``ir.save`` would
  keep the old relative path);
* otherwise everything is embedded in the model file.

Pass ``external_data="name.data"`` to always use an external file (relative to the model,
inside its folder), or ``external_data=False`` to always embed. Tensors held in node
attributes (``Constant`` values) that live in external files are always embedded.
"""

from __future__ import annotations

__all__ = ["DATA_RECORD_KEY", "EXTERNAL_DATA_TOTAL_BYTES", "load", "save"]

import contextlib
import dataclasses
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_ir_multidevice._errors import ExternalDataError, OmnyFormatError, OmnyIOError
from onnx_ir_multidevice._proto import atomic
from onnx_ir_multidevice._proto.convert import from_proto, from_proto_unrecorded, to_proto
from onnx_ir_multidevice._proto.external import (
    DATA_RECORD_KEY,
    PinnedExternalTensor,
    _DataFile,
    crc32_of,
    external_attributes_embedded,
    make_record,
    model_problems,
    owned_files,
    pin_external,
    proto_problems,
    proto_tensors,
    record_problems,
    record_stamps,
    relocated,
    set_base_dir,
)
from onnx_ir_multidevice._regular_files import read_regular, require_regular, require_replaceable
from onnx_ir_multidevice._util import gc_paused
from onnx_ir_multidevice.omny.container import (
    CONTAINER_META_KEY,
    Container,
    detect,
    parse_container,
)

#: Initializers at least this large (in total) force external data: protobuf's 2 GiB limit.
EXTERNAL_DATA_TOTAL_BYTES = 2**31
_DEFAULT_SIZE_THRESHOLD = 1024


def _as_path(path: object, function: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{function}() takes a file path (str or os.PathLike), not "
            f"{type(path).__name__}; pass the path of an .onnx or .omny file"
        )
    if not os.fspath(path):
        raise OmnyIOError(
            f"{function}(): the path is empty; pass the path of an .onnx or .omny file"
        )
    return Path(path)


def _check_readable_file(path: Path) -> None:
    if path.is_dir():
        raise OmnyIOError(
            f"{path}: is a directory, not a model file; pass the path of the .onnx or .omny "
            "file inside it"
        )
    if not path.exists():
        raise OmnyIOError(f"{path}: no such file; check the path (relative to {Path.cwd()})")
    require_regular(path)  # a FIFO or a device: refused before the folder lock, before reading


# ---------------------------------------------------------------------------------------------
# load


def _pop_record(proto: onnx.ModelProto) -> str | None:
    """Remove the data record from ``proto`` and return its (last) value."""
    props = proto.metadata_props
    found = [i for i, entry in enumerate(props) if entry.key == DATA_RECORD_KEY]
    if not found:
        return None
    value = props[found[-1]].value
    for i in reversed(found):
        del props[i]
    return value


def _referenced_files(proto: onnx.ModelProto) -> dict[str, str]:
    """``{location: name of the first tensor stored there}`` over every external tensor."""
    referenced: dict[str, str] = {}
    for _, name, tensor in proto_tensors(proto):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    referenced.setdefault(os.path.normpath(entry.value), name)
    return referenced


def load(path: str | os.PathLike, *, verify_data: bool = False) -> ir.Model:
    """Load an ``.onnx`` or ``.omny`` model.

    External data files are resolved relative to the model's folder (the folder of the file a
    symbolic link points to); every reference is checked first, and the data files are
    compared with the record :func:`save` wrote: size, modification time and inode (a
    ``stat``, whatever the size of the weights), and the CRC-32 when these differ or with
    ``verify_data``. The data files are opened, not read: the weights are read on first use,
    from the files checked here, even if the model is saved over (or its data removed) in the
    meantime; a data file truncated in place meanwhile gives an :class:`ExternalDataError`
    when a weight is first read.

    An ``.omny`` v2 container (``OMNY`` magic) is read too: its embedded model is loaded, and
    the container is kept in ``model.meta[CONTAINER_META_KEY]`` (see
    :mod:`~onnx_ir_multidevice.omny.container`) for
    :func:`~onnx_ir_multidevice.save_container`.

    Args:
        path: The model file.
        verify_data: Read every recorded data file and compare its CRC-32 with the record,
            even when its size, modification time and inode match (cost: reading the
            weights once).

            .. versionadded:: 0.2

    Returns:
        The model. Saving it with :func:`save` reproduces the file's proto field by field
        (multi-device annotations and ``.omny`` metadata byte for byte), except the name of
        the data file and its record.

    Raises:
        OmnyIOError: The file is missing, a directory, unreadable, or not an ONNX protobuf.
        ExternalDataError: A tensor's external data is outside the model's folder, missing,
            not a regular file, or out of range, or a data file differs from the model's record
            (an :class:`OmnyIOError`; its ``problems`` name every tensor concerned).
        OmnyFormatError: The model cannot be represented without loss, or is not valid ONNX
            (see :func:`onnx_ir_multidevice.from_proto`).
        OmnyContainerError: A v2 container's header, manifest or embedded model is malformed
            (the error names the field and the numbers; an :class:`OmnyFormatError`).
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
    """
    path = _as_path(path, "load")
    _check_readable_file(path)
    folder = os.path.dirname(os.path.realpath(path))
    # Shared with other readers; a save into the folder commits (renames, then removes the
    # data it replaced) under the exclusive lock: the model and data read here belong together.
    with atomic.folder_lock(Path(folder), shared=True):
        return _load_locked(path, folder, verify_data)


def load_structure(path: str | os.PathLike) -> ir.Model:
    """Load a model to read its graph, annotations and metadata, not its weights.

    What a viewer needs (``omny view``), at about the cost of onnx-ir's own ``load``: as
    :func:`load` (``.omny`` v2 containers too), but the external data is neither checked nor
    opened (the initializers stay onnx-ir's lazy external tensors, resolved against the
    model's folder and read only if used) and no fidelity record is kept (see
    :func:`~onnx_ir_multidevice._proto.convert.from_proto_unrecorded`). Save a model loaded so
    with ``onnx_ir.save``, not with :func:`save`.

    Raises:
        OmnyIOError: The file is missing, a directory, unreadable, or not an ONNX protobuf.
        OmnyFormatError: As for :func:`load`.
        OmnyContainerError: As for :func:`load`.
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
    """
    path = _as_path(path, "load_structure")
    _check_readable_file(path)
    folder = os.path.dirname(os.path.realpath(path))
    with atomic.folder_lock(Path(folder), shared=True):
        proto, container = _read_proto(path)
    _pop_record(proto)  # the data files' record: only load checks it
    model = from_proto_unrecorded(proto)
    del proto
    if container is not None:
        model.meta[CONTAINER_META_KEY] = container
    set_base_dir(model, folder)
    return model


def _read_proto(path: Path) -> tuple[onnx.ModelProto, Container | None]:
    """The model proto in ``path`` (a v2 container's embedded one) and the container."""
    try:
        data = read_regular(path)
    except OmnyIOError:
        raise
    except OSError as error:
        raise OmnyIOError(
            f"{path}: cannot be read ({error.strerror}); check permissions"
        ) from error
    container = _v2_container(path, data)
    if container is not None:
        data = container.model_bytes
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as error:
        raise OmnyIOError(
            f"{path}: is not an ONNX model (protobuf parse failed: {error}); pass a binary "
            ".onnx/.omny file"
        ) from error
    if not proto.HasField("graph"):
        raise OmnyIOError(
            f"{path}: is not an ONNX model (no graph in the protobuf); pass a binary "
            ".onnx/.omny file"
        )
    return proto, container


def _load_locked(path: Path, folder: str, verify_data: bool = False) -> ir.Model:
    proto, container = _read_proto(path)
    problems = proto_problems(proto, folder)
    record = _pop_record(proto)
    if record is not None:
        problems.extend(record_problems(record, folder, _referenced_files(proto), full=verify_data))
    if problems:
        raise ExternalDataError(str(path), problems)
    with gc_paused():
        model = from_proto(proto)
    del proto
    if container is not None:
        model.meta[CONTAINER_META_KEY] = container
    set_base_dir(model, folder)
    if record is None:
        pin_external(model)
    else:
        owned = {os.path.realpath(os.path.join(folder, name)) for name in owned_files(record)}
        pin_external(
            model,
            record_stamps(record, folder),
            owned=owned,
            model_file=os.path.realpath(path),
        )
    return model


def _v2_container(path: Path, data: bytes) -> Container | None:
    """The ``.omny`` v2 container ``data`` is (told by its magic), or ``None`` for a v1 file."""
    if detect(data) != "v2":
        return None
    return parse_container(data, source=str(path))


# ---------------------------------------------------------------------------------------------
# save: names


def _check_data_name(name: str, target: Path) -> str:
    """Refuse a data file name that is absolute, has a NUL byte, leaves the folder, or is the model.

    Raises:
        OmnyIOError: ``name`` holds a NUL byte, is absolute, leads out of the folder (``..``,
            or through a subfolder that is a symbolic link leading out), or names the model
            file itself.
    """
    if "\x00" in name:
        raise OmnyIOError(f"external_data={name!r} has a NUL byte; give a file name")
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        raise OmnyIOError(f"external_data={name!r} must be relative to the model file's folder")
    normal = os.path.normpath(name)
    if normal in {".", ".."} or normal.startswith(".." + os.sep):
        raise OmnyIOError(
            f"external_data={name!r} is outside the model's folder; name a file in the "
            "model's folder (or a subfolder of it), e.g. 'model.onnx.data'"
        )
    if normal == target.name:
        raise OmnyIOError(
            f"external_data={name!r} is the name of the model file itself; the data needs "
            f"a file of its own, e.g. {target.name + '.data'!r}"
        )
    folder = os.path.realpath(target.parent)
    parent = os.path.realpath(os.path.join(target.parent, os.path.dirname(normal) or "."))
    if parent != folder and not parent.startswith(folder.rstrip(os.sep) + os.sep):
        raise OmnyIOError(
            f"external_data={name!r}: {os.path.dirname(normal)} is a symbolic link leading to "
            f"{parent}, outside the model's folder ({folder}); name a file in a real "
            "subfolder of the model's folder"
        )
    return normal


def _choose_data_name(
    graphs: Sequence[ir.Graph],
    path: Path,
    external_data: str | os.PathLike | bool | None,
    total: int,
) -> str | None:
    if external_data is False:
        return None
    if external_data is True:
        return f"{path.name}.data"
    if external_data is not None:
        return _check_data_name(os.fspath(external_data), path)
    if next(_external_initializers(graphs), None) is not None:
        return f"{path.name}.data"
    return f"{path.name}.data" if total >= EXTERNAL_DATA_TOTAL_BYTES else None


def _initializer_sizes(graphs: Sequence[ir.Graph]) -> Iterator[int]:
    """The size of every initializer; refuses one whose element type has no size.

    Raises:
        OmnyFormatError: An initializer's element type has no size (``UNDEFINED``, a damaged
            file): neither the proto nor a data file can hold it.
    """
    for graph in graphs:
        for name, value in graph.initializers.items():
            tensor = value.const_value
            if tensor is None:
                continue
            try:
                yield tensor.nbytes
            except (TypeError, ValueError) as error:
                raise OmnyFormatError(
                    f"initializer {name!r}",
                    f"cannot be saved: {error}; give the tensor a valid element type",
                ) from error


def _generation_name(name: str) -> str:
    pure = PurePosixPath(name)
    base, dot, suffix = pure.name.rpartition(".")
    token = secrets.token_hex(4)
    fresh = f"{base}.{token}.{suffix}" if dot and base else f"{pure.name}.{token}"
    return str(pure.parent / fresh) if str(pure.parent) != "." else fresh


_CLAIM = b"omny-claim "
"""First bytes of a claimed data file name (then the staging folder's name), until the data
replaces it."""

_CLAIMS = ".omny-claims"
"""File of the staging folder listing the data names its save claimed: ``?name`` before the
exclusive creation is tried, ``!name`` once it succeeded (the file is this save's), and
``-name`` for each data file of the model being replaced, written before the commit (to be
removed once no model file of that name references it)."""


def _claim_marker(staging: Path) -> bytes:
    return _CLAIM + staging.name.encode("utf-8", "surrogateescape") + b"\n"


def _claim_data_name(folder: Path, name: str, staging: Path) -> str:
    """Claim ``name`` (when free) or a generation name: a small file created exclusively.

    The claim keeps a concurrent save from choosing the same name; it names the staging folder
    (whose lock says whether its writer runs), and the staging folder lists it, so that the
    next save removes it if this writer dies (see :func:`_remove_abandoned_claims`).
    """
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    marker = _claim_marker(staging)
    with open(staging / _CLAIMS, "a", encoding="utf-8", errors="surrogateescape") as claims:
        candidate = name
        while True:
            claims.write(f"?{candidate}\n")
            claims.flush()
            try:
                fd = os.open(folder / candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                candidate = _generation_name(name)
                continue
            try:
                os.write(fd, marker)
            finally:
                os.close(fd)
            claims.write(f"!{candidate}\n")
            claims.flush()
            return candidate


def _is_claim(path: Path, marker: bytes) -> bool:
    """Whether ``path`` is a regular file holding exactly the claim ``marker``."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size != len(marker):
            return False
        return path.read_bytes() == marker
    except OSError:
        return False


def _model_references(model_file: Path, *, owned_only: bool = False) -> set[str] | None:
    """The real paths of the data files ``model_file`` references, inside its folder.

    With ``owned_only``, only those its data record says it owns (written by the save that
    wrote it; not another model's file it reads in place, not a file of a model this package
    did not write). ``set()`` when there is no such file; ``None`` when it cannot be read or
    parsed (then nothing may be deleted on its behalf, and nothing it may use either).
    """
    try:
        data = model_file.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError:
        return None
    try:
        if detect(data) == "v2":
            data = parse_container(data, source=str(model_file)).model_bytes
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception:  # a damaged or foreign file: claim nothing it might use
        return None
    folder = os.path.realpath(model_file.parent)
    inside = folder.rstrip(os.sep) + os.sep
    owned = None
    if owned_only:
        record = next(
            (p.value for p in reversed(proto.metadata_props) if p.key == DATA_RECORD_KEY), None
        )
        owned = owned_files(record) if record is not None else set()
    found = set()
    for location in _referenced_files(proto):
        if os.path.isabs(location) or (owned is not None and location not in owned):
            continue
        real = os.path.realpath(os.path.join(folder, location))
        if real.startswith(inside):
            found.add(real)
    return found


def _remove_abandoned_claims(staging: Path) -> None:
    """Remove the data names a dead save claimed (an :data:`atomic.ABANDONED_HOOKS` hook).

    A name still holding the claim is removed; one the data replaced is removed unless the
    model file the save was writing references it (the writer died after its commit).
    """
    match = atomic.STAGING_PATTERN.match(staging.name)
    try:
        lines = (staging / _CLAIMS).read_text("utf-8", "surrogateescape").splitlines()
    except OSError:
        return
    if match is None or not lines:
        return
    folder = staging.parent
    marker = _claim_marker(staging)
    owned = {line[1:] for line in lines if line[:1] in "!-"}
    tried = {line[1:] for line in lines if line.startswith("?")}
    references: set[str] | None = None
    for name in sorted(owned | tried):
        path = folder / name
        if _is_claim(path, marker):
            path.unlink(missing_ok=True)
            continue
        if name not in owned or not path.is_file() or path.is_symlink():
            continue
        if references is None:
            references = _model_references(folder / match["name"])
            if references is None:
                return
        if os.path.realpath(path) not in references:
            path.unlink(missing_ok=True)


atomic.ABANDONED_HOOKS.append(_remove_abandoned_claims)


def _list_replaced(staging: Path, folder: Path, replaced: set[str] | None) -> None:
    """Add the data files of the model being replaced to the staging folder's claims list.

    Written before the commit: if this writer dies after it, the next save removes them (once
    no model file of the destination's name references them).
    """
    if not replaced:
        return
    real_folder = os.path.realpath(folder)
    with open(staging / _CLAIMS, "a", encoding="utf-8", errors="surrogateescape") as claims:
        for real in sorted(replaced):
            claims.write(f"-{os.path.relpath(real, real_folder)}\n")
        claims.flush()
        os.fsync(claims.fileno())


def _remove_replaced(replaced: set[str] | None, keep: set[str]) -> set[str]:
    """Remove the data files the replaced model referenced, but ``keep``.

    Called with the folder locked, right after the commit.

    Returns:
        The real paths removed.
    """
    removed: set[str] = set()
    for real in sorted(replaced or ()):
        if real in keep:
            continue
        try:
            if not os.path.isfile(real) or os.path.islink(real):
                continue
            os.unlink(real)
        except OSError:
            continue
        removed.add(real)
    return removed


# ---------------------------------------------------------------------------------------------
# save: writing


def _external_initializers(
    graphs: Sequence[ir.Graph],
) -> Iterator[tuple[ir.Value, ir.ExternalTensor]]:
    for graph in graphs:
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                yield value, value.const_value


@dataclasses.dataclass
class _Staged:
    """What :func:`_write_staged` wrote."""

    data: bool
    """Whether a (non-empty) data file was written."""
    written: dict[ir.Value, ir.TensorProtocol]
    """Each initializer's tensor as written: an external tensor in the staged data file, or
    an in-memory copy of an external tensor that went into the model file."""
    originals: dict[ir.Value, ir.TensorProtocol | None]
    """Each initializer's tensor before the save (what the model holds again afterwards)."""
    attributes: list[tuple[ir.Node, str, ir.Attr, ir.Attr]]
    """Tensor attributes read from external files: ``(node, name, original, in-memory)``."""


def _set_record(proto: onnx.ModelProto, record: str | None) -> None:
    _pop_record(proto)
    if record is not None:
        proto.metadata_props.add(key=DATA_RECORD_KEY, value=record)


def _write_staged(
    model: ir.Model,
    graphs: Sequence[ir.Graph],
    staging: Path,
    model_name: str,
    data_name: str | None,
    size_threshold_bytes: int,
    mode: int | None,
    shared: tuple[Mapping[str, _DataFile], set[str]] | None = None,
) -> _Staged:
    """Write the model (and its data file) into the staging folder, flushed to disk.

    With ``shared`` (``({location: data file}, owned locations)``, see :func:`_shared_data`),
    the external initializers keep referring to those files in place and no data file is
    written.
    """
    originals = {
        value: value.const_value for graph in graphs for value in graph.initializers.values()
    }
    written: dict[ir.Value, ir.TensorProtocol] = {}
    staged_data = staging / data_name if data_name is not None else None
    with external_attributes_embedded(model) as attributes:
        try:
            if shared:  # the external initializers stay where they are
                pass
            elif staged_data is None:  # embedded: read the external initializers into memory
                for value, tensor in list(_external_initializers(graphs)):
                    value.const_value = written[value] = ir.Tensor(
                        tensor.numpy().copy(), name=tensor.name, dtype=tensor.dtype
                    )
            else:
                assert data_name is not None  # staged_data is None exactly when it is None
                staged_data.parent.mkdir(parents=True, exist_ok=True)
                ir.external_data.unload_from_model(
                    model, staging, data_name, size_threshold_bytes=size_threshold_bytes
                )
                written = {
                    value: value.const_value for value in originals if value.const_value is not None
                }
            proto = to_proto(model)
        finally:
            for value, original in originals.items():
                value.const_value = original
    wrote_data = False
    if staged_data is not None and staged_data.exists():
        if staged_data.stat().st_size > 0:
            wrote_data = True
            atomic.fsync_file(staged_data)
            if mode is not None:
                os.chmod(staged_data, mode)
        else:
            staged_data.unlink()
    record = None
    if shared:
        files, owned = shared
        record = make_record(
            {location: _shared_record(file) for location, file in files.items()},
            shared=set(files) - owned,
        )
    elif wrote_data:
        assert staged_data is not None
        assert data_name is not None
        size, crc = crc32_of(staged_data)
        # A rename keeps the inode and modification time: load() compares these first.
        record = make_record({data_name: (size, crc, os.stat(staged_data))})
    _set_record(proto, record)
    try:
        serialized = proto.SerializeToString()
    except ValueError as error:  # protobuf refuses messages of 2 GiB or more
        raise OmnyIOError(
            f"{model_name}: the model does not fit in one protobuf file ({error}); save "
            "with external_data=True"
        ) from error
    del proto
    with open(staging / model_name, "wb") as file:
        file.write(serialized)
        file.flush()
        os.fsync(file.fileno())
    if mode is not None:
        os.chmod(staging / model_name, mode)
    return _Staged(wrote_data, written, originals, list(attributes))


def _shared_record(file: _DataFile) -> tuple[int, int, os.stat_result]:
    """``(size, crc32, stat)`` of a data file a model references in place.

    The CRC-32 comes from the record the file was loaded with while the file is unchanged;
    otherwise the file is read once (no copy is written).
    """
    info = os.stat(file.path)
    known = file.crc_if_unchanged()
    size, crc = known if known is not None else crc32_of(file.path)
    return size, crc, info


def _check_unchanged(files: Iterable[_DataFile], path: Path) -> None:
    """Refuse to commit a model referring to a data file replaced while it was saved.

    Raises:
        OmnyIOError: A data file is no longer the one opened at load (another writer
            replaced or removed it meanwhile).
    """
    for file in files:
        try:
            same = os.stat(file.path).st_ino == os.fstat(file.fd).st_ino
        except OSError:
            same = False
        if not same:
            raise OmnyIOError(
                f"{path}: the data file {file.path} was replaced or removed while the model "
                "was being saved; load the model again and save it (the destination is "
                "unchanged)"
            )


def _shared_data(
    graphs: Sequence[ir.Graph], target: Path, size_threshold_bytes: int
) -> tuple[dict[str, _DataFile], set[str]] | None:
    """The data files the model can keep referring to in place when saved as ``target``.

    Possible when every initializer of ``size_threshold_bytes`` or more is read from a data
    file opened by :func:`load` (a :class:`PinnedExternalTensor`) in ``target``'s folder,
    still the file at that name (not replaced since), not ``target`` itself, and either owned
    by no model of ours (an exporter's file, or one a model only borrows) or owned by the
    model file at ``target`` (a save in place: the ownership passes to the new model). A
    file another model owns is never borrowed: that model's next save may remove it. The
    save then writes only the model file, whose record lists the borrowed files as not owned
    (``"owned": false``): no save over it removes them.

    Returns:
        ``({location: data file}, locations the new model owns)``, or ``None`` when the data
        must be written.
    """
    folder = os.path.realpath(target.parent)
    target_real = os.path.realpath(target)
    shared: dict[str, _DataFile] = {}
    owned: set[str] = set()
    for graph in graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if not isinstance(tensor, ir.ExternalTensor):
                if tensor.nbytes >= size_threshold_bytes:
                    return None  # new or changed weights: written to a data file
                continue
            if not isinstance(tensor, PinnedExternalTensor):
                return None
            file = tensor.data_file
            location = os.path.normpath(os.fspath(tensor.location))
            if (
                os.path.realpath(os.fspath(tensor.base_dir)) != folder
                or os.path.isabs(location)
                or location.startswith("..")
                or os.path.realpath(os.path.join(folder, location)) != file.path
                or file.path == target_real
                or file.owner not in (None, target_real)
            ):
                return None
            try:
                now, opened = os.stat(file.path), os.fstat(file.fd)
            except OSError:
                return None
            if (now.st_ino, now.st_dev, now.st_size) != (
                opened.st_ino,
                opened.st_dev,
                opened.st_size,
            ):
                return None  # replaced or changed since it was loaded
            shared[location] = file
            if file.owner is not None:
                owned.add(location)
    return (shared, owned) if shared else None


def _repoint(staged: _Staged, removed: set[str], folder: Path, location: str | None) -> None:
    """Keep the in-memory model valid after the data files it read from were removed.

    Its initializers read lazily from a removed file now read the same bytes from the new data
    file (or hold the in-memory copy that went into the model file); its tensor attributes
    read from a removed file keep their in-memory copies.
    """

    def gone(tensor: object) -> bool:
        return isinstance(tensor, ir.ExternalTensor) and os.path.realpath(tensor.path) in removed

    for value, original in staged.originals.items():
        if not gone(original) or value.const_value is not original:
            continue
        new = staged.written.get(value)
        if isinstance(new, ir.ExternalTensor) and location is not None:
            value.const_value = relocated(new, location, os.path.abspath(folder))
        elif new is not None:
            value.const_value = new
    for node, name, attr, loaded in staged.attributes:
        tensors = [attr.value] if attr.type == ir.AttributeType.TENSOR else list(attr.value)
        if node.attributes.get(name) is attr and any(gone(t) for t in tensors):
            node.attributes[name] = loaded


def _save_destination(model: object, path: str | os.PathLike) -> tuple[Path, Path]:
    """``(path, target)`` of :func:`save`: the path given and the file written (its link's target).

    Checks first that ``model`` is a model and that the target's folder exists.
    """
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"save() takes an onnx_ir.Model, not {type(model).__name__}; to copy a file, "
            "load it first with load(path)"
        )
    path = _as_path(path, "save")
    if path.is_dir():
        raise OmnyIOError(f"{path}: is a directory; pass a file path such as {path / 'model.onnx'}")
    require_replaceable(path, "model")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    folder = target.parent
    if not folder.is_dir():
        raise OmnyIOError(f"{path}: the folder {folder} does not exist; create it first")
    return path, target


def _refuse_own_data_file(graphs: Sequence[ir.Graph], path: Path, target: Path) -> None:
    """Refuse to write the model over a data file its own tensors are read from.

    The model would be written whole, but the file the weights came from would hold it: the
    model file that names that data file (the input, on the command line) loses its weights.
    """
    files: dict[str, str] = {}  # each data file once, by the first tensor read from it
    for value, tensor in _external_initializers(graphs):
        files.setdefault(os.fspath(tensor.path), value.name or "")
    real = os.path.realpath(target)
    for file, name in files.items():
        if os.path.realpath(file) == real:
            raise OmnyIOError(
                f"{path}: is the data file the model's weights (tensor {name!r}) are read "
                "from; writing the model there would leave the model file that names it "
                "without its weights: choose another path"
            )


def _refuse_existing(*paths: Path | None) -> None:
    """Raise :class:`OmnyIOError` for the first of ``paths`` that exists (``overwrite=False``)."""
    for existing in paths:
        if existing is not None and os.path.lexists(existing):
            raise OmnyIOError(
                f"{existing}: exists (overwrite=False in Python); choose another path, or "
                "pass --force (overwrite=True in Python) to replace it"
            )


def save(
    model: ir.Model,
    path: str | os.PathLike,
    *,
    overwrite: bool = True,
    external_data: str | os.PathLike | bool | None = None,
    size_threshold_bytes: int = _DEFAULT_SIZE_THRESHOLD,
) -> None:
    """Save a model to an ``.onnx`` or ``.omny`` file, atomically.

    The model (and its data file) are written to a staging folder next to the destination,
    flushed to disk, and committed by one rename of the model file (see the module
    docstring): a crash leaves the old model with its data, or the new one with its data. On
    failure the destination is untouched and the staging folder is removed. The in-memory
    model is unchanged, except that initializers read lazily from a data file this call
    removes (the data of the model it replaces) are read from the new data file afterwards,
    so they stay valid (saving a model onto the files it was loaded from is safe).

    Args:
        model: The model to save.
        path: The destination file. Its folder must exist. A symbolic link is written through:
            the file it points to is replaced.
        overwrite: When ``False``, refuse if the model file or its data file exists.
        external_data: ``None`` (default): automatic, see the module docstring (data files
            of the model's own folder are referenced in place when the weights are unchanged,
            otherwise written next to the model, or embedded). A relative
            file name inside the model's folder: write initializers of
            ``size_threshold_bytes`` or more to that file. ``True``: the same with the name
            ``<model file name>.data``. ``False``: embed every initializer.
        size_threshold_bytes: Smallest initializer written to external data.

    Raises:
        OmnyIOError: The destination folder does not exist or is not writable, the
            destination exists and ``overwrite`` is ``False`` (also when another writer
            made it while this one ran), the destination is a data file the model's own
            tensors are read from, ``external_data`` leaves the model's folder, or writing
            failed.
        ExternalDataError: A tensor of the model cannot be read from its external file (the
            file is gone, outside its folder, or too short); its ``problems`` name each.
        OmnyFormatError: The model cannot be serialised without losing its multi-device
            annotations (see :func:`onnx_ir_multidevice.to_proto`), or an initializer's
            element type has no size.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`, or ``path`` is not a
            ``str`` or ``os.PathLike``.
    """
    path, target = _save_destination(model, path)
    folder = target.parent
    graphs = list(model.graphs())
    _refuse_own_data_file(graphs, path, target)
    total = sum(_initializer_sizes(graphs))
    data_name = _choose_data_name(graphs, target, external_data, total)
    shared = None
    if external_data is None and data_name is not None:
        shared = _shared_data(graphs, target, size_threshold_bytes)
        if shared is not None:
            data_name = None  # referenced in place: no data file to write
    if not overwrite:
        _refuse_existing(target, None if data_name is None else folder / data_name)
    problems = model_problems(model)
    if problems:
        raise ExternalDataError(f"{path} (the model being saved)", problems)
    atomic.remove_stale(folder)
    try:
        staging = atomic.make_staging(folder, target.name, "tmp")
    except OSError as error:
        raise OmnyIOError(
            f"{path}: cannot write into {folder} ({error.strerror}); check its permissions"
        ) from error
    claimed: Path | None = None
    staged: _Staged | None = None
    committed = False
    removed: set[str] = set()
    try:
        mode = atomic.existing_mode(target)
        final = None
        if data_name is not None:
            final = _claim_data_name(folder, data_name, staging)
            claimed = folder / final
        with gc_paused():
            staged = _write_staged(
                model, graphs, staging, target.name, final, size_threshold_bytes, mode, shared
            )
        with atomic.folder_lock(folder):  # commits into one folder happen one at a time
            if not overwrite and os.path.lexists(target):  # made since the check above
                raise OmnyIOError(
                    f"{path}: another writer created this file while this one ran; it was "
                    "left as it is and nothing was written. Choose another path, or pass "
                    "--force (overwrite=True in Python) to replace it."
                )
            # What the model being replaced owns (its data files written by a save).
            replaced = _model_references(target, owned_only=True)
            if shared:
                _check_unchanged(shared[0].values(), path)
            _list_replaced(staging, folder, replaced)
            if staged.data:
                assert claimed is not None
                assert final is not None
                os.replace(staging / final, claimed)
                atomic.fsync_dir(claimed.parent)
            os.replace(staging / target.name, target)  # the commit
            committed = True
            atomic.fsync_dir(folder)
            keep = {os.path.realpath(claimed)} if staged.data and claimed is not None else set()
            keep.add(os.path.realpath(target))
            keep.update(file.path for file in (shared[0].values() if shared else ()))
            removed = _remove_replaced(replaced, keep)
    except OmnyIOError:
        raise
    except OSError as error:
        raise OmnyIOError(
            f"{path}: writing failed ({error}); the destination is unchanged"
        ) from error
    finally:
        if claimed is not None and (staged is None or not staged.data or not committed):
            _unlink_claim(claimed, staging)
        shutil.rmtree(staging, ignore_errors=True)
        atomic.release(staging)
    if removed:
        _repoint(staged, removed, folder, final if staged.data else None)


def _unlink_claim(path: Path, staging: Path) -> None:
    """Remove this writer's claim of a data name that received no data."""
    with contextlib.suppress(OSError):
        if _is_claim(path, _claim_marker(staging)):
            path.unlink()
