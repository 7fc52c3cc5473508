"""``kernelcli status``: how far a run has got, from its files alone (no jax, no data)."""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Optional

from ..config import KINDS
from ..errors import UsageError, resume_command
from ..pipeline import check_present_files, check_shard_count, missing_tiles_problem
from ..store import Manifest, RunStore
from ._results import ExtendSummary, RayRecord, StatusReport
from ._shard_progress import ShardCounts, shard_counts

_STATUS_FULL_CHECK_BYTES = 1 << 30


def _result_bytes(store: RunStore) -> int:
    try:
        return store.result_path.stat().st_size
    except OSError:
        return 0


def status(run_dir, shards: Optional[int] = None) -> StatusReport:
    """Progress of the run in ``run_dir`` from its tiles alone (no jax import), whatever
    wrote them; per shard for a job array (``shards`` = N, else the N that the shard
    processes recorded in ``shards/<I>of<N>.json``)."""
    if shards is not None and (isinstance(shards, bool) or int(shards) < 1):
        raise UsageError.naming(f"<<shards>>: {shards!r} is not a process count; expected a "
                                f"positive integer")
    store = RunStore.open(run_dir)
    m = store.run_manifest
    plan = m.geometry
    if shards is not None:
        check_shard_count((0, int(shards)), plan, argument="shards")
    check_present_files(store)
    done = store.done_keys()
    # Reading every byte of a large result on each status call is too slow; its
    # identity and structure are checked always, its checksums up to this size
    # (`kernelcli verify` reads everything).
    problem = store.result_problem(full=_result_bytes(store) <= _STATUS_FULL_CHECK_BYTES)
    removed = store.tiles_removed is not None
    if removed and problem is None:  # the result holds every block
        done = {b.key for b in plan.blocks}
    pairs_done = sum(b.n_pairs for b in plan.blocks if b.key in done)
    result_problem = None
    if store.finished and problem is not None:
        result_problem = (f"{store.result_path} does not verify: {problem}; "
                          f"`kernelcli verify {run_dir}` says more")
    if removed and problem is not None:
        result_problem = (f"{result_problem or f'{store.result_path} does not exist'}; its "
                          f"tiles were removed after assembly, so "
                          f"`{resume_command(run_dir)}` computes them again")
    gone = missing_tiles_problem(store, plan, done)
    if gone is not None and problem is None:
        problem = result_problem = gone  # kernels.h5 is whole, the run is not
    markers, unreadable = store.shard_markers()
    per_shard = shard_counts(store, plan, None if shards is None else int(shards), done,
                             markers) or ShardCounts()
    ray, why = ray_record(store)
    return StatusReport(
        run_dir=str(store.run_dir), name=m.name, pairs_done=pairs_done,
        pairs_total=plan.pairs_total, blocks_done=len(done & {b.key for b in plan.blocks}),
        blocks_total=plan.blocks_total, finished=problem is None,
        result=str(store.result_path) if problem is None else None,
        result_problem=result_problem, shard_count=per_shard.count,
        shards=per_shard.shards, shard_counts_seen=per_shard.counts_seen,
        tiles_removed=removed, extend=_extend_summary(m, plan),
        readouts=tuple(k for k in m.kinds if k not in KINDS), engine=m.engine,
        ray=ray, skipped=tuple(unreadable + ([] if why is None else [why])),
        **store.file_counts())


def ray_record(store: RunStore) -> tuple[Optional[RayRecord], Optional[str]]:
    """What the run's last Ray driver recorded of its cluster (``shards/ray.json``) and
    ``None``; ``(None, why)`` when the file is there but not one kernelcli wrote (status
    says it skipped it: a diagnostics file never fails a command); ``(None, None)``
    when there is none. A driver recorded as running on this host whose process is gone
    was killed: it is shown as not running."""
    r = store.ray_record()
    if r is None:
        return None, None
    if "unreadable" in r:
        return None, f"{store.shards_dir / 'ray.json'} ({r['unreadable']})"
    try:
        record = RayRecord(
            note=str(r.get("note", "")), planned=int(r["planned"]), placed=int(r["placed"]),
            waiting=int(r.get("waiting", 0)), given_up=int(r.get("given_up", 0)),
            nodes_lost=tuple(str(n) for n in r.get("nodes_lost", ())),
            actors_lost=int(r.get("actors_lost", 0)), requeued=int(r.get("requeued", 0)),
            running=r.get("running") is True, host=str(r.get("host", "")),
            pid=int(r.get("pid", 0)), updated=str(r.get("updated", "")))
    except (KeyError, TypeError, ValueError):
        return None, (f"{store.shards_dir / 'ray.json'} (not what a Ray driver writes)")
    if record.running and record.host == socket.gethostname() and not _alive(record.pid):
        record = dataclasses.replace(record, running=False)
    return record, None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # no pid to ask about: the record stands
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid we can ask about
    return True


def _extend_summary(m: Manifest, plan) -> Optional[ExtendSummary]:
    """What ``kernelcli extend`` grew the run from, and the tiles it keeps."""
    ext = m.extend
    if not isinstance(ext, dict):
        return None
    rows = max([e["rows"] for e in m.lineage], default=0)
    return ExtendSummary(
        n1_before=ext.get("n1_before"), n1=plan.n1, n_test_before=ext.get("n_test_before"),
        n_test=plan.n_test,
        blocks_reused=sum(1 for b in plan.blocks if b.r0 < plan.n1 and b.r1 <= rows)
        + len(ext.get("carry") or ()))
