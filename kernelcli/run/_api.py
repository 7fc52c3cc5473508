"""The operations the CLI offers, as library calls: compute, resume, estimate, status.

Each returns plain data and raises only :mod:`kernelcli.errors`; progress is
reported through a callback, so nothing here knows about terminals or click.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import time
from pathlib import Path
from typing import Callable, Optional

from .. import __version__
from ..errors import RunDirError
from ..plan import make_plan
from ..spec import OutputSpec, RunConfig, load_config, parse_config
from ..store import RunStore
from ._executor import Progress, execute, interrupted_error
from ._job import Job, config_fingerprint, prepare


def _with_run_dir(cfg: RunConfig, run_dir) -> RunConfig:
    if run_dir is None:
        return cfg
    return dataclasses.replace(cfg, output=OutputSpec(Path(run_dir)))


def _check_same_data(job: Job, manifest: dict, run_dir: Path) -> None:
    stored = manifest.get("data_fingerprints", {})
    for key, value in job.fingerprints.items():
        if stored.get(key) != value:
            raise RunDirError(
                f"data.{key} ({getattr(job.inputs, key).path}) is not the data the run in "
                f"{run_dir} started with (its content fingerprint changed); restore the "
                f"original file, or start afresh with `kernelcli compute CONFIG "
                f"--run-dir {run_dir} --overwrite` or another --run-dir")


def _finish(job: Job, store: RunStore, progress) -> Path:
    try:
        execute(job, store, progress)
    except KeyboardInterrupt:
        raise interrupted_error(store.run_dir) from None
    attrs = {
        "config": job.cfg.text,
        "name": job.cfg.name,
        "kernelcli_version": __version__,
        "data_fingerprint": json.dumps(job.fingerprints, sort_keys=True),
        "config_fingerprint": config_fingerprint(job.cfg),
    }
    return store.assemble(job.plan.blocks, job.plan.n1, job.plan.n2, job.plan.kinds,
                          job.cfg.kernel.dtype, job.plan.symmetric, attrs)


def compute(config_path, run_dir=None, overwrite: bool = False,
            progress: Optional[Callable[[Progress], None]] = None) -> dict:
    """Run (or continue) the configuration at ``config_path``; returns a summary dict."""
    cfg = _with_run_dir(load_config(config_path), run_dir)
    run_dir = cfg.output.run_dir
    existing = (run_dir / "manifest.json").exists() and not overwrite
    if existing:
        store = RunStore.open(run_dir)
        manifest = store.manifest
        if manifest.get("config_fingerprint") != config_fingerprint(cfg):
            raise RunDirError(
                f"{run_dir} holds a run of a different configuration "
                f"({manifest.get('name')!r}); continue that one with `kernelcli resume "
                f"{run_dir}`, pick another --run-dir, or replace it with --overwrite")
        job = prepare(cfg, stored_plan=manifest["plan"])
        _check_same_data(job, manifest, run_dir)
        if store.finished:
            job.inputs.close()
            return {"result": str(store.result_path), "already_finished": True}
    else:
        job = prepare(cfg)
        store = RunStore(run_dir).create(job.manifest(), overwrite=overwrite)
    try:
        path = _finish(job, store, progress)
    finally:
        job.inputs.close()
    return {"result": str(path), "already_finished": False, "resumed": existing}


def load_run_config(run_dir) -> tuple[RunStore, RunConfig]:
    """The store of ``run_dir`` and the configuration its manifest recorded."""
    store = RunStore.open(run_dir)
    m = store.manifest
    if "config_text" not in m or "plan" not in m:
        raise RunDirError(f"{run_dir}/manifest.json was not written by kernelcli "
                          f"(no configuration recorded); it cannot be resumed")
    base = Path(m.get("config_dir", "."))
    cfg = parse_config(m["config_text"], base_dir=base, source=base / "config.yaml")
    return store, _with_run_dir(cfg, Path(run_dir))


def resume(run_dir, progress: Optional[Callable[[Progress], None]] = None) -> dict:
    """Continue the run in ``run_dir`` where it stopped; bit-identical to an uninterrupted run."""
    store, cfg = load_run_config(run_dir)
    if store.finished:
        return {"result": str(store.result_path), "already_finished": True}
    job = prepare(cfg, stored_plan=store.manifest["plan"])
    try:
        _check_same_data(job, store.manifest, Path(run_dir))
        path = _finish(job, store, progress)
    finally:
        job.inputs.close()
    return {"result": str(path), "already_finished": False, "resumed": True}


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def estimate(config_path, run_time: bool = False) -> dict:
    """The plan of a run before anything runs (and, with ``run_time``, a timed batch)."""
    cfg = load_config(config_path)
    job = prepare(cfg)
    try:
        plan = job.plan
        out = plan.to_dict()
        out.update({
            "name": cfg.name,
            "kinds": list(plan.kinds),
            "dtype": cfg.kernel.dtype,
            "devices": len(job.devices),
            "platform": job.devices[0].platform,
            "stats_bytes": job.stats_bytes,
            "cov_elements_per_pair": job.kfn.cov_elements,
        })
        baseline = _rss_bytes()
        out["process_peak_bytes_estimate"] = (baseline + job.stats_bytes
                                              + len(job.devices) * plan.peak_bytes_per_device)
        if run_time:
            out.update(_time_one_batch(job))
    finally:
        job.inputs.close()
    return out


def _time_one_batch(job: Job) -> dict:
    """Time one real pair batch (after compiling) and extrapolate to the plan."""
    import numpy as np

    from ._executor import _block_pairs, _pad_rows, _stats_for

    plan, kfn = job.plan, job.kfn
    block = plan.blocks[0]
    edge = plan.block
    x1 = _pad_rows(job.inputs.x1.read(block.r0, block.r1, dtype=kfn.dtype), edge)
    x2 = _pad_rows(job.inputs.second.read(block.c0, block.c1, dtype=kfn.dtype), edge)
    s1 = kfn.stats(x1)
    s2 = kfn.stats(x2)
    i, j = block.local_pairs()
    # A full batch when it is short; else a few chunks, to keep `estimate` quick.
    n = min(plan.pair_batch, max(4 * kfn.chunk, 64))
    i = np.resize(i, n)
    j = np.resize(j, n)
    kfn.pairs(x1, s1, x2, s2, i, j)  # compile
    t = time.perf_counter()
    res = kfn.pairs(x1, s1, x2, s2, i, j)
    for v in res.values():
        v.block_until_ready()
    per_batch = time.perf_counter() - t
    per_pair = per_batch / n
    # All devices work in parallel; the per-input pass costs one pair per input.
    n_inputs = plan.n1 + (0 if plan.symmetric else plan.n2)
    seconds = (plan.pairs_total + n_inputs) * per_pair / len(job.devices)
    return {"seconds_per_pair": per_pair, "seconds_estimate": seconds}


def status(run_dir) -> dict:
    """Progress of the run in ``run_dir`` from its tiles alone (no jax import)."""
    store = RunStore.open(run_dir)
    m = store.manifest
    if "plan" not in m:
        raise RunDirError(f"{run_dir}/manifest.json was not written by kernelcli (no plan)")
    p = m["plan"]
    plan = make_plan(p["n1"], p["n2"], symmetric=p["symmetric"], bytes_per_pair=1,
                     fixed_bytes=0, budget_bytes=p["pair_batch"], kinds=p["kinds"],
                     itemsize=8 if p["dtype"] == "float64" else 4, block=p["block"],
                     pair_batch=p["pair_batch"])
    done = store.done_keys()
    pairs_done = sum(b.n_pairs for b in plan.blocks if b.key in done)
    return {
        "run_dir": str(store.run_dir),
        "name": m.get("name"),
        "pairs_done": pairs_done,
        "pairs_total": plan.pairs_total,
        "blocks_done": len(done & {b.key for b in plan.blocks}),
        "blocks_total": plan.blocks_total,
        "finished": store.finished,
        "result": str(store.result_path) if store.finished else None,
    }
