"""The options several commands share, each declared once, and the callbacks that
turn an option's text into what the library takes (a malformed value is a usage error,
exit 2; the library checks ranges and names the flag)."""

from __future__ import annotations

import functools
import os

import click

from ..config import EXECUTORS
from . import _setup

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON object on stdout.")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")


class RunDirPath(click.Path):
    """A command's RUN_DIR: a file given instead (most often the configuration) is a
    usage error that says what the command takes, the same for every such command."""

    def __init__(self):
        super().__init__(file_okay=False)

    def convert(self, value, param, ctx):
        if os.path.isfile(value):
            raise click.UsageError(run_dir_not_file(ctx.info_name if ctx else "kernelcli"),
                                   ctx)
        return super().convert(value, param, ctx)


def run_dir_not_file(command: str) -> str:
    """What a command that takes a run directory says when given a file."""
    return (f"{command} takes a run directory (the output.run_dir of a computed "
            f"configuration), not a file: kernelcli {command} RUN_DIR")


run_dir_argument = click.argument("run_dir", type=RunDirPath())


# --- -v: counted on the group and the command together -----------------------------------

_VERBOSE = "kernelcli.verbose"
VERBOSE_HELP = ("-v: where the run computes (platform, devices) and its plan; -vv: also "
                "JAX's own warnings (hidden otherwise).")


def _count_verbose(ctx, param, value):
    root = ctx.find_root()
    root.meta[_VERBOSE] = root.meta.get(_VERBOSE, 0) + (value or 0)


def verbosity() -> int:
    """``-v`` counted on the group and the command together."""
    return click.get_current_context().find_root().meta.get(_VERBOSE, 0)


group_verbose_option = click.option(
    "-v", "--verbose", count=True, expose_value=False, callback=_count_verbose,
    help=VERBOSE_HELP + " Counted with a command's own -v.")


def verbose_option(fn):
    """``-v/--verbose`` on a command that computes (counted with the group's); before the
    command runs, :func:`kernelcli.cli._setup.before_computing` (JAX's warnings silenced
    unless the count reaches 2, and the GPU check)."""
    @functools.wraps(fn)
    def command(*args, **kwargs):
        _setup.before_computing(verbosity())
        return fn(*args, **kwargs)

    return click.option("-v", "--verbose", count=True, expose_value=False,
                        callback=_count_verbose, help=VERBOSE_HELP)(command)


# --- where the tiles run -------------------------------------------------------------------

def _shard(ctx, param, value):
    """``--shard I/N`` -> ``(I, N)``; a malformed value is a usage error (exit 2)."""
    if value is None:
        return None
    from ..errors import UsageError
    from ..run import parse_shard

    try:
        return parse_shard(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], ctx=ctx, param=param) from None


_SHARD_HELP = ("Be process I of N (0-based: I = 0 .. N-1) of a job array writing one run "
               "directory on a shared file system: compute only this process's share of the "
               "tiles (deterministic, balanced by pair evaluations). The process that finds "
               "every tile done assembles the result. E.g. --shard "
               "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.")
_EXECUTOR_HELP = ("Where tile jobs run (overrides compute.executor): local devices, or kernel "
                  "actors on a Ray cluster (needs `pip install 'kernelcli[ray]'`).")
_ADDRESS_HELP = ("Ray cluster address for --executor ray (overrides compute.address), e.g. "
                 "127.0.0.1:6379 or ray://head:10001; default RAY_ADDRESS or a new local one.")


def executor_options(fn):
    """``--shard I/N``, ``--executor`` and ``--address``."""
    fn = click.option("--address", metavar="ADDRESS", help=_ADDRESS_HELP)(fn)
    # validated by the library (one list, EXECUTORS), which names the flag when wrong
    fn = click.option("--executor", metavar="|".join(EXECUTORS), help=_EXECUTOR_HELP)(fn)
    fn = click.option("--shard", metavar="I/N", callback=_shard, help=_SHARD_HELP)(fn)
    return fn


def numbers(example: str):
    """A callback: ``--opt 1,2 --opt 3`` -> ``[1.0, 2.0, 3.0]``; a part that is not a
    number is a usage error (exit 2); the library checks the range and names the flag."""

    def parse(ctx, param, values):
        if not values:
            return None
        out = []
        for value in values:
            for part in value.split(","):
                try:
                    out.append(float(part))
                except ValueError:
                    raise click.BadParameter(f"{part!r} is not a number; {example}",
                                             ctx=ctx, param=param) from None
        return out

    return parse
