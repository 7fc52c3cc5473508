"""``resume``: continue a run where it stopped; bit-identical to an uninterrupted run.

The run's configuration is the one its manifest records (:mod:`kernelcli.pipeline._open_run`); the job is
prepared against the run's plan and fitted preprocessing, then finished as
``compute`` finishes one (:func:`~._finish.continue_run`).
"""

from __future__ import annotations

from typing import Callable, Optional

from .._stop import Stop
from ..config import RunConfig
from ..pipeline import Progress, Shard, load_run_config, writes_run
from ..store import RunStore
from ._finish import RunSummary, continue_run
from ._results import RunResult
from ._run_checks import with_executor

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
    store, cfg = loaded if loaded is not None else load_run_config(run_dir)
    return continue_run(store, with_executor(cfg, executor, address), progress, shard,
                        on_start, stop)
