"""``assemble``: build ``kernels.h5`` from a run's tiles, and the assembly a run does
itself once every tile exists (:func:`assemble_if_complete`).

Every tile is verified first; those that fail are moved to ``quarantine/`` and
:class:`DamagedTiles` names them (a resume computes them again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import ComputeError, DamagedTiles, resume_command
from ..pipeline import check_recorded_config, verified_result, writes_run
from ..store import Manifest, RunStore, result_attrs
from ._results import RunResult
from ._shard_progress import shard_counts

__all__ = ["assemble", "assemble_if_complete", "DamagedTiles"]


def assemble_if_complete(store: RunStore, plan,
                         announce: Optional[Callable[[str], None]] = None
                         ) -> tuple[Optional[Path], int]:
    """Assemble ``kernels.h5`` when every tile exists: ``(path or None, tiles missing)``.

    Every tile is verified first; those that fail are moved to ``quarantine/`` and
    :class:`DamagedTiles` names them (a resume recomputes them). Safe when several
    processes do it at once: each writes its own temporary file and renames it into
    place; the content is the same either way. ``announce(line)`` is told before the
    verification and the writing begin.
    """
    done = store.done_keys()
    missing = sum(1 for b in plan.blocks if b.key not in done)
    if missing:
        return None, missing
    if announce is not None:
        n = len(plan.blocks)
        announce(f"verifying the {n:,} tile{'' if n == 1 else 's'} and writing "
                 f"{store.result_path.name}")
    p = store.manifest["plan"]
    damaged = store.damaged_tiles(plan.blocks, tuple(p["kinds"]))
    if damaged:
        moved = store.quarantine_tiles([b for b, _ in damaged])
        raise DamagedTiles(store.run_dir, damaged, moved[0].parent)
    path = store.assemble(plan.blocks, plan.n1, plan.n2, tuple(p["kinds"]), p["dtype"],
                          plan.symmetric, result_attrs(store.manifest), n_test=plan.n_test,
                          test_diagonal=bool(p.get("test_diagonal")))
    return path, 0


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
