"""Atomic writes: staging folders named after their writer, modes kept, stale ones removed.

Every writer of the package (:func:`~onnx_ir_multidevice.save`,
:func:`~onnx_ir_multidevice.save_split`) writes into a hidden *staging* folder next to its
destination and renames the result into place. This module is the one home of that concept:

* **Names.** A staging folder is ``.<destination name>.omny-<pid>-<8 hex>.<kind>`` (kinds:
  ``tmp`` for a model, ``stages`` for a split, ``old`` for the split directory it replaces),
  so a leftover says which process made it. :data:`STAGING_PATTERN` matches exactly these.
* **Stale leftovers.** A writer killed with SIGKILL cannot remove its staging folder.
  :func:`remove_stale` (called by every writer on the folder it writes to) removes those of
  the folder that belong to this user and whose writer is gone: no process has that pid, or
  the process that has it started after the folder was last modified (the pid was reused).
  Folders of live writers, of other users, and every other name are left alone.
* **Modes.** :func:`make_staging` creates the folder with :func:`os.mkdir`, so it gets the
  mode the umask gives (``tempfile.mkdtemp`` would give 0700, which a split directory kept
  after its rename). :func:`existing_mode` reads the mode of a file about to be replaced, so
  that the writer can give it to the new file.
* **Durability.** :func:`fsync_file` and :func:`fsync_dir` flush data and renames.
"""

from __future__ import annotations

__all__ = [
    "STAGING_PATTERN",
    "existing_mode",
    "fsync_dir",
    "fsync_file",
    "make_staging",
    "process_started_after",
    "remove_stale",
    "staging_name",
]

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from pathlib import Path

STAGING_PATTERN = re.compile(r"^\.(?P<name>.+)\.omny-(?P<pid>\d+)-[0-9a-f]{8}\.(?:tmp|stages|old)$")
"""Names of staging folders: ``.<name>.omny-<pid>-<8 hex digits>.<tmp|stages|old>``."""

_CLOCK_SLACK_SECONDS = 2.0
"""A leftover modified less than this before its pid's process started is not called stale
(the boot time in ``/proc/stat`` has a resolution of one second)."""


def make_staging(folder: Path, name: str, kind: str) -> Path:
    """Create the staging folder ``folder/.<name>.omny-<pid>-<hex>.<kind>`` (umask's mode).

    Raises:
        OSError: The folder cannot be created.
    """
    while True:
        path = folder / staging_name(name, kind)
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        return path


def staging_name(name: str, kind: str) -> str:
    """A fresh staging name for ``name`` (not created): for a rename target."""
    return f".{name}.omny-{os.getpid()}-{secrets.token_hex(4)}.{kind}"


def existing_mode(path: Path) -> int | None:
    """The permission bits of ``path`` (followed through links), or ``None`` if absent."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def fsync_file(path: Path) -> None:
    """Flush a file's content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Flush a folder's entries (renames into it) to disk, where the platform supports it."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as file:
            for line in file:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def process_started_after(pid: int, moment: float) -> bool:
    """Whether the process ``pid`` started after ``moment`` (a Unix time), as far as known.

    Read from ``/proc/<pid>/stat``; ``False`` where that is not available.
    """
    boot = _boot_time()
    if boot is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            text = file.read()
    except OSError:
        return False
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text.rpartition(")")[2].split()
    try:
        ticks = int(fields[19])  # field 22 of the whole line: start time in clock ticks
    except (IndexError, ValueError):
        return False
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    return started > moment + _CLOCK_SLACK_SECONDS


def _writer_gone(pid: int, modified: float) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's: the pid was reused if it started later
        pass
    except OSError as error:  # pragma: no cover - e.g. EINVAL for an absurd pid
        return error.errno == errno.ESRCH
    return process_started_after(pid, modified)


def remove_stale(folder: Path) -> list[str]:
    """Remove the staging folders of dead writers in ``folder`` (see the module docstring).

    Never raises: a leftover that cannot be removed stays for a later write.

    Returns:
        The names removed.
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for entry in entries:
        match = STAGING_PATTERN.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
            continue
        if not _writer_gone(int(match["pid"]), info.st_mtime):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(entry.name)
    return removed
