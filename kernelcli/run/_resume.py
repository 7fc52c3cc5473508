"""``resume``: continue a run where it stopped; bit-identical to an uninterrupted run.

The run's configuration is the one its manifest records (:mod:`kernelcli.pipeline._open_run`); the job is
prepared against the run's plan and fitted preprocessing, then finished as
``compute`` finishes one (:func:`~._finish.finish`).
"""

from __future__ import annotations

from typing import Callable, Optional

from .._stop import Stop, or_new
from ..config import RunConfig
from ..pipeline import Progress, Shard, load_run_config, prepare_run, verified_result, writes_run
from ..store import RunStore
from ._finish import RunSummary, finish
from ._results import RunResult
from ._run_checks import check_combination, check_inputs_outside, with_executor

__all__ = ["resume"]



@writes_run
def resume(run_dir, progress: Optional[Callable[[Progress], None]] = None,
           shard: Optional[Shard] = None, executor: Optional[str] = None,
           address: Optional[str] = None, *,
           loaded: Optional[tuple[RunStore, RunConfig]] = None,
           on_start: Optional[Callable[[RunSummary], None]] = None,
           stop: Optional[Stop] = None) -> RunResult:
    """Continue the run in ``run_dir`` where it stopped; bit-identical to an uninterrupted run.

    ``shard = (I, N)`` continues only process I's share of a job array of N.
    ``loaded``: what :func:`load_run_config` returned for ``run_dir`` (not read again).
    ``on_start``, ``stop``: as for :func:`~._compute.compute`.
    """
    stop = or_new(stop)
    store, cfg = loaded if loaded is not None else load_run_config(run_dir)
    cfg = with_executor(cfg, executor, address)
    check_combination(cfg, shard)
    check_inputs_outside(cfg)
    result = verified_result(store)  # a finished run needs neither its data nor jax
    if result is not None:
        return RunResult(result=result, already_finished=True)
    with prepare_run(cfg, store, shard, stop=stop, progress=progress) as job:
        return finish(job, store, progress, shard, True, on_start, stop)
