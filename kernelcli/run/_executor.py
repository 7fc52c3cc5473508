"""Compute the missing tiles of a run, spread over local devices, and assemble.

Per block: read its rows of ``x1`` and columns of ``x2`` (padded to the block
edge so every call has one shape and XLA compiles once), take their per-input
variances, cut the block's pairs into batches of ``plan.pair_batch`` (the last
one padded), and evaluate the batches on all devices at once, one Python thread
per device (XLA releases the GIL while it computes). A diagonal block of a
symmetric run evaluates only its strict lower triangle; its diagonal is the
inputs' self-kernels from the per-input pass. A block becomes a tile file
only when all its pairs are done, so a kill loses at most the blocks in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..errors import ComputeError
from ..store import RunStore
from ._job import Job


@dataclass
class Progress:
    """What a progress callback receives after each batch."""

    pairs_done: int
    pairs_total: int
    blocks_done: int
    blocks_total: int
    elapsed: float        # seconds since this process started computing
    pairs_this_run: int   # pairs computed by this process (for the rate)


def _stats_for(job: Job, src, batch_rows: int = 1024):
    """Per-input variances of every row of ``src``, streamed by slices."""
    from ..kernels import Stats

    parts = []
    for s in range(0, src.n, batch_rows):
        x = src.read(s, min(s + batch_rows, src.n), dtype=job.kfn.dtype)
        parts.append(job.kfn.stats(x, batch=max(job.kfn.chunk, 1) * 8))
    variances = tuple(np.concatenate([p.variances[k] for p in parts])
                      for k in range(job.kfn.n_variances))
    diag = {k: np.concatenate([p.diag[k] for p in parts]) for k in job.kfn.kinds}
    return Stats(variances, diag)


def _pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    if a.shape[0] == n:
        return a
    return np.concatenate([a, np.repeat(a[-1:], n - a.shape[0], axis=0)])


def _block_pairs(block):
    """Local (i, j) pairs the engine evaluates: a diagonal block skips i == j."""
    i, j = block.local_pairs()
    if block.diagonal:
        keep = i != j
        i, j = i[keep], j[keep]
    return i, j


class _DeviceWorkers:
    """One thread per device, each evaluating the batches it takes from a queue."""

    def __init__(self, job: Job):
        self.job = job
        self.devices = job.devices

    def run_block(self, x1, s1, x2, s2, i, j, on_batch: Callable[[int], None]):
        import jax

        kfn, pb = self.job.kfn, self.job.plan.pair_batch
        kinds = kfn.kinds
        out = {k: np.empty(len(i), kfn.dtype) for k in kinds}
        todo: "queue.Queue" = queue.Queue()
        for s in range(0, len(i), pb):
            todo.put(s)
        errors = []
        lock = threading.Lock()

        def worker(dev):
            try:
                put = lambda a: jax.device_put(a, dev)  # noqa: E731
                args = (put(x1), tuple(map(put, s1.variances)),
                        put(x2), tuple(map(put, s2.variances)))
                while not errors:
                    try:
                        s = todo.get_nowait()
                    except queue.Empty:
                        return
                    ii, jj = i[s:s + pb], j[s:s + pb]
                    m = len(ii)
                    ii = _pad_rows(ii, pb)
                    jj = _pad_rows(jj, pb)
                    got = kfn._pairs_jit(*args[:2], *args[2:], put(ii), put(jj))
                    for k in kinds:
                        out[k][s:s + m] = np.asarray(got[k])[:m]
                    with lock:
                        on_batch(m)
            except BaseException as exc:  # surfaced in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(d,), daemon=True) for d in self.devices]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short waits keep the main thread responsive to Ctrl-C
        if errors:
            raise errors[0]
        return out


def execute(job: Job, store: RunStore, progress: Optional[Callable[[Progress], None]] = None,
            after_tile: Optional[Callable[[object], None]] = None) -> None:
    """Compute every block of ``job.plan`` whose tile ``store`` lacks."""
    plan, kfn = job.plan, job.kfn
    done = store.done_keys()
    pending = [b for b in plan.blocks if b.key not in done]
    pairs_done = sum(b.n_pairs for b in plan.blocks if b.key in done)
    blocks_done = len(plan.blocks) - len(pending)
    t0 = time.monotonic()
    this_run = 0

    def report():
        if progress is not None:
            progress(Progress(pairs_done, plan.pairs_total, blocks_done, plan.blocks_total,
                              time.monotonic() - t0, this_run))

    report()
    if not pending:
        return
    s1 = _stats_for(job, job.inputs.x1)
    s2 = s1 if job.inputs.symmetric else _stats_for(job, job.inputs.x2)
    workers = _DeviceWorkers(job)
    edge = plan.block
    for block in pending:
        x1 = _pad_rows(job.inputs.x1.read(block.r0, block.r1, dtype=kfn.dtype), edge)
        x2 = _pad_rows(job.inputs.second.read(block.c0, block.c1, dtype=kfn.dtype), edge)
        b1 = s1.take(slice(block.r0, block.r1))
        b2 = s2.take(slice(block.c0, block.c1))
        b1p = type(b1)(tuple(_pad_rows(v, edge) for v in b1.variances), b1.diag)
        b2p = type(b2)(tuple(_pad_rows(v, edge) for v in b2.variances), b2.diag)
        i, j = _block_pairs(block)

        def on_batch(m):
            nonlocal pairs_done, this_run
            pairs_done += m
            this_run += m
            report()

        vals = workers.run_block(x1, b1p, x2, b2p, i, j, on_batch)
        tile = {}
        for k in kfn.kinds:
            t = np.zeros(block.shape, kfn.dtype)
            t[i, j] = vals[k]
            if block.diagonal:
                t[j, i] = vals[k]
                d = np.arange(block.shape[0])
                t[d, d] = b1.diag[k]
            tile[k] = t
        if block.diagonal:  # the diagonal's pairs came from the per-input pass
            pairs_done += block.shape[0]
            this_run += block.shape[0]
        store.write_tile(block, tile)
        blocks_done += 1
        report()
        if after_tile is not None:
            after_tile(block)


def interrupted_error(run_dir) -> ComputeError:
    return ComputeError(f"interrupted; completed tiles are kept: continue with "
                        f"`kernelcli resume {run_dir}`")
