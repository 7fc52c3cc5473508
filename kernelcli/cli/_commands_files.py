"""The commands that read a run's files and need neither the data nor JAX:
``assemble``, ``clean``, ``status`` and ``verify``."""

from __future__ import annotations

import json
import sys

import click

from . import _print_run
from ._click_group import call
from ._options import json_option, quiet_option, run_dir_argument


@click.command()
@run_dir_argument
@quiet_option
@json_option
def assemble(run_dir, quiet, as_json):
    """Build RUN_DIR/kernels.h5 from the tiles once every tile exists.

    Needed only when no process did it (the shard of a job array that finds every
    tile done assembles by itself). Exit status 1, saying how many tiles are
    missing, when the run is not complete. A kernels.h5 that exists is verified
    again (and rebuilt from the tiles when it fails). Needs neither the data nor JAX.
    """
    from ..run import assemble as run_assemble

    out = call(run_assemble, run_dir)
    if out.already_finished:
        click.echo(f"{_print_run.shown(out.result)} is already complete (verified)", err=True)
    elif not quiet:
        click.echo(f"wrote {_print_run.shown(out.result)}", err=True)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))


@click.command()
@run_dir_argument
@quiet_option
@json_option
def clean(run_dir, quiet, as_json):
    """Delete the tiles of the finished run in RUN_DIR, once kernels.h5 verifies.

    The tiles are a second copy of the result, kept (output.keep_tiles: true) so
    that a damaged kernels.h5 can be assembled again without computing; by default
    compute and resume delete them themselves once kernels.h5 verifies. kernels.h5 is checked as `kernelcli
    verify` checks it (checksums, run identity, shapes, finite values, symmetry)
    first; when it does not exist or does not verify, nothing is deleted (exit
    status 1). Only tile files are deleted, and only inside RUN_DIR. Needs neither
    the data nor JAX.
    """
    from ..run import clean as run_clean

    out = call(run_clean, run_dir)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
    elif not quiet:
        _print_run.print_clean(out)


@click.command()
@run_dir_argument
@click.option("--shards", type=click.IntRange(min=1), metavar="N",
              help="Count per shard of a job array of N processes (default: the N that "
                   "--shard processes recorded in RUN_DIR/shards/).")
@json_option
def status(run_dir, shards, as_json):
    """Show how far the run in RUN_DIR has got (from its completed tiles, whichever
    process or machine wrote them; per shard for a job array)."""
    from ..run import status as run_status

    report = call(run_status, run_dir, shards=shards)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        _print_run.print_status(report)


@click.command()
@run_dir_argument
@json_option
def verify(run_dir, as_json):
    """Check that RUN_DIR holds exactly what an uninterrupted run writes.

    Reads every file of the run: the manifest (its checksum and the fingerprint of
    the configuration it records), every tile (checksum, block, run identity), the
    test diagonal and kernels.h5 (run identity, a checksum per dataset, shapes,
    finite values, exact symmetry, positive diagonal). Changes nothing. Exit status
    0 only when everything holds; otherwise 1 with each problem on its own line
    and what to run (2 when the manifest itself is damaged or not a run's).
    """
    from ..run import verify as run_verify

    report = call(run_verify, run_dir)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        _print_run.print_verify(report, run_dir)
    if not report.ok:
        sys.exit(1)
