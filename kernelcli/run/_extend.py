"""``kernelcli extend``: grow a finished run by more training rows or another test set.

The grown run is a new run in the same directory: a new manifest (so a new identity)
recording the plan of the grown data set with the *stored* block edge and pair batch,
what was added (``extend``: the appended files and the test set, with the request that
made it) and the earlier runs whose tiles it keeps (``lineage``, see
:mod:`kernelcli.store`). Its result is what ``compute`` writes for the grown data set
with that plan, bit for bit, because a tile is a function of its block's rows, their
per-input numbers, the block edge and the pair batch alone:

* the per-input pass runs over the grown rows exactly as a fresh run's does; its
  numbers for the old rows are compared, bit for bit, with the old run's (the old
  rows' pass run again as the old run ran it, its self-kernels checked against the
  old result's diagonal). A tile is kept only when every row and
  column of its block had the same numbers and the block has the same extent; every
  other tile is computed again (a network whose per-input numbers depend on how many
  rows a call holds loses the reuse of the rows concerned, never correctness);
* the test diagonal is computed afresh, and the test tiles too unless the test set
  stays and their rows and columns pass the same check: the test rows follow the
  training rows, so their blocks move when those grow, and such a tile is rewritten
  under its new key (:mod:`._extend_carry`).

A run whose tiles were removed (``output.keep_tiles: false``, the default) has the
tiles it keeps written again from its verified ``kernels.h5`` first (:mod:`._extend_restore`).

Crash safety: nothing of the old run changes until the new manifest is complete
except deleting tiles the grown run will not keep (the old ``kernels.h5`` stays whole,
so a kill before the switch leaves a finished run). The switch is the atomic
replacement of ``manifest.json``; after it the old ``kernels.h5`` carries an identity
that is not the run's, so it can never pass as the grown result (it is deleted), and
``kernelcli resume`` -- or the same ``extend`` again -- continues the grown run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from .._stop import Stop, or_new, signal_name
from ..errors import DataError, Interrupted, QuarantinedError, RunDirError
from ..pipeline import (
    STATS_ROWS,
    LocalBackend,
    Progress,
    check_same_data,
    closed_on_error,
    extended_config,
    load_run_config,
    open_inputs,
    prepare,
    side_files,
    stored_preprocess,
    writes_run,
)
from ..plan import make_geometry
from ..store import Manifest, RunStore
from ._extend_carry import carry_keys, set_aside, take_over
from ._extend_request import check_extensible, request_of, resolve_files
from ._extend_restore import restore_tiles
from ._finish import continue_run, finish
from ._results import ExtendResult


@writes_run
def extend(run_dir, test=None, append=None, *, test_key: Optional[str] = None,
           test_labels=None, test_labels_key: Optional[str] = None,
           append_key: Optional[str] = None, append_labels=None,
           append_labels_key: Optional[str] = None, dry_run: bool = False,
           progress: Optional[Callable[[Progress], None]] = None,
           on_start: Optional[Callable[[dict], None]] = None,
           stop: Optional[Stop] = None) -> ExtendResult:
    """Grow the finished run in ``run_dir``: ``test`` (a file) adds or replaces its test
    set, ``append`` (a file) adds training rows after the existing ones; either or both.
    Keys as ``data.test_key`` etc. name the arrays in ``.npz``/``.h5`` files; one not
    given is the run's matching key where the file holds it, else the only array in
    the file besides the labels. With
    ``dry_run`` nothing is written: the cost is reported (no jax needed).

    The same call on a run it left unfinished (killed) continues it, as ``resume`` does.
    ``stop``: as for :func:`~kernelcli.run.compute`.
    """
    stop = or_new(stop)
    request = request_of(test, test_key, test_labels, test_labels_key, append, append_key,
                         append_labels, append_labels_key)
    store, cfg = load_run_config(run_dir)
    resolve_files(cfg, request)
    m = store.manifest
    if (m.get("extend") or {}).get("request") == request:  # this extend, once more
        if dry_run:
            return _report(store, Manifest.check(m, run_dir).geometry, m, dry_run=True)
        out = continue_run(store, cfg, progress, on_start=on_start, stop=stop)
        return _report(store, Manifest.check(m, run_dir).geometry, m, run=out)
    check_extensible(store, cfg, request)
    old = m.get("extend") or {}
    ext = {"request": request, "n1_before": m["plan"]["n1"], "previous": store.run_id,
           "n_test_before": m["plan"]["n_test"],
           "append": list(old.get("append", ())) + ([request["append"]] if append else []),
           "test": request["test"] or old.get("test")}
    new_cfg = extended_config(cfg, ext)
    if dry_run:
        return _dry_run(store, new_cfg, ext)
    try:  # until the switch the run is the old one, finished: a stop changes nothing
        job = prepare(new_cfg, stored=store.run_manifest.compute,
                      preprocess=stored_preprocess(store),
                      extension=ext, stop=stop)
        with closed_on_error(job):
            rows, test_same = _same_stats_rows(store, cfg, job, request["test"] is None, stop)
    except Interrupted as exc:
        raise Interrupted(f"interrupted ({signal_name(exc.signum)}) before "
                          f"{run_dir} was extended; it is unchanged: run the same extend "
                          f"again", exc.signum) from None
    with job:
        job.lineage = _lineage(store, rows)
        before = Manifest.check(m, run_dir).geometry
        ext["carry"] = carry_keys(before, job.plan, rows, test_same)  # job.extension is ext
        manifest = job.manifest()
        keep = _kept_blocks(store, job.plan, rows)
        # tiles removed: those kept are written back from kernels.h5
        restore_tiles(store, before, keep, bool(ext["carry"]))
        _check_kept(store, before, keep)
        set_aside(store, before, job.plan, ext["carry"])
        _switch(store, manifest, side_files(job), keep)
        store.forget_tiles_removed()  # the grown run's tiles are its own from here
        take_over(store, job.plan)
        run = finish(job, store, progress, None, False, on_start, stop)
    return _report(store, job.plan.geometry, store.manifest, run=run)


def _same_stats_rows(store: RunStore, cfg, job, same_test: bool, stop=None) -> tuple:
    """How many leading training rows have the same per-input numbers in the grown run
    as in the old one, and (``same_test``: the test set stays) which test rows do: the
    old rows' pass is run again as the old run ran it (its own data, checked against its
    fingerprints) and compared bit for bit.

    A test set being replaced may be gone or rewritten already. Its rows shared the
    per-input pass's slices (of ``STATS_ROWS``) with the last training rows, so without
    it only the training rows of whole slices before it are known: they were passed
    in the same calls in both runs, and are compared as the others."""
    m = store.manifest
    appends = (m.get("extend") or {}).get("append", ())
    known = None
    try:
        old = _old_inputs(store, cfg, job, appends, ("x1", "x2", "test", "labels", "append"))
    except (DataError, RunDirError):
        if same_test or cfg.data.test is None:
            raise
        data = dataclasses.replace(cfg.data, test=None, test_key=None, test_labels=None,
                                   test_labels_key=None, test_limit=None)
        old = _old_inputs(store, dataclasses.replace(cfg, data=data), job, appends,
                          ("x1", "append"))
        known = old.n1 // STATS_ROWS * STATS_ROWS
    try:
        backend = LocalBackend(job.devices, stop)
        before = backend.input_stats(job.kfn, old.rows)
        n = old.n1
    finally:
        old.close()
    after = backend.input_stats(job.kfn, job.inputs.rows)
    rows = _equal_rows(before, after, 0, 0, n if known is None else known)
    rows &= _as_stored(store, before, len(rows))
    test_same = None
    if same_test and job.inputs.n_test:
        test_same = _equal_rows(before, after, n, job.inputs.n1, job.inputs.n_test)
    return (len(rows) if rows.all() else int(np.argmin(rows))), test_same


def _as_stored(store: RunStore, stats, n: int) -> np.ndarray:
    """Rows whose self-kernels, as the old rows' pass gives them here, are the bits of the
    old result's diagonal: the pass run again is the one that made the run (not another
    platform's, whose last bits may differ). Read from the diagonal blocks only."""
    same = np.ones(n, bool)
    edge = store.manifest["plan"]["block"]
    for kind, values in stats.diag.items():
        for r0, diag in store.result().diagonal_blocks(kind, n, edge):
            same[r0:r0 + diag.shape[0]] &= diag == values[r0:r0 + diag.shape[0]]
    return same


class _OldData(NamedTuple):
    """The old run's data as check_same_data reads a job's."""

    fingerprints: dict
    inputs: Any


def _old_inputs(store: RunStore, cfg, job, appends, keys):
    """The old run's data, opened, whose fingerprints of ``keys`` must be the ones it
    was computed with (``RunDirError`` otherwise)."""
    m = store.manifest
    old = open_inputs(cfg, preprocess=job.inputs.preprocess, fit=False, appends=appends)
    try:
        fps = old.fingerprints()
        stored = {k: v for k, v in m.get("data_fingerprints", {}).items() if k in keys}
        check_same_data(_OldData({k: v for k, v in fps.items() if k in keys}, old),
                        {"data_fingerprints": stored}, store.run_dir)
    except BaseException:
        old.close()
        raise
    return old


def _equal_rows(before, after, start: int, start_after: int, n: int) -> np.ndarray:
    """Rows ``start + i`` of ``before`` whose numbers are the bits of rows
    ``start_after + i`` of ``after``, ``i < n``."""
    same = np.ones(n, bool)
    pairs = list(zip(before.variances, after.variances, strict=True))
    pairs += [(before.diag[k], after.diag[k]) for k in before.diag]
    for a, b in pairs:
        a, b = a[start:start + n], b[start_after:start_after + n]
        same &= np.all((a == b).reshape(n, -1), axis=1) if n else same
    return same


def _lineage(store: RunStore, rows: int) -> list:
    """The earlier runs whose tiles the grown run may read, each up to ``rows``."""
    out = [{"run": e["run"], "rows": min(e["rows"], rows)}
           for e in store.manifest.get("lineage") or () if min(e["rows"], rows) > 0]
    return out + ([{"run": store.run_id, "rows": rows}] if rows > 0 else [])


def _kept_blocks(store: RunStore, plan, rows: int) -> set:
    """Keys of the grown plan's training blocks whose old tile stays: same extent in both
    plans, every row and column below ``rows``."""
    before = {b.key: b for b in Manifest.check(store.manifest, store.run_dir).geometry.blocks}
    return {b.key for b in plan.blocks
            if b.r0 < plan.n1 and b.r1 <= rows and before.get(b.key) == b}


def _check_kept(store: RunStore, before, keep: set) -> None:
    """Before anything changes: every tile the grown run keeps reads back whole, as the
    old run's (its checksum and its run identity). A tile of another run refuses the
    extend (exit 2, nothing moved); a damaged one is moved to ``quarantine/`` and
    refuses it too, the old run otherwise as it was, so the same extend again computes
    that tile. Reads every kept tile once (what assembling them costs)."""
    blocks = [b for b in before.blocks if b.key in keep]
    damaged = store.damaged_tiles(blocks, tuple(store.manifest["plan"]["kinds"]))
    if damaged:
        moved = store.quarantine_tiles([b for b, _ in damaged])
        more = "" if len(damaged) == 1 else f" (and {len(damaged) - 1} more tiles)"
        raise QuarantinedError(
            f"{damaged[0][1]}{more}; moved to {moved[0].parent}/ before {store.run_dir} "
            f"was extended (nothing else changed): run the same extend again, it "
            f"computes that tile", [b for b, _ in damaged])


def _switch(store: RunStore, manifest: dict, side: dict, keep: set) -> None:
    """Turn the old run into the grown one (see the module docstring for the order)."""
    for key in sorted(store.done_keys() - keep):  # tiles the grown run does not keep
        store.growth.remove_tile(key)
    store.growth.remove_side_file("predictions.h5")  # the old run's; predict again
    store.grow(manifest, side)  # the switch: the manifest is replaced atomically
    store.growth.drop_superseded()
    for name in store.side_files():  # the labels of the run it grew from
        if name.startswith("labels") and name != manifest.get("labels_file"):
            store.growth.remove_side_file(name)
    store.growth.remove_shard_markers()


def _report(store: RunStore, plan, manifest: dict, run=None, dry_run: bool = False,
            lineage=None) -> ExtendResult:
    """The cost: the grown plan's tiles that the lineage keeps (training blocks below its
    rows: such a block has its old extent) and the rest."""
    ext = manifest.get("extend") or {}
    lineage = manifest.get("lineage") if lineage is None else lineage
    rows = max((e["rows"] for e in lineage or ()), default=0)
    kept = {b.key for b in plan.blocks if b.r0 < plan.n1 and b.r1 <= rows}
    kept |= set(ext.get("carry") or ())
    reused = len(kept)
    return ExtendResult(
        run_dir=str(store.run_dir), n1_before=ext.get("n1_before", plan.n1), n1=plan.n1,
        n_test_before=ext.get("n_test_before", plan.n_test), n_test=plan.n_test,
        blocks_total=plan.blocks_total, blocks_reused=reused,
        blocks_new=plan.blocks_total - reused, pairs_total=plan.pairs_total,
        pairs_new=sum(b.n_pairs for b in plan.blocks if b.key not in kept),
        dry_run=dry_run, run=run)


def _dry_run(store: RunStore, cfg, ext: dict) -> ExtendResult:
    """The grown plan and what it reuses, from the files' sizes alone (no jax): the
    reuse assumes the old rows' per-input numbers are unchanged, which the real run
    checks."""
    m = store.manifest
    inputs = open_inputs(cfg, check_values=False, fit=False, appends=ext["append"])
    with _closing(inputs):
        n1, n_test = inputs.n1, inputs.n_test
    p = m["plan"]
    plan = make_geometry(n1, n1, symmetric=True, block=p["block"], pair_batch=p["pair_batch"],
                         kinds=p["kinds"], itemsize=8 if p["dtype"] == "float64" else 4,
                         n_test=n_test)
    lineage = _lineage(store, p["n1"])
    old = Manifest.check(m, store.run_dir).geometry
    before = {b.key: b for b in old.blocks}
    lineage = lineage if all(before.get(b.key) == b for b in plan.blocks
                             if b.r0 < plan.n1 and b.r1 <= p["n1"]) else []
    same = np.ones(n_test, bool) if ext["request"]["test"] is None else None
    ext = dict(ext, carry=carry_keys(old, plan, p["n1"], same))
    return _report(store, plan, dict(m, extend=ext), dry_run=True, lineage=lineage)


class _closing:
    def __init__(self, inputs):
        self.inputs = inputs

    def __enter__(self):
        return self.inputs

    def __exit__(self, *exc):
        self.inputs.close()


__all__ = ["extend"]
