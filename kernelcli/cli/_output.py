"""stdout as the command line writes its results: a write that fails is one error.

Why: a result (``--json``, ``status``, ``verify``'s "verified" line, ``estimate``'s
plan, ``predict``'s numbers) that could not be written must not look done. Python's
own ``sys.stdout`` raises a plain :class:`OSError` from wherever the write happened
(a traceback, and the group cannot tell it from a run file's failure), and with
descriptor 1 closed it is ``None``: click then drops every line and the command
exits 0. So the console script writes stdout through :func:`guard_stdout`'s stream,
whose every failed write (a full device, a closed descriptor, a reader that closed
the pipe) raises :class:`OutputError`; the group (:mod:`kernelcli.cli._click_group`) turns
it into one ``Error: could not write the output to stdout: ...`` line and exit
status 1, and flushes stdout before it decides on exit status 0 (:func:`flush`).

A pipe whose reader stops after a few bytes (``| head -c 10``) is no error as long as
the output reached the pipe: a ``--json`` object is written in one piece.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Optional

from ..errors import KernelcliError

# The whole of a --json object in one write (up to this size): a reader that closes the
# pipe after its first bytes (`| head -c 10`) then gets it all, and no error follows.
_BUFFER_BYTES = 1 << 20


class OutputError(KernelcliError):
    """A result could not be written to stdout (exit status 1)."""


def output_error(code: Optional[int]) -> OutputError:
    """The error for a write to stdout that failed with ``errno`` ``code``."""
    reason = os.strerror(code) if code else "an unknown error"
    if code == errno.EBADF:
        reason = "it is closed"
    elif code == errno.EPIPE:
        reason = "Broken pipe (its reader closed it)"
    return OutputError(f"could not write the output to stdout: {reason}")


class _Descriptor1(io.FileIO):
    """Descriptor 1, written as Python writes it, every failure an :class:`OutputError`
    (``closed_at_start``: it was closed when the process started, and is now held by
    /dev/null, see :func:`guard_stdout`; every write fails)."""

    def __init__(self, closed_at_start: bool):
        super().__init__(1, "w", closefd=False)
        self.closed_at_start = closed_at_start

    def write(self, data):
        if self.closed_at_start:
            raise output_error(errno.EBADF)
        try:
            return super().write(data)
        except OSError as exc:
            raise output_error(exc.errno) from None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _hold_standard_descriptors() -> None:
    """A closed descriptor 0, 1 or 2 is opened on /dev/null: otherwise the next file the
    command opens (a tile, kernels.h5) takes its number, and whatever writes to stdout
    or stderr below Python (XLA's C++ logging) would write into that file."""
    for fd in (0, 1, 2):
        if _is_open(fd):
            continue
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


def guard_stdout() -> None:
    """Replace ``sys.stdout`` (the console script's, descriptor 1) by a stream of the same
    encoding whose failed writes raise :class:`OutputError`."""
    old = sys.stdout
    closed = old is None or not _is_open(1)
    _hold_standard_descriptors()
    if old is not None:
        try:
            old.flush()
        except (OSError, ValueError):  # nothing was written yet; what was is lost anyway
            pass
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(_Descriptor1(closed), buffer_size=_BUFFER_BYTES),
        encoding=getattr(old, "encoding", None) or "utf-8",
        errors=getattr(old, "errors", None) or "strict",
        line_buffering=bool(getattr(old, "line_buffering", False)))


def flush() -> None:
    """Flush stdout (before the exit status is decided): :class:`OutputError` when what
    was written to it cannot be delivered."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except ValueError:  # I/O operation on a closed file
        raise output_error(errno.EBADF) from None
    except OSError as exc:  # a stream other than guard_stdout's (called in-process)
        raise output_error(exc.errno) from None


# C0 controls but tab, DEL and C1 controls: what a terminal acts on instead of showing
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0a, 0x20),
                                         *range(0x7f, 0xa0))}


def printable(text: str) -> str:
    """``text`` as one line a terminal shows as written: every control character
    (a newline, a carriage return, an escape sequence's ESC) as ``\\xNN``. Whatever the
    CLI prints from a run directory's files or a user's data goes through it, so a
    field of such a file cannot forge a line (an ``Error: ...`` of its own) or drive
    the terminal."""
    return text.translate(_CONTROLS)
