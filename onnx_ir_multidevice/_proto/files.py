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
to a name *no existing model refers to*, and the model file is renamed over the destination
last: that one rename is the commit. A crash (even SIGKILL or a power cut) before it leaves the
old model and its old data untouched; after it, the new model with its new data. What a crash
can leave besides: the staging folder, and a data file no model refers to; the next save into
that folder removes both (the staging folders of writers whose process is gone, the data files
of the saved model's name family). The commit (the renames and the removal of the data it
replaced) holds the folder's lock (``flock``), so concurrent saves and loads in one folder
see one commit at a time.

The data file's name is ``<model file name>.data`` (or the name passed as ``external_data``)
when no such file exists; when one does (the model is saved over itself, or over a model
saved so before), the new data goes to ``<stem>.<8 hex digits><suffix>`` instead (e.g.
``m.onnx.1f2e3d4c.data``), and once the model is committed the older data files of that name
family are removed. Saving a model in place therefore alternates between the two names.

The model records the size and CRC-32 of its data file (a ``metadata_props`` entry of ours,
:data:`~onnx_ir_multidevice._proto.external.DATA_RECORD_KEY`); :func:`load` and ``omny check``
verify them, so a data file replaced after the fact is reported instead of read.

Modes and links: a file replaced keeps its permission bits (its data file gets the same);
a new file gets the mode the umask gives, as ``open`` would. Saving onto a symbolic link
writes through it: the file it points to is replaced, the link stays, and the data file goes
next to the file pointed to.

External data rules of :func:`save` (``external_data=None``, the default):

* if any initializer of the model lives in an external file (the model was loaded with
  external data), or the initializers total 2 GiB or more (the protobuf limit), all
  initializers of ``size_threshold_bytes`` or more are written to a data file next to the
  saved model (named as above), and the model references it by that relative name. Data is
  never referenced from the folder the model came from, so the saved model stays valid when
  moved or when the source folder disappears (onnx-ir's ``ir.save`` would keep the old
  relative path);
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
import re
import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_ir_multidevice._errors import ExternalDataError, OmnyFormatError, OmnyIOError
from onnx_ir_multidevice._proto import atomic
from onnx_ir_multidevice._proto.convert import from_proto, to_proto
from onnx_ir_multidevice._proto.external import (
    DATA_RECORD_KEY,
    crc32_of,
    external_attributes_embedded,
    make_record,
    model_problems,
    pin_external,
    proto_problems,
    proto_tensors,
    record_problems,
    set_base_dir,
)
from onnx_ir_multidevice._regular_files import read_regular, require_regular
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


def load(path: str | os.PathLike) -> ir.Model:
    """Load an ``.onnx`` or ``.omny`` model.

    External data files are resolved relative to the model's folder (the folder of the file a
    symbolic link points to); every reference is checked first, and the data files are
    compared with the size and CRC-32 the model recorded when :func:`save` wrote it. The
    weights are then mapped into memory, not read: they are read on first use, from the files
    checked here, even if the model is saved over (or its data removed) in the meantime.

    An ``.omny`` v2 container (``OMNY`` magic) is read too: its embedded model is loaded, and
    the container is kept in ``model.meta[CONTAINER_META_KEY]`` (see
    :mod:`~onnx_ir_multidevice.omny.container`) for
    :func:`~onnx_ir_multidevice.save_container`.

    Args:
        path: The model file.

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
        return _load_locked(path, folder)


def _load_locked(path: Path, folder: str) -> ir.Model:
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
    del data
    problems = proto_problems(proto, folder)
    record = _pop_record(proto)
    if record is not None:
        problems.extend(record_problems(record, folder, _referenced_files(proto)))
    if problems:
        raise ExternalDataError(str(path), problems)
    with gc_paused():
        model = from_proto(proto)
    del proto
    if container is not None:
        model.meta[CONTAINER_META_KEY] = container
    set_base_dir(model, folder)
    pin_external(model)
    return model


def _v2_container(path: Path, data: bytes) -> Container | None:
    """The ``.omny`` v2 container ``data`` is (told by its magic), or ``None`` for a v1 file."""
    if detect(data) != "v2":
        return None
    return parse_container(data, source=str(path))


# ---------------------------------------------------------------------------------------------
# save: names


def _check_data_name(name: str) -> str:
    """Refuse a data file name that is absolute, holds a NUL byte or leaves the model's folder."""
    if "\x00" in name:
        raise OmnyIOError(f"external_data={name!r} has a NUL byte; give a file name")
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        raise OmnyIOError(f"external_data={name!r} must be relative to the model file's folder")
    normal = os.path.normpath(name)
    if normal == "." or normal == ".." or normal.startswith(".." + os.sep):
        raise OmnyIOError(
            f"external_data={name!r} is outside the model's folder; name a file in the "
            "model's folder (or a subfolder of it), e.g. 'model.onnx.data'"
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
        return _check_data_name(os.fspath(external_data))
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


def _family(name: str) -> tuple[str, re.Pattern[str]]:
    """``(folder part, pattern of the file names)`` of the data files named after ``name``."""
    pure = PurePosixPath(name)
    base, dot, suffix = pure.name.rpartition(".")
    if not dot or not base:
        base, suffix = pure.name, ""
    tail = rf"\.{re.escape(suffix)}" if suffix else ""
    pattern = re.compile(rf"^(?:{re.escape(pure.name)}|{re.escape(base)}\.[0-9a-f]{{8}}{tail})$")
    return str(pure.parent), pattern


def _generation_name(name: str) -> str:
    pure = PurePosixPath(name)
    base, dot, suffix = pure.name.rpartition(".")
    token = secrets.token_hex(4)
    fresh = f"{base}.{token}.{suffix}" if dot and base else f"{pure.name}.{token}"
    return str(pure.parent / fresh) if str(pure.parent) != "." else fresh


def _family_members(folder: Path, name: str) -> list[Path]:
    """The existing data files of ``name``'s family (``name`` and its generation names)."""
    sub, pattern = _family(name)
    directory = folder / sub
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    return [directory / e.name for e in entries if pattern.match(e.name) and e.is_file()]


_CLAIM = b"omny-claim "
"""First bytes of a claimed data file name (then the writer's pid), until the data replaces it."""


def _claim_data_name(folder: Path, name: str) -> str:
    """Claim ``name`` (when free) or a generation name: a small file created exclusively.

    The claim keeps a concurrent save from choosing the same name, and names its writer so
    that no other save removes it while the writer runs; the data replaces it.
    """
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    candidate = name
    while True:
        try:
            fd = os.open(folder / candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            candidate = _generation_name(name)
            continue
        try:
            os.write(fd, _CLAIM + str(os.getpid()).encode("ascii") + b"\n")
        finally:
            os.close(fd)
        return candidate


def _live_claim(path: Path) -> bool:
    """Whether ``path`` is the claim of a writer that is still running."""
    try:
        info = path.stat()
        if info.st_size > 64:
            return False
        text = path.read_bytes()
    except OSError:
        return False
    if not text.startswith(_CLAIM):
        return False
    try:
        pid = int(text[len(_CLAIM) :].strip())
    except ValueError:
        return False
    return atomic.pid_alive_since(pid, info.st_mtime)


def _remove_family(folder: Path, name: str, keep: Path | None) -> set[str]:
    """Remove the data files of ``name``'s family but ``keep`` and live claims.

    Called with the folder locked, right after a commit: the committed model refers to
    ``keep`` (or to no data file); every other member is the data of a replaced model, a
    leftover of a killed writer, or an empty claim of a writer that is gone.

    Returns:
        The real paths removed.
    """
    removed: set[str] = set()
    for old in _family_members(folder, name):
        if keep is not None and old.name == keep.name and old.parent == keep.parent:
            continue
        if _live_claim(old):
            continue
        real = os.path.realpath(old)
        try:
            os.unlink(old)
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
    originals: dict[ir.Value, ir.TensorProtocol]
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
) -> _Staged:
    """Write the model (and its data file) into the staging folder, flushed to disk."""
    originals = {
        value: value.const_value for graph in graphs for value in graph.initializers.values()
    }
    written: dict[ir.Value, ir.TensorProtocol] = {}
    staged_data = staging / data_name if data_name is not None else None
    with external_attributes_embedded(model) as attributes:
        try:
            if staged_data is None:  # embedded: read the external initializers into memory
                for value, tensor in list(_external_initializers(graphs)):
                    value.const_value = written[value] = ir.Tensor(
                        tensor.numpy().copy(), name=tensor.name, dtype=tensor.dtype
                    )
            else:
                staged_data.parent.mkdir(parents=True, exist_ok=True)
                ir.external_data.unload_from_model(
                    model, staging, data_name, size_threshold_bytes=size_threshold_bytes
                )
                written = {value: value.const_value for value in originals}  # type: ignore[misc]
            proto = to_proto(model)
        finally:
            for value, tensor in originals.items():
                value.const_value = tensor
    wrote_data = False
    if staged_data is not None and staged_data.exists():
        if staged_data.stat().st_size > 0:
            wrote_data = True
            atomic.fsync_file(staged_data)
            if mode is not None:
                os.chmod(staged_data, mode)
        else:
            staged_data.unlink()
    _set_record(proto, make_record({data_name: crc32_of(staged_data)}) if wrote_data else None)
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
            value.const_value = ir.ExternalTensor(
                location,
                new.offset,
                new.length,
                new.dtype,
                shape=new.shape,
                name=new.name,
                doc_string=new.doc_string,
                metadata_props=dict(new.metadata_props) if new.metadata_props else None,
                base_dir=os.path.abspath(folder),
            )
        elif new is not None:
            value.const_value = new
    for node, name, attr, loaded in staged.attributes:
        tensors = [attr.value] if attr.type == ir.AttributeType.TENSOR else list(attr.value)
        if node.attributes.get(name) is attr and any(gone(t) for t in tensors):
            node.attributes[name] = loaded


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
        external_data: ``None`` (default): automatic, see the module docstring. A relative
            file name inside the model's folder: write initializers of
            ``size_threshold_bytes`` or more to that file. ``True``: the same with the name
            ``<model file name>.data``. ``False``: embed every initializer.
        size_threshold_bytes: Smallest initializer written to external data.

    Raises:
        OmnyIOError: The destination folder does not exist or is not writable, the
            destination exists and ``overwrite`` is ``False``, ``external_data`` leaves the
            model's folder, or writing failed.
        ExternalDataError: A tensor of the model cannot be read from its external file (the
            file is gone, outside its folder, or too short); its ``problems`` name each.
        OmnyFormatError: The model cannot be serialised without losing its multi-device
            annotations (see :func:`onnx_ir_multidevice.to_proto`), or an initializer's
            element type has no size.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`, or ``path`` is not a
            ``str`` or ``os.PathLike``.
    """
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"save() takes an onnx_ir.Model, not {type(model).__name__}; to copy a file, "
            "load it first with load(path)"
        )
    path = _as_path(path, "save")
    if path.is_dir():
        raise OmnyIOError(f"{path}: is a directory; pass a file path such as {path / 'model.onnx'}")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    folder = target.parent
    if not folder.is_dir():
        raise OmnyIOError(f"{path}: the folder {folder} does not exist; create it first")
    graphs = list(model.graphs())
    total = sum(_initializer_sizes(graphs))
    data_name = _choose_data_name(graphs, target, external_data, total)
    if not overwrite:
        for existing in (target, folder / data_name if data_name is not None else None):
            if existing is not None and os.path.lexists(existing):
                raise OmnyIOError(
                    f"{existing}: exists and overwrite=False; choose another path or pass "
                    "overwrite=True"
                )
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
    removed: set[str] = set()
    try:
        mode = atomic.existing_mode(target)
        final = None
        if data_name is not None:
            final = _claim_data_name(folder, data_name)
            claimed = folder / final
        with gc_paused():
            staged = _write_staged(
                model, graphs, staging, target.name, final, size_threshold_bytes, mode
            )
        with atomic.folder_lock(folder):  # commits into one folder happen one at a time
            if staged.data:
                assert claimed is not None
                os.replace(staging / final, claimed)
                atomic.fsync_dir(claimed.parent)
            os.replace(staging / target.name, target)  # the commit
            atomic.fsync_dir(folder)
            # The older data of this model name: the committed model refers to none of them.
            removed = _remove_family(
                folder, data_name or f"{target.name}.data", claimed if staged.data else None
            )
    except OSError as error:
        raise OmnyIOError(
            f"{path}: writing failed ({error}); the destination is unchanged"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if claimed is not None and (staged is None or not staged.data):
            _unlink_claim(claimed)
    if removed:
        _repoint(staged, removed, folder, final if staged.data else None)


def _unlink_claim(path: Path) -> None:
    """Remove this writer's claim of a data name that received no data."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == _CLAIM + str(os.getpid()).encode("ascii") + b"\n":
            path.unlink()
