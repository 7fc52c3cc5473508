"""What ``kernelcli estimate`` prints: the plan of a run, its memory and, when asked,
its time and cost model, from :class:`kernelcli.run.EstimateResult`."""

from __future__ import annotations

import click

from ..config import format_size
from ._print_run import memory_source_text
from ._progress import format_duration


def _row(label: str, text: str) -> None:
    click.echo(f"  {label:<30} {text}")


def print_estimate(est) -> None:
    """The plan table of ``est`` (an EstimateResult), then its optional parts."""
    plan = est.plan
    g, m = plan.geometry, plan.memory
    click.echo(f"plan for {est.name} ({', '.join(est.kinds)}, {est.dtype}, "
               f"{est.platform}, {plan.engine} engine)")
    _row("engine", f"{plan.engine} ({est.engine_reason})")
    _row("N1 (rows)", f"{g.n1:,}")
    _row("N2 (columns)", f"{g.n2:,}")
    if g.n_test:
        _row("test rows (K(test, x1))", f"{g.n_test:,}")
    _row("pair evaluations", f"{g.pairs_total:,}")
    if est.group_size > 1:
        _row("kernel.augment", f"{', '.join(est.augment)}: {est.group_size} evaluations per "
                               f"pair (y and its flipped copies), "
                               f"{g.pairs_total * est.group_size:,} in all")
    _row("blocks (tiles)", f"{g.blocks_total:,}")
    _row("block edge", f"{g.block:,}")
    _row("pair batch", f"{g.pair_batch:,}")
    _row("devices", f"{m.devices}")
    _row("peak memory per device", format_size(plan.peak_bytes_per_device))
    _row("memory budget per device", format_size(m.budget_bytes))
    _row("memory budget from", memory_source_text(est.memory_source, m.memory_kind))
    process = format_size(est.process_peak_bytes_estimate)
    if est.device_peak_bytes is not None:  # an accelerator: host and device memory apart
        _row("peak host memory (process)", process)
        _row("peak device memory per device", format_size(est.device_peak_bytes))
    else:
        _row("peak memory of the process", process)
    _row("covariance entries per pair", f"{est.cov_elements_per_pair:,}")
    _row("one untiled call would need", format_size(plan.untiled_peak_bytes))
    _row("result on disk", format_size(g.output_bytes))
    if est.files is not None:
        f = est.files
        parts = [f"kernels.h5 {format_size(f.result_bytes)}"]
        if f.preprocess_bytes:
            parts.append(f"fitted preprocessing {format_size(f.preprocess_bytes)}")
        if f.tile_bytes:
            parts.append(f"tiles kept {format_size(f.tile_bytes)}")
        _row("run directory on disk", f"{format_size(f.disk_bytes)} ({', '.join(parts)})")
        _row("files in the run directory",
             f"{f.total:,} ({f.tiles:,} tiles, {f.packs:,} packs, {f.other:,} others; "
             f"output.keep_tiles: {'true' if f.keep_tiles else 'false'})")
    if est.patches is not None:
        _print_patches(est.patches)
    _print_parts(est)


def _print_patches(p) -> None:
    """data.preprocess: random_patches: its feature maps and what they cost."""
    _row("random patches: feature maps", " x ".join(f"{s:,}" for s in p.patches_output_shape)
         + f" ({p.patches_channels:,} channels)")
    _row("random patches: memory", f"fit {format_size(p.patches_fit_bytes)}, mapping the "
                                   f"rows read {format_size(p.patches_apply_bytes)}")
    _row("random patches fit on disk", format_size(p.patches_file_bytes))
    if p.patches_fit_seconds is not None and p.patches_apply_seconds is not None:
        _row("random patches: time", f"fit {format_duration(p.patches_fit_seconds)}, "
                                     f"mapping every row read "
                                     f"{format_duration(p.patches_apply_seconds)} "
                                     f"(in the estimated wall time)")


def _print_parts(est) -> None:
    """What ``predict`` will need, readouts, workers, the cost model and the time."""
    if est.solve:
        s = est.solve
        for c in s.solve_routes:
            cg = " (an estimate: CG's passes follow the kernel's spectrum)" \
                if c.route == "cg" else ""
            _row(f"predict: {c.route} route", f"about {format_duration(c.seconds)}{cg}, "
                                              f"{format_size(c.bytes)}"
                                              f"{'' if c.fits else ', does not fit'}")
        verdict = ("does not fit on any solver: predict will refuse; fewer --ridge values "
                   "or classes numbered 0 .. C-1" if s.solver == "none" else
                   f"--solver auto takes {s.solver}, the quickest that fits")
        route = {"cg": "CG solve", "eigen": "eigen solve"}.get(s.solver, "Cholesky solve")
        _row(f"predict: {route} needs",
             f"{format_size(s.solve_bytes)} ({s.classes:,} one-hot target columns, the "
             f"default ridges; {format_size(s.solve_available_bytes)} available: {verdict})")
        bound = ("at most (its cap of 2 N1 + 10 products with K per column); converged "
                 "columns stop, so usually far fewer" if s.solver == "cg"
                 else "the factorisations, solves and predictions")
        _row("predict: work of the solve", f"{s.solve_operations:,} multiply-adds ({bound})")
    if est.routes is not None:
        _print_routes(est.routes)
    if est.readouts:
        r = est.readouts
        one, apart = r.readout_layers_one_pass, r.readout_layers_separate
        _row("readouts (after body layers)", ", ".join(map(str, r.readouts)))
        _row("layers per pair, one pass", f"{one} (body to the last readout and a head "
                                          f"per readout)")
        _row("layers per pair, separately", f"{apart} (each truncated network run on its "
                                            f"own: {apart / max(one, 1):.2f}x)")
    if est.workers:
        w = est.workers
        _row("workers", f"{w.workers}")
        _row("pairs of the busiest worker", f"{w.worker_pairs_max:,} "
                                            f"({w.worker_balance:.2f}x an even share)")
    if est.cost is not None:
        from ..kernels import describe_cost

        for label, line in zip(("cost model: launches", "  bytes", "  predicted"),
                               describe_cost(est.cost), strict=True):
            _row(label, line)
    t = est.timing
    if t is None:
        return
    if t.timed_devices > 1:
        _row("time per pair", f"{t.seconds_per_pair * 1e3:.4g} ms of wall time, the "
                              f"{t.timed_devices} devices at once (one device: "
                              f"{t.seconds_per_pair_per_device * 1e3:.4g} ms a pair)")
    else:
        _row("time per pair", f"{t.seconds_per_pair * 1e3:.4g} ms of wall time")
    _row("estimated wall time", format_duration(t.seconds_estimate))
    parts = ", ".join(f"{name} {format_duration(seconds)}" for name, seconds in (
        ("start-up", t.startup_seconds), ("compiling", t.compile_seconds),
        ("per-input pass", t.stats_seconds), ("pairs", t.pairs_seconds),
        ("writing", t.writes_seconds)))
    _row("  of which", parts)
    _row("", "(a repeated run with the compilation cache skips compiling)")
    _row("cores while timing", _load_text(t))
    _row("timed on", f"{t.timed_on} (these times hold for this machine: run "
                     f"`kernelcli estimate --time` on yours)")
    if t.seconds_estimate_workers is not None:
        _row(f"wall time on {est.workers.workers} workers",
             format_duration(t.seconds_estimate_workers))


# Below this share of its cores the machine is loaded enough to say what the estimate
# depends on (a quiet machine's timing calls reach 0.95-1).
LOADED_SHARE = 0.85


def _load_text(t) -> str:
    """What share of its cores the timed calls had, and what that means for the estimate."""
    text = (f"{t.cores_share:.0%} of the {t.timed_cores} the run computes on (load average "
            f"{t.load_average:.1f})")
    if t.cores_share >= LOADED_SHARE:
        return text
    return (f"{text}: the machine is loaded, so the estimate holds while the load stays; "
            f"with the cores to itself about {format_duration(t.seconds_estimate_idle)}")


def _print_routes(r) -> None:
    """A landmark configuration: what the full kernel would cost beside it."""
    for name, pairs, size, solve, work in (
            ("full kernel", r.full_pairs, r.full_result_bytes, r.full_solve_bytes,
             r.full_solve_operations),
            (f"{r.landmarks:,} landmarks", r.landmark_pairs, r.landmark_result_bytes,
             r.landmark_solve_bytes, r.landmark_solve_operations)):
        time = ("" if r.seconds_per_pair is None
                else f", about {format_duration(pairs * r.seconds_per_pair)}")
        _row(f"route: {name}", f"{pairs:,} pairs{time}, {format_size(size)} on disk, "
                               f"predict needs {format_size(solve)} and {work:,} "
                               f"multiply-adds")
