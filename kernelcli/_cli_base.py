"""The machinery under the ``kernelcli`` commands: the group that owns the process's
signals and exit status, the one way a command fails, and ``-v``.

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
import sys
import warnings

import click

from . import _env


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
