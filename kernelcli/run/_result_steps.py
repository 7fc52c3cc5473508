"""The result's two steps that a run takes itself and that ``assemble`` and ``clean``
take on request: assembling ``kernels.h5`` once every tile exists, and deleting the
tiles once it verifies."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..errors import ComputeError, DamagedTiles, resume_command
from ..store import RunStore, result_attrs
from ._results import CleanResult


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


def remove_verified_tiles(store: RunStore, plan) -> CleanResult:
    """Verify ``kernels.h5`` of ``store`` against ``plan``, then delete the tiles."""
    run_dir = store.run_dir
    if not store.finished:
        raise ComputeError(
            f"cannot clean {run_dir}: {store.result_path} does not exist (the run is not "
            f"finished); nothing was deleted. Finish it with `{resume_command(run_dir)}` "
            f"(or `kernelcli assemble {run_dir}`), then clean")
    problem = store.result_problem(values=True)
    if problem is not None:
        raise ComputeError(
            f"cannot clean {run_dir}: {store.result_path} does not verify ({problem}); "
            f"nothing was deleted. `{resume_command(run_dir)}` assembles it again from "
            f"the tiles")
    removed, size = store.remove_tiles()
    return CleanResult(run_dir=str(run_dir), result=str(store.result_path),
                       tiles_removed=removed, bytes_removed=size)
