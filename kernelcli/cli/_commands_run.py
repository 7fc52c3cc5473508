"""The commands that compute tiles: ``compute``, ``resume`` and ``extend``.

Each parses its options, calls one library function (:mod:`kernelcli.run`) through
:func:`~kernelcli.cli._click_group.call`, giving it the stop the signal handlers request
(:func:`kernelcli._interrupt.stop`), and prints the typed result; a library error goes
up to the group, which prints it (:mod:`kernelcli.cli._click_group`).
"""

from __future__ import annotations

import json

import click

from .. import _interrupt
from . import _print_run
from ._click_group import call
from ._options import (
    executor_options,
    json_option,
    quiet_option,
    run_dir_argument,
    verbose_option,
    verbosity,
)


def _progress(name: str, quiet: bool, shard=None):
    if quiet:
        return None
    from ._progress import ProgressPrinter

    return ProgressPrinter(name if shard is None else f"{name} shard {shard[0]}/{shard[1]}")


def _on_start(quiet: bool):
    """At -v, what compute, resume and extend print once the run is planned."""
    return None if quiet or verbosity() < 1 else _print_run.print_run_summary


def _report_run(out, run_dir, quiet: bool, as_json: bool, finished_text: str) -> None:
    _print_run.report_repairs(out)
    _print_run.report_run(out, run_dir, quiet, finished_text)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False),
              help="Run directory (default: output.run_dir of the configuration).")
@click.option("--overwrite", is_flag=True,
              help="Replace a run of another configuration (or a finished one) in the run directory.")
@quiet_option
@json_option
@executor_options
@verbose_option
def compute(config, run_dir, overwrite, quiet, as_json, shard, executor, address):
    """Compute the kernels that CONFIG (a YAML file) describes.

    Writes RUN_DIR/kernels.h5 with one (N1, N2) dataset per kind ("nngp", "ntk").
    Without x2 only the lower triangle is computed and mirrored. Completed tiles
    are kept, so an interrupted run continues with `kernelcli resume RUN_DIR`
    (or by running the same compute command again).

    With --shard I/N, N processes (a SLURM job array, a Kubernetes indexed Job)
    share the tiles of one run directory without talking to each other.
    """
    from ..config import load_config
    from ..run import compute as run_compute

    cfg = call(load_config, config)  # once: the library is given it
    out = call(run_compute, cfg, run_dir=run_dir, overwrite=overwrite,
               progress=_progress(cfg.name, quiet, shard), shard=shard,
               executor=executor and executor.lower(), address=address,
               on_start=_on_start(quiet), stop=_interrupt.stop())
    _report_run(out, run_dir or cfg.output.run_dir, quiet, as_json,
                "{result} is already complete; use --overwrite to recompute it")


@click.command()
@run_dir_argument
@quiet_option
@json_option
@executor_options
@verbose_option
def resume(run_dir, quiet, as_json, shard, executor, address):
    """Continue the interrupted run in RUN_DIR where it stopped.

    Only missing tiles are computed; the result is bit-identical to an
    uninterrupted run. Refuses when the data changed since the run started.
    With --shard I/N only that process's share is continued.
    """
    from ..run import load_run_config
    from ..run import resume as run_resume

    loaded = call(load_run_config, run_dir, for_run=run_dir)
    out = call(run_resume, run_dir, progress=_progress(loaded[1].name, quiet, shard),
               shard=shard, executor=executor and executor.lower(), address=address,
               loaded=loaded, on_start=_on_start(quiet), stop=_interrupt.stop())
    _report_run(out, run_dir, quiet, as_json, "{result} is already complete")


_FILE = click.Path(dir_okay=False)


@click.command()
@run_dir_argument
@click.option("--test", type=_FILE, metavar="FILE",
              help="Add or replace the test set (.npy, .npz or .h5, as data.test): only "
                   "K(test, train) and the test diagonal are computed.")
@click.option("--test-key", metavar="NAME",
              help="Its array name (as data.test_key; default: the run's key where the file "
                   "holds it, else its only array besides the labels).")
@click.option("--test-labels", type=_FILE, metavar="FILE",
              help="A file of its labels (as data.test_labels).")
@click.option("--test-labels-key", metavar="NAME",
              help="The labels' array name (as data.test_labels_key).")
@click.option("--append", type=_FILE, metavar="FILE",
              help="Append training examples (same example shape and dtype as data.x1): "
                   "only the new rows of the training kernel are computed.")
@click.option("--append-key", metavar="NAME",
              help="Its array name (as data.key; default: the run's key where the file "
                   "holds it, else its only array besides the labels).")
@click.option("--append-labels", type=_FILE, metavar="FILE",
              help="A file of the appended examples' labels (as data.labels).")
@click.option("--append-labels-key", metavar="NAME",
              help="The labels' array name (as data.labels_key); a run with labels needs "
                   "this or --append-labels.")
@click.option("--dry-run", is_flag=True,
              help="Show what the grown run reuses and computes; write nothing.")
@quiet_option
@json_option
@verbose_option
def extend(run_dir, test, test_key, test_labels, test_labels_key, append, append_key,
           append_labels, append_labels_key, dry_run, quiet, as_json):
    """Grow the finished run in RUN_DIR: another test set (--test) or more training
    examples (--append), or both.

    The old tiles are kept (written back from the verified kernels.h5 where they
    were removed) and only the new entries are computed; the result is
    bit-identical to computing the grown data set from scratch with the run's plan
    (block edge and pair batch). Interrupted, it continues with `kernelcli resume
    RUN_DIR` or the same extend command.
    """
    from ..run import extend as run_extend
    from ..run import load_run_config

    # progress lines carry the run's name, as compute's and resume's do
    progress = None
    if not (dry_run or quiet):
        progress = _progress(call(load_run_config, run_dir)[1].name, quiet)
    out = call(run_extend, run_dir, test=test, append=append, test_key=test_key,
               test_labels=test_labels, test_labels_key=test_labels_key,
               append_key=append_key, append_labels=append_labels,
               append_labels_key=append_labels_key, dry_run=dry_run,
               progress=progress,
               on_start=_on_start(quiet), stop=_interrupt.stop(),
               for_run=None if dry_run else run_dir)
    finished = out.run is not None and out.run.already_finished
    if not as_json and (dry_run or not quiet) and not finished:
        _print_run.print_extend(out)
    if out.run is not None:
        _print_run.report_repairs(out.run)
        _print_run.report_run(out.run, run_dir, quiet, "{result} is already complete")
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
