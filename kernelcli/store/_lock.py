"""One writer per run directory: an OS lock on ``<run_dir>/.kernelcli.lock``.

Two commands that write one run directory at once (two ``extend``, ``clean`` while a
``resume`` assembles) would each rename files the other relies on. Every command that
writes takes this lock for its whole run, exclusively; the processes of one job array
(``--shard I/N``), which are designed to write one run directory together, share it,
so they still exclude any other writer. Readers (``status``, ``verify``) take none.

The lock is ``flock`` on a file kernelcli creates, and on the run directory itself:
the OS releases both when their holder dies, however it dies, so a crashed command
never blocks the next and there is nothing stale to clean up. The file alone is not
enough: ``flock`` holds the file the name stood for when it was opened, so once the
file is deleted (by hand, or by a ``rm`` of stale-looking files) the next command
would create and lock a new one and run beside the holder. The directory cannot be
deleted while it holds a run, so a second command is refused on it even then; and a
lock taken on a file whose name was deleted or replaced meanwhile is let go and taken
again on the file the name holds now. (File systems without ``flock``, some network
mounts, are let be: the lock then guards nothing, as before it existed; one that locks
files but not directories still has the file.) The holder writes its pid into the file
while it holds the lock (and empties it before letting go), to show who holds it; a
command that calls another within one process (``extend`` finishing as ``resume``
does) holds it once, not twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from ..errors import RunDirError
from ._atomic import host_tag, storage_error

LOCK = ".kernelcli.lock"

# the lock cannot be taken here, and nothing can be written either: let the command
# go on (reading a finished run) and fail where it writes, naming the file
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
# this file system has no flock (for this kind of file): the lock is let be
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF)
_ATTEMPTS = 8  # a lock file deleted or replaced this often while taken: refused
_HELD: set = set()  # (st_dev, st_ino) of the run directories this process has locked
_WHERE: dict = {}  # the path each was locked by -> its (st_dev, st_ino)


@contextlib.contextmanager
def run_lock(run_dir, shared: bool = False):
    """Hold the run directory's lock (``shared``: as one process of a job array) for
    the ``with`` block; :class:`RunDirError` (exit 2) when another kernelcli process
    holds it."""
    path = Path(run_dir) / LOCK
    try:
        dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise RunDirError(f"{run_dir} is not a kernelcli run directory (no such "
                          f"directory)") from None
    except OSError as exc:
        if exc.errno in _UNWRITABLE:
            yield
            return
        raise storage_error(exc, Path(run_dir)) from None
    try:
        st = os.fstat(dir_fd)
        held = (st.st_dev, st.st_ino)
        if held in _HELD:  # this process holds it already (a command within a command)
            yield
            return
        fd = _lock_file(run_dir, path, shared)
        if fd is None:  # nothing can be written here: nothing to guard
            yield
            return
        try:
            _flock(dir_fd, run_dir, path, shared)
            if not shared:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}@{host_tag()}".encode(), 0)
            _HELD.add(held)
            where = os.path.abspath(run_dir)
            _WHERE[where] = held
            try:
                yield
            finally:
                _HELD.discard(held)
                _WHERE.pop(where, None)
                if not shared:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, 0)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _lock_file(run_dir, path: Path, shared: bool):
    """The descriptor of the lock file, locked, still named ``path`` once locked (a
    file deleted or replaced meanwhile is let go and the new one taken); ``None``
    where the run directory cannot be written."""
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno in _UNWRITABLE:
                return None
            if exc.errno == errno.ELOOP:
                raise RunDirError(f"{path} is a symbolic link, not kernelcli's lock file; "
                                  f"remove it") from None
            raise storage_error(exc, path) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RunDirError(f"{path} is not a regular file, not kernelcli's lock "
                                  f"file; remove it")
            _flock(fd, run_dir, path, shared)
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return fd
        os.close(fd)  # the name holds another file now: lock that one
    raise RunDirError(f"{path} was deleted or replaced {_ATTEMPTS} times while kernelcli "
                      f"took the lock on it: another program is removing it; stop that "
                      f"program, then run this again")


def _flock(fd: int, run_dir, path: Path, shared: bool) -> None:
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunDirError(f"{run_dir} is in use by another kernelcli process (it holds "
                          f"{path}); wait for it to end, then run this again") from None
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise storage_error(exc, path) from None


def check_still_here(run_dir) -> None:
    """Refuse to write into ``run_dir`` by its path once the path no longer names the
    directory this process locked: the run directory renamed away and another put in
    its place while a command runs would receive tiles the lock never covered, beside a
    second writer that locked the new one. :class:`RunDirError`, one line; nothing is
    written. A path this process holds no lock for is let be (the reader's)."""
    where = os.path.abspath(run_dir)
    held = _WHERE.get(where)
    if held is None:
        return
    try:
        st = os.stat(where)
        now = (st.st_dev, st.st_ino)
    except OSError:
        now = None
    if now != held:
        raise RunDirError(f"{run_dir} is no longer the run directory this command locked "
                          f"(it was moved, renamed or replaced while the command ran); "
                          f"nothing more is written there: find where the run went, and "
                          f"continue it there with `kernelcli resume`")
