"""External data: where a model may read it from, and the record tying a data file to its model.

**References.** A tensor stored outside the model file (``data_location: EXTERNAL``) names
its file with ``location`` and the bytes with ``offset`` and ``length``. The package accepts a
reference only when all of these hold (the rules of onnx-ir's and onnxruntime's loaders,
checked up front, for every tensor at once, with the tensor named):

* ``location`` is a non-empty *relative* path of a file, without a NUL byte or a ``..``
  component (even one that normalises inside: the OS resolves ``sub/..`` through ``sub``),
  that stays inside the model's folder once links are followed (no symlink leading out);
* it names an existing *regular* file with a single hard link (onnx-ir refuses hard links:
  one could bring any file of the system into the folder);
* ``offset`` and ``length``, when given, are non-negative integers; ``length`` equals the
  tensor's size (element type and shape); ``offset`` plus the size stays inside the file.

:func:`proto_problems` checks a proto before it is deserialised (so a non-numeric offset is
reported, not raised by onnx-ir), :func:`model_problems` the external tensors of an IR model
before they are read. Both return :class:`~onnx_ir_multidevice.ExternalDataProblem` records
with code ``OMNY108``.

**The data record.** :func:`~onnx_ir_multidevice.save` records, in the ``metadata_props``
entry :data:`DATA_RECORD_KEY` of the model it writes, the size, CRC-32, modification time
(ns) and inode number of each data file it wrote: ``{"version": 2, "files": {"m.onnx.data":
{"bytes": 50331648, "crc32": "1c291ca3", "mtime_ns": ..., "inode": ...}}}``.
:func:`record_problems` compares the files with the record (code ``OMNY109``): a data file
that was replaced, truncated or appended to after the model was saved is detected before a
wrong weight is read. The check costs one ``stat`` per data file when the file is the one
written (same size, modification time and inode): rewriting a file in place changes its
modification time, and replacing it changes its inode. Only when these differ (the folder
was copied, the file touched or replaced by one of the same size) is the file read to
compare its CRC-32, and with ``full=True`` always. Version 1 records (CRC-32 only) are
always read. ``load`` removes the entry from the loaded model (it describes the
file, not the model), so it never travels into a stage, an export or another save.

**Reading.** :func:`pin_external` opens each data file once when the model is loaded and
keeps it open: the weights read later come from the file checked at load (a later save
renames a new file over it), and before a weight is mapped the open file's size is checked,
so a data file truncated in place after the load gives an
:class:`~onnx_ir_multidevice.ExternalDataError` instead of a ``SIGBUS`` from the mapping.
A weight already read before the truncation stays mapped: reading it afterwards is what the
operating system allows (``SIGBUS``); reload the model after changing its data file.

**Embedding.** :func:`external_attributes_embedded` replaces, for the duration of a block,
the tensor attributes (``Constant`` values) read from external files by in-memory copies, so
that what is serialised meanwhile is self-contained.
"""

from __future__ import annotations

__all__ = [
    "relocated",
    "DATA_RECORD_KEY",
    "crc32_of",
    "external_attributes_embedded",
    "make_record",
    "model_problems",
    "owned_files",
    "PinnedExternalTensor",
    "record_stamps",
    "pin_external",
    "proto_problems",
    "proto_tensors",
    "record_problems",
    "set_base_dir",
]

import contextlib
import json
import mmap
import os
import stat
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_ir_multidevice._dtype_sizes import tensor_nbytes
from onnx_ir_multidevice._errors import ExternalDataError, ExternalDataProblem, OmnyFormatError

DATA_RECORD_KEY = "onnx_ir_multidevice.external_data"
"""``metadata_props`` key of the data record :func:`~onnx_ir_multidevice.save` writes."""

_RECORD_VERSION = 2
_RECORD_VERSIONS = (1, 2)
_REFERENCE = "OMNY108"
_MISMATCH = "OMNY109"
_CRC_CHUNK = 1 << 24
_EXTERNAL = onnx.TensorProto.EXTERNAL
_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS


# ---------------------------------------------------------------------------------------------
# One reference


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _as_offset(text: object, field: str) -> tuple[int | None, str | None]:
    """``(value, None)`` for a non-negative integer (or ``None``), else ``(None, reason)``."""
    if text is None or isinstance(text, int):
        value = text
    else:
        stripped = str(text).strip()
        if not stripped.isdigit():
            return None, f"{field} {str(text)!r} is not a non-negative integer"
        value = int(stripped)
    if value is not None and value < 0:
        return None, f"{field} {value} is not a non-negative integer"
    return value, None


class _Files:
    """Resolved data files of one folder, each looked at once."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.normpath(os.path.abspath(folder)) if folder else ""
        self.real_folder = os.path.realpath(self.folder) if folder else ""
        self._seen: dict[str, tuple[str | None, str, int]] = {}

    def resolve(self, location: str) -> tuple[str | None, str, int]:
        """``(reason or None, resolved path, size)`` of a location."""
        found = self._seen.get(location)
        if found is None:
            found = self._resolve(location)
            self._seen[location] = found
        return found

    def _resolve(self, location: str) -> tuple[str | None, str, int]:
        if not location:
            return "has no location (the data file is not named)", "", 0
        if "\x00" in location:
            return "has a NUL byte in its location, which no file name holds", location, 0
        if self.folder and (os.path.isabs(location) or location.startswith(("/", "\\"))):
            return (
                (
                    "is an absolute path; external data must be a relative path inside the "
                    "model's folder"
                ),
                location,
                0,
            )
        if not self.folder:  # a tensor built in memory, without a folder: no boundary
            path = os.path.abspath(location)
        else:
            path = os.path.normpath(os.path.join(self.folder, location))
            if not _inside(path, self.folder):
                return f"is outside the model's folder ({self.folder})", path, 0
            parts = location.replace("\\", "/").split("/")
            if ".." in parts:
                # Refused even when it normalises inside: the OS resolves `sub/..` through
                # `sub` (a link, or missing), so onnxruntime may open another file than checked.
                return (
                    (
                        "has a '..' component; write the data file's plain relative path (e.g. "
                        "'weights.data' or 'sub/weights.data')"
                    ),
                    location,
                    0,
                )
            if parts[-1] in ("", "."):
                return "names a folder, not a data file", location, 0
            real = os.path.realpath(path)
            if not _inside(real, self.real_folder):
                return f"leads to {real}, outside the model's folder ({self.folder})", path, 0
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return f"does not exist ({path}); put the data file next to the model", path, 0
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            return f"cannot be read ({reason})", path, 0
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file", path, 0
        if info.st_nlink > 1:
            return (
                (
                    f"is a hard link ({info.st_nlink} names for one file), which onnx-ir and "
                    "onnxruntime refuse; replace it by a copy"
                ),
                path,
                0,
            )
        return None, path, info.st_size


def _tensor_problem(
    files: _Files,
    location: str,
    offset_text: object,
    length_text: object,
    nbytes: int | None,
) -> str | None:
    """Why a reference is refused, or ``None`` (see the module docstring)."""
    reason, _, size = files.resolve(location)
    if reason is not None:
        return reason
    offset, reason = _as_offset(offset_text, "offset")
    if reason is not None:
        return reason
    length, reason = _as_offset(length_text, "length")
    if reason is not None:
        return reason
    if length is not None and nbytes is not None and length != nbytes:
        return f"length {length} differs from the tensor's size, {nbytes} bytes"
    span = length if length is not None else nbytes
    start = offset or 0
    if span is not None and start + span > size:
        return (
            f"offset {start} + {span} bytes reaches past the end of the file ({size} bytes): "
            "the data file is truncated or not this model's"
        )
    if start > size:
        return f"offset {start} is past the end of the file ({size} bytes)"
    return None


# ---------------------------------------------------------------------------------------------
# Protos


def _proto_nbytes(tensor: onnx.TensorProto) -> int | None:
    """The size of a tensor proto's data from its element type and dims (``None``: unknown)."""
    try:
        dtype = ir.DataType(tensor.data_type)
    except ValueError:
        return None
    if any(d < 0 for d in tensor.dims):
        return None
    return tensor_nbytes(tensor.dims, dtype)


def proto_tensors(proto: onnx.ModelProto) -> Iterator[tuple[str, str, onnx.TensorProto]]:
    """Yield ``(field path, name, tensor)`` for every tensor proto of a model.

    Initializers of the main graph and of every subgraph, and tensors held by node
    attributes (``Constant`` values...) in graphs, subgraphs and functions.
    """

    def nodes(node_protos: Sequence[onnx.NodeProto], path: str) -> Iterator[Any]:
        for i, node in enumerate(node_protos):
            if not node.attribute:
                continue
            for k, attribute in enumerate(node.attribute):
                where = f"{path}.node[{i}].attribute[{k}]"
                label = f"<attribute {attribute.name!r} of node {node.name!r}>"
                if attribute.HasField("t"):
                    yield f"{where}.t", attribute.t.name or label, attribute.t
                for j, tensor in enumerate(attribute.tensors):
                    yield f"{where}.tensors[{j}]", tensor.name or label, tensor
                if attribute.type == _GRAPH:
                    yield from graph(attribute.g, f"{where}.g")
                elif attribute.type == _GRAPHS:
                    for j, subgraph in enumerate(attribute.graphs):
                        yield from graph(subgraph, f"{where}.graphs[{j}]")

    def graph(graph_proto: onnx.GraphProto, path: str) -> Iterator[Any]:
        for i, tensor in enumerate(graph_proto.initializer):
            yield f"{path}.initializer[{i}]", tensor.name, tensor
        yield from nodes(graph_proto.node, path)

    yield from graph(proto.graph, "graph")
    for f, function in enumerate(proto.functions):
        yield from nodes(function.node, f"functions[{f}]")


def proto_problems(proto: onnx.ModelProto, folder: str | os.PathLike) -> list[ExternalDataProblem]:
    """Check every external reference of ``proto`` against the model's ``folder``.

    Args:
        proto: The model proto (not modified).
        folder: The folder of the model file.

    Returns:
        One problem per refused tensor (code ``OMNY108``), in proto order.
    """
    files = _Files(os.fspath(folder))
    problems = []
    for where, name, tensor in proto_tensors(proto):
        if tensor.data_location != _EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        reason = _tensor_problem(
            files, location, entries.get("offset"), entries.get("length"), _proto_nbytes(tensor)
        )
        if reason is not None:
            problems.append(ExternalDataProblem(name, location, reason, _REFERENCE, where))
    return problems


# ---------------------------------------------------------------------------------------------
# IR models


def _all_nodes(model: ir.Model) -> Iterator[ir.Node]:
    yield from ir.traversal.RecursiveGraphIterator(model.graph)
    for function in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(function)


def _ir_tensors(model: ir.Model) -> Iterator[tuple[str, ir.TensorProtocol]]:
    """Yield ``(name, tensor)`` for every initializer and tensor attribute of the model."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                yield value.name or "", value.const_value
    for node in _all_nodes(model):
        if not node.attributes:
            continue
        for attr in node.attributes.values():
            if attr.is_ref():
                continue
            if attr.type == ir.AttributeType.TENSOR:
                yield attr.value.name or f"<attribute {attr.name!r} of {node.name!r}>", attr.value
            elif attr.type == ir.AttributeType.TENSORS:
                for tensor in attr.value:
                    yield tensor.name or f"<attribute {attr.name!r} of {node.name!r}>", tensor


def set_base_dir(model: ir.Model, folder: str) -> None:
    """Resolve every external tensor of ``model`` (functions included) against ``folder``.

    One walk over the nodes, into the subgraphs of the attributes that hold them (what
    :func:`_ir_tensors` yields, without its names and without onnx-ir's recursive iterator:
    on a 50k-node graph, a third of the time ``load`` spends beside deserialising).
    """
    _set_base_dir(model.graph, folder)
    for function in model.functions.values():
        _set_base_dir(function, folder)


def _set_base_dir(graph: ir.Graph | ir.Function, folder: str) -> None:
    if isinstance(graph, ir.Graph):
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value.base_dir = folder
    for node in graph:
        if not node.attributes:
            continue
        for attr in node.attributes.values():
            if attr.is_ref():
                continue
            kind = attr.type
            if kind == ir.AttributeType.TENSOR:
                tensors = [attr.value]
            elif kind == ir.AttributeType.TENSORS:
                tensors = list(attr.value)
            elif kind == ir.AttributeType.GRAPH:
                _set_base_dir(attr.value, folder)
                continue
            elif kind == ir.AttributeType.GRAPHS:
                for subgraph in attr.value:
                    _set_base_dir(subgraph, folder)
                continue
            else:
                continue
            for tensor in tensors:
                if isinstance(tensor, ir.ExternalTensor):
                    tensor.base_dir = folder


class _DataFile:
    """A data file opened once at load, shared by the tensors read from it."""

    __slots__ = ("fd", "location", "owner", "path", "stamp")

    def __init__(
        self,
        path: str,
        location: str,
        stamp: tuple[int, int, int, int] | None,
        owner: str | None = None,
    ) -> None:
        self.path = path
        self.location = location
        self.stamp = stamp  # (size, crc32, mtime_ns, inode) of the model's record (checked)
        self.owner = owner  # the model file whose record owns this data file, if it does
        self.fd = os.open(path, os.O_RDONLY)

    def crc_if_unchanged(self) -> tuple[int, int] | None:
        """``(size, crc32)`` from the record while the file is unchanged, else ``None``.

        Unchanged: the file at :attr:`path` is the one opened, with the recorded inode, size
        and modification time.
        """
        if self.stamp is None:
            return None
        try:
            now, opened = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return None
        size, crc, mtime, inode = self.stamp
        if (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev):
            return None
        if (now.st_size, now.st_mtime_ns, now.st_ino) != (size, mtime, inode):
            return None
        return size, crc

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


class PinnedExternalTensor(ir.ExternalTensor):
    """An external tensor read from the data file opened when the model was loaded.

    The file stays open with the tensor (one descriptor per data file, shared), so its content
    is the one :func:`~onnx_ir_multidevice.load` checked even after the file is replaced or
    removed; its size is checked before the weight is mapped (see the module docstring).
    """

    __slots__ = ("_file",)

    def __init__(self, tensor: ir.ExternalTensor, file: _DataFile) -> None:
        super().__init__(
            tensor.location,
            tensor.offset,
            tensor.length,
            tensor.dtype,
            shape=tensor.shape,
            name=tensor.name,
            doc_string=tensor.doc_string,
            metadata_props=dict(tensor.metadata_props) if tensor.metadata_props else None,
            base_dir=tensor.base_dir,
        )
        self._file = file

    @property
    def data_file(self) -> _DataFile:
        """The data file opened at load (shared by the tensors read from it)."""
        return self._file

    def tobytes(self) -> bytes:
        """The tensor's bytes (read from the data file opened at load)."""
        if self.size == 0:
            return b""
        return super().tobytes()

    def _load(self) -> None:
        self._check_validity()
        dtype = np.dtype(self.dtype.numpy()).newbyteorder("<")
        start = self.offset or 0
        size = os.fstat(self._file.fd).st_size
        if start + self.nbytes > size:
            raise ExternalDataError(
                self._file.path,
                [
                    ExternalDataProblem(
                        self.name or "",
                        self._file.location,
                        f"offset {start} + {self.nbytes} bytes reaches past the end of the "
                        f"file, now {size} bytes: the data file was truncated after the model "
                        "was loaded; restore it, or load the model again from a complete copy",
                        _REFERENCE,
                    )
                ],
            )
        if self.size == 0:
            self._array = np.empty(self.shape.numpy(), dtype=dtype)
            return
        self.raw = mmap.mmap(self._file.fd, 0, access=mmap.ACCESS_READ)
        array = np.frombuffer(self.raw, dtype=dtype, offset=start, count=self.size)
        self._array = array.reshape(self.shape.numpy())


def pin_external(
    model: ir.Model,
    stamps: Mapping[str, tuple[int, int, int, int]] | None = None,
    *,
    owned: Collection[str] = (),
    model_file: str | None = None,
) -> None:
    """Open the data file of every external initializer now (nothing is read until first use).

    The initializers become :class:`PinnedExternalTensor` s reading from files opened here
    (one descriptor per data file): the weights read later are those of the file checked at
    load, even after a later save replaces or removes it, and a file truncated in place is
    reported (an :class:`~onnx_ir_multidevice.ExternalDataError`) before anything is mapped.
    Tensors of sub-byte element types and tensor attributes stay onnx-ir's lazy tensors.

    Args:
        model: The model just loaded.
        stamps: :func:`record_stamps` of the model's record (checked by the caller).
        owned: Real paths of the data files the model's record owns (:func:`owned_files`).
        model_file: Real path of the model file (the owner of ``owned``).
    """
    files: dict[str, _DataFile] = {}
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if not isinstance(tensor, ir.ExternalTensor) or isinstance(
                tensor, PinnedExternalTensor
            ):
                continue
            try:
                whole_bytes = tensor.dtype.bitwidth % 8 == 0
            except TypeError:  # no size (STRING): left to fail where it is read
                continue
            if not whole_bytes:
                continue
            path = os.path.realpath(tensor.path)
            file = files.get(path)
            if file is None:
                try:
                    file = files[path] = _DataFile(
                        path,
                        os.fspath(tensor.location),
                        (stamps or {}).get(path),
                        model_file if path in owned else None,
                    )
                except OSError:  # out of descriptors: stay lazy
                    return
            value.const_value = PinnedExternalTensor(tensor, file)


def model_problems(model: ir.Model) -> list[ExternalDataProblem]:
    """Check the external tensors of an IR model before they are read.

    A tensor whose ``base_dir`` is set (a model from :func:`~onnx_ir_multidevice.load`)
    must stay inside that folder; one built in memory without a ``base_dir`` is only checked
    for its file and range.

    Returns:
        One problem per refused tensor (code ``OMNY108``).
    """
    by_folder: dict[str, _Files] = {}
    problems = []
    for name, tensor in _ir_tensors(model):
        if not isinstance(tensor, ir.ExternalTensor):
            continue
        folder = os.fspath(tensor.base_dir)
        files = by_folder.get(folder)
        if files is None:
            files = by_folder[folder] = _Files(folder)
        try:
            nbytes: int | None = tensor.nbytes
        except (ValueError, TypeError, NotImplementedError):
            # An element type with no size (UNDEFINED, a damaged file): the reference is still
            # checked (file, offset, inside the folder); split and run refuse the tensor by name.
            nbytes = None
        location = os.fspath(tensor.location)
        reason = _tensor_problem(files, location, tensor.offset, tensor.length, nbytes)
        if reason is not None:
            problems.append(ExternalDataProblem(name, location, reason, _REFERENCE))
    return problems


def relocated(tensor: ir.ExternalTensor, location: str, base_dir: str) -> ir.ExternalTensor:
    """``tensor`` (its offset, length, dtype, shape, name and metadata) at another location."""
    return ir.ExternalTensor(
        location,
        tensor.offset,
        tensor.length,
        tensor.dtype,
        shape=tensor.shape,
        name=tensor.name,
        doc_string=tensor.doc_string,
        metadata_props=dict(tensor.metadata_props) if tensor.metadata_props else None,
        base_dir=base_dir,
    )


def _loaded(tensor: ir.TensorProtocol) -> ir.TensorProtocol:
    if not isinstance(tensor, ir.ExternalTensor):
        return tensor
    return ir.Tensor(np.array(tensor.numpy(), copy=True), name=tensor.name, dtype=tensor.dtype)


@contextlib.contextmanager
def external_attributes_embedded(
    model: ir.Model,
) -> Iterator[list[tuple[ir.Node, str, ir.Attr, ir.Attr]]]:
    """Within the block, tensor attributes read from external files are in-memory copies.

    onnx-ir serialises such a tensor with its old relative location, which does not exist
    next to a model written elsewhere (a stage of a split, a session's temporary copy); in
    the proto it stays valid wherever the model goes. The attributes are put back when the
    block ends (not thread-safe: the model must not be used by another thread meanwhile).

    Yields:
        ``(node, attribute name, original attribute, in-memory attribute)`` for each swap.
    """
    swaps: list[tuple[ir.Node, str, ir.Attr, ir.Attr]] = []
    try:
        for node in _all_nodes(model):
            if not node.attributes:
                continue
            for name, attr in list(node.attributes.items()):
                if attr.is_ref() or attr.type not in (
                    ir.AttributeType.TENSOR,
                    ir.AttributeType.TENSORS,
                ):
                    continue
                single = attr.type == ir.AttributeType.TENSOR
                tensors = [attr.value] if single else list(attr.value)
                if not any(isinstance(t, ir.ExternalTensor) for t in tensors):
                    continue
                loaded = [_loaded(t) for t in tensors]
                new = ir.AttrTensor(name, loaded[0]) if single else ir.AttrTensors(name, loaded)
                node.attributes[name] = new
                swaps.append((node, name, attr, new))
        yield swaps
    finally:
        for node, name, attr, new in swaps:
            if node.attributes.get(name) is new:
                node.attributes[name] = attr


# ---------------------------------------------------------------------------------------------
# The data record


def crc32_of(path: str | os.PathLike) -> tuple[int, int]:
    """``(size in bytes, CRC-32)`` of a file, read through a memory map in 16 MiB pieces."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return 0, 0
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                crc = 0
                for start in range(0, size, _CRC_CHUNK):
                    crc = zlib.crc32(view[start : start + _CRC_CHUNK], crc)
            finally:
                view.release()
    return size, crc


def make_record(
    files: Mapping[str, tuple[int, int, os.stat_result]], *, shared: Collection[str] = ()
) -> str:
    """The record's JSON text for ``{location: (size, crc32, stat of the file)}``.

    Args:
        files: Each data file the model references.
        shared: Those the model references but does not own (another model's data file it
            reads in place): ``"owned": false``; a later save over the model never removes
            them.
    """
    entries: dict[str, dict[str, Any]] = {}
    for name, (size, crc, info) in files.items():
        entry: dict[str, Any] = {
            "bytes": size,
            "crc32": f"{crc:08x}",
            "mtime_ns": info.st_mtime_ns,
            "inode": info.st_ino,
        }
        if name in shared:
            entry["owned"] = False
        entries[name] = entry
    document = {"version": _RECORD_VERSION, "files": entries}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def owned_files(text: str) -> set[str]:
    """The normalised locations a record says its model owns (``set()`` if malformed).

    A file is owned when the save that wrote the model wrote it (no ``"owned": false``).
    """
    try:
        files = json.loads(text).get("files")
    except (ValueError, RecursionError, AttributeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {
        os.path.normpath(name)
        for name, entry in files.items()
        if isinstance(entry, dict) and entry.get("owned", True) is not False
    }


def record_stamps(text: str, folder: str) -> dict[str, tuple[int, int, int, int]]:
    """``{real path: (size, crc32, mtime_ns, inode)}`` of a record's version 2 entries.

    What :func:`pin_external` keeps with each data file, so that a save referencing the file
    in place reuses its CRC-32 while the file is unchanged instead of reading it again.
    """
    try:
        parsed = _parse_record(text)
    except OmnyFormatError:
        return {}
    stamps = {}
    for name, (size, crc, stamp) in parsed.items():
        if stamp is not None:
            real = os.path.realpath(os.path.join(folder, name))
            stamps[real] = (size, int(crc, 16), *stamp)
    return stamps


def _stamp(entry: dict[str, Any]) -> tuple[int, int] | None:
    """``(mtime_ns, inode)`` of a version 2 entry, or ``None``."""
    mtime, inode = entry.get("mtime_ns"), entry.get("inode")
    if all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (mtime, inode)):
        return mtime, inode  # type: ignore[return-value]  # both checked ints just above
    return None


def _parse_record(text: str) -> dict[str, tuple[int, str, tuple[int, int] | None]]:
    path = f"metadata_props[{DATA_RECORD_KEY}]"
    advice = (
        "it is written by onnx_ir_multidevice.save and describes the data file: remove the "
        "entry, or save the model again"
    )
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise OmnyFormatError(path, f"not JSON ({error}); {advice}") from error
    if not isinstance(document, dict) or document.get("version") not in _RECORD_VERSIONS:
        raise OmnyFormatError(
            path, f"expected an object with version 1 or {_RECORD_VERSION}; {advice}"
        )
    files = document.get("files")
    if not isinstance(files, dict):
        raise OmnyFormatError(f"{path}.files", f"expected an object; {advice}")
    parsed: dict[str, tuple[int, str, tuple[int, int] | None]] = {}
    for name, entry in files.items():
        size = entry.get("bytes") if isinstance(entry, dict) else None
        crc = entry.get("crc32") if isinstance(entry, dict) else None
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or not isinstance(crc, str)
            or len(crc) != 8
            or any(c not in "0123456789abcdef" for c in crc)
        ):
            raise OmnyFormatError(
                f"{path}.files.{name}",
                f"expected {{'bytes': <size>, 'crc32': '<8 hex digits>'}}; {advice}",
            )
        parsed[name] = (size, crc, _stamp(entry))
    return parsed


def record_problems(
    text: str, folder: str | os.PathLike, referenced: Mapping[str, str], *, full: bool = False
) -> list[ExternalDataProblem]:
    """Compare the data files that tensors reference with the record written with the model.

    Args:
        text: The record (the value of :data:`DATA_RECORD_KEY`).
        folder: The model's folder.
        referenced: ``{normalised location: name of the first tensor stored there}``;
            recorded files no tensor references, and files the reference rules refuse
            (outside the folder...), are not read.
        full: Read every data file and compare its CRC-32, even when its size, modification
            time and inode are those recorded (see the module docstring).

    Returns:
        One problem (code ``OMNY109``) per data file whose size or CRC-32 differs.

    Raises:
        OmnyFormatError: The record is malformed.
    """
    files = _Files(os.fspath(folder))
    problems = []
    for name, (size, crc, stamp) in _parse_record(text).items():
        tensor = referenced.get(os.path.normpath(name))
        if tensor is None:
            continue
        refused, path, _ = files.resolve(name)
        if refused is not None:  # outside the folder, missing...: OMNY108 says so; never read
            continue
        try:
            info = os.stat(path)
            if not full and info.st_size == size and (info.st_mtime_ns, info.st_ino) == stamp:
                continue  # the very file written: no need to read it
            actual_size, actual_crc = crc32_of(path) if info.st_size == size else (info.st_size, 0)
        except OSError as error:
            reason = f"cannot be read ({error.strerror})"
            problems.append(ExternalDataProblem(tensor, name, reason, _MISMATCH))
            continue
        if actual_size != size:
            reason = (
                f"is {actual_size} bytes, but the model was saved with a data file of {size} "
                "bytes: the data file was replaced or changed after the model was written"
            )
        elif f"{actual_crc:08x}" != crc:
            reason = (
                f"has CRC-32 {actual_crc:08x}, but the model was saved with a data file of "
                f"CRC-32 {crc}: the data file was replaced or changed after the model was "
                "written (its weights are not this model's)"
            )
        else:
            continue
        problems.append(ExternalDataProblem(tensor, name, reason, _MISMATCH))
    return problems
