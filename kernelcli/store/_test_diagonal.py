"""``test_diag.h5``: the self-kernels of a run's test rows, one sealed file a run writes
once (:mod:`._sealed`), checked against the run's identity and the size its plan
implies, and read into ``kernels.h5`` at assembly as ``<kind>_test_diag``.

:class:`DiagonalFile` is a helper the store holds (``store.test_diag``): it uses the
store's manifest, identity and quarantine, and owns nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import QuarantinedError, RunDirError, resume_command
from ._manifest_schema import bytes_bound
from ._run_files import TEST_DIAG, check_test_diagonal
from ._sealed import write_sealed


class DiagonalFile:
    """The test diagonal of ``store``'s run."""

    def __init__(self, store):
        self._store = store

    @property
    def path(self) -> Path:
        return self._store.run_dir / TEST_DIAG

    def exists(self) -> bool:
        return self.path.is_file()

    def write(self, arrays: dict) -> Path:
        """Store kind -> ``(n_test,)`` self-kernels of the test rows as a sealed file."""
        return write_sealed(self.path, {k: np.asarray(v) for k, v in arrays.items()},
                            {"run": self._store.run_id})

    def problem(self, kinds):
        """``None`` when ``test_diag.h5`` is this run's and whole; else what is wrong."""
        return self._check(kinds)[1]

    def read(self, kinds) -> dict:
        """The stored test diagonal, verified; a damaged one is moved to quarantine."""
        datasets, problem = self._check(kinds)
        if problem is not None:
            if not self.path.is_file():
                raise RunDirError(f"{problem}; resume the run to write it")
            moved = self._store.quarantine(self.path)
            run_dir = self._store.run_dir
            raise QuarantinedError(f"{problem}; moved to {moved}: "
                                   f"`{resume_command(run_dir)}` computes it again")
        return {k: datasets[k] for k in kinds}

    def _check(self, kinds) -> tuple:
        """``(datasets, None)`` of a whole ``test_diag.h5`` of this run, else
        ``(None, what is wrong)``: one read serves the check and the values."""
        manifest = self._store.manifest
        plan = manifest.get("plan") if isinstance(manifest, dict) else None
        n_test, kinds = (plan.get("n_test"), plan.get("kinds")) if isinstance(plan, dict) \
            else (None, None)
        bound = (bytes_bound(1, n_test, len(kinds)) if isinstance(n_test, int)
                 and isinstance(kinds, list) else None)  # None: the generic cap
        return check_test_diagonal(self.path, self._store.run_id, kinds, bound)
