"""Opening a file as untrusted: the one gate every reader of a run directory's files and
of a configuration's data files passes.

A run directory is user-writable, so any of its names may be a FIFO (an ``open``
that blocks for ever, and a SIGTERM that does not end it), a device (``/dev/zero``: a
read that never ends), a socket, a directory, or a link to somewhere else; a data file
named in a configuration may be any of these too. Each reader asks here first: the file is
opened with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer),
``fstat`` of the open descriptor says what it is (no race between the check and the
read), links must resolve inside the folder the caller names (a run directory's files;
a data file's links may go anywhere: ``within="/"``), and a read is bounded
by the size the caller's format allows. What is refused raises
:class:`UntrustedFileError` (exit 2) with one line naming the file and what it is.
``FileNotFoundError`` passes through unchanged: callers say what a missing file means.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional

from .errors import DamagedFileError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class UntrustedFileError(DamagedFileError):
    """A run-directory file that is not a regular file inside the run, or too large."""


def _what(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _check_link(path: Path, within: Optional[Path]) -> None:
    root = Path(within if within is not None else path.parent)
    try:
        target = path.resolve(strict=False)
        inside = root.resolve(strict=False)
    except (OSError, RuntimeError):  # a link loop
        raise UntrustedFileError(f"{path} is a link that cannot be resolved (a loop?)") from None
    if target != inside and inside not in target.parents:
        raise UntrustedFileError(f"{path} is a link to {target}, outside {inside}; "
                                 f"kernelcli does not follow it")


def open_untrusted(path, within=None, max_bytes: Optional[int] = None) -> int:
    """A read-only descriptor of the regular file ``path`` (the caller closes it).

    ``within``: the folder links must stay inside (default: the file's own folder).
    ``max_bytes``: the largest size the caller's format allows (``None``: no bound).
    """
    path = Path(path)
    _check_link(path, within)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise UntrustedFileError(f"{path} is a directory, not a regular file") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket
            raise UntrustedFileError(f"{path} is {_what(os.stat(path).st_mode)}, not a "
                                     f"regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(f"{path} is {_what(st.st_mode)}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise UntrustedFileError(f"{path} is {st.st_size} bytes, more than a kernelcli "
                                     f"file of its kind can be ({max_bytes} bytes)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_untrusted(path, within=None, max_bytes: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path``, checked as :func:`open_untrusted` does; a
    file that grows past ``max_bytes`` while read is refused too."""
    fd = open_untrusted(path, within, max_bytes)
    with os.fdopen(fd, "rb") as f:
        data = f.read() if max_bytes is None else _read_upto(f, max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise UntrustedFileError(f"{path} is more than {max_bytes} bytes, more than a "
                                 f"kernelcli file of its kind can be")
    return data


def _read_upto(f, limit: int) -> bytes:
    """At most ``limit`` bytes of ``f``, asking for no more than its size (and one byte)
    at first: ``read(limit)`` sets aside ``limit`` bytes whatever the file holds."""
    size = os.fstat(f.fileno()).st_size
    data = f.read(min(limit, size + 1))
    while size < len(data) < limit:  # it grew since: read on, still bounded
        more = f.read(min(limit - len(data), 1 << 20))
        if not more:
            break
        data += more
    return data


def check_untrusted(path, within=None, max_bytes: Optional[int] = None) -> None:
    """Check ``path`` as :func:`open_untrusted` does, for readers (h5py, numpy) that open
    by name: the file is checked, then reopened by the caller. A swap between the two
    is the caller's own folder being raced by its owner; the check keeps out what sits
    there, which is what hangs or floods a reader."""
    os.close(open_untrusted(path, within, max_bytes))
