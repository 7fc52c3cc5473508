"""The commands around a run's computation: ``estimate`` (its plan, before it runs)
and ``predict`` (kernel regression with a finished run)."""

from __future__ import annotations

import json

import click

from .. import _interrupt
from ..config import KINDS
from ._click_group import call
from ._options import _shard, json_option, numbers, run_dir_argument, verbose_option


@click.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--memory", is_flag=True, hidden=True,
              help="Report the plan and its memory (always shown; the flag is accepted for "
                   "scripts that pass it).")
@click.option("--time", "run_time", is_flag=True,
              help="Also run one real pair batch and extrapolate the wall time.")
@click.option("--workers", type=click.IntRange(min=1), metavar="W",
              help="Also show how the work divides over W processes (--shard I/N): the most "
                   "loaded one's pair evaluations and, with --time, its wall time.")
@click.option("--bandwidth", type=click.FloatRange(min=0, min_open=True), metavar="B/S",
              help="Device memory bandwidth in bytes per second for the accelerator engine's "
                   "cost model (default 4.8e12, an H200's).")
@click.option("--launch-latency", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Seconds per kernel launch for the accelerator engine's cost model "
                   "(default 5e-6).")
@json_option
@verbose_option
def estimate(config, memory, run_time, workers, bandwidth, launch_latency, as_json):
    """Show the plan for CONFIG before anything runs: sizes, blocks, pair batch,
    peak memory per device against the budget, and what one untiled call would need.

    The peak comes from XLA's own memory analysis of the compiled kernel call. With
    compute.memory: auto the budget is what this process can still take: the host's
    MemAvailable or, when tighter, its cgroup's limit less its usage (a scheduler's
    memory limit); on a GPU it is the device's own free memory (JAX's preallocated
    pool less what is in use), and the host's and the device's peaks are shown apart.

    On the accelerator engine (compute.engine) it also shows the cost model: program
    launches per pair batch, bytes per pair (and the layers moving the most), and the
    predicted time per kernel entry at --bandwidth and --launch-latency.
    """
    from ..run import estimate as run_estimate
    from ._print_estimate import print_estimate

    out = call(run_estimate, config, run_time=run_time, workers=workers,
               bandwidth=bandwidth, launch_latency=launch_latency, stop=_interrupt.stop())
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
    else:
        print_estimate(out)


@click.command()
@run_dir_argument
@click.option("--ridge", "ridges", multiple=True, metavar="R[,R...]",
              callback=numbers("give numbers from 0 to 1e12, e.g. --ridge 1e-4,1e-2"),
              help="Ridge(s) to sweep, each added to the diagonal as ridge * trace(K)/n "
                   "(repeat the option or separate by commas; at most 64 values, each "
                   "from 0 to 1e12); the one of each kind is "
                   "chosen by leave-one-out on the training set (5-fold cross-validation "
                   "with --solver cg). Default: 1e-6,1e-4,1e-2,0.1,1.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="Kernel(s) to predict with (repeatable; default: every kind of the run).")
# kernelcli.solvers.SOLVERS, spelled here: importing it would load numpy before --help
@click.option("--solver", type=click.Choice(["auto", "cholesky", "eigen", "cg"]),
              default="auto", show_default=True,
              help="cholesky: a float64 factorisation per ridge, in memory (16 N^2 "
                   "bytes); eigen: one eigendecomposition serving every ridge (32 N^2 "
                   "bytes; quicker for long sweeps); cg: conjugate gradients streaming K "
                   "from kernels.h5 by row blocks; auto: the quickest that fits in the "
                   "available memory (MemAvailable, or the cgroup's limit less its usage "
                   "when tighter), priced from this machine's measured rates "
                   "(`kernelcli estimate` shows each route's time and memory). On a "
                   "landmark run: cholesky the direct Nystrom solve, cg Falkon, auto by "
                   "memory.")
@click.option("--time", "times", multiple=True, metavar="T[,T...]",
              callback=numbers("give numbers >= 0 or inf, e.g. --time 1,10,inf"),
              help="Also the gradient-flow ensemble after training time(s) T on the MSE "
                   "loss (neural-tangents' gradient_descent_mse_ensemble: t x learning "
                   "rate; inf: the ridge solution; at most 64 values), every ridge; mean "
                   "and variance. Needs "
                   "an eigendecomposition in memory (not --solver cg).")
# kernelcli.run._predict_spread.PREDICT_EXECUTORS, spelled here (numpy before --help)
@click.option("--executor", type=click.Choice(["local", "processes", "ray", "shards"]),
              default="local", show_default=True,
              help="Where --solver cg's products with K run: in this process; in --workers "
                   "local processes, each holding a row band of K; on Ray actors, one "
                   "per band (needs `pip install 'kernelcli[ray]'`; the run directory at "
                   "the same path on every node); or in the --workers shards of a job "
                   "array, each `kernelcli predict RUN_DIR --shard I/N`. The same numbers "
                   "bit for bit.")
@click.option("--workers", type=int, metavar="N",
              help="Row bands of K (one worker each) for --executor processes, ray or "
                   "shards (default: this machine's CPUs, or the Ray cluster's, at most its "
                   "CPUs; shards: required, the job array's N).")
@click.option("--address", metavar="ADDRESS",
              help="Ray cluster address for --executor ray, e.g. 127.0.0.1:6379 or "
                   "ray://head:10001; default RAY_ADDRESS or a new local one.")
@click.option("--shard", metavar="I/N", callback=_shard,
              help="Serve band I of N (0-based) of K's rows to the predict that runs with "
                   "--executor shards --workers N on the same run directory, until it "
                   "ends: the task of a job array, e.g. --shard "
                   "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT. Solves nothing itself.")
@json_option
def predict(run_dir, ridges, kinds, solver, times, executor, workers, address, shard,
            as_json):
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
      kernelcli predict RUN_DIR --solver cg --executor processes --workers 4
    """
    from ..run import predict as run_predict
    from ._print_predict import predict_lines

    if shard is not None:
        from ..errors import UsageError
        from ..run import serve_shard

        if (executor, workers, address) != ("local", None, None):
            raise UsageError.naming("<<shard>> serves a band to the predict that coordinates; "
                                    "<<executor>>, <<workers>> and <<address>> are that "
                                    "predict's: drop them here")
        served = call(serve_shard, run_dir, shard, stop=_interrupt.stop())
        click.echo(f"shard {shard[0]}/{shard[1]}: served {served:,} products", err=True)
        return

    out = call(run_predict, run_dir, ridges=ridges, kinds=kinds or None, solver=solver,
               times=times, progress=lambda line: click.echo(line, err=True),
               **({} if executor == "local" and workers is None and address is None else
                  dict(executor=executor, workers=workers, address=address)))
    if as_json:
        click.echo(json.dumps(out.to_dict(), sort_keys=True))
        return
    for line in predict_lines(out):
        click.echo(line)
