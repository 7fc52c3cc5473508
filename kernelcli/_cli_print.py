"""What the ``kernelcli`` commands print: the text forms of the library's results.

Kept apart from :mod:`kernelcli.cli` (options, exit codes, signals) so that each file
has one topic. Each printer takes a result's ``to_dict()`` (or the result) and writes
with ``click.echo``: results on stdout, messages on stderr, as docs/cli.md says.
"""

from __future__ import annotations

import os

import click

from .spec import format_size


def shown(path) -> str:
    """A path as a user reads it: relative to the working folder when it is inside it
    (as the README's examples show it), else absolute."""
    text = str(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return rel if not rel.startswith("..") else text


def hms(seconds: float) -> str:
    from ._progress import format_duration

    return format_duration(seconds)


def report_run(out, run_dir, quiet: bool, finished_text: str) -> None:
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
        click.echo(f"wrote {shown(out.result)}", err=True)
        if out.tiles_removed:
            click.echo(f"removed its {out.tiles_removed:,} tiles (output.keep_tiles: false)",
                       err=True)


def report_repairs(out) -> None:
    """Files that failed verification and were recomputed (always shown: it means the
    disk or something else damaged a run file)."""
    for line in out.repaired:
        click.echo(f"Warning: {line.split('; moved to')[0]}; it was moved to quarantine and "
                   f"computed again", err=True)


def memory_source_text(source: str, memory: str = "host") -> str:
    """What bound the memory budget, in words (``memory_source`` of a plan, and which
    memory it is: ``memory_budget_of``)."""
    if source == "device memory_stats":
        return ("device memory_stats (the least free device: its allocator's limit, JAX's "
                "preallocated pool, less its use), less headroom")
    if source == "compute.memory" and memory == "device":
        return "compute.memory of the configuration (device memory)"
    if source == "MemAvailable":
        return "MemAvailable (no tighter cgroup limit), less headroom"
    if source.startswith("cgroup "):
        return f"{source} (its limit less its usage, below MemAvailable), less headroom"
    return "compute.memory of the configuration"


def print_run_summary(summary: dict) -> None:
    """``-v`` for compute and resume (on stderr): where the run computes and its plan."""
    n = summary["devices"]
    executor = summary["executor"]
    where = (f"{n} {summary['platform']} device{'' if n == 1 else 's'}"
             if executor == "local" else f"a Ray cluster ({summary['platform']} workers)")
    where += f" ({summary.get('engine', 'cpu')} plan)"
    test = f" and {summary['n_test']:,} test rows" if summary["n_test"] else ""
    lines = [
        f"{summary['name']}: computing on {where}",
        f"  plan: {summary['n1']:,} x {summary['n2']:,}{test}, "
        f"{summary['pairs_total']:,} pair evaluations in {summary['blocks_total']:,} "
        f"blocks of edge {summary['block']:,}, {summary['pair_batch']:,} pairs per call",
        f"  memory: peak {format_size(summary['peak_bytes_per_device'])} per device of a "
        f"budget of {format_size(summary['memory_budget_bytes'])} from "
        f"{memory_source_text(summary['memory_source'], summary.get('memory_budget_of'))}",
    ]
    for line in lines:
        click.echo(line, err=True)


ESTIMATE_ROWS = (
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
    ("memory_source", "memory budget from", "source"),
    ("process_peak_bytes_estimate", "peak memory of the process", "size"),
    ("cov_elements_per_pair", "covariance entries per pair", "{:,}"),
    ("untiled_peak_bytes", "one untiled call would need", "size"),
    ("output_bytes", "result on disk", "size"),
)


def print_estimate(out: dict) -> None:
    click.echo(f"plan for {out['name']} ({', '.join(out['kinds'])}, {out['dtype']}, "
               f"{out['platform']}, {out.get('engine', 'cpu')} plan)")
    for key, label, fmt in ESTIMATE_ROWS:
        value = out[key]
        if key == "n_test" and not value:
            continue
        if fmt == "size":
            text = format_size(value)
        elif fmt == "source":
            text = memory_source_text(value, out.get("memory_budget_of", "host"))
        else:
            text = fmt.format(value)
        if key == "process_peak_bytes_estimate" and "device_peak_bytes_estimate" in out:
            # an accelerator: host and device memory are apart
            click.echo(f"  {'peak host memory (process)':<30} {text}")
            click.echo(f"  {'peak device memory per device':<30} "
                       f"{format_size(out['device_peak_bytes_estimate'])}")
            continue
        click.echo(f"  {label:<30} {text}")
        if key == "pairs_total" and out.get("group_size", 1) > 1:
            click.echo(f"  {'kernel.augment':<30} {', '.join(out['augment'])}: "
                       f"{out['group_size']} evaluations per pair (y and its flipped "
                       f"copies), {out['network_evaluations']:,} in all")
    if "solve_bytes" in out:
        fits = out["solver"] == "cholesky"
        click.echo(f"  {'predict: Cholesky solve needs':<30} {format_size(out['solve_bytes'])} "
                   f"(float64 kernel + factor; {format_size(out['solve_available_bytes'])} "
                   f"available: {'fits' if fits else 'does not fit, predict will use --solver cg'})")
    if "readouts" in out:
        one, apart = out["readout_layers_one_pass"], out["readout_layers_separate"]
        click.echo(f"  {'readouts (after body layers)':<30} {', '.join(map(str, out['readouts']))}")
        click.echo(f"  {'layers per pair, one pass':<30} {one} (body to the last readout "
                   f"and a head per readout)")
        click.echo(f"  {'layers per pair, separately':<30} {apart} (each truncated network "
                   f"run on its own: {apart / max(one, 1):.2f}x)")
    if "workers" in out:
        w = out["workers"]
        click.echo(f"  {'workers':<30} {w}")
        click.echo(f"  {'pairs of the busiest worker':<30} {out['worker_pairs_max']:,} "
                   f"({out['worker_balance']:.2f}x an even share)")
    if "cost_launches_per_batch" in out:
        _print_cost(out)
    if "seconds_estimate" in out:
        click.echo(f"  {'time per pair':<30} {out['seconds_per_pair'] * 1e3:.3f} ms")
        click.echo(f"  {'estimated wall time':<30} {hms(out['seconds_estimate'])}")
        parts = ", ".join(f"{name} {hms(out[key])}" for name, key in (
            ("start-up", "startup_seconds"), ("compiling", "compile_seconds"),
            ("per-input pass", "stats_seconds"), ("pairs", "pairs_seconds"),
            ("writing", "writes_seconds")))
        click.echo(f"  {'  of which':<30} {parts}")
        click.echo(f"  {'':<30} (a repeated run with the compilation cache skips compiling)")
    if "seconds_estimate_workers" in out:
        label = f"wall time on {out['workers']} workers"
        click.echo(f"  {label:<30} {hms(out['seconds_estimate_workers'])}")


def _print_cost(out: dict) -> None:
    """The accelerator plan's cost model (``kernelcli.kernels.cost_model``)."""
    from .kernels import CostModel, LayerCost, describe_cost

    model = CostModel(tuple(LayerCost(**c) for c in out["cost_layers"]),
                      out["cost_launches_per_batch"], out["cost_launches_source"],
                      out["pair_batch"], out["cost_bandwidth"], out["cost_launch_latency"])
    for label, line in zip(("cost model: launches", "  bytes", "  predicted"),
                           describe_cost(model)):
        click.echo(f"  {label:<30} {line}")


def print_status(report) -> None:
    pct = 100.0 * report.pairs_done / max(report.pairs_total, 1)
    state = "finished" if report.finished else "not finished"
    removed = " (tiles removed after assembly)" if report.tiles_removed and report.finished \
        else ""
    click.echo(f"{report.name}: {state}, {pct:.1f}% of pairs "
               f"({report.pairs_done:,}/{report.pairs_total:,}), "
               f"blocks {report.blocks_done}/{report.blocks_total}{removed}")
    if report.extend:
        e = report.extend
        doing = "extended" if report.finished else "extend in progress"
        click.echo(f"  {doing}: {e['n1_before']:,} -> {e['n1']:,} training and "
                   f"{e['n_test_before']:,} -> {e['n_test']:,} test examples; "
                   f"{e['blocks_reused']:,} tiles kept from before")
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
    if report.readouts:
        click.echo(f"readouts: {', '.join(report.readouts)}")
    if report.finished:
        click.echo(f"result: {shown(report.result)}")
    elif report.result_problem:
        click.echo(f"result: {report.result_problem}")


def print_verify(report, run_dir) -> None:
    if report.ok and report.tiles_removed:
        click.echo(f"{run_dir}: verified: manifest and kernels.h5 (its tiles were removed "
                   f"after assembly)")
    elif report.ok:
        click.echo(f"{run_dir}: verified: manifest, {report.tiles_present:,} of "
                   f"{report.tiles_total:,} tiles and kernels.h5")
    else:
        for problem in report.problems:
            click.echo(f"Error: {problem}", err=True)
        click.echo(f"then run: {report.next_step}", err=True)


def print_clean(out) -> None:
    if out.tiles_removed:
        click.echo(f"removed {out.tiles_removed:,} tiles ({format_size(out.bytes_removed)}) "
                   f"from {out.run_dir}; {out.result} verified and kept", err=True)
    else:
        click.echo(f"{out.run_dir} has no tiles left to remove; {out.result} verified",
                   err=True)


def print_extend(out) -> None:
    """What ``extend`` will do (``--dry-run``) or did: the grown sizes and the cost
    against a fresh run of the grown data set."""
    what = "would grow" if out.dry_run else "grows"
    pct = 100.0 * out.pairs_new / max(out.pairs_total, 1)
    click.echo(f"{shown(out.run_dir)}: {what} from {out.n1_before:,} to {out.n1:,} training "
               f"and from {out.n_test_before:,} to {out.n_test:,} test examples", err=True)
    click.echo(f"  tiles: {out.blocks_reused:,} kept, {out.blocks_new:,} to compute, of "
               f"{out.blocks_total:,} (a fresh run computes all {out.blocks_total:,})",
               err=True)
    click.echo(f"  pair evaluations: {out.pairs_new:,} of {out.pairs_total:,} ({pct:.1f}% of "
               f"a fresh run)", err=True)
