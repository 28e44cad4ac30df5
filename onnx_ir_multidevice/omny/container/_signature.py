"""Upstream ``<file>.sig`` companions: where one is, and when it no longer matches."""

from __future__ import annotations

import os
from pathlib import Path

# --------------------------------------------------------------------------- signatures


def signature_path(path: str | os.PathLike) -> Path | None:
    """The upstream signature companion of a file, if there is one.

    Upstream signs a file with ``<file>.sig`` (74 bytes: ``OSIG``, u16 version 1, u32 flags
    0, an Ed25519 signature over the SHA-256 of the whole file). Any rewrite of the file
    invalidates it; the caller should warn (:func:`stale_signature_message`).

    Args:
        path: The ``.omny`` file.

    Returns:
        ``Path("<file>.sig")`` when that file exists, else ``None``.
    """
    candidate = Path(f"{os.fspath(path)}.sig")
    return candidate if candidate.is_file() else None


def stale_signature_message(path: str | os.PathLike, signature: str | os.PathLike) -> str:
    """The warning to show after rewriting a signed file.

    Args:
        path: The rewritten file.
        signature: Its companion (from :func:`signature_path`).

    Returns:
        A one-line message for stderr.
    """
    return (
        f"{path}: rewritten, so its signature {signature} no longer verifies; sign the new "
        "file again with the upstream tool, or delete the stale signature"
    )
