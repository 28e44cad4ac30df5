"""Atomic output: a file or directory written under a temporary sibling name, then renamed.

The one home of the "stage, then rename" rule, so that a destination never holds a
half-written result:

* :func:`write_bytes_atomic` -- small whole-file writes (an ``.omny`` v2 container, a
  conversion log); :func:`~onnx_ir_multidevice.save` stages a model and its data file the
  same way;
* :func:`staged_file` -- a context manager for a file written as a stream (an exporter's
  archive): the block writes the yielded temporary path, which is flushed and renamed over the
  destination (:func:`check_output_file` refuses a destination first);
* :func:`staged_directory` -- the same for a directory (``omny split``, the exporters): the
  block fills the yielded temporary directory, which is renamed over the destination
  (:func:`check_output_directory`, :func:`replace_directory`).

A failure leaves the destination as it was and nothing temporary behind. New files and
directories get the usual permissions (``0o666`` / ``0o777`` less the umask), not
``mkstemp``'s ``0o600`` or ``mkdtemp``'s ``0o700``.
"""

from __future__ import annotations

__all__ = [
    "check_output_directory",
    "check_output_file",
    "replace_directory",
    "staged_directory",
    "staged_file",
    "write_bytes_atomic",
]

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from onnx_ir_multidevice._errors import OmnyIOError


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not supported on every platform / filesystem
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(destination: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``destination`` atomically.

    Args:
        destination: The file; its folder must exist.
        data: The whole content.

    Raises:
        OmnyIOError: The folder cannot be written, or writing failed (the destination is
            unchanged and no temporary file is left).
    """
    destination = Path(destination)
    temporary = destination.parent / f".{destination.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        raise OmnyIOError(
            f"{destination}: cannot write into {destination.parent} ({error.strerror}); check "
            "its permissions"
        ) from error
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, destination)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise OmnyIOError(
                f"{destination}: writing failed ({error}); no temporary file was left behind"
            ) from error
        raise
    _fsync_dir(destination.parent)


def _temporary_name(target: Path, tag: str = "") -> Path:
    """A fresh hidden sibling name of ``target`` (``.<name>.<tag><random>.tmp``)."""
    return target.parent / f".{target.name}.{tag}{secrets.token_hex(6)}.tmp"


def _check_parent(target: Path) -> None:
    parent = target.parent
    if not parent.is_dir():
        raise OmnyIOError(
            f"{target}: the folder {parent} "
            f"{'is not a directory' if parent.exists() else 'does not exist'}; create it "
            "first (only the output itself is created)"
        )


def check_output_directory(
    target: Path, force: bool, *, holds: str = "the split is a directory of stage files"
) -> None:
    """Refuse a ``target`` directory that cannot take the output, saying what to pass instead.

    Args:
        target: The directory to create (or replace).
        force: Whether a non-empty ``target`` may be replaced.
        holds: What the output is, for the message about a ``target`` that is a file.

    Raises:
        OmnyIOError: ``target`` is a file, is a non-empty directory (without ``force``), or its
            parent folder does not exist.
    """
    if target.exists():
        if not target.is_dir():
            raise OmnyIOError(
                f"{target}: exists and is not a directory; {holds}: pass a directory that "
                "does not exist yet or is empty, e.g. "
                f"{target.with_name(target.stem + '_split')}"
            )
        if not force and any(target.iterdir()):
            raise OmnyIOError(
                f"{target}: directory is not empty; choose another one or pass --force "
                "(force=True) to replace it."
            )
    else:
        _check_parent(target)


def check_output_file(target: Path, force: bool) -> None:
    """Refuse a ``target`` file that exists (without ``force``) or is a directory.

    Raises:
        OmnyIOError: ``target`` is a directory, exists (without ``force``), or its parent
            folder does not exist.
    """
    if target.is_dir():
        raise OmnyIOError(f"{target}: is a directory; pass a file path such as {target / 'out'}")
    if target.exists() and not force:
        raise OmnyIOError(
            f"{target}: exists; choose another path or pass --force (force=True) to replace it"
        )
    _check_parent(target)


def replace_directory(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, replacing ``target`` (a directory) if it exists.

    A non-empty ``target`` is first renamed aside, so that a failure puts it back.

    Raises:
        OmnyIOError: A rename failed.
    """
    try:
        if not target.exists():
            os.rename(source, target)
            return
        if not any(target.iterdir()):
            target.rmdir()
            os.rename(source, target)
            return
        old = _temporary_name(target, "old.")
        os.rename(target, old)
        try:
            os.rename(source, target)
        except OSError:
            os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot move the output into place: {error}") from error


@contextlib.contextmanager
def staged_directory(
    target: Path, force: bool, *, holds: str = "the output is a directory"
) -> Iterator[Path]:
    """Yield a new temporary directory next to ``target``; rename it to ``target`` on success.

    Args:
        target: The directory to write.
        force: Replace a non-empty ``target``.
        holds: What the output is (for :func:`check_output_directory`'s message).

    Raises:
        OmnyIOError: See :func:`check_output_directory`; or the temporary directory cannot be
            created, or the rename failed.
    """
    check_output_directory(target, force, holds=holds)
    temporary = _temporary_name(target)
    try:
        os.mkdir(temporary, 0o777)
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot create the output directory: {error}") from error
    try:
        yield temporary
        replace_directory(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    _fsync_dir(target.parent)


@contextlib.contextmanager
def staged_file(target: Path, force: bool) -> Iterator[Path]:
    """Yield a new, empty temporary file next to ``target``; flush it and rename it over ``target``.

    Raises:
        OmnyIOError: See :func:`check_output_file`; or writing or renaming failed (``target``
            is unchanged and nothing temporary is left).
    """
    check_output_file(target, force)
    temporary = _temporary_name(target)
    try:
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot write into {target.parent}: {error}") from error
    try:
        yield temporary
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and not isinstance(error, OmnyIOError):
            raise OmnyIOError(
                f"{target}: writing failed ({error}); no temporary file was left behind"
            ) from error
        raise
    _fsync_dir(target.parent)
