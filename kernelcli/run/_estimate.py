"""``estimate``: the plan of a run, its memory and (optionally) its time, before it runs.

A requested ``stop`` (:mod:`kernelcli._stop`) is honoured before and after each
compilation: :class:`~kernelcli.errors.Interrupted`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from .._stop import Stop, check, or_new
from .._system import peak_rss_bytes, process_age_seconds
from ..config import RunConfig, load_config, walk
from ..errors import UsageError
from ..pipeline import STATS_ROWS, Job, check_shard_count, prepare, route_costs, worker_loads
from ._estimate_patches import patch_cost
from ._estimate_time import time_run
from ._results import EstimateResult, PlannedFiles, ReadoutWork, SolveNeed, WorkerSplit


def estimate(config, run_time: bool = False, workers: Optional[int] = None,
             bandwidth: Optional[float] = None,
             launch_latency: Optional[float] = None,
             stop: Optional[Stop] = None) -> EstimateResult:
    """The plan of a run before anything runs (and, with ``run_time``, a timed batch).

    ``config``: a YAML file's path or a loaded :class:`~kernelcli.config.RunConfig`.
    ``workers = W``: how the work divides over W processes (``shard=(I, N)`` job
    arrays): the most loaded worker's share of pair evaluations from the same split
    the shards use, and with ``run_time`` the wall time when every worker is like
    this machine.

    On an accelerator the host's and the devices' peaks are apart (``process_peak``
    is the host's: inputs, variances, tiles, Python; ``device_peak_bytes_estimate``
    the compiled programs' per device), and an accelerator engine's cost model
    (:func:`kernelcli.kernels.cost_model`) is reported at ``bandwidth`` (bytes/s) and
    ``launch_latency`` (s), default an H200's.

    ``stop``: as for :func:`~kernelcli.run.compute`.
    """
    if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
        raise UsageError.naming(f"<<workers>>: {workers!r} is not a worker count; expected a "
                                f"positive integer")
    stop = or_new(stop)
    check(stop)
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    # values checked (a NaN is found before a long run, not in it), never hashed
    with prepare(cfg, fit_preprocess=False, fingerprints={}, stop=stop) as job:
        startup = process_age_seconds()  # what `compute` spends too before its first call
        plan = job.plan
        landmark = job.inputs.landmarks is not None
        solve = (_solve_memory(plan.n1, plan.n_test, job.inputs.labels,
                               job.inputs.test_labels, len(plan.kinds),
                               _variance_kinds(cfg, plan.kinds))
                 if not landmark and (cfg.data.test is not None or cfg.data.has_labels)
                 else None)
        # The per-input pass runs first, in slices of STATS_ROWS inputs; the memory
        # it frees stays with the process (malloc keeps it), so it adds up.
        stats_rows = job.kfn.stats_rows(min(STATS_ROWS, plan.n1))
        check(stop)
        stats_peak = job.kfn.compiled_stats_memory(stats_rows)
        check(stop)
        on_device = plan.memory_kind == "device"
        device_peak = max(plan.peak_bytes_per_device, stats_peak) if on_device else None
        # on CPU the devices' buffers are the process's; on an accelerator the host
        # holds the inputs, variances and a tile per device on top of its baseline
        process_peak = peak_rss_bytes() + job.stats_bytes + (
            len(job.devices) * plan.block * plan.block * len(plan.kinds) * plan.itemsize
            if on_device else stats_peak + len(job.devices) * plan.peak_bytes_per_device)
        cost = (_cost(job, bandwidth, launch_latency, stop)
                if job.kfn.engine.batched else None)
        split = None
        if workers is not None:
            check_shard_count((0, int(workers)), plan, argument="workers")
            loads = worker_loads(plan.blocks, int(workers))
            # the wall time follows the most loaded worker
            split = WorkerSplit(
                workers=int(workers), worker_pairs_max=max(loads),
                worker_pairs_min=min(loads),
                worker_balance=max(loads) * int(workers) / max(plan.pairs_total, 1))
        timing = None
        if run_time:
            timing = time_run(job, startup, stop)
            if split is not None:
                # Every worker starts, compiles and runs the per-input pass over all
                # inputs; the pairs follow the most loaded worker's share.
                t = timing
                share = split.worker_pairs_max / max(plan.pairs_total, 1)
                timing = dataclasses.replace(t, seconds_estimate_workers=(
                    t.startup_seconds + t.compile_seconds + t.stats_seconds
                    + share * (t.pairs_seconds + t.writes_seconds)))
        routes = None
        if landmark:
            labels = job.inputs.labels
            routes = route_costs(job.inputs.x1.n, job.inputs.test.n if job.inputs.test
                                 else 0, plan.n2, len(plan.kinds), plan.itemsize,
                                 _classes(labels, job.inputs.test_labels),
                                 None if timing is None else timing.seconds_per_pair)
        patches = patch_cost(job, run_time, stop)
        if patches is not None:  # mapping rows while computing; fitting before
            process_peak = max(process_peak + patches.patches_apply_bytes,
                               peak_rss_bytes() + patches.patches_fit_bytes)
            if timing is not None:
                seconds = (patches.patches_fit_seconds or 0.0) + (
                    patches.patches_apply_seconds or 0.0)
                timing = dataclasses.replace(
                    timing, seconds_estimate=timing.seconds_estimate + seconds)
        return EstimateResult(
            plan=plan, name=cfg.name, kinds=tuple(plan.kinds), dtype=cfg.kernel.dtype,
            platform=job.devices[0].platform, stats_bytes=job.stats_bytes,
            cov_elements_per_pair=job.kfn.cov_elements, stats_peak_bytes=stats_peak,
            process_peak_bytes_estimate=process_peak, solve=solve, workers=split,
            timing=timing, memory_source=job.memory_source,
            augment=tuple(job.kfn.augment), group_size=len(job.kfn.group),
            readouts=readout_work(cfg.architecture), device_peak_bytes=device_peak,
            cost=cost, routes=routes,
            files=planned_files(cfg, plan, job.inputs.x1.example_shape),
            engine_reason=job.engine_reason, patches=patches)


def _cost(job: Job, bandwidth, launch_latency, stop: Stop):
    """The accelerator engine's cost model at the plan's pair batch, launches counted in
    the compiled pairs program (the memory model's executable where shapes match)."""
    from ..kernels import H200_BANDWIDTH, H200_LAUNCH_LATENCY, cost_model, pairs_program_text

    plan = job.plan
    check(stop)
    text = pairs_program_text(job.kfn, plan.block, plan.block, plan.pair_batch)
    check(stop)
    return cost_model(job.kfn, plan.pair_batch, hlo_text=text,
                      platform=job.devices[0].platform,
                      bandwidth=bandwidth or H200_BANDWIDTH,
                      launch_latency=launch_latency or H200_LAUNCH_LATENCY)


def readout_work(arch) -> Optional[ReadoutWork]:
    """What one pass with readouts saves, as layers evaluated per pair (branches' layers
    included; every layer counted as one whatever its cost): the body up to the last
    readout plus one head per readout, against the sum of the truncated networks
    (``after[i]`` body layers and the head each) run separately. ``None`` without
    readouts."""
    ro = arch.readouts
    if ro is None:
        return None

    def count(layers) -> int:
        return sum(1 for _ in walk(layers))

    head = count(ro.head)
    return ReadoutWork(
        readouts=list(ro.after),
        readout_layers_one_pass=count(arch.layers[:ro.after[-1]]) + head * len(ro.after),
        readout_layers_separate=sum(count(arch.layers[:a]) + head for a in ro.after))


def _classes(labels, test_labels) -> int:
    """The one-hot target columns ``predict`` will solve for (1 without labels)."""
    from ..solvers import class_count

    return 1 if labels is None or not len(labels) else class_count(labels, test_labels)


def _variance_kinds(cfg, kinds) -> int:
    """The kinds whose posterior variance ``predict`` solves for (the NNGP's, with
    ``kernel.test_diagonal``)."""
    from ..config import base_kind

    return sum(base_kind(k) == "nngp" for k in kinds) if cfg.kernel.test_diagonal else 0


def _solve_memory(n: int, m: int, labels, test_labels, kinds: int,
                  variance_kinds: int = 0) -> SolveNeed:
    """What ``kernelcli predict`` will need for the (n, n) training kernel with its
    default ridges: every route's time and memory on this machine, the route ``auto``
    takes (the quickest that fits; ``none`` when none fits, as predict then refuses),
    and that route's memory and multiply-adds."""
    from .._system import available_ram_bytes
    from ..errors import BudgetError
    from ..plan import auto_budget
    from ..solvers import (
        cg_operations,
        cholesky_operations,
        choose_solver,
        route_costs,
    )
    from ._predict_common import CV_FOLDS, DEFAULT_RIDGES

    available = auto_budget(available_ram_bytes())
    classes = _classes(labels, test_labels)
    ridges, folds = len(DEFAULT_RIDGES), min(CV_FOLDS, n)
    costs = route_costs(n, m, classes, ridges, kinds, folds, variance_kinds, available)
    try:
        solver = choose_solver(n, "auto", available, m, classes, ridges, kinds, folds,
                               variance_kinds)
    except BudgetError:
        solver = "none"
    # the route taken's bytes from its price (none fits: counted on Cholesky's)
    need = next(c.bytes for c in costs if c.route == ("cholesky" if solver == "none"
                                                        else solver))
    if solver == "cg":
        work = cg_operations(n, m, classes, ridges, kinds, folds)
    else:
        work = cholesky_operations(n, m, classes, ridges, kinds, variance_kinds)
    return SolveNeed(solve_bytes=need, solve_available_bytes=available, solver=solver,
                     classes=classes, solve_operations=work, solve_routes=costs)


def planned_files(cfg, plan, example_shape=None) -> PlannedFiles:
    """The files of the finished run directory under ``output.keep_tiles``: its tiles
    (packed as one process packs them, with the default ``KERNELCLI_PACK_TILES``), or
    none once ``kernels.h5`` verifies, and the others (manifest, result, lock, side
    files, and the record that the tiles were removed); their bytes, the preprocessing's
    side file's counted from ``example_shape`` (one input example's)."""
    from ..data import preprocess_file_bytes
    from ..store import planned_tile_files

    keep = cfg.output.keep_tiles
    per_value = plan.itemsize * len(plan.kinds)
    sizes = [(b.r1 - b.r0) * (b.c1 - b.c0) * per_value + 4096 for b in plan.blocks] \
        if keep else []
    loose, packs = planned_tile_files(sizes) if keep else (0, 0)
    data = cfg.data
    other = 3 + (not keep) + bool(data.has_labels) + (data.preprocess is not None) + bool(
        plan.n_test and cfg.kernel.test_diagonal)
    fitted = (preprocess_file_bytes(data.preprocess, example_shape)
              if data.preprocess is not None and example_shape is not None else 0)
    return PlannedFiles(keep_tiles=keep, tiles=loose, packs=packs, other=other,
                        result_bytes=plan.output_bytes, preprocess_bytes=fitted,
                        tile_bytes=sum(sizes))
