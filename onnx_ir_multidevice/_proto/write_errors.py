"""Write failures (a full disk, a file-size limit, a quota) as typed errors naming the output.

The writers stage their output (:mod:`~onnx_ir_multidevice._proto.atomic`) and remove what
they staged when a write fails; what reaches the caller is the ``OSError`` of the write that
failed, deep inside onnx-ir, numpy or tarfile. :func:`typed_write_errors` turns it into an
:class:`~onnx_ir_multidevice.OmnyIOError` that names the output the caller asked for, says
what happened in words (``ENOSPC``, ``EFBIG``, ``EDQUOT``, ``EROFS``...) and what to do, and
keeps the original error as its ``__cause__`` (with its ``errno``).
"""

from __future__ import annotations

__all__ = ["typed_write_errors", "writes_to"]

import contextlib
import errno
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from onnx_ir_multidevice._errors import OmnyError, OmnyIOError

_ADVICE = {
    errno.ENOSPC: "the disk is full: free space on that file system, or write elsewhere",
    errno.EFBIG: (
        "a file reached the file-size limit (ulimit -f) or the file system's largest file: "
        "raise the limit, or write to a file system that takes larger files"
    ),
    errno.EDQUOT: "the disk quota is exhausted: free space, or ask for a larger quota",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EIO: "the device reported an I/O error: check the disk",
}

F = TypeVar("F", bound=Callable[..., Any])


def _message(target: str | os.PathLike, error: OSError) -> str:
    advice = _ADVICE.get(error.errno or 0)
    reason = error.strerror or str(error)
    text = f"{os.fspath(target)}: writing failed ({reason}"
    if error.filename and os.fspath(error.filename) != os.fspath(target):
        text += f" at {error.filename}"
    text += "); the output was not written (nothing partial is left in its place)"
    return f"{text}; {advice}" if advice else text


@contextlib.contextmanager
def typed_write_errors(target: str | os.PathLike) -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``target`` into an :class:`OmnyIOError`.

    Errors of the package (already typed) pass unchanged.

    Args:
        target: The output the caller asked for (a file or a folder).

    Raises:
        OmnyIOError: Writing failed; the message names ``target`` and the cause.
    """
    try:
        yield
    except OmnyError:
        raise
    except OSError as error:
        raise OmnyIOError(_message(target, error)) from error


def writes_to(argument: str) -> Callable[[F], F]:
    """Decorate a writer so that its ``OSError`` names the output given as ``argument``.

    Args:
        argument: The name of the writer's parameter that holds the output path.
    """

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            target = bound.arguments.get(argument, "<output>")
            with typed_write_errors(target):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # functools.wraps keeps F's signature

    return decorate
