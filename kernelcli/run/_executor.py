"""Compute the missing tiles of a run, spread over local devices, and assemble.

Per block: read its rows of ``x1`` and columns of ``x2`` (padded to the block
edge so every call has one shape and XLA compiles once), take their per-input
variances, cut the block's pairs into batches of ``plan.pair_batch`` (the last
one padded), and evaluate the batches on all devices at once, one Python thread
per device (XLA releases the GIL while it computes). A diagonal block of a
symmetric run evaluates only its strict lower triangle; its diagonal is the
inputs' self-kernels from the per-input pass. A block becomes a tile file
only when all its pairs are done, so a kill loses at most the blocks in flight.

The per-block computation (:func:`block_input`, then :func:`compute_tile`) is
shared with the Ray executor (:mod:`._ray`), so a tile is the same bits whichever
ran it. ``execute`` takes a subset of the blocks for a job array's shard.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .. import _interrupt
from ..errors import Interrupted
from ..store import RunStore
from ._checks import check_diagonal, check_tile
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


STATS_ROWS = 1024  # rows of an input read (and passed to the per-input pass) at once


def stats_slices(n: int, rows: int = STATS_ROWS) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row slices the per-input pass reads, in order."""
    return [(s, min(s + rows, n)) for s in range(0, n, rows)]


def stats_of_slice(kfn, x, devices=None):
    """Per-input variances of the rows ``x`` (one slice of :func:`stats_slices`),
    its batches spread over ``devices`` (default: one).

    Local and Ray executors both call exactly this on exactly these slices, with
    the same batches whatever the devices, so their per-input numbers, and hence
    their tiles, are bit-identical.
    """
    return kfn.stats(x, batch=max(kfn.chunk, 1) * 8, devices=devices)


def concat_stats(kfn, parts):
    """One :class:`~kernelcli.kernels.Stats` from those of consecutive slices."""
    from ..kernels import Stats

    variances = tuple(np.concatenate([p.variances[k] for p in parts])
                      for k in range(kfn.n_variances))
    diag = {k: np.concatenate([p.diag[k] for p in parts]) for k in kfn.kinds}
    return Stats(variances, diag)


def _stats_for(job: Job, src, batch_rows: int = STATS_ROWS):
    """Per-input variances of every row of ``src``, streamed by slices (a requested stop
    is honoured between slices)."""
    parts = []
    for s, e in stats_slices(src.n, batch_rows):
        _interrupt.check()
        parts.append(stats_of_slice(job.kfn, src.read(s, e, dtype=job.kfn.dtype), job.devices))
    return concat_stats(job.kfn, parts)


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


@dataclass
class BlockInput:
    """Everything one block's computation needs, as plain arrays (picklable, so a Ray
    task gets exactly what the local executor uses): the block's rows of ``x1`` and
    columns of ``x2`` and their per-input variances, padded to the block edge so
    every call has one shape; the local pairs to evaluate; and, for a diagonal
    block, the self-kernels of its rows (its diagonal)."""

    block: object
    x1: np.ndarray
    s1: object            # Stats, variances padded to the edge
    x2: np.ndarray
    s2: object
    i: np.ndarray
    j: np.ndarray
    diag: Optional[dict]  # kind -> (rows,) for a diagonal block, else None

    @property
    def n_evaluated(self) -> int:
        return len(self.i)


def block_input(kfn, x1_src, x2_src, s1, s2, block, edge: int) -> BlockInput:
    """Read and pad the inputs of ``block`` (``s1``, ``s2``: stats of all rows)."""
    x1 = _pad_rows(x1_src.read(block.r0, block.r1, dtype=kfn.dtype), edge)
    x2 = _pad_rows(x2_src.read(block.c0, block.c1, dtype=kfn.dtype), edge)
    b1 = s1.take(slice(block.r0, block.r1))
    b2 = s2.take(slice(block.c0, block.c1))
    b1p = type(b1)(tuple(_pad_rows(v, edge) for v in b1.variances), {})
    b2p = type(b2)(tuple(_pad_rows(v, edge) for v in b2.variances), {})
    i, j = _block_pairs(block)
    diag = {k: np.asarray(b1.diag[k]) for k in kfn.kinds} if block.diagonal else None
    return BlockInput(block, x1, b1p, x2, b2p, i, j, diag)


def evaluate_pairs(kfn, pair_batch: int, bi: BlockInput, devices,
                   on_batch: Optional[Callable[[int], None]] = None) -> dict:
    """Values of the pairs ``bi.i, bi.j`` (kind -> 1-d array), in batches of
    ``pair_batch`` (the last padded), one thread per device taking batches from a
    queue (XLA releases the GIL while it computes). Batch ``k`` is always pairs
    ``[k*pair_batch, (k+1)*pair_batch)``, whichever device evaluates it.

    A stop requested by a signal (:mod:`kernelcli._interrupt`) is honoured between
    batches: the threads take no new batch, the calling thread waits until each has
    finished the one it is in (no thread is left inside XLA), then raises
    :class:`~kernelcli.errors.Interrupted`."""
    import jax

    i, j, pb = bi.i, bi.j, pair_batch
    kinds = kfn.kinds
    out = {k: np.empty(len(i), kfn.dtype) for k in kinds}
    todo: "queue.Queue" = queue.Queue()
    for s in range(0, len(i), pb):
        todo.put(s)
    errors = []
    stopped = []  # set (under ``lock``) when the caller leaves: no more reports after that
    lock = threading.Lock()

    def worker(dev, began):
        began.set()
        try:
            put = lambda a: jax.device_put(a, dev)  # noqa: E731
            args = (put(bi.x1), tuple(map(put, bi.s1.variances)),
                    put(bi.x2), tuple(map(put, bi.s2.variances)))
            while not errors and not stopped and _interrupt.requested() is None:
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
                if on_batch is not None:
                    with lock:
                        if not stopped and _interrupt.requested() is None:
                            on_batch(m)
        except BaseException as exc:  # surfaced in the calling thread
            errors.append(exc)

    began = [threading.Event() for _ in devices]
    threads = [threading.Thread(target=worker, args=(d, b), daemon=True)
               for d, b in zip(devices, began)]
    launched = []
    try:
        for t in threads:
            launched.append(t)
            t.start()  # a signal can arrive while start() waits for the thread
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # a requested stop: each thread ends after its batch
    except BaseException:
        # KeyboardInterrupt (a caller without kernelcli's handlers: a notebook), or an
        # error in this thread: let each thread finish the batch it is in, unreported,
        # and wait for it: no progress line follows the caller's error message, and no
        # thread is still inside XLA when the interpreter exits (that aborts the
        # process). A second Ctrl-C stops the wait.
        with lock:
            stopped.append(True)
        for t, b in zip(launched, began):
            b.wait(5.0)  # (not set only if start() was interrupted before the thread)
            while t.is_alive():
                t.join(0.2)
        raise
    if errors:
        raise errors[0]
    _interrupt.check()  # every thread is joined: safe to leave
    return out


def tile_from_values(kfn, bi: BlockInput, vals: dict) -> dict:
    """The block's full tile per kind from its evaluated pairs (and its diagonal)."""
    block, i, j = bi.block, bi.i, bi.j
    tile = {}
    for k in kfn.kinds:
        t = np.zeros(block.shape, kfn.dtype)
        t[i, j] = vals[k]
        if block.diagonal:
            t[j, i] = vals[k]
            d = np.arange(block.shape[0])
            t[d, d] = bi.diag[k]
        tile[k] = t
    return tile


def compute_tile(kfn, pair_batch: int, bi: BlockInput, devices,
                 on_batch: Optional[Callable[[int], None]] = None) -> dict:
    """One block's tile (kind -> array of the block's shape): the computation that
    the local executor and a Ray task share, so both give the same bits."""
    return tile_from_values(kfn, bi, evaluate_pairs(kfn, pair_batch, bi, devices, on_batch))


class Tally:
    """Progress over a set of blocks, reported through a callback."""

    def __init__(self, blocks, done: set, progress):
        self.blocks = list(blocks)
        self.progress = progress
        self.pairs_total = sum(b.n_pairs for b in self.blocks)
        self.pairs_done = sum(b.n_pairs for b in self.blocks if b.key in done)
        self.blocks_done = sum(1 for b in self.blocks if b.key in done)
        self.this_run = 0
        self.t0 = time.monotonic()

    def report(self):
        if self.progress is not None:
            self.progress(Progress(self.pairs_done, self.pairs_total, self.blocks_done,
                                   len(self.blocks), time.monotonic() - self.t0,
                                   self.this_run))

    def pairs(self, m: int, computed: bool = True):
        self.pairs_done += m
        if computed:
            self.this_run += m
        self.report()

    def block_done(self, extra_pairs: int = 0, computed: bool = True):
        self.pairs_done += extra_pairs
        if computed:
            self.this_run += extra_pairs
        self.blocks_done += 1
        self.report()


def pending_blocks(store: RunStore, blocks) -> tuple[list, set]:
    done = store.done_keys()
    return [b for b in blocks if b.key not in done], done


def begin(job: Job, store: RunStore, progress, blocks=None) -> tuple:
    """What an executor does first: ``(pending blocks, Tally)``, progress reported once;
    ``pending`` is ``None`` when nothing is left to do (every tile there and, with a
    test set, the test diagonal too). ``blocks`` default: all of ``job.plan``."""
    blocks = job.plan.blocks if blocks is None else list(blocks)
    pending, done = pending_blocks(store, blocks)
    tally = Tally(blocks, done, progress)
    tally.report()
    if not pending and not needs_test_diagonal(job, store):
        return None, tally
    return pending, tally


def execute(job: Job, store: RunStore, progress: Optional[Callable[[Progress], None]] = None,
            after_tile: Optional[Callable[[object], None]] = None, blocks=None) -> None:
    """Compute every block of ``blocks`` (default: all of ``job.plan``) whose tile
    ``store`` lacks. A block whose tile appears meanwhile (written by another
    process of a job array) is skipped."""
    from .. import kernels  # jax: only once the host devices are configured

    plan, kfn = job.plan, job.kfn
    pending, tally = begin(job, store, progress, blocks)
    if pending is None:
        return
    rows, columns = job.inputs.rows, job.inputs.columns
    s1 = _stats_for(job, rows)
    s2 = s1 if job.inputs.symmetric else _stats_for(job, columns)
    write_test_diagonal(job, store, s1)
    edge = plan.block
    for block in pending:
        _interrupt.check()
        if store.has(block):  # another process wrote it meanwhile
            tally.block_done(block.n_pairs, computed=False)
            continue
        t0 = time.perf_counter()
        bi = block_input(kfn, rows, columns, s1, s2, block, edge)
        tile = compute_tile(kfn, plan.pair_batch, bi, job.devices, tally.pairs)
        check_tile(block, tile)
        store.write_tile(block, tile)
        evaluated = bi.n_evaluated
        del tile, bi
        kernels.release_free_memory(time.perf_counter() - t0)  # freed buffers not resident
        # the diagonal's pairs came from the per-input pass
        tally.block_done(block.n_pairs - evaluated)
        if after_tile is not None:
            after_tile(block)


def needs_test_diagonal(job: Job, store: RunStore) -> bool:
    return bool(job.plan.n_test and job.cfg.kernel.test_diagonal
                and not store.has_test_diagonal())


def write_test_diagonal(job: Job, store: RunStore, s1) -> None:
    """Store ``K(t, t)`` of every test row (kind -> (n_test,)), from the per-input pass
    over ``rows`` (``s1``), once: before any test tile, so a finished run has it."""
    if needs_test_diagonal(job, store):
        n1 = job.plan.n1
        diag = {k: np.asarray(s1.diag[k][n1:]) for k in job.kfn.kinds}
        check_diagonal(diag, n1, "the test set's self-kernels")
        store.write_test_diagonal(diag)


def interrupted_error(run_dir, shard=None, signum: int = signal.SIGINT) -> Interrupted:
    """The error of a run that a signal (or Ctrl-C's KeyboardInterrupt) stopped:
    "interrupted (SIGINT); completed tiles are kept: continue with `kernelcli resume
    RUN_DIR`", exit status 128 + ``signum``."""
    return Interrupted(_interrupt.message(signum, run_dir, shard), signum)
