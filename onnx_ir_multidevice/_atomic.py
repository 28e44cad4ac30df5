"""Atomic output: a directory or file is written under a temporary sibling name, then renamed.

The one home of the "stage, then rename" rule that ``omny split`` and the exporters follow, so
that a destination never holds a half-written result:

* :func:`staged_directory` -- a context manager that checks the destination directory
  (:func:`check_output_directory`), yields a fresh temporary directory next to it and, when the
  block succeeds, renames it over the destination (:func:`replace_directory`); on failure the
  temporary directory is removed and the destination is untouched;
* :func:`staged_file` -- the same for one file (:func:`check_output_file`): the block writes the
  yielded temporary path, which is flushed to disk and renamed over the destination.

Errors are :class:`~onnx_ir_multidevice.OmnyIOError` whose message names the path and says
what to pass instead.
"""

from __future__ import annotations

__all__ = [
    "check_output_directory",
    "check_output_file",
    "replace_directory",
    "staged_directory",
    "staged_file",
]

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from onnx_ir_multidevice._errors import OmnyIOError


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
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        old.rmdir()
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
    """Yield a temporary directory next to ``target``; rename it to ``target`` on success.

    Args:
        target: The directory to write (an absolute path is best).
        force: Replace a non-empty ``target``.
        holds: What the output is (for :func:`check_output_directory`'s message).

    Raises:
        OmnyIOError: See :func:`check_output_directory`; or the temporary directory cannot be
            created, or the rename failed.
    """
    check_output_directory(target, force, holds=holds)
    try:
        temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot create the output directory: {error}") from error
    try:
        yield temporary
        replace_directory(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_file(target: Path, force: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; flush it and rename it over ``target``.

    The block writes the yielded path (it exists, empty). On success the file is flushed to
    disk and renamed over ``target``; on failure it is removed and ``target`` is untouched.

    Raises:
        OmnyIOError: See :func:`check_output_file`; or writing or renaming failed.
    """
    check_output_file(target, force)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot write into {target.parent}: {error}") from error
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OmnyIOError):
            raise
        raise OmnyIOError(f"{target}: writing failed ({error}); nothing was left behind") from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
