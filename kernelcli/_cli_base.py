"""The machinery under the ``kernelcli`` commands: the group that owns the process's
signals and exit status, the one way a command fails (:func:`_run`: errors, signals and
resource failures to exit codes), and ``-v``.

Everything here that changes the process as a whole (signal handlers, log levels,
warning filters, XLA's C++ log level) is the command line's alone: the library
(:mod:`kernelcli.run` and below) changes none of it, so a notebook or a workflow that
imports kernelcli keeps its own settings. Called in-process (``CliRunner``), the group
puts all of it back afterwards.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import warnings

import click

from . import _env
from .errors import KernelcliError


def fail(message: str, code: int) -> None:
    from . import _interrupt

    _interrupt.final(code)  # a signal from now on exits at once, with no second line
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


# JAX, jaxlib and absl log warnings that are not the user's business (a GPU plugin not
# found, a cache entry not written); the CLI shows them only at -vv. Library callers
# keep their own logging and warnings settings: only the CLI changes them.
_JAX_LOGGERS = ("jax", "jaxlib", "absl")
_JAX_MODULES = r"(jax|jaxlib|absl)(\.|$)"
_CPP_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"  # XLA's C++ logging: 2 shows errors only
_VERBOSE = "kernelcli.verbose"
VERBOSE_HELP = ("-v: where the run computes (platform, devices) and its plan; -vv: also "
                "JAX's own warnings (hidden otherwise).")


def count_verbose(ctx, param, value):
    root = ctx.find_root()
    root.meta[_VERBOSE] = root.meta.get(_VERBOSE, 0) + (value or 0)


def verbosity() -> int:
    """``-v`` counted on the group and the command together."""
    return click.get_current_context().find_root().meta.get(_VERBOSE, 0)


def _quiet_jax(level: int) -> None:
    """Below ``-vv``, silence JAX's and absl's warnings (logging, ``warnings`` and XLA's
    C++ log, which is read when jax is imported: commands import it later)."""
    if level >= 2:
        return
    for name in _JAX_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=_JAX_MODULES)
    if _env.get(_CPP_LOG_LEVEL) is None:
        os.environ[_CPP_LOG_LEVEL] = "2"


def verbose_option(fn):
    """``-v/--verbose`` on a command (counted with the group's); JAX's warnings are
    silenced before the command runs unless the count reaches 2, and the command
    starts with :func:`kernelcli._gpu_check.warn_once` (these commands compute)."""
    @functools.wraps(fn)
    def command(*args, **kwargs):
        from ._gpu_check import warn_once

        from .errors import KernelcliError

        _quiet_jax(verbosity())
        try:
            warn_once()  # these commands compute: a GPU they would not use is worth a line
        except KernelcliError as exc:  # KERNELCLI_NO_GPU_WARNING's value
            fail(str(exc), exc.exit_code)
        return fn(*args, **kwargs)

    return click.option("-v", "--verbose", count=True, expose_value=False,
                        callback=count_verbose, help=VERBOSE_HELP)(command)


class _ProcessState:
    """What the CLI changes for the whole process (log levels, warning filters, the C++
    log level), put back after an in-process call (``CliRunner``)."""

    def __enter__(self):
        self.levels = {n: logging.getLogger(n).level for n in _JAX_LOGGERS}
        self.filters = list(warnings.filters)
        self.cpp = _env.get(_CPP_LOG_LEVEL)
        return self

    def __exit__(self, *exc):
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)
        warnings.filters[:] = self.filters
        if self.cpp is None:
            os.environ.pop(_CPP_LOG_LEVEL, None)  # the one write: this variable only


class Main(click.Group):
    """The ``kernelcli`` group: installs the SIGINT/SIGTERM handlers first thing (they
    only record the signal; see :mod:`kernelcli._interrupt`) and never exits 0 once a
    signal came, up to the process's very end.

    Run as the console script (``main()`` without arguments) the process ends with
    :func:`kernelcli._interrupt.exit_process`; called in-process (``CliRunner``, with
    arguments) the handlers are put back afterwards and ``SystemExit`` propagates.
    """

    def main(self, *args, **kwargs):
        from . import _interrupt

        in_process = bool(args or kwargs)
        saved = _interrupt.install()
        state = _ProcessState().__enter__() if in_process else None
        try:
            try:
                rv = super().main(*args, **kwargs)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    click.echo(exc.code, err=True)  # sys.exit("text"), as Python would
            else:
                if in_process:  # standalone_mode=False
                    return rv
                code = 0
            signum = _interrupt.final(code)
            if code == 0 and signum is not None:  # e.g. --help, or a command without _run
                code = 128 + signum
                _interrupt.final(code)
                click.echo(f"Error: {_interrupt.message(signum, *_interrupt.current_run())}",
                           err=True)
            if in_process:
                sys.exit(code)
        finally:
            if in_process:
                state.__exit__()
                _interrupt.uninstall(saved)
        _interrupt.exit_process(code)


# The library's arguments as this command line spells them: a library error names
# the argument (``shard=``), the CLI's message names the flag.
FLAGS = {"shard": "--shard", "shards": "--shards", "workers": "--workers",
         "executor": "--executor", "address": "--address", "overwrite": "--overwrite",
         "run_dir": "--run-dir", "ridges": "--ridge", "kinds": "--kind", "solver": "--solver",
         "times": "--time"}


def _flag(argument: str) -> str:
    return FLAGS.get(argument, f"{argument}=")


def _run(fn, *args, for_run=None, **kwargs):
    """Call ``fn``; turn kernelcli errors, signals and resource failures into exit codes.

    SIGINT / SIGTERM (recorded by the handlers of :class:`~kernelcli._cli_base.Main`) stop
    the library at its next safe point with :class:`~kernelcli.errors.Interrupted` (exit
    130 / 143). A signal that came after the last safe point still fails the command: exit 128 +
    signum, saying that the result is complete when it is (or, given ``for_run``, how
    to resume that run); never exit 0 after a signal. Errors naming a library argument
    name this command line's flag (:data:`FLAGS`).
    """
    from . import _interrupt

    try:
        out = fn(*args, **kwargs)
    except KernelcliError as exc:  # Interrupted included: its exit code is 128 + signum
        fail(exc.render(_flag), exc.exit_code)
    except KeyboardInterrupt:  # raised by code of the caller's (the handlers never raise)
        signum = _interrupt.requested() or signal.SIGINT
        fail(_interrupt.message(signum, *_interrupt.current_run()), 128 + signum)
    except MemoryError:
        fail("out of memory; lower `compute.memory` in the configuration", 1)
    except RuntimeError as exc:  # XLA's RESOURCE_EXHAUSTED outside a run's tiles
        from .run import is_out_of_memory, out_of_memory_error

        if not is_out_of_memory(exc):
            raise
        fail(str(out_of_memory_error(memory="either")), 1)  # which one is not known here
    from .run import RunResult

    signum = _interrupt.requested()
    if signum is not None:
        name = _interrupt.signal_name(signum)
        if isinstance(out, RunResult) and out.result:
            text = f"interrupted ({name}) after the run finished: {out.result} is complete"
        elif isinstance(out, RunResult) and out.shard:
            i, n = out.shard
            text = (f"interrupted ({name}) after shard {i}/{n} had done its tiles; the "
                    f"last shard to finish assembles the result")
        elif for_run is not None:
            text = _interrupt.message(signum, for_run)  # a run exists: resume it
        else:
            text = _interrupt.message(signum)
        fail(text, 128 + signum)
    return out
