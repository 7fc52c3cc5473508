"""The operations the CLI offers, as library calls: compute, resume, assemble, status.

Each returns a typed result (:mod:`kernelcli.run._results`) and raises only
:mod:`kernelcli.errors`; progress is reported through a callback, so nothing here
knows about terminals or click. A run goes one way: the configuration (loaded once),
the job (:func:`~kernelcli.run._job.prepare_run`), the store, execution, assembly.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Optional, Union

from ..errors import (ComputeError, DamagedFileError, DamagedTiles, DiskFullError,
                      QuarantinedError, RunDirError, UsageError)
from ..spec import EXECUTORS, RunConfig, load_config, parse_config
from ..store import RunStore
from ._devices import is_out_of_memory, out_of_memory_error
from ._executor import Progress, execute, interrupted_error
from ._clean import remove_verified_tiles
from ._job import Job, adopts, config_fingerprint, extended_config, prepare_run, side_files
from ._manifest import check_manifest, plan_from_manifest, result_attrs
from ._results import RunResult
from ._shards import shard_blocks, shard_label
from ._status import shard_counts, status

__all__ = ["assemble", "compute", "load_run_config", "plan_from_manifest", "result_attrs",
           "resume", "run_summary", "status"]

Shard = Optional[tuple]  # (I, N): process I of a job array of N, or None


def _with_run_dir(cfg: RunConfig, run_dir) -> RunConfig:
    if run_dir is None:
        return cfg
    return dataclasses.replace(cfg, output=dataclasses.replace(cfg.output,
                                                            run_dir=Path(run_dir)))


def _with_executor(cfg: RunConfig, executor: Optional[str], address: Optional[str]) -> RunConfig:
    """``cfg`` with the arguments ``executor`` / ``address`` (which win)."""
    if executor is None and address is None:
        return cfg
    compute = cfg.compute
    if executor is not None:
        if executor not in EXECUTORS:
            raise UsageError.naming(f"<<executor>>: {executor!r} is not an executor; expected "
                                    f"one of {', '.join(EXECUTORS)}")
        compute = dataclasses.replace(compute, executor=executor)
    if address is not None:
        compute = dataclasses.replace(compute, address=address)
    if compute.address is not None and compute.executor != "ray":
        raise UsageError.naming(f"<<address>>: {compute.address!r} is given but the executor "
                                f"is {compute.executor}; add <<executor>> ray, or drop "
                                f"<<address>>")
    return dataclasses.replace(cfg, compute=compute)


def _check_combination(cfg: RunConfig, shard: Shard, overwrite: bool = False) -> None:
    """Refuse what cannot work, before anything is written."""
    if shard is not None and overwrite:
        raise UsageError.naming(f"<<overwrite>> cannot be combined with <<shard>> "
                                f"{shard_label(shard)}: other processes of the job array may "
                                f"be writing the run directory; remove it (or pick another "
                                f"<<run_dir>>) before starting the array")
    if cfg.compute.executor == "ray":
        if shard is not None:
            raise UsageError.naming(f"<<shard>> {shard_label(shard)} cannot be combined with "
                                    f"the ray executor: a Ray driver already spreads all "
                                    f"tiles over the cluster; use one or the other")
        from ._ray import require_ray

        require_ray()


def _assemble_if_complete(store: RunStore, plan) -> tuple[Optional[Path], int]:
    """Assemble ``kernels.h5`` when every tile exists: ``(path or None, tiles missing)``.

    Every tile is verified first; those that fail are moved to ``quarantine/`` and
    :class:`DamagedTiles` names them (a resume recomputes them). Safe when several
    processes do it at once: each writes its own temporary file and renames it into
    place; the content is the same either way.
    """
    done = store.done_keys()
    missing = sum(1 for b in plan.blocks if b.key not in done)
    if missing:
        return None, missing
    p = store.manifest["plan"]
    damaged = store.damaged_tiles(plan.blocks, tuple(p["kinds"]))
    if damaged:
        moved = store.quarantine_tiles([b for b, _ in damaged])
        raise DamagedTiles(store.run_dir, damaged, moved[0].parent)
    path = store.assemble(plan.blocks, plan.n1, plan.n2, tuple(p["kinds"]), p["dtype"],
                          plan.symmetric, result_attrs(store.manifest), n_test=plan.n_test,
                          test_diagonal=bool(p.get("test_diagonal")))
    return path, 0


def _verified_result(store: RunStore) -> Optional[str]:
    """The result's path when ``kernels.h5`` verifies; else ``None``, after moving a
    result that fails (another run's, damaged) to ``quarantine/`` so it is rebuilt. The
    result of the run this one grew from (``kernelcli extend``) is deleted instead."""
    store.growth.drop_superseded()
    if not store.finished:
        return None
    if store.result_problem() is None:
        return str(store.result_path)
    store.quarantine(store.result_path)
    return None


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What a run is about to do: its ``plan``, the devices' ``platform`` (a Ray run's:
    its workers'), the ``executor`` and what bound the memory budget
    (``memory_source``)."""

    plan: object  # kernelcli.plan.Plan
    name: str
    platform: str
    executor: str
    memory_source: str


def run_summary(job: Job) -> RunSummary:
    """The :class:`RunSummary` given to the ``on_start`` callback of :func:`compute` and
    :func:`resume` before the first tile."""
    platform = job.ray.info["platform"] if job.ray is not None else job.devices[0].platform
    return RunSummary(job.plan, job.cfg.name, platform, job.cfg.compute.executor,
                      job.memory_source)


def _finish(job: Job, store: RunStore, progress, shard: Shard, resumed: bool,
            on_start=None) -> RunResult:
    """Compute this process's missing tiles, then assemble if the run is complete.

    Tiles (or a test diagonal) that fail verification at assembly are in quarantine
    by then: they are computed once more and assembly tried again. With
    ``output.keep_tiles: false`` the tiles are deleted once ``kernels.h5`` verifies.

    A signal's requested stop (:mod:`kernelcli._interrupt`, checked at the executors'
    safe points and before assembling) or a KeyboardInterrupt (a caller without the
    CLI's handlers) ends it with :class:`~kernelcli.errors.Interrupted` (exit 128 +
    signum) saying how to resume.
    """
    from .. import _interrupt
    from ..errors import Interrupted

    blocks = shard_blocks(job.plan.blocks, shard)
    todo, repaired, removed = blocks, [], 0
    if on_start is not None:
        on_start(run_summary(job))
    with _interrupt.where(store.run_dir, shard):
        try:
            _interrupt.check()
            if store.tiles_removed is not None:  # the result is gone: tiles are computed again
                store.forget_tiles_removed()
            store.growth.drop_superseded()
            if store.growth.carried():  # a killed extend: the test tiles it kept (kernelcli extend)
                from ._carry import take_over

                take_over(store, job.plan)
            if shard is not None:
                store.mark_shard(shard[0], shard[1], {
                    "blocks": len(blocks), "pairs": sum(b.n_pairs for b in blocks)})
            for attempt in (1, 2):
                try:
                    execute(job, store, progress, blocks=todo)
                    _interrupt.check()
                    path, missing = _assemble_if_complete(store, job.plan)
                    break
                except QuarantinedError as exc:  # moved aside: computing again replaces it
                    if attempt == 2:
                        raise
                    # (the test diagonal has no blocks: execute() sees it missing)
                    todo = exc.blocks
                    repaired.append(str(exc))
                except DiskFullError as exc:
                    raise _disk_full(store, job.plan, exc, shard) from None
                except ComputeError as exc:  # a tile gone while it was read
                    if isinstance(exc, Interrupted) or not _assembled_elsewhere(store):
                        raise
                    path, missing = store.result_path, 0
                    break
            if path is not None and not job.cfg.output.keep_tiles:
                removed = remove_verified_tiles(store, job.plan).tiles_removed
        except Interrupted as exc:
            raise interrupted_error(store.run_dir, shard, exc.signum) from None
        except KeyboardInterrupt:
            raise interrupted_error(store.run_dir, shard) from None
        except RuntimeError as exc:  # XLA's out of memory: an error that says what to do
            if not is_out_of_memory(exc):
                raise
            raise out_of_memory_error(job.plan.budget_bytes, job.plan.memory_kind,
                                      job.memory_source == "compute.memory",
                                      store.run_dir, shard) from exc
    return RunResult(result=None if path is None else str(path), assembled=path is not None,
                     blocks_missing=missing, blocks_total=job.plan.blocks_total,
                     repaired=tuple(repaired), resumed=resumed,
                     shard=None if shard is None else tuple(shard), shard_blocks=len(blocks),
                     tiles_removed=removed)


def _assembled_elsewhere(store: RunStore) -> bool:
    """Whether another process of a job array assembled ``kernels.h5`` and removed the
    tiles (``output.keep_tiles: false``) while this one read them to assemble too."""
    return (store.tiles_removed is not None and store.finished
            and store.result_problem() is None)


def _disk_full(store: RunStore, plan, exc: DiskFullError, shard: Shard) -> DiskFullError:
    """The disk-full error, saying how much the rest of the run needs and how to go on."""
    from ..spec import format_size

    done = store.done_keys()
    per_value = plan.itemsize * len(plan.kinds)
    tiles = sum((b.r1 - b.r0) * (b.c1 - b.c0) * per_value + 4096
                for b in plan.blocks if b.key not in done)
    result = 0 if store.finished else (plan.n1 + plan.n_test) * plan.n2 * per_value
    again = "" if shard is None else f" --shard {shard[0]}/{shard[1]}"
    return DiskFullError(
        f"disk full while writing {exc.path}: the rest of the run needs about "
        f"{format_size(tiles + result)} more in {store.run_dir} (tiles "
        f"{format_size(tiles)}, kernels.h5 {format_size(result)}); free space, then "
        f"`kernelcli resume {store.run_dir}{again}`", exc.path)


def compute(config: Union[str, os.PathLike, RunConfig], run_dir=None, overwrite: bool = False,
            progress: Optional[Callable[[Progress], None]] = None, shard: Shard = None,
            executor: Optional[str] = None, address: Optional[str] = None,
            on_start: Optional[Callable[[RunSummary], None]] = None) -> RunResult:
    """Run (or continue) the configuration ``config`` (a YAML file's path, or one loaded
    with :func:`kernelcli.spec.load_config`).

    ``on_start(summary)`` is called once the run is planned, before its first tile, with
    :func:`run_summary` (the plan, platform and memory source); not for a finished run.

    ``shard = (I, N)`` computes only process I's share of the tiles (a job array of N
    processes writing one run directory). The run directory is created race-free by
    whichever process comes first and the others adopt its plan; the result is
    assembled by whichever process finds every tile done.
    """
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    cfg = _with_executor(_with_run_dir(cfg, run_dir), executor, address)
    _check_combination(cfg, shard, overwrite)
    store = None if overwrite else _existing_run(cfg)
    if store is None:
        with prepare_run(cfg, None, shard) as job:
            store, created = _create_run(job, overwrite)
            if created or adopts(job, store):
                return _continue(job, store, progress, shard, not created, on_start)
        # another process of a job array created the run first, with another plan or
        # fit: continue it as any existing run, with the data fingerprints known now
        fingerprints = job.fingerprints
    else:
        fingerprints = None
    with prepare_run(cfg, store, shard, fingerprints) as job:
        return _continue(job, store, progress, shard, True, on_start)


def resume(run_dir, progress: Optional[Callable[[Progress], None]] = None,
           shard: Shard = None, executor: Optional[str] = None,
           address: Optional[str] = None, *,
           loaded: Optional[tuple[RunStore, RunConfig]] = None,
           on_start: Optional[Callable[[RunSummary], None]] = None) -> RunResult:
    """Continue the run in ``run_dir`` where it stopped; bit-identical to an uninterrupted run.

    ``shard = (I, N)`` continues only process I's share of a job array of N.
    ``loaded``: what :func:`load_run_config` returned for ``run_dir`` (not read again).
    ``on_start``: as for :func:`compute`.
    """
    store, cfg = loaded if loaded is not None else load_run_config(run_dir)
    cfg = _with_executor(cfg, executor, address)
    _check_combination(cfg, shard)
    result = _verified_result(store)  # a finished run needs neither its data nor jax
    if result is not None:
        return RunResult(result=result, already_finished=True)
    with prepare_run(cfg, store, shard) as job:
        return _finish(job, store, progress, shard, True, on_start)


def _existing_run(cfg: RunConfig) -> Optional[RunStore]:
    """The store of the run ``cfg`` names when it holds a run already (of this
    configuration, else RunDirError); ``None`` when there is none yet."""
    run_dir = cfg.output.run_dir
    if not (run_dir / "manifest.json").exists():
        return None
    store = RunStore.open(run_dir)
    manifest = check_manifest(store.manifest, run_dir)
    check_recorded_config(store)
    if manifest.get("config_fingerprint") != config_fingerprint(cfg):
        raise RunDirError.naming(
            f"{run_dir} holds a run of a different configuration "
            f"({manifest.get('name')!r}); continue that one with `kernelcli resume "
            f"{run_dir}`, pick another <<run_dir>>, or replace it with <<overwrite>>")
    return store


def _create_run(job: Job, overwrite: bool) -> tuple[RunStore, bool]:
    """The run directory of ``job``, made now: ``(store, True)``; or ``(store, False)``
    when another process (of a job array) made it at the same moment."""
    store = RunStore(job.cfg.output.run_dir)
    if overwrite:
        return store.create(job.manifest(), overwrite=True, side_files=side_files(job)), True
    return store.create_or_join(job.manifest(), side_files=side_files(job))


def _continue(job: Job, store: RunStore, progress, shard: Shard, resumed: bool,
              on_start=None) -> RunResult:
    """The run's result when it is complete already; else compute what is missing."""
    result = _verified_result(store)
    if result is not None:
        return RunResult(result=result, already_finished=True)
    return _finish(job, store, progress, shard, resumed, on_start)


def load_run_config(run_dir) -> tuple[RunStore, RunConfig]:
    """The store of ``run_dir`` and the configuration its manifest recorded."""
    store = RunStore.open(run_dir)
    check_manifest(store.manifest, run_dir)
    return store, check_recorded_config(store)


def recorded_config(store: RunStore) -> RunConfig:
    """The configuration the (checked) manifest of ``store`` records, its paths as when
    the run started (or next to the run, when config, data and run moved together)."""
    m, run_dir = store.manifest, store.run_dir
    recorded = Path(m.get("config_dir", "."))
    bases = [recorded]
    moved = m.get("config_dir_from_run")
    if isinstance(moved, str) and (Path(run_dir) / moved).is_dir():
        bases.insert(0, Path(os.path.normpath(Path(run_dir) / moved)))
    try:
        configs = [parse_config(m["config_text"], base_dir=b, source=b / "config.yaml")
                   for b in bases]
    except UsageError as exc:
        raise DamagedFileError(f"{run_dir / 'manifest.json'}: its configuration is not valid "
                               f"({exc})") from None
    # where config, data and run moved together, the data is found next to the run;
    # otherwise where the configuration was when the run started
    cfg = next((c for c in configs if c.data.x1.exists()), configs[-1])
    return _with_run_dir(extended_config(cfg, m.get("extend")), Path(run_dir))


def check_recorded_config(store: RunStore) -> RunConfig:
    """The configuration of the manifest, which must have the fingerprint recorded beside
    it (a manifest edited and given a fresh checksum is still refused)."""
    cfg = recorded_config(store)
    extension = store.manifest.get("extend")
    if config_fingerprint(cfg, extension) != store.manifest["config_fingerprint"]:
        raise DamagedFileError(f"{store.run_dir / 'manifest.json'}: the configuration it "
                               f"records does not have the fingerprint it was recorded with; "
                               f"start the run afresh with `kernelcli compute CONFIG "
                               f"--overwrite`")
    return cfg


def assemble(run_dir) -> RunResult:
    """Build ``kernels.h5`` of ``run_dir`` from its tiles (no jax, no data needed).

    Raises :class:`ComputeError` (exit 1) saying how many tiles are missing, and of
    which shards, when the run is not complete.
    """
    store = RunStore.open(run_dir)
    plan = plan_from_manifest(store.manifest, run_dir)
    check_recorded_config(store)
    existed = store.finished
    result = _verified_result(store)
    if result is not None:
        return RunResult(result=result, already_finished=True, computed=False)
    if store.tiles_removed is not None:
        what = "did not verify (it was moved to quarantine/)" if existed else "does not exist"
        raise ComputeError(
            f"cannot assemble {store.result_path}: it {what} and the tiles were removed "
            f"after the run was assembled (`kernelcli clean` or output.keep_tiles: false); "
            f"compute them again with `kernelcli resume {run_dir}`")
    path, missing = _assemble_if_complete(store, plan)
    if path is None:
        where = ""
        per_shard = shard_counts(store, plan, None)
        if per_shard is not None:
            short = [f"{r.index}/{r.count} lacks {r.blocks_total - r.blocks_done}"
                     for r in per_shard["shards"] if not r.finished]
            where = f" (shard {'; '.join(short)})"
        raise ComputeError(
            f"cannot assemble {store.result_path}: {missing} of {plan.blocks_total} tiles "
            f"are missing{where}; compute them with `kernelcli resume {run_dir}` (or rerun "
            f"the unfinished shards, `--shard I/N`), then assemble again")
    return RunResult(result=str(path), assembled=True, computed=False)
