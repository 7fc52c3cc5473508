"""``compute``: run a configuration (or continue its run) into its run directory.

Each returns a typed result (:mod:`kernelcli.run._results`) and raises only
:mod:`kernelcli.errors`; progress is reported through a callback and a stop is
requested through the ``stop`` it is given, so nothing here knows about terminals,
click or signals. A run goes one way: the configuration (loaded once), the job
(:func:`~kernelcli.pipeline._job.prepare_run`, on the backend ``compute.executor`` names),
the store, execution and assembly (:func:`~kernelcli.run._finish.finish`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Optional, Union

from .._stop import Stop, or_new
from ..config import RunConfig, load_config
from ..errors import RunDirError, resume_command
from ..pipeline import (
    Job,
    Progress,
    Shard,
    adopts,
    check_recorded_config,
    config_fingerprint,
    prepare_run,
    side_files,
    verified_result,
    with_run_dir,
)
from ..store import (
    Manifest,
    RunStore,
    check_new_run_dir,
    check_run_dir_path,
    owned_files,
    stored_identity,
)
from ._finish import RunSummary, finish
from ._results import RunResult
from ._run_checks import check_combination, check_inputs_outside, with_executor

__all__ = ["compute"]



def compute(config: Union[str, os.PathLike, RunConfig], run_dir=None, overwrite: bool = False,
            progress: Optional[Callable[[Progress], None]] = None, shard: Optional[Shard] = None,
            executor: Optional[str] = None, address: Optional[str] = None,
            on_start: Optional[Callable[[RunSummary], None]] = None,
            stop: Optional[Stop] = None) -> RunResult:
    """Run (or continue) the configuration ``config`` (a YAML file's path, or one loaded
    with :func:`kernelcli.config.load_config`).

    ``on_start(summary)`` is called once the run is planned, before its first tile, with
    :func:`run_summary` (the plan, platform and memory source); not for a finished run.

    ``shard = (I, N)`` computes only process I's share of the tiles (a job array of N
    processes writing one run directory). The run directory is created race-free by
    whichever process comes first and the others adopt its plan; the result is
    assembled by whichever process finds every tile done.

    ``stop``: a :class:`~kernelcli.run.Stop` another thread (or the CLI's signal handlers)
    may request; the run then ends at its next safe point with
    :class:`~kernelcli.errors.Interrupted`, its completed tiles kept. Default: a stop of
    this call's own (Ctrl-C's KeyboardInterrupt still ends it the same way).
    """
    stop = or_new(stop)
    cfg = config if isinstance(config, RunConfig) else load_config(config)
    cfg = with_executor(with_run_dir(cfg, run_dir), executor, address)
    check_combination(cfg, shard, overwrite)
    check_run_dir_path(cfg.output.run_dir, "output.run_dir" if run_dir is None else "<<run_dir>>")
    check_inputs_outside(cfg)
    with contextlib.ExitStack() as held:
        # a folder that is not a run yet gets its lock file only once it is known to be
        # kernelcli's to take (:func:`_create_run`): nothing is written in a user's folder
        locked = stored_identity(cfg.output.run_dir) is not None
        if locked:
            held.enter_context(RunStore(cfg.output.run_dir).lock(shared=shard is not None))
        store = None if overwrite else _existing_run(cfg)
        if store is None:
            _check_new(cfg.output.run_dir, overwrite)  # before the data is read
            with prepare_run(cfg, None, shard, stop=stop, progress=progress) as job:
                store, created = _create_run(job, overwrite, shard,
                                              None if locked else held)
                if created or adopts(job, store):
                    return _continue(job, store, progress, shard, not created, on_start,
                                     stop)
            # another process of a job array created the run first, with another plan
            # or fit: continue it as any existing run, with the data fingerprints known now
            fingerprints = job.fingerprints
        else:
            fingerprints = None
        with prepare_run(cfg, store, shard, fingerprints, stop, progress) as job:
            return _continue(job, store, progress, shard, True, on_start, stop)


def _check_new(run_dir, overwrite: bool) -> None:
    """Refuse, before any data is read, a run directory kernelcli may not take: one
    holding files that are not kernelcli's (with ``overwrite``, files under
    kernelcli's names that are not this run's)."""
    if overwrite and stored_identity(run_dir) is not None:
        owned_files(run_dir)
    else:
        check_new_run_dir(run_dir)


def _existing_run(cfg: RunConfig) -> Optional[RunStore]:
    """The store of the run ``cfg`` names when it holds a run already (of this
    configuration, else RunDirError); ``None`` when there is none yet."""
    run_dir = cfg.output.run_dir
    if not (run_dir / "manifest.json").exists():
        return None
    store = RunStore.open(run_dir)
    manifest = Manifest.check(store.manifest, run_dir).data
    check_recorded_config(store)
    if manifest.get("config_fingerprint") != config_fingerprint(cfg):
        raise RunDirError.naming(
            f"{run_dir} holds a run of a different configuration "
            f"({manifest.get('name')!r}); continue that one with `{resume_command(run_dir)}`, "
            f"pick another <<run_dir>>, or replace it with <<overwrite>>")
    return store


def _create_run(job: Job, overwrite: bool, shard: Optional[Shard],
                held: Optional[contextlib.ExitStack]) -> tuple[RunStore, bool]:
    """The run directory of ``job``, made now (its lock taken into ``held`` when the
    folder did not exist before): ``(store, True)``; or ``(store, False)`` when another
    process (of a job array) made it at the same moment."""
    store = RunStore(job.cfg.output.run_dir)
    if held is not None:
        if stored_identity(store.run_dir) is None:  # (else another shard made it first)
            check_new_run_dir(store.run_dir, side_files(job))
        store.make_dir()
        held.enter_context(store.lock(shared=shard is not None))
    if overwrite:
        return store.create(job.manifest(), overwrite=True, side_files=side_files(job)), True
    return store.create_or_join(job.manifest(), side_files=side_files(job))


def _continue(job: Job, store: RunStore, progress, shard: Optional[Shard], resumed: bool,
              on_start=None, stop: Optional[Stop] = None) -> RunResult:
    """The run's result when it is complete already; else compute what is missing."""
    result = verified_result(store)
    if result is not None:
        return RunResult(result=result, already_finished=True)
    return finish(job, store, progress, shard, resumed, on_start, stop)


