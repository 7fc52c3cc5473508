"""``kernelcli verify``: is this run directory exactly what an uninterrupted run writes?

Read-only: nothing is moved or rewritten (``resume`` and ``assemble`` do the
repairs). Checks, in order: the manifest (its checksum, its content, the
fingerprint of the configuration it records), every tile of the plan (sealed
checksum, block, run identity), the test diagonal, and ``kernels.h5`` (run identity,
one checksum per dataset, the plan's shapes, finite values, exact symmetry and a
positive diagonal for a symmetric kernel). A manifest that fails is an error (there
is no run to check against); everything else is reported as a list of problems.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..store import RunStore, row_bands
from ._manifest import plan_from_manifest
from ._open import check_recorded_config


@dataclass
class VerifyReport:
    """What ``verify`` found; ``ok`` only when there are no problems."""

    run_dir: str
    tiles_total: int
    tiles_present: int
    tiles_damaged: list = field(default_factory=list)
    result: str = "missing"          # "verified", "missing", or what is wrong with it
    problems: list = field(default_factory=list)
    next_step: Optional[str] = None
    tiles_removed: bool = False      # deleted on purpose once kernels.h5 verified

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return dict(dataclasses.asdict(self), ok=self.ok)


def verify(run_dir) -> VerifyReport:
    store = RunStore.open(run_dir)
    plan = plan_from_manifest(store.manifest, run_dir)
    check_recorded_config(store)
    p = store.manifest["plan"]
    kinds = tuple(p["kinds"])
    done = store.done_keys()
    planned = {b.key for b in plan.blocks}
    report = VerifyReport(str(store.run_dir), plan.blocks_total, len(done & planned),
                          tiles_removed=store.tiles_removed is not None)
    for exc_block, exc in store.damaged_tiles(plan.blocks, kinds):
        report.tiles_damaged.append(exc_block.key)
        report.problems.append(str(exc))
    for key in sorted(done - planned):
        report.problems.append(f"tile {store.tiles_dir / (key + '.h5')} is not a block of "
                               f"this run's plan")
    if plan.n_test and p["test_diagonal"]:
        problem = store.test_diagonal_problem(kinds)
        if problem is not None and (store.has_test_diagonal() or not store.finished):
            report.problems.append(problem)
    if store.finished:
        problem = result_problem(store, plan)
        report.result = "verified" if problem is None else problem
        if problem is not None:
            report.problems.append(f"{store.result_path} does not verify: {problem}")
    else:
        missing = plan.blocks_total - report.tiles_present
        report.problems.append(
            f"the run is not finished: {missing:,} of {plan.blocks_total:,} tiles are missing"
            if missing else "the run is not finished: every tile is there but kernels.h5 "
                            "has not been assembled")
    if report.tiles_removed and report.result != "verified":
        report.problems.append("its tiles were removed after assembly (kernelcli clean or "
                               "output.keep_tiles: false): resume computes them again")
    if report.problems:
        # resume recomputes missing tiles, moves damaged ones (and a result that fails)
        # to quarantine/, recomputes those and assembles again
        report.next_step = f"kernelcli resume {store.run_dir}"
    return report


def result_problem(store: RunStore, plan=None) -> Optional[str]:
    """``None`` when ``kernels.h5`` is whole and what the plan says it is: this run's,
    every dataset matching its checksum, the plan's shapes and dtype, finite, exactly
    symmetric with a positive diagonal; else what is wrong. What must hold before
    anything relies on ``kernels.h5`` alone (the tiles are removed)."""
    if plan is None:
        plan = plan_from_manifest(store.manifest, store.run_dir)
    problem = store.result_problem()
    if problem is None:
        p = store.manifest["plan"]
        problem = _check_values(store, plan, tuple(p["kinds"]), p)
    return problem


def _check_values(store: RunStore, plan, kinds, p) -> Optional[str]:
    """Shapes, dtype, finiteness, symmetry and diagonal of the assembled datasets."""
    import h5py

    dtype = np.dtype(p["dtype"])
    shapes = {k: (plan.n1, plan.n2) for k in kinds}
    if plan.n_test:
        shapes.update({f"{k}_test": (plan.n_test, plan.n2) for k in kinds})
        if p["test_diagonal"]:
            shapes.update({f"{k}_test_diag": (plan.n_test,) for k in kinds})
    with h5py.File(store.result_path, "r") as f:
        for name, shape in shapes.items():
            if name not in f:
                return f"it has no dataset {name!r}"
            d = f[name]
            if d.shape != shape or d.dtype != dtype:
                return (f"dataset {name!r} is {d.dtype}{list(d.shape)}, not "
                        f"{dtype}{list(shape)}")
            for r0, band in row_bands(d):
                if not np.isfinite(band).all():
                    return f"dataset {name!r} has values that are not finite (rows from {r0})"
                if name in kinds and plan.symmetric:
                    r1 = r0 + band.shape[0]
                    if not np.array_equal(band, d[:, r0:r1].T):
                        return f"dataset {name!r} is not exactly symmetric (rows {r0}-{r1 - 1})"
                    diag = band[np.arange(r1 - r0), np.arange(r0, r1)]
                    if not (diag > 0).all():
                        return f"dataset {name!r} has a diagonal entry that is not positive"
                if name.endswith("_test_diag") and not (band > 0).all():
                    return f"dataset {name!r} has an entry that is not positive"
    return None
