"""The ``kernelcli`` command: a thin layer over :mod:`kernelcli.run`.

Each command parses its options, calls one library function and prints the
result. Library errors (:class:`kernelcli.errors.KernelcliError`) become one
``Error: ...`` line on stderr and the exit status the error carries (2 for a
user's mistake, 1 otherwise); a mistake never prints a traceback.
"""

from __future__ import annotations

import json
import signal
import sys

import click

from . import __version__
from .errors import KernelcliError
from .spec import EXECUTORS, format_size

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# The library's arguments as this command line spells them: a library error names
# the argument (``shard=``), the CLI's message names the flag.
FLAGS = {"shard": "--shard", "shards": "--shards", "workers": "--workers",
         "executor": "--executor", "address": "--address", "overwrite": "--overwrite",
         "run_dir": "--run-dir", "ridges": "--ridge", "kinds": "--kind", "solver": "--solver",
         "times": "--time"}


def _flag(argument: str) -> str:
    return FLAGS.get(argument, f"{argument}=")


def _fail(message: str, code: int) -> None:
    from . import _interrupt

    _interrupt.final(code)  # a signal from now on exits at once, with no second line
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _run(fn, *args, for_run=None, **kwargs):
    """Call ``fn``; turn kernelcli errors, signals and resource failures into exit codes.

    SIGINT / SIGTERM (recorded by the handlers of :class:`_Main`) stop the library at
    its next safe point with :class:`~kernelcli.errors.Interrupted` (exit 130 / 143).
    A signal that came after the last safe point still fails the command: exit 128 +
    signum, saying that the result is complete when it is (or, given ``for_run``, how
    to resume that run); never exit 0 after a signal. Errors naming a library argument
    name this command line's flag (:data:`FLAGS`).
    """
    from . import _interrupt

    try:
        out = fn(*args, **kwargs)
    except KernelcliError as exc:  # Interrupted included: its exit code is 128 + signum
        _fail(exc.render(_flag), exc.exit_code)
    except KeyboardInterrupt:  # raised by code of the caller's (the handlers never raise)
        signum = _interrupt.requested() or signal.SIGINT
        _fail(_interrupt.message(signum, *_interrupt.current_run()), 128 + signum)
    except MemoryError:
        _fail("out of memory; lower `compute.memory` in the configuration", 1)
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
        _fail(text, 128 + signum)
    return out


class _Main(click.Group):
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
                _interrupt.uninstall(saved)
        _interrupt.exit_process(code)


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
_EXECUTOR_HELP = ("Where tile jobs run (overrides compute.executor): local devices, or tasks "
                  "on a Ray cluster (needs `pip install 'kernelcli[ray]'`).")
_ADDRESS_HELP = ("Ray cluster address for --executor ray (overrides compute.address), e.g. "
                 "127.0.0.1:6379 or ray://head:10001; default RAY_ADDRESS or a new local one.")


def _executor_options(fn):
    fn = click.option("--address", metavar="ADDRESS", help=_ADDRESS_HELP)(fn)
    # validated by the library (one list, EXECUTORS), which names the flag when wrong
    fn = click.option("--executor", metavar="|".join(EXECUTORS), help=_EXECUTOR_HELP)(fn)
    fn = click.option("--shard", metavar="I/N", callback=_shard_option, help=_SHARD_HELP)(fn)
    return fn


def _report(out, run_dir, quiet: bool, finished_text: str) -> None:
    """What compute/resume print at the end (on stderr), from their RunResult."""
    if out.already_finished:
        click.echo(finished_text.format(result=out.result), err=True)
    elif quiet:
        return
    elif out.result is None:
        i, n = out.shard
        click.echo(f"shard {i}/{n}: its {out.shard_blocks} tiles are done; "
                   f"{out.blocks_missing} of the run's {out.blocks_total} tiles are "
                   f"still missing (other shards). The last shard to finish assembles the "
                   f"result; or run `kernelcli assemble {run_dir}` once all are done",
                   err=True)
    else:
        click.echo(f"wrote {out.result}", err=True)


def _report_repairs(out) -> None:
    """Files that failed verification and were recomputed (always shown: it means the
    disk or something else damaged a run file)."""
    for line in out.repaired:
        click.echo(f"Warning: {line.split('; moved to')[0]}; it was moved to quarantine and "
                   f"computed again", err=True)


@click.group(cls=_Main, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="kernelcli")
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
      kernelcli compute CONFIG --executor ray --address HEAD:6379   # tiles as Ray tasks

    The configuration format is described in README.md (Configuration).
    """
    from . import _interrupt

    # compute, resume and estimate stop at their safe points; the other commands have
    # none (and write only under temporary names): a signal ends them at once
    sub = click.get_current_context().invoked_subcommand
    _interrupt.set_immediate(sub not in ("compute", "resume", "estimate"))
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
@_executor_options
def compute(config, run_dir, overwrite, quiet, shard, executor, address):
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
               executor=executor and executor.lower(), address=address)
    _report_repairs(out)
    _report(out, run_dir or cfg.output.run_dir, quiet,
            "{result} is already complete; use --overwrite to recompute it")


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@_executor_options
def resume(run_dir, quiet, shard, executor, address):
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
               loaded=loaded)
    _report_repairs(out)
    _report(out, run_dir, quiet, "{result} is already complete")


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def assemble(run_dir, quiet):
    """Build RUN_DIR/kernels.h5 from the tiles once every tile exists.

    Needed only when no process did it (the shard of a job array that finds every
    tile done assembles by itself). Exit status 1, saying how many tiles are
    missing, when the run is not complete. Needs neither the data nor JAX.
    """
    from .run import assemble as run_assemble

    out = _run(run_assemble, run_dir)
    if out.already_finished:
        click.echo(f"{out.result} is already complete", err=True)
    elif not quiet:
        click.echo(f"wrote {out.result}", err=True)


_ESTIMATE_ROWS = (
    ("n1", "N1 (rows)", "{:,}"),
    ("n2", "N2 (columns)", "{:,}"),
    ("n_test", "test rows (K(test, x1))", "{:,}"),
    ("pairs_total", "pair evaluations", "{:,}"),
    ("blocks_total", "blocks (tiles)", "{:,}"),
    ("block", "block edge", "{:,}"),
    ("pair_batch", "pair batch", "{:,}"),
    ("devices", "devices", "{}"),
    ("peak_bytes_per_device", "peak memory per device", "size"),
    ("memory_budget_bytes", "memory budget per device", "size"),
    ("process_peak_bytes_estimate", "peak memory of the process", "size"),
    ("untiled_peak_bytes", "one untiled call would need", "size"),
    ("output_bytes", "result on disk", "size"),
)


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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def estimate(config, memory, run_time, workers, as_json):
    """Show the plan for CONFIG before anything runs: sizes, blocks, pair batch,
    peak memory per device against the budget, and what one untiled call would need.

    The peak comes from XLA's own memory analysis of the compiled kernel call.
    """
    from .run import estimate as run_estimate

    out = _run(run_estimate, config, run_time=run_time, workers=workers).to_dict()
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(f"plan for {out['name']} ({', '.join(out['kinds'])}, {out['dtype']}, "
               f"{out['platform']})")
    for key, label, fmt in _ESTIMATE_ROWS:
        value = out[key]
        if key == "n_test" and not value:
            continue
        text = format_size(value) if fmt == "size" else fmt.format(value)
        click.echo(f"  {label:<30} {text}")
    if "solve_bytes" in out:
        fits = out["solver"] == "cholesky"
        click.echo(f"  {'predict: Cholesky solve needs':<30} {format_size(out['solve_bytes'])} "
                   f"(float64 kernel + factor; {format_size(out['solve_available_bytes'])} "
                   f"available: {'fits' if fits else 'does not fit, predict will use --solver cg'})")
    if "workers" in out:
        w = out["workers"]
        click.echo(f"  {'workers':<30} {w}")
        click.echo(f"  {'pairs of the busiest worker':<30} {out['worker_pairs_max']:,} "
                   f"({out['worker_balance']:.2f}x an even share)")
    if "seconds_estimate" in out:
        click.echo(f"  {'time per pair':<30} {out['seconds_per_pair'] * 1e3:.3f} ms")
        click.echo(f"  {'estimated wall time':<30} {_hms(out['seconds_estimate'])}")
        parts = ", ".join(f"{name} {_hms(out[key])}" for name, key in (
            ("start-up", "startup_seconds"), ("compiling", "compile_seconds"),
            ("per-input pass", "stats_seconds"), ("pairs", "pairs_seconds"),
            ("writing", "writes_seconds")))
        click.echo(f"  {'  of which':<30} {parts}")
        click.echo(f"  {'':<30} (a repeated run with the compilation cache skips compiling)")
    if "seconds_estimate_workers" in out:
        label = f"wall time on {out['workers']} workers"
        click.echo(f"  {label:<30} {_hms(out['seconds_estimate_workers'])}")


def _hms(seconds: float) -> str:
    from ._progress import format_duration

    return format_duration(seconds)


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
                   "when it fits in the available memory.")
@click.option("--time", "times", multiple=True, metavar="T[,T...]",
              callback=_numbers("give numbers >= 0 or inf, e.g. --time 1,10,inf"),
              help="Also the gradient-flow ensemble after training time(s) T on the MSE "
                   "loss (neural-tangents' gradient_descent_mse_ensemble: t x learning "
                   "rate; inf: the ridge solution), every ridge; mean and variance. Needs "
                   "an eigendecomposition in memory (not --solver cg).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def status(run_dir, shards, as_json):
    """Show how far the run in RUN_DIR has got (from its completed tiles, whichever
    process or machine wrote them; per shard for a job array)."""
    from .run import status as run_status

    report = _run(run_status, run_dir, shards=shards)
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
        return
    pct = 100.0 * report.pairs_done / max(report.pairs_total, 1)
    state = "finished" if report.finished else "not finished"
    click.echo(f"{report.name}: {state}, {pct:.1f}% of pairs "
               f"({report.pairs_done:,}/{report.pairs_total:,}), "
               f"blocks {report.blocks_done}/{report.blocks_total}")
    if report.shards and not any(row.started for row in report.shards):
        n = report.shards[0].count
        click.echo(f"  no process of a {n}-process job array (--shard I/{n}) has run here; "
                   f"how the run's tiles divide over {n}:")
    for row in report.shards:
        pct = 100.0 * row.pairs_done / row.pairs_total if row.pairs_total else 100.0
        note = "done" if row.finished else ("running or stopped" if row.started
                                            else "not started")
        click.echo(f"  shard {row.index}/{row.count}: {pct:5.1f}% of pairs "
                   f"({row.pairs_done:,}/{row.pairs_total:,}), blocks "
                   f"{row.blocks_done}/{row.blocks_total}, {note}")
    if report.finished:
        click.echo(f"result: {report.result}")
    elif report.result_problem:
        click.echo(f"result: {report.result_problem}")


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
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
    elif report.ok:
        click.echo(f"{run_dir}: verified: manifest, {report.tiles_present:,} of "
                   f"{report.tiles_total:,} tiles and kernels.h5")
    else:
        for problem in report.problems:
            click.echo(f"Error: {problem}", err=True)
        click.echo(f"then run: {report.next_step}", err=True)
    if not report.ok:
        sys.exit(1)
