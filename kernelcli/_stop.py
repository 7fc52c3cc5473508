"""Cancellation of a run: a :class:`Stop` passed down the way ``progress`` is.

A run stops only at its safe points (between slices of the per-input pass, between
batches and blocks, around compilations, in the Ray driver's wait loop), where the
library calls :func:`check`: it raises :class:`kernelcli.errors.Interrupted` (exit
status 128 + the signal's number) once the stop was requested. Who requests it is the
caller's business: the CLI's signal handlers (:mod:`kernelcli._interrupt`) request the
stop they gave the command, a program requests its own from any thread. Every call
gets its own stop (``None``: a fresh one, never requested), so two runs in two
threads are independent: nothing here is module-global.

A stop also records which run it concerns (:meth:`Stop.where`), so the caller that
made it can say how to resume the run after a stop the library never saw (the CLI's
second signal, which ends the process at once).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Optional

from .errors import Interrupted, resume_command


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def message(signum: int, run_dir=None, shard=None) -> str:
    """What an interrupted command says (after ``Error: ``)."""
    name = signal_name(signum)
    if run_dir is None:
        return f"interrupted ({name}) before anything was written"
    return (f"interrupted ({name}); completed tiles are kept: continue with "
            f"`{resume_command(run_dir, shard)}`")


def interrupted_error(run_dir, shard=None, signum: int = signal.SIGINT):
    """The error of a run that a stop (or Ctrl-C's KeyboardInterrupt) ended:
    "interrupted (SIGINT); completed tiles are kept: continue with `kernelcli resume
    RUN_DIR`", exit status 128 + ``signum``."""

    return Interrupted(message(signum, run_dir, shard), signum)


class Stop:
    """A request to stop one run (or one CLI command) at its next safe point.

    :meth:`request` may be called from any thread (a signal watcher, a GUI); the first
    signal number is kept. Calling the stop (``stop()``) says whether it was
    requested: it is the ``stop`` callable the kernels take.
    """

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._signum: Optional[int] = None
        self.run: tuple = (None, None)  # (run dir, shard) of the innermost where()

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask the work to stop (as signal ``signum`` would; the first number is kept)."""
        with self._lock:
            if self._signum is None:
                self._signum = int(signum)
        self._event.set()

    def requested(self) -> Optional[int]:
        """The number of the signal that asked to stop, or ``None``."""
        return self._signum if self._event.is_set() else None

    def __call__(self) -> bool:
        return self._event.is_set()

    def check(self, run_dir=None, shard=None) -> None:
        """Raise :class:`~kernelcli.errors.Interrupted` if a stop was requested.

        The message names ``run_dir`` (and ``shard``), else the run of the innermost
        :meth:`where`, else says that nothing was written yet.
        """
        signum = self.requested()
        if signum is None:
            return
        if run_dir is None:
            run_dir, shard = self.run
        raise interrupted_error(run_dir, shard, signum)

    @contextlib.contextmanager
    def where(self, run_dir, shard=None):
        """Within this block, an interruption concerns the run in ``run_dir``."""
        before = self.run
        self.run = (run_dir, shard)
        try:
            yield
        finally:
            self.run = before


def check(stop: Optional[Stop], run_dir=None, shard=None) -> None:
    """:meth:`Stop.check` of ``stop`` (``None``: never requested)."""
    if stop is not None:
        stop.check(run_dir, shard)


def or_new(stop: Optional[Stop]) -> Stop:
    """``stop``, or a fresh one that nobody requests (a caller without a stop)."""
    return stop if stop is not None else Stop()
