"""What the commands that run, grow, check and clean a run print: the text forms of the
library's typed results (:mod:`kernelcli.run`), written with ``click.echo``: results on
stdout, messages on stderr, as docs/cli.md says."""

from __future__ import annotations

import os

import click

from ..config import format_size
from ._output import printable


def _echo(line: str, **kwargs) -> None:
    """One line, its control characters escaped: every line here shows what a run
    directory's files hold (names, hosts, notes), which its writer may have forged."""
    click.echo(printable(line), **kwargs)


def shown(path) -> str:
    """A path as a user reads it: relative to the working folder when it is inside it
    (as the README's examples show it), else absolute."""
    text = str(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return rel if not rel.startswith("..") else text


def report_run(out, run_dir, quiet: bool, finished_text: str) -> None:
    """What compute/resume print at the end (on stderr), from their RunResult."""
    if out.already_finished:
        _echo(finished_text.format(result=out.result), err=True)
    elif quiet:
        return
    elif out.result is None:
        i, n = out.shard
        _echo(f"shard {i}/{n}: its {out.shard_blocks} tiles are done; "
                   f"{out.blocks_missing} of the run's {out.blocks_total} tiles are "
                   f"still missing (other shards). The last shard to finish assembles the "
                   f"result; or run `kernelcli assemble {run_dir}` once all are done",
                   err=True)
    else:
        _echo(f"wrote {shown(out.result)}", err=True)
        if out.tiles_removed:
            _echo(f"removed its {out.tiles_removed:,} tiles (output.keep_tiles: false)",
                       err=True)


def report_repairs(out) -> None:
    """Files that failed verification and were recomputed (always shown: it means the
    disk or something else damaged a run file)."""
    for line in out.repaired:
        _echo(f"Warning: {line.split('; moved to')[0]}; it was moved to quarantine and "
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


def print_run_summary(summary) -> None:
    """``-v`` for compute and resume (on stderr): where the run computes and its plan,
    from :func:`kernelcli.run.run_summary`'s value."""
    plan = summary.plan
    g, m = plan.geometry, plan.memory
    n = m.devices
    where = (f"{n} {summary.platform} device{'' if n == 1 else 's'}"
             if summary.executor == "local" else f"a Ray cluster ({summary.platform} workers)")
    where += f" ({plan.engine} engine)"
    test = f" and {g.n_test:,} test rows" if g.n_test else ""
    lines = [
        f"{summary.name}: computing on {where}",
        f"  plan: {g.n1:,} x {g.n2:,}{test}, "
        f"{g.pairs_total:,} pair evaluations in {g.blocks_total:,} "
        f"blocks of edge {g.block:,}, {g.pair_batch:,} pairs per call",
        f"  memory: peak {format_size(plan.peak_bytes_per_device)} per device of a "
        f"budget of {format_size(m.budget_bytes)} from "
        f"{memory_source_text(summary.memory_source, m.memory_kind)}",
        f"  engine: {plan.engine} ({summary.engine_reason})",
    ]
    for line in lines:
        _echo(line, err=True)


def print_status(report) -> None:
    pct = 100.0 * report.pairs_done / max(report.pairs_total, 1)
    state = "finished" if report.finished else "not finished"
    removed = " (tiles removed after assembly)" if report.tiles_removed and report.finished \
        else ""
    _echo(f"{report.name}: {state}, {pct:.1f}% of pairs "
               f"({report.pairs_done:,}/{report.pairs_total:,}), "
               f"blocks {report.blocks_done}/{report.blocks_total}{removed}")
    if report.extend:
        e = report.extend
        doing = "extended" if report.finished else "extend in progress"
        _echo(f"  {doing}: {e.n1_before:,} -> {e.n1:,} training and "
                   f"{e.n_test_before:,} -> {e.n_test:,} test examples; "
                   f"{e.blocks_reused:,} tiles kept from before")
    if report.shards and not any(row.started for row in report.shards):
        n = report.shards[0].count
        _echo(f"  no process of a {n}-process job array (--shard I/{n}) has run here; "
                   f"how the run's tiles divide over {n}:")
    for row in report.shards:
        pct = 100.0 * row.pairs_done / row.pairs_total if row.pairs_total else 100.0
        note = "done" if row.finished else ("running or stopped" if row.started
                                            else "not started")
        _echo(f"  shard {row.index}/{row.count}: {pct:5.1f}% of pairs "
                   f"({row.pairs_done:,}/{row.pairs_total:,}), blocks "
                   f"{row.blocks_done}/{row.blocks_total}, {note}")
    if report.ray is not None:
        _echo(ray_line(report.ray))
    for skipped in report.skipped:  # diagnostics files: skipped, never a failure
        _echo(f"skipped: {skipped}")
    engine = report.engine
    line = f"engine: {engine.name} (recorded in its manifest.json"
    if engine.native:
        line += (f"; native library {engine.native_library}, which a resume needs"
                 if engine.native_library else "; no native library recorded: a resume "
                 "needs the kernelcli that started it")
    line += (f"; CPU level {engine.cpu_level}, which a resume pins" if engine.cpu_level
             else "; no CPU level recorded")
    _echo(line + ")")
    _echo(f"files: {report.files:,} in the run directory; tiles: {report.tile_packs:,} "
               f"packs and {report.tiles_loose:,} files of their own")
    if report.readouts:
        _echo(f"readouts: {', '.join(report.readouts)}")
    if report.finished:
        _echo(f"result: {shown(report.result)}")
    elif report.result_problem:
        _echo(f"result: {report.result_problem}")


def ray_line(r) -> str:
    """``status``'s line on what the last Ray driver saw of its cluster."""
    def n(count: int, what: str) -> str:
        return f"{count} {what}{'' if count == 1 else 's'}"

    parts = []
    if r.nodes_lost:
        parts.append(f"{n(len(r.nodes_lost), 'node')} lost ({', '.join(r.nodes_lost)})")
    if r.actors_lost:
        parts.append(f"{n(r.actors_lost, 'actor')} lost")
    parts.append(f"{n(r.requeued, 'block')} requeued")
    placed = f"{r.placed} of {r.planned} actors placed"
    if r.waiting:
        placed += f", waiting for {r.waiting}"
    if r.given_up:
        placed += f", {r.given_up} given up"
    state = "running" if r.running else "not running"
    return (f"ray: {', '.join(parts)}; {placed} (driver pid {r.pid} on {r.host}, {state}; "
            f"recorded {r.updated})")


def print_verify(report, run_dir) -> None:
    if report.ok and report.tiles_removed:
        _echo(f"{run_dir}: verified: manifest and kernels.h5, every byte against its "
                   f"checksums (its tiles were removed after assembly: a damaged kernels.h5 "
                   f"would be computed again by resume, not rebuilt from them)")
    elif report.ok:
        _echo(f"{run_dir}: verified: manifest, {report.tiles_present:,} of "
                   f"{report.tiles_total:,} tiles and kernels.h5")
    else:
        for problem in report.problems:
            _echo(f"Error: {problem}", err=True)
        _echo(f"then run: {report.next_step}", err=True)


def print_clean(out) -> None:
    if out.tiles_removed:
        _echo(f"removed {out.tiles_removed:,} tiles ({format_size(out.bytes_removed)}) "
                   f"from {out.run_dir}; {out.result} verified and kept", err=True)
    else:
        _echo(f"{out.run_dir} has no tiles left to remove; {out.result} verified",
                   err=True)


def print_extend(out) -> None:
    """What ``extend`` will do (``--dry-run``) or did: the grown sizes and the cost
    against a fresh run of the grown data set."""
    what = "would grow" if out.dry_run else "grows"
    pct = 100.0 * out.pairs_new / max(out.pairs_total, 1)
    _echo(f"{shown(out.run_dir)}: {what} from {out.n1_before:,} to {out.n1:,} training "
               f"and from {out.n_test_before:,} to {out.n_test:,} test examples", err=True)
    _echo(f"  tiles: {out.blocks_reused:,} kept, {out.blocks_new:,} to compute, of "
               f"{out.blocks_total:,} (a fresh run computes all {out.blocks_total:,})",
               err=True)
    _echo(f"  pair evaluations: {out.pairs_new:,} of {out.pairs_total:,} ({pct:.1f}% of "
               f"a fresh run)", err=True)
