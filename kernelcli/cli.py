"""The ``kernelcli`` command: a thin layer over :mod:`kernelcli.run`.

Each command parses its options, calls one library function and prints the
result (the text forms are in :mod:`kernelcli._cli_print`, the group's handling of
signals, exit status and ``-v`` in :mod:`kernelcli._cli_base`). Library errors (:class:`kernelcli.errors.KernelcliError`) become one
``Error: ...`` line on stderr and the exit status the error carries (2 for a
user's mistake, 1 otherwise); a mistake never prints a traceback.
"""

from __future__ import annotations

import json
import sys

import click

from . import __version__, _cli_print
from ._cli_base import Main, _run, count_verbose, verbose_option, verbosity, VERBOSE_HELP
from .spec import EXECUTORS

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

def _progress(name: str, quiet: bool, shard=None):
    if quiet:
        return None
    from ._progress import ProgressPrinter

    return ProgressPrinter(name if shard is None else f"{name} shard {shard[0]}/{shard[1]}")


def _shard_option(ctx, param, value):
    """``--shard I/N`` -> ``(I, N)``; a malformed value is a usage error (exit 2)."""
    if value is None:
        return None
    from .errors import UsageError
    from .run import parse_shard

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


def _executor_options(fn):
    fn = click.option("--address", metavar="ADDRESS", help=_ADDRESS_HELP)(fn)
    # validated by the library (one list, EXECUTORS), which names the flag when wrong
    fn = click.option("--executor", metavar="|".join(EXECUTORS), help=_EXECUTOR_HELP)(fn)
    fn = click.option("--shard", metavar="I/N", callback=_shard_option, help=_SHARD_HELP)(fn)
    return fn


_JSON_HELP = "Print one JSON object on stdout."


@click.group(cls=Main, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="kernelcli")
@click.option("-v", "--verbose", count=True, expose_value=False, callback=count_verbose,
              help=VERBOSE_HELP + " Counted with a command's own -v.")
def main():
    """Infinite-width NNGP and NTK kernel matrices of convolutional networks, for whole
    image data sets, computed in tiles that fit memory and survive interruption.

    \b
    Typical session:
      kernelcli estimate configs/demo_digits.yaml --memory --time   # plan, peak memory, time
      kernelcli compute configs/demo_digits.yaml                    # writes runs/.../kernels.h5
      kernelcli status runs/demo_digits                             # progress of a run
      kernelcli resume runs/demo_digits                             # after a kill or Ctrl-C

    \b
    Many machines (README.md, "Beyond one machine"):
      kernelcli compute CONFIG --shard I/N      # process I (0-based) of a job array of N
      kernelcli assemble RUN_DIR                # the result, once every tile exists
      kernelcli clean RUN_DIR                   # drop the tiles once kernels.h5 verifies
      kernelcli compute CONFIG --executor ray --address HEAD:6379   # tiles on Ray actors

    The configuration format is described in README.md (Configuration).
    """
    from . import _interrupt

    # compute, resume and estimate stop at their safe points; the other commands have
    # none (and write only under temporary names): a signal ends them at once
    sub = click.get_current_context().invoked_subcommand
    _interrupt.set_immediate(sub not in ("compute", "resume", "estimate", "extend"))
    from .run import configure_host_devices

    configure_host_devices()
    from ._cache import enable_compile_cache

    enable_compile_cache()  # before jax is imported (README: "Compilation cache")


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False),
              help="Run directory (default: output.run_dir of the configuration).")
@click.option("--overwrite", is_flag=True,
              help="Replace a run of another configuration (or a finished one) in the run directory.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@_executor_options
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
    from .run import compute as run_compute
    from .spec import load_config

    cfg = _run(load_config, config)  # once: the library is given it
    out = _run(run_compute, cfg, run_dir=run_dir, overwrite=overwrite,
               progress=_progress(cfg.name, quiet, shard), shard=shard,
               executor=executor and executor.lower(), address=address,
               on_start=_on_start(quiet))
    _report_run(out, run_dir or cfg.output.run_dir, quiet, as_json,
                "{result} is already complete; use --overwrite to recompute it")


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@_executor_options
@verbose_option
def resume(run_dir, quiet, as_json, shard, executor, address):
    """Continue the interrupted run in RUN_DIR where it stopped.

    Only missing tiles are computed; the result is bit-identical to an
    uninterrupted run. Refuses when the data changed since the run started.
    With --shard I/N only that process's share is continued.
    """
    from .run import load_run_config
    from .run import resume as run_resume

    loaded = _run(load_run_config, run_dir, for_run=run_dir)
    out = _run(run_resume, run_dir, progress=_progress(loaded[1].name, quiet, shard),
               shard=shard, executor=executor and executor.lower(), address=address,
               loaded=loaded, on_start=_on_start(quiet))
    _report_run(out, run_dir, quiet, as_json, "{result} is already complete")


def _on_start(quiet: bool):
    """At -v, what compute and resume print once the run is planned."""
    return None if quiet or verbosity() < 1 else _cli_print.print_run_summary


def _report_run(out, run_dir, quiet: bool, as_json: bool, finished_text: str) -> None:
    _cli_print.report_repairs(out)
    _cli_print.report_run(out, run_dir, quiet, finished_text)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def assemble(run_dir, quiet, as_json):
    """Build RUN_DIR/kernels.h5 from the tiles once every tile exists.

    Needed only when no process did it (the shard of a job array that finds every
    tile done assembles by itself). Exit status 1, saying how many tiles are
    missing, when the run is not complete. A kernels.h5 that exists is verified
    again (and rebuilt from the tiles when it fails). Needs neither the data nor JAX.
    """
    from .run import assemble as run_assemble

    out = _run(run_assemble, run_dir)
    if out.already_finished:
        click.echo(f"{_cli_print.shown(out.result)} is already complete (verified)", err=True)
    elif not quiet:
        click.echo(f"wrote {_cli_print.shown(out.result)}", err=True)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def clean(run_dir, quiet, as_json):
    """Delete the tiles of the finished run in RUN_DIR, once kernels.h5 verifies.

    The tiles are a second copy of the result, kept so that a damaged kernels.h5
    can be assembled again without computing. kernels.h5 is checked as `kernelcli
    verify` checks it (checksums, run identity, shapes, finite values, symmetry)
    first; when it does not exist or does not verify, nothing is deleted (exit
    status 1). Only tile files are deleted, and only inside RUN_DIR. Needs neither
    the data nor JAX.
    """
    from .run import clean as run_clean

    out = _run(run_clean, run_dir)
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
    elif not quiet:
        _cli_print.print_clean(out)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--memory", is_flag=True,
              help="Report the plan and its memory (always shown; the flag is accepted for "
                   "scripts that pass it).")
@click.option("--time", "run_time", is_flag=True,
              help="Also run one real pair batch and extrapolate the wall time.")
@click.option("--workers", type=click.IntRange(min=1), metavar="W",
              help="Also show how the work divides over W processes (--shard I/N): the most "
                   "loaded one's pair evaluations and, with --time, its wall time.")
@click.option("--bandwidth", type=click.FloatRange(min=0, min_open=True), metavar="B/S",
              help="Device memory bandwidth in bytes per second for the accelerator plan's "
                   "cost model (default 4.8e12, an H200's).")
@click.option("--launch-latency", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Seconds per kernel launch for the accelerator plan's cost model "
                   "(default 5e-6).")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@verbose_option
def estimate(config, memory, run_time, workers, bandwidth, launch_latency, as_json):
    """Show the plan for CONFIG before anything runs: sizes, blocks, pair batch,
    peak memory per device against the budget, and what one untiled call would need.

    The peak comes from XLA's own memory analysis of the compiled kernel call. With
    compute.memory: auto the budget is what this process can still take: the host's
    MemAvailable or, when tighter, its cgroup's limit less its usage (a scheduler's
    memory limit); on a GPU it is the device's own free memory (JAX's preallocated
    pool less what is in use), and the host's and the device's peaks are shown apart.

    On the accelerator plan (compute.engine) it also shows the cost model: program
    launches per pair batch, bytes per pair (and the layers moving the most), and the
    predicted time per kernel entry at --bandwidth and --launch-latency.
    """
    from .run import estimate as run_estimate

    out = _run(run_estimate, config, run_time=run_time, workers=workers,
               bandwidth=bandwidth, launch_latency=launch_latency).to_dict()
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
    else:
        _cli_print.print_estimate(out)


def _numbers(example: str):
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


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--ridge", "ridges", multiple=True, metavar="R[,R...]",
              callback=_numbers("give finite numbers >= 0, e.g. --ridge 1e-4,1e-2"),
              help="Ridge(s) to sweep, each added to the diagonal as ridge * trace(K)/n "
                   "(repeat the option or separate by commas); the one of each kind is "
                   "chosen by leave-one-out on the training set (5-fold cross-validation "
                   "with --solver cg). Default: 1e-6,1e-4,1e-2,0.1,1.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["nngp", "ntk"]),
              help="Kernel(s) to predict with (repeatable; default: every kind of the run).")
@click.option("--solver", type=click.Choice(["auto", "cholesky", "cg"]), default="auto",
              show_default=True,
              help="cholesky: float64 factor in memory (16 N^2 bytes); cg: conjugate "
                   "gradients streaming K from kernels.h5 by row blocks; auto: Cholesky "
                   "when it fits in the available memory (MemAvailable, or the cgroup's "
                   "limit less its usage when tighter).")
@click.option("--time", "times", multiple=True, metavar="T[,T...]",
              callback=_numbers("give numbers >= 0 or inf, e.g. --time 1,10,inf"),
              help="Also the gradient-flow ensemble after training time(s) T on the MSE "
                   "loss (neural-tangents' gradient_descent_mse_ensemble: t x learning "
                   "rate; inf: the ridge solution), every ridge; mean and variance. Needs "
                   "an eigendecomposition in memory (not --solver cg).")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def predict(run_dir, ridges, kinds, solver, times, as_json):
    """Kernel regression on a finished run: the NNGP posterior mean and the NTK's
    infinite-time gradient-descent prediction for the test set, per ridge.

    The run's configuration must name the training labels and a test set
    (data.labels_key, data.test, data.test_labels_key). Solves in float64 with
    one-hot targets and writes RUN_DIR/predictions.h5; prints, per kind, the
    ridge chosen by leave-one-out on the training set with the test accuracy and
    MSE there, then the whole sweep's test numbers (when the test set has labels).

    \b
    Example:
      kernelcli compute configs/demo_digits_predict.yaml
      kernelcli predict runs/demo_digits_predict --ridge 1e-4,1e-2 --time 100,inf
    """
    from ._predict_report import predict_lines
    from .run import predict as run_predict

    out = _run(run_predict, run_dir, ridges=ridges, kinds=kinds or None, solver=solver,
               times=times).to_dict()
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    for line in predict_lines(out):
        click.echo(line)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--shards", type=click.IntRange(min=1), metavar="N",
              help="Count per shard of a job array of N processes (default: the N that "
                   "--shard processes recorded in RUN_DIR/shards/).")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def status(run_dir, shards, as_json):
    """Show how far the run in RUN_DIR has got (from its completed tiles, whichever
    process or machine wrote them; per shard for a job array)."""
    from .run import status as run_status

    report = _run(run_status, run_dir, shards=shards)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        _cli_print.print_status(report)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def verify(run_dir, as_json):
    """Check that RUN_DIR holds exactly what an uninterrupted run writes.

    Reads every file of the run: the manifest (its checksum and the fingerprint of
    the configuration it records), every tile (checksum, block, run identity), the
    test diagonal and kernels.h5 (run identity, a checksum per dataset, shapes,
    finite values, exact symmetry, positive diagonal). Changes nothing. Exit status
    0 only when everything holds; otherwise 1 with each problem on its own line
    and what to run (2 when the manifest itself is damaged or not a run's).
    """
    from .run import verify as run_verify

    report = _run(run_verify, run_dir)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
    else:
        _cli_print.print_verify(report, run_dir)
    if not report.ok:
        sys.exit(1)


from . import _cli_extend  # noqa: E402,F401  (registers `kernelcli extend` on main)
