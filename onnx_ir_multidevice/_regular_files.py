"""Reading input files: only regular files, refused before anything is read.

Every file the package reads on a caller's behalf (a model, an ``.omny`` container, a split
folder's manifest and stage models, an OAAX toolchain input) goes through :func:`open_regular`
or :func:`require_regular`. A path that names something other than a regular file -- a FIFO
(whose ``open`` blocks until a writer comes, and whose reads block after), a character device
such as ``/dev/zero`` (endless) or ``/dev/tty``, a socket, a directory -- is refused with an
:class:`~onnx_ir_multidevice.OmnyIOError` naming the path and what it is, before any byte is
read. :func:`open_regular` opens without blocking and checks the opened descriptor, so a path
swapped for a FIFO between a check and the open is refused too. Symbolic links are followed
(their target must be a regular file).
"""

from __future__ import annotations

__all__ = [
    "describe_kind",
    "open_regular",
    "read_regular",
    "require_regular",
    "require_replaceable",
]

import errno
import os
import stat
from typing import BinaryIO

from onnx_ir_multidevice._errors import OmnyIOError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def describe_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``"a FIFO (named pipe)"``...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def _refusal(path: str | os.PathLike, mode: int, what: str) -> OmnyIOError:
    kind = describe_kind(mode)
    hint = (
        f"pass the path of the {what} inside it"
        if stat.S_ISDIR(mode)
        else f"copy the {what} into a regular file and pass that file"
    )
    return OmnyIOError(
        f"{os.fspath(path)}: is {kind}, not a regular file; nothing was read; {hint}"
    )


def _missing(path: str | os.PathLike, error: OSError, what: str) -> OmnyIOError:
    where = os.fspath(path)
    if error.errno == errno.ENOENT:
        return OmnyIOError(f"{where}: no such file; check the path of the {what}")
    reason = error.strerror or type(error).__name__
    return OmnyIOError(f"{where}: cannot be read ({reason}); check the path and permissions")


def require_regular(path: str | os.PathLike, what: str = "model file") -> os.stat_result:
    """Refuse ``path`` unless it is (a link to) an existing regular file.

    For paths handed to another reader (onnx, onnxruntime); read with :func:`open_regular`
    where the package reads the bytes itself.

    Args:
        path: The file.
        what: What the file should be, for the message (``"model file"``, ``"manifest"``).

    Returns:
        The file's ``stat``.

    Raises:
        OmnyIOError: ``path`` is missing, unreadable, or not a regular file (the message
            names the path and what it is).
    """
    try:
        info = os.stat(path)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        if isinstance(error, ValueError):
            raise OmnyIOError(f"{os.fspath(path)!r}: is not a valid path ({error})") from None
        raise _missing(path, error, what) from None
    if not stat.S_ISREG(info.st_mode):
        raise _refusal(path, info.st_mode, what)
    return info


def open_regular(path: str | os.PathLike, what: str = "model file") -> BinaryIO:
    """Open ``path`` for reading in binary mode, if it is a regular file.

    The open does not block (a FIFO without a writer would); the opened descriptor is checked,
    then switched back to blocking reads.

    Args:
        path: The file.
        what: What the file should be, for the message.

    Returns:
        The open file (close it; it is a context manager).

    Raises:
        OmnyIOError: ``path`` is missing, unreadable, or not a regular file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise _refusal(path, stat.S_IFDIR, what) from None
    except ValueError as error:  # a NUL byte in the path
        raise OmnyIOError(f"{os.fspath(path)!r}: is not a valid path ({error})") from None
    except OSError as error:
        raise _missing(path, error, what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(path, mode, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, what: str = "model file") -> bytes:
    """The bytes of ``path``, if it is a regular file (see :func:`open_regular`).

    Raises:
        OmnyIOError: ``path`` is missing, unreadable, or not a regular file.
    """
    with open_regular(path, what) as file:
        try:
            return file.read()
        except OSError as error:
            raise OmnyIOError(
                f"{os.fspath(path)}: cannot be read ({error.strerror}); check the file"
            ) from error


def require_replaceable(path: str | os.PathLike, what: str = "output") -> None:
    """Refuse an output path that exists and is not a regular file (nor a directory).

    Writers put a new file next to the target and rename it over the target: over a device
    such as ``/dev/null``, a FIFO or a socket, that rename would replace the special file with
    a regular one (as root, even ``/dev/null``). Directories are left to the caller, which says
    what to pass instead. A missing path, or a link to a regular file, is fine.

    Args:
        path: The output path (symbolic links are followed).
        what: What the output is, for the message.

    Raises:
        OmnyIOError: ``path`` names a device, FIFO or socket.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise OmnyIOError(
            f"{os.fspath(path)}: is {describe_kind(mode)}, not a regular file; the {what} is "
            "written to a new file renamed over its target, which would replace it: pass the "
            "path of a regular file (or of one that does not exist yet)"
        )
