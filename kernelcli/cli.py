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
from .spec._sizes import format_size

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(message: str, code: int) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _run(fn, *args, **kwargs):
    """Call ``fn``; turn kernelcli errors, Ctrl-C and resource failures into exit codes."""
    try:
        return fn(*args, **kwargs)
    except KernelcliError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 1)
    except MemoryError:
        _fail("out of memory; lower `compute.memory` in the configuration", 1)


def _sigterm_to_interrupt(signum, frame):  # a scheduler's SIGTERM stops like Ctrl-C
    raise KeyboardInterrupt


def _progress(name: str, quiet: bool):
    if quiet:
        return None
    from ._progress import ProgressPrinter

    return ProgressPrinter(name)


@click.group(context_settings=CONTEXT)
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

    The configuration format is described in README.md (Configuration).
    """
    from .run import configure_host_devices

    configure_host_devices()
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--run-dir", type=click.Path(file_okay=False),
              help="Run directory (default: output.run_dir of the configuration).")
@click.option("--overwrite", is_flag=True,
              help="Replace a run of another configuration (or a finished one) in the run directory.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def compute(config, run_dir, overwrite, quiet):
    """Compute the kernels that CONFIG (a YAML file) describes.

    Writes RUN_DIR/kernels.h5 with one (N1, N2) dataset per kind ("nngp", "ntk").
    Without x2 only the lower triangle is computed and mirrored. Completed tiles
    are kept, so an interrupted run continues with `kernelcli resume RUN_DIR`
    (or by running the same compute command again).
    """
    from .run import compute as run_compute
    from .spec import load_config

    name = _run(load_config, config).name
    out = _run(run_compute, config, run_dir=run_dir, overwrite=overwrite,
               progress=_progress(name, quiet))
    if out.get("already_finished"):
        click.echo(f"{out['result']} is already complete; use --overwrite to recompute it",
                   err=True)
    elif not quiet:
        click.echo(f"wrote {out['result']}", err=True)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def resume(run_dir, quiet):
    """Continue the interrupted run in RUN_DIR where it stopped.

    Only missing tiles are computed; the result is bit-identical to an
    uninterrupted run. Refuses when the data changed since the run started.
    """
    from .run import load_run_config
    from .run import resume as run_resume

    _store, cfg = _run(load_run_config, run_dir)
    out = _run(run_resume, run_dir, progress=_progress(cfg.name, quiet))
    if out.get("already_finished"):
        click.echo(f"{out['result']} is already complete", err=True)
    elif not quiet:
        click.echo(f"wrote {out['result']}", err=True)


_ESTIMATE_ROWS = (
    ("n1", "N1 (rows)", "{:,}"),
    ("n2", "N2 (columns)", "{:,}"),
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
@click.option("--memory", is_flag=True, required=True,
              help="Report the plan and its memory (required; the plan is always shown).")
@click.option("--time", "run_time", is_flag=True,
              help="Also run one real pair batch and extrapolate the wall time.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def estimate(config, memory, run_time, as_json):
    """Show the plan for CONFIG before anything runs: sizes, blocks, pair batch,
    peak memory per device against the budget, and what one untiled call would need.

    The peak comes from XLA's own memory analysis of the compiled kernel call.
    """
    from .run import estimate as run_estimate

    out = _run(run_estimate, config, run_time=run_time)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(f"plan for {out['name']} ({', '.join(out['kinds'])}, {out['dtype']}, "
               f"{out['platform']})")
    for key, label, fmt in _ESTIMATE_ROWS:
        value = out[key]
        text = format_size(value) if fmt == "size" else fmt.format(value)
        click.echo(f"  {label:<30} {text}")
    if "seconds_estimate" in out:
        click.echo(f"  {'time per pair':<30} {out['seconds_per_pair'] * 1e3:.3f} ms")
        click.echo(f"  {'estimated wall time':<30} {_hms(out['seconds_estimate'])}")


def _hms(seconds: float) -> str:
    from ._progress import _duration

    return _duration(seconds)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def status(run_dir, as_json):
    """Show how far the run in RUN_DIR has got (from its completed tiles)."""
    from .run import status as run_status

    out = _run(run_status, run_dir)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    pct = 100.0 * out["pairs_done"] / max(out["pairs_total"], 1)
    state = "finished" if out["finished"] else "not finished"
    click.echo(f"{out['name']}: {state}, {pct:.1f}% of pairs "
               f"({out['pairs_done']:,}/{out['pairs_total']:,}), "
               f"blocks {out['blocks_done']}/{out['blocks_total']}")
    if out["finished"]:
        click.echo(f"result: {out['result']}")
