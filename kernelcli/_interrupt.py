"""SIGINT and SIGTERM stop a run at a safe point; they are never lost and never fatal.

Why: a signal handler that raises (Python's default SIGINT handler raises
``KeyboardInterrupt``) raises at whichever bytecode runs next, and with JAX loaded
that is often a gc callback or a ``__del__`` (the exception is printed as "Exception
ignored" and lost: the run went on and exited 0) or a Python callback that XLA called
from C++ (the exception unwinds C++ frames: ``std::terminate``, SIGABRT).

So nothing here raises from a handler:

* Only the CLI installs handlers (:func:`install`, from ``kernelcli.cli``); the library
  never touches process-wide signal state.
* A signal is only recorded: the handlers request the CLI's :class:`~kernelcli._stop.Stop`
  (:func:`stop`), which the CLI passes to the library as its ``stop=`` argument. The
  recording is done by a small watcher thread woken through ``signal.set_wakeup_fd``,
  so it happens at once even while the main thread is inside a long XLA compilation;
  the Python-level handler itself does nothing.
* The library checks that stop at safe points (between slices of the per-input pass,
  between batches and blocks, around compilations, in the Ray driver's wait loop); it
  raises :class:`kernelcli.errors.Interrupted` (exit status 128 + the signal's number:
  130 for SIGINT, 143 for SIGTERM). Device threads stop taking new batches as soon as
  a stop is requested and are joined before it is raised, so no thread is inside XLA
  when the interpreter exits.
* A second SIGINT/SIGTERM while stopping ends the process at once
  (``os._exit(128 + signum)``) after the one-line message (naming the run the stop
  says is being computed): every file of a run is written under a temporary name and
  renamed, so nothing is left half-written.
* Commands without safe points (``status``, ``verify``, ``assemble``, ``predict``) are
  put in :func:`set_immediate` mode: the first signal ends them at once, the same way.

Library users without these handlers (a notebook) still stop on Ctrl-C's
``KeyboardInterrupt``; ``compute``/``resume`` turn it into the same
:class:`~kernelcli.errors.Interrupted` error.

The state here is the process's signal state (one per process, as signals are); the
library has none of its own.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Optional

from ._stop import Stop, message, signal_name

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_stop = Stop()                    # what the handlers request; the CLI passes it down
_immediate = False                # the first signal ends the process (no safe points)
_final_code: Optional[int] = None  # set once the CLI has printed its last line
_watcher: Optional[threading.Thread] = None
_wakeup_fd: Optional[int] = None  # write end of the watcher's pipe
_lock = threading.RLock()         # deciding on a signal vs. deciding the exit status

__all__ = ["check", "current_run", "exit_process", "final", "flush_std", "hard_exit",
           "install", "message", "request", "requested", "reset", "set_immediate",
           "signal_name", "stop", "uninstall", "where"]


def stop() -> Stop:
    """The stop the handlers request: the CLI gives it to the library (``stop=``)."""
    return _stop


def request(signum: int) -> None:
    """Record that ``signum`` asked the work to stop (the first signal's number is kept)."""
    _stop.request(signum)


def requested() -> Optional[int]:
    """The number of the signal that asked to stop, or ``None``."""
    return _stop.requested()


def reset() -> None:
    """Forget a recorded signal (a new CLI invocation in the same process): a fresh stop."""
    global _stop, _final_code, _immediate
    _stop = Stop()
    _final_code = None
    _immediate = False


def check(run_dir=None, shard=None) -> None:
    """:meth:`~kernelcli._stop.Stop.check` of the CLI's stop."""
    _stop.check(run_dir, shard)


def current_run() -> tuple:
    """``(run dir, shard)`` the CLI's stop concerns (innermost :func:`where`), or
    ``(None, None)``."""
    return _stop.run


def where(run_dir, shard=None):
    """Within this block, an interruption of the CLI's command concerns ``run_dir``."""
    return _stop.where(run_dir, shard)


# -- the CLI's side: handlers, the watcher thread, hard exits ---------------------------

def _handler(signum, frame) -> None:
    # Never raises. The watcher thread records the signal (woken by the wakeup fd);
    # without a watcher (wakeup fd unavailable), or once the exit status is decided
    # (the watcher may no longer run while the interpreter finalizes), this does.
    if _watcher is None or _final_code is not None:
        _on_signal(signum)


def _on_signal(signum: int) -> None:
    with _lock:
        if _stop() or _immediate or _final_code is not None:
            hard_exit(signum)
        request(signum)


def hard_exit(signum: int) -> None:
    """End the process now, with the one-line message (unless the CLI printed its last
    line already) and exit status 128 + ``signum`` (or the status already decided)."""
    with _lock:
        code = _final_code
        if code is None or code == 0:
            if code == 0:
                text = (f"interrupted ({signal_name(signum)}) while exiting, after the "
                        f"command had finished")
            else:
                text = message(signum, *_stop.run)
            try:
                os.write(2, f"Error: {text}\n".encode())
            except OSError:
                pass
            code = 128 + int(signum)
        os._exit(code)


def _watch(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in SIGNALS:
                _on_signal(signum)


def _after_fork_in_child() -> None:
    # A forked child has no watcher thread, and its wakeup fd would write into the
    # parent's pipe: it records its own signals through the handler instead.
    global _watcher
    _watcher = None
    try:
        signal.set_wakeup_fd(-1)
    except (OSError, ValueError):
        pass


def install():
    """Install the recording handlers for SIGINT and SIGTERM (the CLI calls this first
    thing; a no-op outside the main thread) and forget any earlier signal but the one the
    console script recorded while it imported the CLI. Returns what :func:`uninstall`
    puts back."""
    global _watcher, _wakeup_fd
    reset()
    if threading.current_thread() is not threading.main_thread():
        return None
    # the handlers, and the wakeup fd set before ours (None: not set here)
    saved: tuple[dict, Optional[int]] = ({s: signal.getsignal(s) for s in SIGNALS}, None)
    # a signal the console script's first code recorded (kernelcli._entry)
    early = getattr(saved[0][signal.SIGINT], "first", None)
    try:
        if _wakeup_fd is None:
            r, w = os.pipe()
            os.set_blocking(w, False)
            saved = (saved[0], signal.set_wakeup_fd(w, warn_on_full_buffer=False))
            _wakeup_fd = w
            t = threading.Thread(target=_watch, args=(r,), name="kernelcli-signals",
                                 daemon=True)
            t.start()
            _watcher = t
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
        else:  # installed before in this process (the CLI called in-process again)
            saved = (saved[0], signal.set_wakeup_fd(_wakeup_fd, warn_on_full_buffer=False))
    except (OSError, ValueError, RuntimeError):
        _watcher = None  # the handler records signals itself
    for s in SIGNALS:
        signal.signal(s, _handler)
    if early is not None:
        request(early)
    return saved


def set_immediate(on: bool = True) -> None:
    """The command has no safe points: a signal ends the process at once (and one that
    came already does so now)."""
    global _immediate
    _immediate = on
    signum = _stop.requested()
    if on and signum is not None:
        hard_exit(signum)


def final(code: int) -> Optional[int]:
    """The CLI decided its exit status (and printed its last line, if any): a signal from
    now on exits at once with that status (or 128 + signum when it was 0). Returns the
    signal recorded before this moment (``None`` if none): with status 0, the caller
    must not exit 0."""
    global _final_code
    with _lock:
        _final_code = int(code)
        return requested()


def exit_process(code: int) -> None:
    """End the CLI process with ``code`` once its work is done: join the non-daemon
    threads and run the ``atexit`` functions as the interpreter would, flush stdout and
    stderr, then ``os._exit``. The interpreter's own finalization (module teardown,
    XLA's C++ destructors) takes a few hundred milliseconds with JAX loaded, and a signal
    in it would end the process by the signal's default action, or be lost; so that
    phase is skipped, and a signal until the very end exits 128 + signum."""
    final(code)
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - they print their own errors
        pass
    flush_std()
    os._exit(_final_code if _final_code is not None else code)


def uninstall(saved) -> None:
    """Put back the handlers and wakeup fd that :func:`install` returned (the CLI called
    in-process: a test's ``CliRunner``, a script)."""
    if saved is None or threading.current_thread() is not threading.main_thread():
        return
    handlers, fd = saved
    for s, h in handlers.items():
        if h is not None:
            signal.signal(s, h)
    if fd is not None:
        try:
            signal.set_wakeup_fd(fd)
        except (OSError, ValueError):
            pass


def flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream at exit
            pass
