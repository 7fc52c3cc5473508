"""One writer per run directory: an OS lock on ``<run_dir>/.kernelcli.lock``.

Two commands that write one run directory at once (two ``extend``, ``clean`` while a
``resume`` assembles) would each rename files the other relies on. Every command that
writes takes this lock for its whole run, exclusively; the processes of one job array
(``--shard I/N``), which are designed to write one run directory together, share it,
so they still exclude any other writer. Readers (``status``, ``verify``) take none.

The lock is ``flock`` on a file kernelcli creates: the OS releases it when its holder
dies, however it dies, so a crashed command never blocks the next one and there is
nothing stale to clean up. The holder writes its pid into the file while it holds
the lock (and empties it before letting go), so a command that calls another within
one process (``extend`` finishing as ``resume`` does) holds it once, not twice.
(File systems without ``flock``, some network mounts, are
let be: the lock then guards nothing, as before it existed.)
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


@contextlib.contextmanager
def run_lock(run_dir, shared: bool = False):
    """Hold the run directory's lock (``shared``: as one process of a job array) for
    the ``with`` block; :class:`RunDirError` (exit 2) when another kernelcli process
    holds it."""
    path = Path(run_dir) / LOCK
    if not Path(run_dir).is_dir():
        raise RunDirError(f"{run_dir} is not a kernelcli run directory (no such directory)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno in _UNWRITABLE:
            yield
            return
        if exc.errno == errno.ELOOP:
            raise RunDirError(f"{path} is a symbolic link, not kernelcli's lock file; "
                              f"remove it") from None
        raise storage_error(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunDirError(f"{path} is not a regular file, not kernelcli's lock file; "
                              f"remove it")
        me = f"{os.getpid()}@{host_tag()}".encode()
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            if os.pread(fd, 256, 0) == me:  # this process holds it already
                yield
                return
            raise RunDirError(f"{run_dir} is in use by another kernelcli process (it holds "
                              f"{path}); wait for it to end, then run this again") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise storage_error(exc, path) from None
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, me, 0)
        try:
            yield
        finally:
            if not shared:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
    finally:
        os.close(fd)
