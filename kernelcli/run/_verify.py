"""``kernelcli verify``: is this run directory exactly what an uninterrupted run writes?

Read-only: nothing is moved or rewritten (``resume`` and ``assemble`` do the
repairs). Checks, in order: the manifest (its checksum, its content, the
fingerprint of the configuration it records), the side files that ``resume``,
``extend`` and ``predict`` read (the fitted preprocessing and the labels, against the
manifest's fingerprints), every tile of the plan (sealed
checksum, block, run identity; in a file of its own or in a pack, whose index is
checked too; every copy of a tile held twice; a pack of another run is refused, as a
tile of another run is), the test diagonal, and ``kernels.h5`` (run identity, one
checksum per dataset, the plan's shapes, finite values, exact symmetry and a
positive diagonal for a symmetric kernel). A manifest that fails is an error (there
is no run to check against); everything else is reported as a list of problems.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from ..errors import KernelcliError, resume_command
from ..pipeline import (
    check_present_files,
    check_recorded_config,
    missing_tiles_problem,
    side_file_problems,
)
from ..store import RunStore


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


def shadowed_problems(store: RunStore, blocks, kinds) -> list:
    """One line for each of the run's packs holding a damaged tile that reading the run
    never reads, since another copy of it (loose, or a pack sorting after) is read
    first: once that copy goes (a resume deletes loose copies of packed tiles, clean
    deletes everything), this one would be the run's."""
    blocks, out = {b.key: b for b in blocks}, []
    for pack, keys in store.tiles.shadowed():
        for key in (k for k in keys if k in blocks):
            try:
                store.tiles.read_packed(pack, blocks[key], kinds, store.tile_runs(blocks[key]))
            except KernelcliError as exc:
                out.append(str(exc))
                break
    return out


def verify(run_dir) -> VerifyReport:
    store = RunStore.open(run_dir)
    manifest = store.run_manifest
    plan = manifest.geometry
    check_recorded_config(store)
    check_present_files(store)
    kinds = manifest.kinds
    done = store.done_keys()
    planned = {b.key for b in plan.blocks}
    report = VerifyReport(str(store.run_dir), plan.blocks_total, len(done & planned),
                          tiles_removed=store.tiles_removed is not None)
    side = side_file_problems(store)  # each line says what to do: resume cannot repair them
    report.problems += side
    for exc_block, exc in store.damaged_tiles(plan.blocks, kinds):
        report.tiles_damaged.append(exc_block.key)
        report.problems.append(str(exc))
    for path, problem in store.damaged_packs():  # its tiles are not counted as present
        report.problems.append(f"tile pack {path} is damaged: {problem}")
    report.problems += shadowed_problems(store, plan.blocks, kinds)
    for key in sorted(done - planned):
        report.problems.append(f"tile {store.tiles.where(key)} is not a block of "
                               f"this run's plan")
    if plan.n_test and manifest.test_diagonal:
        problem = store.test_diag.problem(kinds)
        if problem is not None and (store.test_diag.exists() or not store.finished):
            report.problems.append(problem)
    gone = missing_tiles_problem(store, plan, done)
    if gone is not None:
        report.problems.append(gone)
    if store.finished:
        problem = store.result_problem(values=True)
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
    if side:  # what resume would refuse: the fit and the labels are the run's own
        report.next_step = ("kernelcli compute CONFIG --overwrite (resume cannot rebuild a "
                            "run's side files)")
    elif report.problems and gone is not None and len(report.problems) == 1:
        report.next_step = "the same `kernelcli extend` command again"
    elif report.problems:
        # resume recomputes missing tiles, moves damaged ones (and a result that fails)
        # to quarantine/, recomputes those and assembles again
        report.next_step = resume_command(store.run_dir)
    return report
