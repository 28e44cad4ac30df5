"""Atomic output: a file or directory written under a temporary sibling name, then renamed.

The one home of the "stage, then rename" rule, so that a destination never holds a
half-written result:

* :func:`write_bytes_atomic` -- small whole-file writes (an ``.omny`` v2 container, a
  conversion log); :func:`~onnx_ir_multidevice.save` stages a model and its data file in a
  staging folder (:func:`make_staging`) the same way;
* :func:`staged_file` -- a context manager for a file written as a stream (an exporter's
  archive): the block writes the yielded temporary path, which is flushed and renamed over the
  destination (:func:`check_output_file` refuses a destination first);
* :func:`staged_directory` -- the same for a directory (``omny split``, the exporters): the
  block fills the yielded temporary directory, which is renamed over the destination
  (:func:`check_output_directory`, :func:`replace_directory`).

A failure leaves the destination as it was and nothing temporary behind. The rules every
writer follows:

* **Names.** A temporary file or folder is ``.<destination name>.omny-<pid>-<8 hex>.<kind>``
  (``tmp``; ``old`` for a directory being replaced), so a leftover says which process made it;
  :data:`STAGING_PATTERN` matches exactly these names.
* **Liveness.** A writer holds an exclusive ``flock`` on each temporary file it creates, and
  on the lock file of each temporary folder (``.<name>.omny-<pid>-<8 hex>.lock``, created
  before the folder, removed after it: a folder is not locked through itself, since a reader
  may lock it to load a model from it), from the creation (under the folder's lock, so no
  other writer sees it unlocked) until it is renamed or removed (:func:`release`). The kernel
  releases the lock when the process dies, whatever PID namespace it runs in: a pid alone
  does not prove a writer dead (two containers sharing one volume see different pids), a
  lock does.
* **Stale leftovers.** A writer killed with SIGKILL cannot remove its temporary files.
  :func:`remove_stale`, called by every writer on the folder it writes to, removes those of
  the folder that belong to this user and whose lock it can take (their writer is gone).
  Where ``flock`` is not available (Windows, a file system that refuses it) a leftover is
  stale when no process has its pid, or the process that has it started after the leftover
  was last modified (the pid was reused). Leftovers of live writers, of other users, and every
  other name are left alone. A directory set aside (``.old``) by a writer killed before it
  put the new one in place is *restored* when the destination is missing, never deleted.
* **Replacing a directory** exchanges it with the new one in one ``renameat2`` call
  (``RENAME_EXCHANGE``, Linux): there is no moment without the destination. Where the
  call is not available, the old directory is renamed aside (``.old``, locked) first, and
  restored as said above if the writer dies before the second rename. Without ``force``, a
  destination that another writer filled meanwhile is never replaced: the rename fails and
  the new output is removed.
* **Modes.** New files and directories get the usual permissions (``0o666`` / ``0o777`` less
  the umask), not ``mkstemp``'s ``0o600`` or ``mkdtemp``'s ``0o700``; a file or directory
  that is replaced keeps its permission bits (:func:`existing_mode`).
* **Links.** A destination that is a symbolic link is written through: the file or directory
  it points to is replaced, the link stays.
* **Durability.** Files are flushed before the rename, and the folder after it
  (:func:`fsync_file`, :func:`fsync_dir`).
"""

from __future__ import annotations

__all__ = [
    "STAGING_PATTERN",
    "check_output_directory",
    "check_output_file",
    "existing_mode",
    "folder_lock",
    "fsync_dir",
    "fsync_file",
    "make_staging",
    "pid_alive_since",
    "process_started_after",
    "release",
    "remove_stale",
    "replace_directory",
    "staged_directory",
    "staged_file",
    "staging_name",
    "write_bytes_atomic",
]

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from onnx_ir_multidevice._errors import OmnyIOError
from onnx_ir_multidevice._regular_files import require_replaceable

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: commits are then not serialised
    fcntl = None  # type: ignore[assignment]  # no fcntl on Windows

STAGING_PATTERN = re.compile(
    r"^\.(?P<name>.+)\.omny-(?P<pid>\d+)-[0-9a-f]{8}\.(?P<kind>tmp|old|lock)$"
)
"""Names of temporary files and folders: ``.<name>.omny-<pid>-<8 hex digits>.<tmp|old>``, and
of the lock file of a temporary folder (``.lock``, same stem)."""

ABANDONED_HOOKS: list[Callable[[Path], None]] = []
"""Called with each stale temporary folder before :func:`remove_stale` removes it (the folder's
lock and the leftover's are held): a writer that put files *outside* its staging folder (the
data names :func:`~onnx_ir_multidevice.save` claims) registers here what removes them."""

_HELD: dict[str, tuple[int, Path | None]] = {}
"""Temporary files and folders of this process: path -> (descriptor holding the ``flock``, the
lock file to remove on release: a folder's sibling ``.lock``)."""
_HELD_GUARD = threading.Lock()

_USE_EXCHANGE = True
"""Whether :func:`replace_directory` may use ``renameat2(RENAME_EXCHANGE)`` (tests turn it off
to exercise the two-rename fallback)."""
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

_CLOCK_SLACK_SECONDS = 2.0
"""A leftover modified less than this before its pid's process started is not called stale
(the boot time in ``/proc/stat`` has a resolution of one second)."""


# ---------------------------------------------------------------------------------------------
# Names, modes, flushes


def staging_name(name: str, kind: str = "tmp") -> str:
    """A fresh temporary name for the destination ``name`` (nothing is created)."""
    return f".{name}.omny-{os.getpid()}-{secrets.token_hex(4)}.{kind}"


def lock_file_of(path: Path) -> Path:
    """The sibling lock file of a temporary folder (``.<name>.omny-<pid>-<hex>.lock``).

    A folder is locked through this file, not through itself: a reader may take the folder's
    own lock (:func:`folder_lock`, e.g. :func:`~onnx_ir_multidevice.load` of a model
    extracted into it) while its writer is alive.
    """
    return path.with_name(path.name.rpartition(".")[0] + ".lock")


def make_staging(folder: Path, name: str, kind: str = "tmp") -> Path:
    """Create the staging folder ``folder/.<name>.omny-<pid>-<hex>.<kind>`` (umask's mode).

    Its lock file (:func:`lock_file_of`) is created and locked first, under ``folder``'s lock,
    so no :func:`remove_stale` sees the folder unlocked; the caller calls :func:`release` once
    the folder is renamed or removed.

    Raises:
        OSError: The folder cannot be created.
    """
    with folder_lock(folder):
        while True:
            path = folder / staging_name(name, kind)
            if not _hold_folder(path):
                continue
            try:
                os.mkdir(path, 0o777)
            except BaseException:
                release(path)
                raise
            return path


def _hold_folder(path: Path) -> bool:
    """Create and lock the lock file of the (future) folder ``path``; ``False`` if taken."""
    lock = lock_file_of(path)
    try:
        os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:
        return False
    _hold(lock, key=path, remove=True)
    return True


def _create_file(folder: Path, name: str) -> Path:
    """Create (and lock, see :func:`make_staging`) an empty temporary file for ``name``."""
    with folder_lock(folder):
        while True:
            path = folder / staging_name(name)
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                continue
            _hold(path)
            return path


def _try_lock(path: str | os.PathLike) -> int | None:
    """A descriptor of ``path`` holding its exclusive ``flock``, or ``None`` if taken.

    Raises:
        OSError: ``path`` cannot be opened, or ``flock`` is not supported there.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def _hold(path: Path, *, key: Path | None = None, remove: bool = False) -> None:
    """Lock ``path`` (a temporary file, or a folder's lock file) until :func:`release`.

    Args:
        path: The file to lock.
        key: What :func:`release` is called with (default ``path``).
        remove: Remove ``path`` on release (a lock file).
    """
    fd = None
    if fcntl is not None:
        with contextlib.suppress(OSError):  # flock not supported: liveness by pid
            fd = _try_lock(path)
    with _HELD_GUARD:
        _HELD[os.fspath(key or path)] = (-1 if fd is None else fd, path if remove else None)


def release(path: Path) -> None:
    """Release the lock this process holds on its temporary ``path`` (renamed or removed)."""
    with _HELD_GUARD:
        fd, lock = _HELD.pop(os.fspath(path), (-1, None))
    if lock is not None:
        with contextlib.suppress(OSError):
            os.unlink(lock)
    if fd >= 0:
        os.close(fd)


def existing_mode(path: Path) -> int | None:
    """The permission bits of ``path`` (followed through links), or ``None`` if absent."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _through_link(path: Path) -> Path:
    """``path``, or the path a symbolic link ``path`` points to (the file to replace)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


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


@contextlib.contextmanager
def folder_lock(folder: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock on ``folder`` for the block (``flock`` on the folder).

    Writers hold it exclusively while they commit (the renames into the folder and the removal
    of what the commit replaced), so that commits into one folder happen one at a time and
    never while a reader (holding it shared) reads a model and its data; the writing itself is
    not serialised. Where ``flock`` is not available (Windows, a file system that refuses it),
    the block runs unlocked.
    """
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(folder, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def pid_alive_since(pid: int, moment: float) -> bool:
    """Whether process ``pid`` exists and was already running at ``moment`` (a Unix time)."""
    return not _writer_gone(pid, moment)


# ---------------------------------------------------------------------------------------------
# Stale leftovers


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


def _abandoned(path: str, pid: int, modified: float) -> tuple[bool, int | None]:
    """``(whether the writer of a leftover is gone, descriptor holding its lock or None)``.

    Its lock decides where ``flock`` works (a live writer holds it, in any PID namespace): a
    file's own, a folder's lock file (:func:`lock_file_of`). Otherwise (no ``flock``, or a
    folder without a lock file: a version before this one) its pid (see the module docstring).
    """
    lock = lock_file_of(Path(path)) if os.path.isdir(path) else Path(path)
    if fcntl is not None and os.path.lexists(lock):
        try:
            fd = _try_lock(lock)
        except OSError:
            pass  # flock not supported on this file system: the pid decides
        else:
            return fd is not None, fd
    return _writer_gone(pid, modified), None


def remove_stale(folder: Path) -> list[str]:
    """Remove the temporary files and folders of dead writers in ``folder``.

    See the module docstring: a leftover is removed only when no live process holds its lock;
    a set-aside directory (``.old``) whose destination is missing is renamed back instead.
    Runs under ``folder``'s lock. Never raises: a leftover that cannot be removed stays for a
    later write.

    Returns:
        The names removed (or restored).
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    candidates = []
    for entry in entries:
        match = STAGING_PATTERN.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        kind = stat.S_IFMT(info.st_mode)
        if kind not in (stat.S_IFDIR, stat.S_IFREG) or (uid is not None and info.st_uid != uid):
            continue
        candidates.append((entry, match, kind, info))
    if not candidates:
        return removed
    # Folders first: a folder's lock file goes with it; a lock file alone is what a writer
    # killed before it created its folder (or while it removed it) left.
    candidates.sort(key=lambda c: c[1]["kind"] == "lock")
    with folder_lock(folder):
        for entry, match, kind, info in candidates:
            if not os.path.lexists(entry.path):  # a lock file removed with its folder
                continue
            lone_lock = match["kind"] == "lock"
            if lone_lock and kind != stat.S_IFREG:
                continue
            gone, fd = _abandoned(entry.path, int(match["pid"]), info.st_mtime)
            if not gone:
                continue
            try:
                _remove_leftover(Path(entry.path), match, kind)
                if kind == stat.S_IFDIR and not os.path.lexists(entry.path):
                    with contextlib.suppress(OSError):
                        os.unlink(lock_file_of(Path(entry.path)))
            finally:
                if fd is not None:
                    os.close(fd)
            if not os.path.lexists(entry.path):
                removed.append(entry.name)
    return removed


def _remove_leftover(path: Path, match: re.Match[str], kind: int) -> None:
    """Remove one stale leftover, or restore a set-aside directory whose destination is gone."""
    if kind != stat.S_IFDIR:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    destination = path.parent / match["name"]
    if path.name.endswith(".old") and not os.path.lexists(destination):
        with contextlib.suppress(OSError):  # the writer died between its two renames
            os.rename(path, destination)
            return
    for hook in ABANDONED_HOOKS:
        with contextlib.suppress(Exception):  # a hook must not stop the clean-up
            hook(path)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Writers


def write_bytes_atomic(destination: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``destination`` atomically (keeping its mode; through a link).

    Args:
        destination: The file; its folder must exist.
        data: The whole content.

    Raises:
        OmnyIOError: The folder is missing or cannot be written, the destination is a
            directory, or writing failed (the destination is unchanged and no temporary file
            is left).
    """
    with staged_file(Path(destination), force=True) as temporary:
        temporary.write_bytes(data)


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
                "(force=True in Python) to replace it."
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
    require_replaceable(target)
    if target.exists() and not force:
        raise OmnyIOError(
            f"{target}: exists; choose another path or pass --force (force=True in Python) to "
            "replace it"
        )
    _check_parent(target)


def _renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # not glibc >= 2.28, or not Linux
        return None
    path, directory = ctypes.c_char_p, ctypes.c_int
    function.argtypes = [directory, path, directory, path, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _exchange(source: Path, target: Path) -> bool:
    """Swap ``source`` and ``target`` in one call; ``False`` where the system cannot.

    Raises:
        OSError: The exchange failed for another reason.
    """
    function = _renameat2() if _USE_EXCHANGE else None
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return False
        raise OSError(code, os.strerror(code), os.fspath(target))
    return True


def replace_directory(source: Path, target: Path, *, force: bool = True) -> None:
    """Rename ``source`` to ``target``, replacing ``target`` (a directory) if it exists.

    A missing or empty ``target`` is replaced by one rename. A non-empty one (with ``force``)
    is exchanged with ``source`` in one call where the system can (``renameat2``), so that
    ``target`` always exists; otherwise it is first renamed aside (``.<name>.omny-<pid>-<hex>.old``,
    locked while this runs), so that a failure puts it back and a writer killed in between
    leaves it for :func:`remove_stale` to restore. ``source`` takes the mode of the ``target``
    it replaces.

    Args:
        source: The new directory.
        target: The destination.
        force: Whether a non-empty ``target`` may be replaced. Without it, a ``target`` that
            another writer filled since the caller checked it is left as it is.

    Raises:
        OmnyIOError: A rename failed, or (without ``force``) ``target`` is no longer empty.
    """
    try:
        mode = existing_mode(target)
        if mode is not None:
            os.chmod(source, mode)
        try:
            os.rename(source, target)  # atomic over a missing or empty directory
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.is_dir():
                raise
            if not force:
                raise OmnyIOError(
                    f"{target}: another writer filled this directory while this one ran; "
                    "it was left as it is and the new output removed. Choose another "
                    "directory, or pass --force (force=True in Python) to replace it."
                ) from None
        if _exchange(source, target):
            shutil.rmtree(source, ignore_errors=True)  # now the old directory
            return
        with folder_lock(target.parent):  # the set-aside name is locked before it exists
            old = target.parent / staging_name(target.name, "old")
            while not _hold_folder(old):
                old = target.parent / staging_name(target.name, "old")
            try:
                os.rename(target, old)
            except BaseException:
                release(old)
                raise
        try:
            try:
                os.rename(source, target)
            except OSError:
                os.rename(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        finally:
            release(old)
    except OmnyIOError:
        raise
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot move the output into place: {error}") from error


@contextlib.contextmanager
def staged_directory(
    target: Path, force: bool, *, holds: str = "the output is a directory"
) -> Iterator[Path]:
    """Yield a new temporary directory next to ``target``; rename it to ``target`` on success.

    Args:
        target: The directory to write (a link to a directory: the directory it points to).
        force: Replace a non-empty ``target``.
        holds: What the output is (for :func:`check_output_directory`'s message).

    Raises:
        OmnyIOError: See :func:`check_output_directory`; or the temporary directory cannot be
            created, or the rename failed.
    """
    target = _through_link(target)
    check_output_directory(target, force, holds=holds)
    remove_stale(target.parent)
    try:
        temporary = make_staging(target.parent, target.name)
    except OSError as error:
        raise OmnyIOError(f"{target}: cannot create the output directory: {error}") from error
    try:
        yield temporary
        replace_directory(temporary, target, force=force)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    finally:
        release(temporary)
    fsync_dir(target.parent)


@contextlib.contextmanager
def staged_file(target: Path, force: bool) -> Iterator[Path]:
    """Yield a new, empty temporary file next to ``target``; flush it and rename it over ``target``.

    The new file keeps the mode of the ``target`` it replaces; a ``target`` that is a symbolic
    link is written through.

    Raises:
        OmnyIOError: See :func:`check_output_file`; or writing or renaming failed (``target``
            is unchanged and nothing temporary is left).
    """
    target = _through_link(target)
    check_output_file(target, force)
    remove_stale(target.parent)
    try:
        temporary = _create_file(target.parent, target.name)
    except OSError as error:
        raise OmnyIOError(
            f"{target}: cannot write into {target.parent} ({error.strerror}); check its permissions"
        ) from error
    try:
        yield temporary
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        mode = existing_mode(target)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and not isinstance(error, OmnyIOError):
            raise OmnyIOError(
                f"{target}: writing failed ({error}); no temporary file was left behind"
            ) from error
        raise
    finally:
        release(temporary)
    fsync_dir(target.parent)
