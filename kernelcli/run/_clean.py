"""``kernelcli clean``: delete the tiles of a finished run, once ``kernels.h5`` verifies.

The tiles are the second copy of every number in ``kernels.h5`` (kept so that a
damaged result is assembled again without computing); on a large run they double
the disk used. They are deleted only after the result passes the checks of
``kernelcli verify`` (checksums, run identity, shapes, finite values, symmetry), so
the one copy left is known to be whole; otherwise nothing is deleted.
``output.keep_tiles: false`` does the same at the end of ``compute`` and ``resume``.
"""

from __future__ import annotations

from ..pipeline import check_recorded_config, writes_run
from ..store import Manifest, RunStore
from ._result_steps import remove_verified_tiles
from ._results import CleanResult


@writes_run
def clean(run_dir) -> CleanResult:
    """Delete the tiles of the finished run in ``run_dir`` (no jax, no data needed).

    Raises :class:`ComputeError` (exit 1), deleting nothing, when ``kernels.h5`` does
    not exist or does not verify.
    """
    store = RunStore.open(run_dir)
    plan = Manifest.check(store.manifest, run_dir).geometry
    check_recorded_config(store)
    return remove_verified_tiles(store, plan)
