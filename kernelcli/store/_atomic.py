"""Atomic, durable file writes, and the translation of OS errors into kernelcli errors.

A file is written under a temporary name ``.<name>.<pid>.tmp`` in the folder of its
final name (so the rename never crosses a file system), flushed and fsynced, renamed
with ``os.replace`` (atomic on POSIX), and then the folder is fsynced so the rename
itself survives a power cut. Whoever sees the final name sees a complete file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

from ..errors import ComputeError, RunDirError

_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)
_IN_THE_WAY = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST)


def tmp_path(path: Path) -> Path:
    """The temporary name this process writes ``path`` under before renaming it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


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
        return ComputeError(f"disk full while writing {path}: free some space, then resume")
    if code in _NO_PERMISSION or "Permission denied" in text or "Read-only file system" in text:
        return RunDirError(f"cannot write {path}: permission denied or read-only file system")
    if code in _IN_THE_WAY:  # a file where a folder should be, or the reverse
        return RunDirError(f"cannot write {path}: {exc.strerror}")
    reason = exc.strerror if getattr(exc, "strerror", None) else text
    return ComputeError(f"could not write {path}: {reason}")


def remove_stale_tmp(folder: Path) -> list[Path]:
    """Remove ``.<name>.<pid>.tmp`` files in ``folder`` whose writer process is gone.

    A file whose process is still alive may be mid-write by a concurrent command (say
    ``compute`` while ``status`` opens the run), so it is left alone. Returns the
    removed paths.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        match = _TMP.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        if _pid_alive(int(match["pid"])):
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
