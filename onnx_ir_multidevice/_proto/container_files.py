"""``.omny`` v2 containers as files: convert between v1 and v2, save a model as v2.

Reading is transparent: :func:`~onnx_ir_multidevice.load` detects a v2 container by its magic,
loads the embedded model and keeps the :class:`~onnx_ir_multidevice.omny.container.Container`
in ``model.meta[CONTAINER_META_KEY]``. Writing v2 is explicit:

* :func:`convert_container` converts a file, at the byte level: v1 → v2 gives exactly what
  the upstream writer's ``upgrade`` gives; v2 → v2 writes an unchanged container back byte for
  byte; v2 → v1 writes the embedded model verbatim and warns which manifest keys the v1 file
  cannot hold; v1 → v1 copies the file.
* :func:`save_container` saves an in-memory model as v2: the container it was loaded from,
  unchanged when the model is (byte-identical), else rebuilt around the new model
  (:func:`~onnx_ir_multidevice.omny.container.replace_model`); a model read from a v1 file
  gets upstream's ``upgrade`` manifest.

Both refuse a model that cannot fit one container (2 GiB or more, or tensors in external
data files) before the destination is touched, write atomically (a temporary file in the
destination folder, flushed, then renamed over it), and warn with a :class:`ContainerWarning`
when the destination has an upstream signature companion (``<file>.sig``), which no longer
verifies once the file is rewritten.

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["ContainerConversion", "ContainerWarning", "convert_container", "save_container"]

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir

from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._proto.atomic import write_bytes_atomic
from onnx_ir_multidevice._proto.convert import to_proto
from onnx_ir_multidevice._proto.files import load, save
from onnx_ir_multidevice._regular_files import read_regular
from onnx_ir_multidevice._util import require_model
from onnx_ir_multidevice.omny.container import (
    CONTAINER_META_KEY,
    Container,
    OmnyContainerError,
    detect,
    downgrade,
    parse_container,
    read_container,
    replace_model,
    serialize_container,
    signature_path,
    stale_signature_message,
    unfit_model_reason,
    upgrade,
    uses_external_data,
)

ContainerKind = Literal["v1", "v2"]


class ContainerWarning(UserWarning):
    """A container was written with a caveat: manifest keys dropped, or a signature made stale.

    .. versionadded:: 0.1
    """


@dataclasses.dataclass(frozen=True)
class ContainerConversion:
    """What :func:`convert_container` did.

    .. versionadded:: 0.1
    """

    source: Path
    """The file read."""

    destination: Path
    """The file written."""

    source_container: ContainerKind
    """What the source was: ``"v1"`` (an ONNX protobuf) or ``"v2"`` (an ``OMNY`` container)."""

    container: ContainerKind
    """What was written."""

    dropped: tuple[str, ...] = ()
    """Manifest keys the written v1 file cannot hold (``processor.processor_id``,
    ``preprocess``...), in manifest order; empty for any other conversion."""

    warnings: tuple[str, ...] = ()
    """The messages also issued as :class:`ContainerWarning` (dropped keys, stale signature)."""


def _check_destination(destination: Path, overwrite: bool) -> None:
    if destination.is_dir():
        raise OmnyIOError(f"{destination}: is a directory; pass a file path such as model.omny")
    if not destination.parent.is_dir():
        raise OmnyIOError(
            f"{destination}: the folder {destination.parent} does not exist; create it first"
        )
    if not overwrite and destination.exists():
        raise OmnyIOError(
            f"{destination}: exists and overwrite=False; choose another path or overwrite"
        )


def _signature_warning(destination: Path) -> str | None:
    signature = signature_path(destination)
    return None if signature is None else stale_signature_message(destination, signature)


def _read_source(source: Path) -> bytes:
    if source.is_dir():
        raise OmnyIOError(f"{source}: is a directory, not a model file")
    try:
        return read_regular(source)
    except FileNotFoundError as error:
        raise OmnyIOError(f"{source}: no such file; check the path") from error
    except OSError as error:
        raise OmnyIOError(f"{source}: cannot be read ({error.strerror})") from error


def _v1_to_v2(source: Path) -> bytes:
    try:
        size = source.stat().st_size
    except OSError as error:
        raise OmnyIOError(f"{source}: cannot be read ({error.strerror})") from error
    reason = unfit_model_reason(n_bytes=size)
    if reason is not None:  # refused from the file's size, before reading it
        raise OmnyContainerError("model", reason, source=str(source))
    return upgrade(_read_source(source), source=str(source))


def _v1_copy(source: Path, destination: Path, overwrite: bool) -> bytes | None:
    """The v1 file's bytes to write verbatim, or ``None`` once saved with its external data."""
    model = load(source)  # parses it: a file that is not ONNX is refused here
    if not uses_external_data(model):
        return _read_source(source)
    save(model, destination, overwrite=overwrite)
    return None


def convert_container(
    source: str | os.PathLike,
    destination: str | os.PathLike,
    *,
    container: ContainerKind = "v2",
    overwrite: bool = True,
) -> ContainerConversion:
    """Convert an ``.omny`` file to the v1 or v2 container, losslessly where the format can.

    Args:
        source: A v1 ``.omny`` / ``.onnx`` file, or a v2 container (told apart by magic).
        destination: The file to write (may be ``source`` itself).
        container: ``"v2"``: v1 → v2 is upstream's ``upgrade`` byte for byte (the v1 file
            must hold a plan), v2 → v2 writes the container back byte for byte. ``"v1"``: v2 →
            v1 writes the embedded model verbatim (its ``metadata_props`` hold the plan) and
            warns which manifest keys are dropped; v1 → v1 copies the file (re-saved with
            :func:`~onnx_ir_multidevice.save` when it has external data).
        overwrite: When ``False``, refuse an existing destination.

    Returns:
        What was done (:class:`ContainerConversion`).

    Raises:
        OmnyContainerError: The source's v2 header, manifest or embedded model is malformed
            (the error names the field and the numbers), or the model cannot go into a
            container (no plan to upgrade, 2 GiB or more, external data); nothing is written.
        OmnyIOError: The source cannot be read, or the destination cannot be written.
        ValueError: ``container`` is neither ``"v1"`` nor ``"v2"``.

    Warns:
        ContainerWarning: Manifest keys dropped (v2 → v1); the destination's ``.sig``
            signature no longer verifies.

    .. versionadded:: 0.1
    """
    if container not in ("v1", "v2"):
        raise ValueError(f"container must be 'v1' or 'v2', not {container!r}")
    source, destination = Path(source), Path(destination)
    _check_destination(destination, overwrite)
    kind = detect(source)
    dropped: list[str] = []
    data: bytes | None
    if container == "v2":
        data = _v1_to_v2(source) if kind == "v1" else serialize_container(read_container(source))
    elif kind == "v2":
        data, dropped = downgrade(read_container(source))
    else:
        data = _v1_copy(source, destination, overwrite)
    messages = []
    if dropped:
        messages.append(
            f"{destination}: the v1 file cannot hold these manifest keys of {source}, dropped: "
            f"{', '.join(dropped)}"
        )
    stale = _signature_warning(destination)
    if stale is not None:
        messages.append(stale)
    if data is not None:
        write_bytes_atomic(destination, data)
    for message in messages:
        warnings.warn(message, ContainerWarning, stacklevel=2)
    return ContainerConversion(
        source, destination, kind, container, tuple(dropped), tuple(messages)
    )


def save_container(
    model: ir.Model, path: str | os.PathLike, *, overwrite: bool = True
) -> Container:
    """Save a model as an ``.omny`` v2 container, atomically.

    * A model loaded from a v2 container (``model.meta[CONTAINER_META_KEY]``) and not changed
      is written back byte for byte; a changed one gets the same container around the new
      model (:func:`~onnx_ir_multidevice.omny.container.replace_model`: the manifest follows
      the new plan, what only the manifest holds is kept).
    * Any other model gets the manifest upstream's ``upgrade`` writes: it must hold a plan
      (``.omny`` metadata; plan it first).

    Args:
        model: The model.
        path: The destination file; its folder must exist.
        overwrite: When ``False``, refuse an existing destination.

    Returns:
        The container written.

    Raises:
        OmnyContainerError: The model cannot go into one container (tensors in external
            data files, 2 GiB or more, no plan); nothing is written.
        OmnyIOError: The destination cannot be written.
        OmnyFormatError: The model's multi-device annotations cannot be serialised.
        TypeError: ``model`` is not an :class:`onnx_ir.Model`.

    Warns:
        ContainerWarning: The destination's ``.sig`` signature no longer verifies.

    .. versionadded:: 0.1
    """
    require_model(model, "save_container")
    destination = Path(path)
    _check_destination(destination, overwrite)
    proto: onnx.ModelProto = to_proto(model)
    reason = unfit_model_reason(n_bytes=proto.ByteSize(), external_data=uses_external_data(proto))
    if reason is not None:
        raise OmnyContainerError("model", reason, source=str(destination))
    data = proto.SerializeToString()
    del proto
    old = model.meta.get(CONTAINER_META_KEY)
    if isinstance(old, Container):
        container = old if old.model_bytes == data else replace_model(old, data)
        out = serialize_container(container)
    else:
        out = upgrade(data, source=str(destination))
        container = parse_container(out, source=str(destination), check_model=False)
    stale = _signature_warning(destination)
    write_bytes_atomic(destination, out)
    if stale is not None:
        warnings.warn(stale, ContainerWarning, stacklevel=2)
    return container
