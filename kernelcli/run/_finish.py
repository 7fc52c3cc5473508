"""Computing a prepared run's missing tiles and assembling it: what ``compute``,
``resume`` and ``extend`` share once their job is prepared (:func:`finish`), and the
:class:`RunSummary` their ``on_start`` callback is given.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from .._stop import Stop, check, interrupted_error, or_new
from ..errors import ComputeError, DiskFullError, Interrupted, QuarantinedError, resume_command
from ..pipeline import (
    Job,
    Shard,
    execute,
    is_out_of_memory,
    out_of_memory_error,
    prepare_run,
    shard_blocks,
    verified_result,
)
from ..plan import Plan
from ..store import RunStore, result_space_bytes
from ._result_steps import assemble_if_complete, remove_verified_tiles
from ._results import RunResult
from ._run_checks import check_combination, check_inputs_outside

__all__ = ["continue_run", "finish", "run_summary", "RunSummary"]



@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What a run is about to do: its ``plan``, the devices' ``platform`` (a Ray run's:
    its workers'), the ``executor`` and what bound the memory budget
    (``memory_source``)."""

    plan: Plan
    name: str
    platform: str
    executor: str
    memory_source: str
    engine_reason: str = ""  # why plan.engine, the engine, computes (kernels.engine_reason)


def run_summary(job: Job) -> RunSummary:
    """The :class:`RunSummary` given to the ``on_start`` callback of :func:`compute` and
    :func:`resume` before the first tile."""
    assert job.backend is not None  # prepare() opened it
    platform = job.backend.platform
    return RunSummary(job.plan, job.cfg.name, platform, job.cfg.compute.executor,
                      job.memory_source, job.engine_reason)


def continue_run(store: RunStore, cfg, progress=None, shard: Optional[Shard] = None,
                 on_start=None, stop: Optional[Stop] = None) -> RunResult:
    """Continue the run of ``store`` and its recorded configuration ``cfg`` where it
    stopped, bit-identical to an uninterrupted run (``resume``'s work, and ``extend``'s
    on a run it left unfinished); a finished run needs neither its data nor jax. The
    caller holds the run's lock."""
    check_combination(cfg, shard)
    check_inputs_outside(cfg)
    result = verified_result(store)
    if result is not None:
        return RunResult(result=result, already_finished=True)
    stop = or_new(stop)
    with prepare_run(cfg, store, shard, stop=stop, progress=progress) as job:
        return finish(job, store, progress, shard, True, on_start, stop)


def finish(job: Job, store: RunStore, progress, shard: Optional[Shard], resumed: bool,
           on_start=None, stop: Optional[Stop] = None) -> RunResult:
    """Compute this process's missing tiles, then assemble if the run is complete.

    Tiles (or a test diagonal) that fail verification at assembly are in quarantine
    by then: they are computed once more and assembly tried again. With
    ``output.keep_tiles: false`` the tiles are deleted once ``kernels.h5`` verifies.

    A requested ``stop`` (the one the job's backend was given: checked at the
    backends' safe points and before assembling; the CLI's signal handlers request
    it) or a KeyboardInterrupt (a caller without the CLI's handlers) ends it with
    :class:`~kernelcli.errors.Interrupted` (exit 128 + signum) saying how to resume;
    within it ``stop`` names this run (:meth:`~kernelcli._stop.Stop.where`).
    """
    stop = or_new(stop)
    blocks = shard_blocks(job.plan.blocks, shard)
    todo, repaired, removed = blocks, [], 0
    if on_start is not None:
        on_start(run_summary(job))
    with stop.where(store.run_dir, shard):
        try:
            check(stop)
            if store.tiles_removed is not None:  # the result is gone: tiles are computed again
                store.forget_tiles_removed()
            store.growth.drop_superseded()
            if store.growth.carried():  # a killed extend: the test tiles it kept (kernelcli extend)
                from ._extend_carry import take_over

                take_over(store, job.plan)
            if shard is not None:
                store.mark_shard(shard[0], shard[1], {
                    "blocks": len(blocks), "pairs": sum(b.n_pairs for b in blocks)})
            for attempt in (1, 2):
                try:
                    execute(job, store, progress, blocks=todo)
                    check(stop)
                    # a printer's line of its own for the wait (None without one)
                    path, missing = assemble_if_complete(store, job.plan,
                                                         getattr(progress, "stage", None))
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


def _disk_full(store: RunStore, plan, exc: DiskFullError, shard: Optional[Shard]) -> DiskFullError:
    """The disk-full error, saying how much the rest of the run needs and how to go on."""
    from ..config import format_size

    done = store.done_keys()
    per_value = plan.itemsize * len(plan.kinds)
    tiles = sum((b.r1 - b.r0) * (b.c1 - b.c0) * per_value + 4096
                for b in plan.blocks if b.key not in done)
    # kernels.h5 as its assembly checks for it: the data and HDF5's margin
    result = (0 if store.finished else
              result_space_bytes((plan.n1 + plan.n_test) * plan.n2 * per_value))
    return DiskFullError(
        f"disk full while writing {exc.path}: the rest of the run needs about "
        f"{format_size(tiles + result)} more in {store.run_dir} (tiles "
        f"{format_size(tiles)}, kernels.h5 {format_size(result)} with its metadata "
        f"margin); free space, then "
        f"`{resume_command(store.run_dir, shard)}`", exc.path)


