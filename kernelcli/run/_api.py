"""The operations the CLI offers, as library calls: compute, resume, assemble, estimate,
status.

Each returns plain data and raises only :mod:`kernelcli.errors`; progress is
reported through a callback, so nothing here knows about terminals or click.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable, Optional

from .. import __version__
from ..errors import ComputeError, RunDirError, UsageError
from ..plan import assign, make_plan
from ..spec import OutputSpec, RunConfig, load_config, parse_config
from ..spec._config import EXECUTORS
from ..store import LABELS, RunStore, preprocess_name
from ._executor import Progress, execute, interrupted_error
from ._job import Job, config_fingerprint, prepare
from ._shards import shard_blocks, shard_label

Shard = Optional[tuple]  # (I, N): process I of a job array of N, or None


def _with_run_dir(cfg: RunConfig, run_dir) -> RunConfig:
    if run_dir is None:
        return cfg
    return dataclasses.replace(cfg, output=OutputSpec(Path(run_dir)))


def _with_executor(cfg: RunConfig, executor: Optional[str], address: Optional[str]) -> RunConfig:
    """``cfg`` with the command line's ``--executor`` / ``--address`` (which win)."""
    if executor is None and address is None:
        return cfg
    compute = cfg.compute
    if executor is not None:
        if executor not in EXECUTORS:
            raise UsageError(f"--executor: {executor!r} is not an executor; expected one of "
                             f"{', '.join(EXECUTORS)}")
        compute = dataclasses.replace(compute, executor=executor)
    if address is not None:
        compute = dataclasses.replace(compute, address=address)
    if compute.address is not None and compute.executor != "ray":
        raise UsageError(f"--address: {compute.address!r} is given but the executor is "
                         f"{compute.executor}; add --executor ray, or drop --address")
    return dataclasses.replace(cfg, compute=compute)


def _check_combination(cfg: RunConfig, shard: Shard, overwrite: bool = False) -> None:
    """Refuse what cannot work, before anything is written."""
    if shard is not None and overwrite:
        raise UsageError(f"--overwrite cannot be combined with --shard {shard_label(shard)}: "
                         f"other processes of the job array may be writing the run "
                         f"directory; remove it (or pick another --run-dir) before starting "
                         f"the array")
    if cfg.compute.executor == "ray":
        if shard is not None:
            raise UsageError(f"--shard {shard_label(shard)} cannot be combined with the ray "
                             f"executor: a Ray driver already spreads all tiles over the "
                             f"cluster; use one or the other")
        from ._ray import require_ray

        require_ray()


_WHAT = {"labels": "the labels (data.labels_key, data.test_labels_key)",
         "preprocess": "the fitted data.preprocess"}


def _check_same_data(job: Job, manifest: dict, run_dir: Path) -> None:
    stored = manifest.get("data_fingerprints", {})
    for key in sorted(set(stored) | set(job.fingerprints)):
        value = job.fingerprints.get(key)
        if stored.get(key) != value:
            what = _WHAT.get(key) or f"data.{key} ({getattr(job.inputs, key).path})"
            raise RunDirError(
                f"{what} is not the data the run in "
                f"{run_dir} started with (its content fingerprint changed); restore the "
                f"original file, or start afresh with `kernelcli compute CONFIG "
                f"--run-dir {run_dir} --overwrite` or another --run-dir")


def result_attrs(manifest: dict) -> dict:
    """The attributes of ``kernels.h5``, from the manifest alone, so that whichever
    process assembles (any shard, ``kernelcli assemble``) writes the same file."""
    return {
        "config": manifest.get("config_text", ""),
        "name": manifest.get("name", ""),
        "kernelcli_version": __version__,
        "data_fingerprint": json.dumps(manifest.get("data_fingerprints", {}), sort_keys=True),
        "config_fingerprint": manifest.get("config_fingerprint", ""),
    }


def plan_from_manifest(manifest: dict, run_dir):
    """The plan a manifest records (its blocks and batch; no jax, no data needed)."""
    if "plan" not in manifest:
        raise RunDirError(f"{run_dir}/manifest.json was not written by kernelcli (no plan)")
    p = manifest["plan"]
    return make_plan(p["n1"], p["n2"], symmetric=p["symmetric"], bytes_per_pair=1,
                     fixed_bytes=0, budget_bytes=p["pair_batch"], kinds=p["kinds"],
                     itemsize=8 if p["dtype"] == "float64" else 4, block=p["block"],
                     pair_batch=p["pair_batch"], n_test=p.get("n_test", 0))


def _assemble_if_complete(store: RunStore, plan) -> tuple[Optional[Path], int]:
    """Assemble ``kernels.h5`` when every tile exists: ``(path or None, tiles missing)``.

    Safe when several processes do it at once: each writes its own temporary file
    and renames it into place; the content is the same either way.
    """
    done = store.done_keys()
    missing = sum(1 for b in plan.blocks if b.key not in done)
    if missing:
        return None, missing
    p = store.manifest["plan"]
    path = store.assemble(plan.blocks, plan.n1, plan.n2, tuple(p["kinds"]), p["dtype"],
                          plan.symmetric, result_attrs(store.manifest), n_test=plan.n_test,
                          test_diagonal=bool(p.get("test_diagonal")))
    return path, 0


def _finish(job: Job, store: RunStore, progress, shard: Shard = None) -> dict:
    """Compute this process's missing tiles, then assemble if the run is complete."""
    blocks = shard_blocks(job.plan.blocks, shard)
    if shard is not None:
        store.mark_shard(shard[0], shard[1], {
            "blocks": len(blocks), "pairs": sum(b.n_pairs for b in blocks)})
    try:
        if job.cfg.compute.executor == "ray":
            from ._ray import execute_ray

            execute_ray(job, store, job.cfg.compute.address, progress, blocks=blocks)
        else:
            execute(job, store, progress, blocks=blocks)
    except KeyboardInterrupt:
        raise interrupted_error(store.run_dir, shard) from None
    path, missing = _assemble_if_complete(store, job.plan)
    out = {"result": None if path is None else str(path), "already_finished": False,
           "assembled": path is not None, "blocks_missing": missing,
           "blocks_total": job.plan.blocks_total}
    if shard is not None:
        out.update(shard=list(shard), shard_blocks=len(blocks))
    return out


def side_files(job: Job) -> dict:
    """What a new run directory holds beside its manifest (see :mod:`kernelcli.store`)."""
    import io

    import numpy as np

    out = {}
    inputs = job.inputs
    if inputs.labels is not None or inputs.test_labels is not None:
        arrays = {k: v for k, v in (("labels", inputs.labels),
                                    ("test_labels", inputs.test_labels)) if v is not None}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        out[LABELS] = buf.getvalue()
    if inputs.preprocess is not None:
        out[preprocess_name(job.fingerprints["preprocess"])] = inputs.preprocess.to_bytes()
    return out


def stored_preprocess(store: RunStore):
    """The fitted preprocessing a run directory holds (``None`` when the run has none)."""
    fp = store.manifest.get("data_fingerprints", {}).get("preprocess")
    if fp is None:
        return None
    from ._inputs import check_preprocess_file

    return check_preprocess_file(store.side_path(preprocess_name(fp)), fp)


def _check_joined(job: Job, manifest: dict, run_dir: Path) -> None:
    """A run directory another process created at the same moment must hold this run."""
    if manifest.get("config_fingerprint") != config_fingerprint(job.cfg):
        raise RunDirError(
            f"{run_dir} holds a run of a different configuration ({manifest.get('name')!r}), "
            f"just created by another process; every process of a job array must be given "
            f"the same configuration and data")
    if "plan" not in manifest:
        raise RunDirError(f"{run_dir}/manifest.json was not written by kernelcli (no plan)")
    _check_same_data(job, manifest, run_dir)


def _same_plan(job: Job, stored: dict) -> bool:
    return all(stored.get(k) == v for k, v in job.manifest()["plan"].items())


def compute(config_path, run_dir=None, overwrite: bool = False,
            progress: Optional[Callable[[Progress], None]] = None, shard: Shard = None,
            executor: Optional[str] = None, address: Optional[str] = None) -> dict:
    """Run (or continue) the configuration at ``config_path``; returns a summary dict.

    ``shard = (I, N)`` computes only process I's share of the tiles (a job array of N
    processes writing one run directory). The run directory is created race-free by
    whichever process comes first and the others adopt its plan; the result is
    assembled by whichever process finds every tile done.
    """
    cfg = _with_executor(_with_run_dir(load_config(config_path), run_dir), executor, address)
    _check_combination(cfg, shard, overwrite)
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
        job = prepare(cfg, stored_plan=manifest["plan"], preprocess=stored_preprocess(store))
        _check_same_data(job, manifest, run_dir)
        if store.finished:
            job.inputs.close()
            return {"result": str(store.result_path), "already_finished": True}
    elif overwrite:
        job = prepare(cfg)
        try:
            store = RunStore(run_dir).create(job.manifest(), overwrite=True,
                                             side_files=side_files(job))
        except BaseException:
            job.inputs.close()
            raise
    else:
        job = prepare(cfg)
        try:
            store, created = RunStore(run_dir).create_or_join(job.manifest(),
                                                              side_files=side_files(job))
            if not created:  # another process (of a job array) was first: use its plan
                existing = True
                fingerprints = dict(job.fingerprints)
                stored_fp = store.manifest.get("data_fingerprints", {}).get("preprocess")
                refit = stored_fp is not None and stored_fp != fingerprints.get("preprocess")
                if refit:  # a fit that rounded differently: the run's own fit wins
                    fingerprints["preprocess"] = stored_fp
                    job.fingerprints = fingerprints
                _check_joined(job, store.manifest, run_dir)
                if refit or not _same_plan(job, store.manifest["plan"]):
                    job.inputs.close()
                    job = prepare(cfg, stored_plan=store.manifest["plan"],
                                  fingerprints=fingerprints,
                                  preprocess=stored_preprocess(store))
        except BaseException:
            job.inputs.close()
            raise
        if store.finished:
            job.inputs.close()
            return {"result": str(store.result_path), "already_finished": True}
    try:
        out = _finish(job, store, progress, shard)
    finally:
        job.inputs.close()
    out["resumed"] = existing
    return out


def load_run_config(run_dir) -> tuple[RunStore, RunConfig]:
    """The store of ``run_dir`` and the configuration its manifest recorded."""
    store = RunStore.open(run_dir)
    m = store.manifest
    if "config_text" not in m or "plan" not in m:
        raise RunDirError(f"{run_dir}/manifest.json was not written by kernelcli "
                          f"(no configuration recorded); it cannot be resumed")
    base = Path(m.get("config_dir", "."))
    moved = m.get("config_dir_from_run")
    if moved is not None and (Path(run_dir) / moved).is_dir():
        base = Path(os.path.normpath(Path(run_dir) / moved))
    cfg = parse_config(m["config_text"], base_dir=base, source=base / "config.yaml")
    return store, _with_run_dir(cfg, Path(run_dir))


def resume(run_dir, progress: Optional[Callable[[Progress], None]] = None,
           shard: Shard = None, executor: Optional[str] = None,
           address: Optional[str] = None) -> dict:
    """Continue the run in ``run_dir`` where it stopped; bit-identical to an uninterrupted run.

    ``shard = (I, N)`` continues only process I's share of a job array of N.
    """
    store, cfg = load_run_config(run_dir)
    cfg = _with_executor(cfg, executor, address)
    _check_combination(cfg, shard)
    if store.finished:
        return {"result": str(store.result_path), "already_finished": True}
    job = prepare(cfg, stored_plan=store.manifest["plan"], preprocess=stored_preprocess(store))
    try:
        _check_same_data(job, store.manifest, Path(run_dir))
        out = _finish(job, store, progress, shard)
    finally:
        job.inputs.close()
    out["resumed"] = True
    return out


def assemble(run_dir) -> dict:
    """Build ``kernels.h5`` of ``run_dir`` from its tiles (no jax, no data needed).

    Raises :class:`ComputeError` (exit 1) saying how many tiles are missing, and of
    which shards, when the run is not complete.
    """
    store = RunStore.open(run_dir)
    if store.finished:
        return {"result": str(store.result_path), "already_finished": True}
    plan = plan_from_manifest(store.manifest, run_dir)
    path, missing = _assemble_if_complete(store, plan)
    if path is None:
        where = ""
        per_shard = _shard_counts(store, plan, None)
        if per_shard is not None:
            short = [f"{r['index']}/{r['count']} lacks {r['blocks_total'] - r['blocks_done']}"
                     for r in per_shard["shards"] if not r["finished"]]
            where = f" (shard {'; '.join(short)})"
        raise ComputeError(
            f"cannot assemble {store.result_path}: {missing} of {plan.blocks_total} tiles "
            f"are missing{where}; compute them with `kernelcli resume {run_dir}` (or rerun "
            f"the unfinished shards, `--shard I/N`), then assemble again")
    return {"result": str(path), "already_finished": False}


def _shard_counts(store: RunStore, plan, shards: Optional[int]) -> Optional[dict]:
    """Per-shard progress for a job array of ``shards`` processes (default: the N of the
    newest ``shards/<I>of<N>.json`` marker); ``None`` when there is no job array."""
    markers = store.shard_markers()
    if shards is None:
        if not markers:
            return None
        shards = markers[0]["count"]
    started = {m["index"] for m in markers if m["count"] == shards}
    done = store.done_keys()
    rows = []
    for index, part in enumerate(assign(plan.blocks, shards)):
        blocks_done = sum(1 for b in part if b.key in done)
        rows.append({
            "index": index,
            "count": shards,
            "blocks_done": blocks_done,
            "blocks_total": len(part),
            "pairs_done": sum(b.n_pairs for b in part if b.key in done),
            "pairs_total": sum(b.n_pairs for b in part),
            "finished": blocks_done == len(part),
            "started": index in started,
        })
    return {"count": shards, "shards": rows,
            "counts_seen": sorted({m["count"] for m in markers})}


def status(run_dir, shards: Optional[int] = None) -> dict:
    """Progress of the run in ``run_dir`` from its tiles alone (no jax import), whatever
    wrote them; per shard for a job array (``shards`` = N, else the N that the shard
    processes recorded in ``shards/<I>of<N>.json``)."""
    if shards is not None and (isinstance(shards, bool) or int(shards) < 1):
        raise UsageError(f"--shards: {shards!r} is not a process count; expected a "
                         f"positive integer")
    store = RunStore.open(run_dir)
    m = store.manifest
    plan = plan_from_manifest(m, run_dir)
    done = store.done_keys()
    pairs_done = sum(b.n_pairs for b in plan.blocks if b.key in done)
    out = {
        "run_dir": str(store.run_dir),
        "name": m.get("name"),
        "pairs_done": pairs_done,
        "pairs_total": plan.pairs_total,
        "blocks_done": len(done & {b.key for b in plan.blocks}),
        "blocks_total": plan.blocks_total,
        "finished": store.finished,
        "result": str(store.result_path) if store.finished else None,
    }
    per_shard = _shard_counts(store, plan, None if shards is None else int(shards))
    if per_shard is not None:
        out["shard_count"] = per_shard["count"]
        out["shards"] = per_shard["shards"]
        out["shard_counts_seen"] = per_shard["counts_seen"]
    return out
