"""``assemble``: build ``kernels.h5`` from a run's tiles (the same step a run takes
itself once every tile exists: :func:`~._result_steps.assemble_if_complete`).

Every tile is verified first; those that fail are moved to ``quarantine/`` and
:class:`DamagedTiles` names them (a resume computes them again).
"""

from __future__ import annotations

from ..errors import ComputeError, DamagedTiles, resume_command
from ..pipeline import check_recorded_config, verified_result, writes_run
from ..store import Manifest, RunStore
from ._result_steps import assemble_if_complete
from ._results import RunResult
from ._shard_progress import shard_counts

__all__ = ["assemble", "DamagedTiles"]


@writes_run
def assemble(run_dir) -> RunResult:
    """Build ``kernels.h5`` of ``run_dir`` from its tiles (no jax, no data needed).

    Raises :class:`ComputeError` (exit 1) saying how many tiles are missing, and of
    which shards, when the run is not complete.
    """
    store = RunStore.open(run_dir)
    plan = Manifest.check(store.manifest, run_dir).geometry
    check_recorded_config(store)
    existed = store.finished
    result = verified_result(store)
    if result is not None:
        return RunResult(result=result, already_finished=True, computed=False)
    if store.tiles_removed is not None:
        what = "did not verify (it was moved to quarantine/)" if existed else "does not exist"
        raise ComputeError(
            f"cannot assemble {store.result_path}: it {what} and the tiles were removed "
            f"after the run was assembled (`kernelcli clean` or output.keep_tiles: false); "
            f"compute them again with `{resume_command(run_dir)}`")
    path, missing = assemble_if_complete(store, plan)
    if path is None:
        where = ""
        per_shard = shard_counts(store, plan, None)
        if per_shard is not None:
            short = [f"{r.index}/{r.count} lacks {r.blocks_total - r.blocks_done}"
                     for r in per_shard.shards if not r.finished]
            where = f" (shard {'; '.join(short)})"
        raise ComputeError(
            f"cannot assemble {store.result_path}: {missing} of {plan.blocks_total} tiles "
            f"are missing{where}; compute them with `{resume_command(run_dir)}` (or rerun "
            f"the unfinished shards, `--shard I/N`), then assemble again")
    return RunResult(result=str(path), assembled=True, computed=False)
