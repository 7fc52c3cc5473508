"""The ``kernelcli`` group: the one edge where the process's exit status is decided.

A library error (:class:`kernelcli.errors.KernelcliError`) raised by any command
becomes one ``Error: ...`` line on stderr and the exit status it carries (2 for a
user's mistake, 1 otherwise), here in :meth:`Main.invoke`; a mistake never prints a
traceback. A library error naming an argument (``shard=``) names the flag of that
argument instead, as click declares it (``--shard``). Output: a result that could not
be written to stdout (a full device, a closed descriptor, a closed pipe) is such an
error too (:mod:`kernelcli.cli._output`), and stdout is flushed before exit status 0 is
decided, so nothing looks done that was not written. Signals: the group installs the
recording handlers first thing (:mod:`kernelcli.cli._setup`) and never exits 0 once a
signal came, up to the process's very end.
"""

from __future__ import annotations

import signal
import sys

import click

from .. import _interrupt
from ..errors import Interrupted, KernelcliError
from . import _output, _setup


def report(message: str, code: int) -> None:
    """Print ``Error: message``, the command's last line, for exit status ``code``."""
    _interrupt.final(code)  # a signal from now on exits at once, with no second line
    try:
        click.echo(f"Error: {_output.printable(message)}", err=True)
    except (OSError, ValueError):  # stderr is full or closed too: the status still says it
        pass


def fail(message: str, code: int) -> None:
    """Print ``Error: message`` and exit ``code``."""
    report(message, code)
    sys.exit(code)


# What to lower after a MemoryError, by command: a run's tiles follow compute.memory;
# a prediction's memory follows its sweep and solver (each bounded and checked before
# it starts, so this is the machine's memory taken by something else meanwhile).
_LOWER = {
    None: "lower `compute.memory` in the configuration",
    "predict": "free memory, or predict with fewer --ridge or --time values or one --kind "
               "(a Cholesky solve: --solver cg streams the kernel instead)",
}


def flags(group: click.Group) -> dict[str, str]:
    """``{parameter name: its long flag}`` over every command of ``group`` (the library's
    arguments are named as the CLI's parameters are: ``run_dir`` is ``--run-dir``)."""
    out: dict[str, str] = {}
    for command in group.commands.values():
        for param in command.params:
            if isinstance(param, click.Option):
                long = [o for o in param.opts if o.startswith("--")]
                out.setdefault(param.name, (long or param.opts)[0])
    return out


class Main(click.Group):
    """Run as the console script (``main()`` without arguments) the process ends with
    :func:`kernelcli._interrupt.exit_process`; called in-process (``CliRunner``, with
    arguments) what the CLI changed is put back afterwards and ``SystemExit``
    propagates."""

    def main(self, *args, **kwargs):
        in_process = bool(args or kwargs)
        with _setup.cli_process(in_process):
            try:
                rv = super().main(*args, **kwargs)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    click.echo(exc.code, err=True)  # sys.exit("text"), as Python would
            except _output.OutputError as exc:  # click's own output (--help, --version)
                code = 1
                report(str(exc), code)
            else:
                if in_process:  # standalone_mode=False
                    return rv
                code = 0
            if code == 0:
                try:
                    _output.flush()  # what the command printed reached stdout
                except _output.OutputError as exc:
                    code = 1
                    report(str(exc), code)
            signum = _interrupt.final(code)
            if code == 0 and signum is not None:  # e.g. --help, or a command without a run
                code = 128 + signum
                _interrupt.final(code)
                click.echo(f"Error: {_interrupt.message(signum, *_interrupt.current_run())}",
                           err=True)
            if in_process:
                sys.exit(code)
        _interrupt.exit_process(code)

    def invoke(self, ctx):
        """Errors, Ctrl-C's ``KeyboardInterrupt`` and resource failures to exit codes."""
        try:
            return super().invoke(ctx)
        except KernelcliError as exc:  # Interrupted included: its exit code is 128 + signum
            spelled = flags(self)
            fail(exc.render(lambda name: spelled.get(name, f"{name}=")), exc.exit_code)
        except KeyboardInterrupt:  # raised by code of the caller's (the handlers never raise)
            signum = _interrupt.requested() or signal.SIGINT
            fail(_interrupt.message(signum, *_interrupt.current_run()), 128 + signum)
        except MemoryError:
            fail(f"out of memory; {_LOWER.get(ctx.invoked_subcommand, _LOWER[None])}", 1)
        except RuntimeError as exc:  # XLA's RESOURCE_EXHAUSTED outside a run's tiles
            from ..run import is_out_of_memory, out_of_memory_error

            if str(exc) == "can't start new thread":  # no memory left for a thread's stack
                fail(f"out of memory (a thread could not be started); "
                     f"{_LOWER.get(ctx.invoked_subcommand, _LOWER[None])}", 1)
            if not is_out_of_memory(exc):
                raise
            fail(str(out_of_memory_error(memory="either")), 1)  # which one is not known here


def call(fn, *args, for_run=None, **kwargs):
    """``fn(*args, **kwargs)``, and no result after a signal.

    SIGINT / SIGTERM (recorded by the group's handlers) stop the library at its next
    safe point with :class:`~kernelcli.errors.Interrupted` (exit 130 / 143). A signal
    that came after the last safe point still fails the command, before it prints
    anything: exit 128 + signum, saying that the result is complete when it is (or,
    given ``for_run``, how to resume that run); never exit 0 after a signal.
    """
    from ..run import RunResult

    out = fn(*args, **kwargs)
    signum = _interrupt.requested()
    if signum is None:
        return out
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
    raise Interrupted(text, signum)
