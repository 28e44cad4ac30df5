"""Load and save ``.onnx`` / ``.omny`` models: lossless, atomic, external data kept reachable.

Loading parses the protobuf, converts it with
:func:`onnx_ir_multidevice.from_proto` (which keeps what onnx-ir alone would lose
on the way back) and points external tensors at the model's folder. Python's garbage
collector is paused while the IR is built and while it is serialised: on large graphs
onnx-ir otherwise spends a large share of its time in collections that find nothing to free.

Saving writes every file under a temporary name in the destination folder, flushes it to
disk, and only then renames it over the destination (``os.replace``), so a failure leaves
the destination as it was and no temporary file behind.

External data rules of :func:`save` (``external_data=None``, the default):

* if any initializer of the model lives in an external file (the model was loaded with
  external data), or the initializers total 2 GiB or more (the protobuf limit), all
  initializers of ``size_threshold_bytes`` or more are written to a new file
  ``<model file name>.data`` next to the saved model, and the model references it by that
  relative name. Data is never referenced from the folder the model came from, so the saved
  model stays valid when moved or when the source folder disappears (onnx-ir's ``ir.save``
  would keep the old relative path);
* otherwise everything is embedded in the model file.

Pass ``external_data="name.data"`` to always use an external file (relative to the model),
or ``external_data=False`` to always embed. Tensors held in node attributes (``Constant``
values) that live in external files are always embedded.
"""

from __future__ import annotations

__all__ = ["load", "save"]

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._proto.convert import from_proto, to_proto
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
_TENSOR_ATTRS = (ir.AttributeType.TENSOR, ir.AttributeType.TENSORS)


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


def load(path: str | os.PathLike) -> ir.Model:
    """Load an ``.onnx`` or ``.omny`` model.

    External data files are resolved relative to the model's folder and read lazily; a
    missing one is reported here rather than at first use.

    An ``.omny`` v2 container (``OMNY`` magic) is read too: its embedded model is loaded, and
    the container is kept in ``model.meta[CONTAINER_META_KEY]`` (see
    :mod:`~onnx_ir_multidevice.omny.container`) for
    :func:`~onnx_ir_multidevice.save_container`.

    Args:
        path: The model file.

    Returns:
        The model. Saving it with :func:`save` reproduces the file's proto field by field
        (multi-device annotations and ``.omny`` metadata byte for byte).

    Raises:
        OmnyIOError: The file is missing, a directory, unreadable, not an ONNX protobuf, or
            references an external data file that does not exist.
        OmnyContainerError: A v2 container's header, manifest or embedded model is malformed
            (the error names the field and the numbers).
        OmnyFormatError: The multi-device annotations cannot be represented (see
            :func:`onnx_ir_multidevice.from_proto`).
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
    """
    path = _as_path(path, "load")
    _check_readable_file(path)
    try:
        data = path.read_bytes()
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
    with gc_paused():
        model = from_proto(proto)
    del proto
    if container is not None:
        model.meta[CONTAINER_META_KEY] = container
    base_dir = str(path.parent)
    ir.external_data.set_base_dir(model.graph, base_dir)
    _check_external_files(model, path)
    return model


def _v2_container(path: Path, data: bytes) -> Container | None:
    """The ``.omny`` v2 container ``data`` is (told by its magic), or ``None`` for a v1 file."""
    if detect(data) != "v2":
        return None
    return parse_container(data, source=str(path))


def _external_tensors(graphs: Sequence[ir.Graph]) -> Iterator[tuple[ir.Value, ir.ExternalTensor]]:
    """Yield the initializers of the graphs that live in external files."""
    for graph in graphs:
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                yield value, value.const_value


def _check_external_files(model: ir.Model, path: Path) -> None:
    checked: set[str] = set()
    for value, tensor in _external_tensors(list(model.graphs())):
        if tensor.path in checked:
            continue
        if not os.path.isfile(tensor.path):
            raise OmnyIOError(
                f"{path}: initializer {value.name!r} is stored in {tensor.location!r}, but "
                f"{tensor.path} does not exist; put the data file next to the model"
            )
        checked.add(tensor.path)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not supported on every platform / filesystem
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _choose_data_name(
    graphs: Sequence[ir.Graph], path: Path, external_data: str | os.PathLike | bool | None
) -> str | None:
    if external_data is False:
        return None
    if external_data is True:
        return f"{path.name}.data"
    if external_data is not None:
        name = os.fspath(external_data)
        if os.path.isabs(name):
            raise OmnyIOError(f"external_data={name!r} must be relative to the model file's folder")
        return name
    if next(_external_tensors(graphs), None) is not None:
        return f"{path.name}.data"
    total = 0
    for graph in graphs:
        for value in graph.initializers.values():
            if value.const_value is not None:
                total += value.const_value.nbytes
    return f"{path.name}.data" if total >= EXTERNAL_DATA_TOTAL_BYTES else None


def _detach_external(
    graphs: Sequence[ir.Graph], keep: str | None
) -> list[tuple[ir.Value, ir.TensorProtocol]]:
    """Load into memory the external initializers that must not be referenced as they are.

    Those are all of them when embedding (``keep`` is None), and, when writing to the data
    file ``keep``, the ones read lazily from that very file (it is about to be replaced).

    Returns:
        ``(value, original tensor)`` pairs to restore after saving.
    """
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    for value, tensor in list(_external_tensors(graphs)):
        if keep is not None and not _same_file(tensor.path, keep):
            continue
        swapped.append((value, tensor))
        value.const_value = ir.Tensor(tensor.numpy().copy(), name=tensor.name, dtype=tensor.dtype)
    return swapped


def _embed_external_attributes(
    graphs: Sequence[ir.Graph | ir.Function], keep: str | None
) -> list[tuple[ir.Node, str, ir.Attr]]:
    """Replace tensor attributes read from external files by in-memory copies.

    onnx-ir writes such a tensor with its old relative location, which does not exist next to
    the new file; embedded in the proto it stays valid wherever the model goes.

    Returns:
        ``(node, name, original attribute)`` to restore after saving, except those read from
        ``keep`` (the data file being replaced), whose in-memory copies stay.
    """
    restore: list[tuple[ir.Node, str, ir.Attr]] = []
    for graph in graphs:
        for node in graph:
            if not node.attributes:
                continue
            for name, attr in list(node.attributes.items()):
                if attr.is_ref() or attr.type not in _TENSOR_ATTRS:
                    continue
                tensors = [attr.value] if attr.type == ir.AttributeType.TENSOR else attr.value
                if not any(isinstance(t, ir.ExternalTensor) for t in tensors):
                    continue
                loaded = [
                    ir.Tensor(t.numpy().copy(), name=t.name, dtype=t.dtype)
                    if isinstance(t, ir.ExternalTensor)
                    else t
                    for t in tensors
                ]
                node.attributes[name] = (
                    ir.AttrTensor(name, loaded[0])
                    if attr.type == ir.AttributeType.TENSOR
                    else ir.AttrTensors(name, loaded)
                )
                if keep is None or not any(
                    isinstance(t, ir.ExternalTensor) and _same_file(t.path, keep) for t in tensors
                ):
                    restore.append((node, name, attr))
    return restore


def save(
    model: ir.Model,
    path: str | os.PathLike,
    *,
    overwrite: bool = True,
    external_data: str | os.PathLike | bool | None = None,
    size_threshold_bytes: int = _DEFAULT_SIZE_THRESHOLD,
) -> None:
    """Save a model to an ``.onnx`` or ``.omny`` file, atomically.

    The model is written to temporary files in the destination folder, flushed to disk and
    renamed over the destination. On failure nothing is left behind and an existing
    destination is untouched. The in-memory model is unchanged, except that initializers
    read lazily from the data file that this call replaces are loaded into memory first, so
    they stay valid (saving a model onto the files it was loaded from is safe).

    Args:
        model: The model to save.
        path: The destination file. Its folder must exist.
        overwrite: When ``False``, refuse if the model file or its data file exists.
        external_data: ``None`` (default): automatic, see the module docstring. A relative
            file name: write initializers of ``size_threshold_bytes`` or more to that file,
            next to the model. ``True``: the same with the name ``<model file name>.data``.
            ``False``: embed every initializer.
        size_threshold_bytes: Smallest initializer written to external data.

    Raises:
        OmnyIOError: The destination folder does not exist or is not writable, the
            destination exists and ``overwrite`` is ``False``, or writing failed.
        OmnyFormatError: The model cannot be serialised without losing its multi-device
            annotations (see :func:`onnx_ir_multidevice.to_proto`).
        TypeError: ``model`` is not an :class:`onnx_ir.Model`, or ``path`` is not a
            ``str`` or ``os.PathLike``.
    """
    if not isinstance(model, ir.Model):
        raise TypeError(
            f"save() takes an onnx_ir.Model, not {type(model).__name__}; to copy a file, "
            "load it first with load(path)"
        )
    path = _as_path(path, "save")
    folder = path.parent
    if path.is_dir():
        raise OmnyIOError(f"{path}: is a directory; pass a file path such as {path / 'model.onnx'}")
    if not folder.is_dir():
        raise OmnyIOError(f"{path}: the folder {folder} does not exist; create it first")
    graphs = list(model.graphs())
    data_name = _choose_data_name(graphs, path, external_data)
    data_path = folder / data_name if data_name is not None else None
    if not overwrite:
        for target in (path, data_path):
            if target is not None and target.exists():
                raise OmnyIOError(
                    f"{target}: exists and overwrite=False; choose another path or pass "
                    "overwrite=True"
                )
    try:
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp"))
    except OSError as error:
        raise OmnyIOError(
            f"{path}: cannot write into {folder} ({error.strerror}); check its permissions"
        ) from error
    try:
        with gc_paused():
            wrote_data = _write_staged(
                model, graphs, staging, path.name, data_name, data_path, size_threshold_bytes
            )
        if wrote_data:
            assert data_name is not None and data_path is not None
            data_path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / data_name, data_path)
        os.replace(staging / path.name, path)
        _fsync_dir(folder)
    except OSError as error:
        raise OmnyIOError(
            f"{path}: writing failed ({error}); no temporary file was left behind"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_staged(
    model: ir.Model,
    graphs: Sequence[ir.Graph],
    staging: Path,
    model_name: str,
    data_name: str | None,
    data_path: Path | None,
    size_threshold_bytes: int,
) -> bool:
    """Write the model (and its data file) into the staging folder, flushed to disk.

    Returns:
        Whether a data file was written (no initializer may reach the size threshold).
    """
    keep = None if data_path is None else str(data_path)
    swapped = _detach_external(graphs, keep)
    attributes = _embed_external_attributes([*graphs, *model.functions.values()], keep)
    initialized = [
        (value, value.const_value) for graph in graphs for value in graph.initializers.values()
    ]
    staged_data = staging / data_name if data_name is not None else None
    try:
        if staged_data is not None:
            staged_data.parent.mkdir(parents=True, exist_ok=True)
            ir.external_data.unload_from_model(
                model, staging, data_name, size_threshold_bytes=size_threshold_bytes
            )
        proto = to_proto(model)
    finally:
        for value, tensor in initialized:
            value.const_value = tensor
        if data_path is None:
            # Embedded: the external files stay valid, so keep reading lazily from them.
            for value, tensor in swapped:
                value.const_value = tensor
        for node, name, attr in attributes:
            node.attributes[name] = attr
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
    if staged_data is not None and staged_data.exists():
        _fsync_file(staged_data)
        return True
    return False
