"""Atomic, durable file writes, and the translation of OS errors into kernelcli errors.

A file is written under a temporary name ``.<name>.<pid>@<host>.tmp`` in the folder of
its final name (so the rename never crosses a file system), flushed and fsynced, renamed
with ``os.replace`` (atomic on POSIX), and then the folder is fsynced so the rename
itself survives a power cut. Whoever sees the final name sees a complete file.

The host in the name matters on a shared file system, where processes of a job array
on several machines write into one run directory: a writer's pid says whether it is
alive only on its own machine, so leftovers of other machines are removed only once
they have not been touched for a day. Two processes writing the same final name (two
shards given the same work) each publish a complete file; the last rename wins, and
both files hold the same numbers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import time
from pathlib import Path

from ..errors import ComputeError, DiskFullError, RunDirError

_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)(?:@(?P<host>[A-Za-z0-9_-]+))?\.tmp$")
_FOREIGN_TMP_AGE = 24 * 3600  # seconds untouched before another machine's leftover goes
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # EFBIG: a ulimit -f
_NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)
_IN_THE_WAY = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST)


def host_tag() -> str:
    """This machine's name as it appears in temporary file names (``[A-Za-z0-9_-]``)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname()) or "host"
    return name[:64]


def tmp_path(path: Path) -> Path:
    """The temporary name this process writes ``path`` under before renaming it."""
    return path.with_name(f".{path.name}.{os.getpid()}@{host_tag()}.tmp")


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable; file systems that cannot fsync a folder are let be."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path):
    """Yield a temporary path to write ``path``'s content to; publish it on a clean exit.

    The writer must close the file before the block ends (h5py files included). On
    an exception the temporary file is removed and the final name is untouched. OS
    errors come out as :class:`ComputeError` / :class:`RunDirError` naming ``path``.
    """
    path = Path(path)
    tmp = tmp_path(path)
    try:
        try:
            yield tmp
            fsync_file(tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error(exc, path) from None


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def storage_error(exc: BaseException, path: Path) -> Exception:
    """A kernelcli error for an OS error met while writing ``path``.

    Disk full is a failure (:class:`ComputeError`, exit 1); a folder the user cannot
    write to is theirs to fix (:class:`RunDirError`, exit 2). h5py does not always set
    ``errno``, so its message text is consulted too.
    """
    code = getattr(exc, "errno", None)
    text = str(exc)
    if code in _NO_SPACE or "No space left" in text or "quota exceeded" in text.lower():
        return DiskFullError(f"disk full while writing {path}: free some space, then resume",
                             path)
    if code in _NO_PERMISSION or "Permission denied" in text or "Read-only file system" in text:
        return RunDirError(f"cannot write {path}: permission denied or read-only file system")
    if code in _IN_THE_WAY:  # a file where a folder should be, or the reverse
        return RunDirError(f"cannot write {path}: {getattr(exc, 'strerror', None)}")
    reason = getattr(exc, "strerror", None) or text
    return ComputeError(f"could not write {path}: {reason}")


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Remove ``.<name>.<pid>[@<host>].tmp`` files in ``folder`` whose writer is gone.

    A file whose process is still alive may be mid-write by a concurrent command (say
    ``compute`` while ``status`` opens the run), so it is left alone. A file written
    on another machine (a shard of a job array on a shared file system) is removed
    only when untouched for a day: its pid means nothing here. Returns the removed
    paths.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    here = host_tag()
    for entry in entries:
        match = _TMP.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        if match["host"] is not None and match["host"] != here:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if age < _FOREIGN_TMP_AGE:
                continue
        elif _pid_alive(int(match["pid"])):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # it exists but belongs to someone else
        return True
    except (OverflowError, OSError):  # no such process, or not a pid at all
        return False
    return True


def create_exclusive(path: Path, data: bytes) -> bool:
    """Publish ``data`` as ``path`` unless ``path`` exists; whether this call created it.

    Race-free among processes (on one machine or on a shared file system): the bytes
    go to a temporary file, are fsynced, and are then hard-linked to the final name,
    which fails if the name exists, so exactly one of several concurrent callers wins
    and every reader sees either no file or a complete one. File systems without hard
    links fall back to an exclusive lock file (``.<name>.lock``) around a rename.
    """
    path = Path(path)
    tmp = tmp_path(path)
    try:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
                created = True
            except FileExistsError:
                created = False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                                     errno.EXDEV, errno.EMLINK):
                    raise
                created = _create_with_lock(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if created:
            fsync_dir(path.parent)
    except OSError as exc:
        raise storage_error(exc, path) from None
    return created


def _create_with_lock(tmp: Path, path: Path, wait: float = 120.0) -> bool:
    """``create_exclusive`` where hard links are not supported: an ``O_EXCL`` lock file."""
    lock = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        deadline = time.monotonic() + wait  # the winner is renaming its file into place
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not path.exists():
            raise ComputeError(f"{lock} exists but {path} did not appear within {wait:.0f} s; "
                               f"if no other process is starting this run, delete {lock}"
                               ) from None
        return False
    os.close(fd)
    try:
        if path.exists():
            return False
        os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
