"""Write one file atomically: a temporary file in the same folder, flushed, renamed over it.

:func:`write_bytes_atomic` is the home for small whole-file writes (an ``.omny`` v2
container, a conversion log); :func:`~onnx_ir_multidevice.save` stages a model and its data
file the same way. A failure leaves the destination as it was and no temporary file behind;
the new file gets the usual permissions (``0o666`` less the umask), not ``mkstemp``'s
``0o600``.
"""

from __future__ import annotations

__all__ = ["write_bytes_atomic"]

import contextlib
import os
import secrets
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
