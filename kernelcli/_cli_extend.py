"""``kernelcli extend``: the command line of :func:`kernelcli.run.extend` (kept apart
from :mod:`kernelcli.cli` so that each file has one topic)."""

from __future__ import annotations

import json

import click

from . import _cli_print
from ._cli_base import verbose_option
from ._cli_base import FLAGS, _run
from .cli import _JSON_HELP, _on_start, _progress, main

FLAGS.update({name: "--" + name.replace("_", "-") for name in (
    "test", "test_key", "test_labels", "test_labels_key", "append", "append_key",
    "append_labels", "append_labels_key")})

_FILE = click.Path(dir_okay=False)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--test", type=_FILE, metavar="FILE",
              help="Add or replace the test set (.npy, .npz or .h5, as data.test): only "
                   "K(test, train) and the test diagonal are computed.")
@click.option("--test-key", metavar="NAME", help="Its array name (as data.test_key).")
@click.option("--test-labels", type=_FILE, metavar="FILE",
              help="A file of its labels (as data.test_labels).")
@click.option("--test-labels-key", metavar="NAME",
              help="The labels' array name (as data.test_labels_key).")
@click.option("--append", type=_FILE, metavar="FILE",
              help="Append training examples (same example shape and dtype as data.x1): "
                   "only the new rows of the training kernel are computed.")
@click.option("--append-key", metavar="NAME", help="Its array name (as data.key).")
@click.option("--append-labels", type=_FILE, metavar="FILE",
              help="A file of the appended examples' labels (as data.labels).")
@click.option("--append-labels-key", metavar="NAME",
              help="The labels' array name (as data.labels_key); a run with labels needs "
                   "this or --append-labels.")
@click.option("--dry-run", is_flag=True,
              help="Show what the grown run reuses and computes; write nothing.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@verbose_option
def extend(run_dir, test, test_key, test_labels, test_labels_key, append, append_key,
           append_labels, append_labels_key, dry_run, quiet, as_json):
    """Grow the finished run in RUN_DIR: another test set (--test) or more training
    examples (--append), or both.

    The old tiles are kept and only the new entries are computed; the result is
    bit-identical to computing the grown data set from scratch with the run's plan
    (block edge and pair batch). Interrupted, it continues with `kernelcli resume
    RUN_DIR` or the same extend command.
    """
    from .run import extend as run_extend

    out = _run(run_extend, run_dir, test=test, append=append, test_key=test_key,
               test_labels=test_labels, test_labels_key=test_labels_key,
               append_key=append_key, append_labels=append_labels,
               append_labels_key=append_labels_key, dry_run=dry_run,
               progress=None if dry_run else _progress(str(run_dir), quiet),
               on_start=_on_start(quiet), for_run=None if dry_run else run_dir)
    finished = out.run is not None and out.run.already_finished
    if not as_json and (dry_run or not quiet) and not finished:
        _cli_print.print_extend(out)
    if out.run is not None:
        _cli_print.report_repairs(out.run)
        _cli_print.report_run(out.run, run_dir, quiet, "{result} is already complete")
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
