"""The one executor driver: compute the missing tiles of a run, write them, report.

:func:`execute` is the same for every backend: it finds the blocks the store
lacks, runs the per-input pass (through the backend), writes the test set's
diagonal, then takes the backend's tiles as they come, checks and writes each,
and tallies progress. A backend provides exactly two things -- the per-input
pass of a row source and the tiles of a list of blocks -- so skipping a tile
another process wrote meanwhile, the tally, the test diagonal and the interrupt
message exist once:

* :class:`LocalBackend` (here): blocks one after another in this process, each
  block's pair batches spread over the local devices by the engine's runner;
* :class:`~._ray.RayBackend`: blocks fed to kernel actors on a Ray cluster, one per GPU.

Per block: its rows of ``x1`` and columns of ``x2`` and their per-input
variances, padded to the block edge so every call has one shape and XLA compiles
once (:func:`block_input`), the block's pairs in batches of ``plan.pair_batch``,
and the tile from the values (:func:`block_tile`). A diagonal block of a
symmetric run evaluates only its strict lower triangle; its diagonal is the
inputs' self-kernels from the per-input pass. Both backends run exactly this on
exactly these inputs, so a tile is the same bits whichever ran it, and
:func:`~._matrix.kernel_matrix` assembles an in-memory matrix by the same route.
A block becomes a tile file only when all its pairs are done, so a kill loses
at most the blocks in flight. Tiles are checked, written and counted by one
background thread (:class:`~._writer.TileWriter`) while the next block computes.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from .. import _interrupt
from ..errors import Interrupted
from ..store import RunStore
from ._checks import check_diagonal, check_tile
from ._job import Job
from ._writer import TileWriter


@dataclass
class Progress:
    """What a progress callback receives after each batch."""

    pairs_done: int
    pairs_total: int
    blocks_done: int
    blocks_total: int
    elapsed: float        # seconds since this process started computing
    pairs_this_run: int   # pairs computed by this process (for the rate)
    platform: str = ""    # of the local devices computing ("" when not known: Ray)
    devices: int = 0      # how many of them


STATS_ROWS = 1024  # rows of an input read (and passed to the per-input pass) at once


def stats_slices(n: int, rows: int = STATS_ROWS) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row slices the per-input pass reads, in order: every
    backend reads exactly these, so the per-input numbers are the same bits."""
    return [(s, min(s + rows, n)) for s in range(0, n, rows)]


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
    task gets exactly what the local backend uses): the block's rows of ``x1`` and
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
    from ..kernels import pad_rows

    x1 = pad_rows(x1_src.read(block.r0, block.r1, dtype=kfn.dtype), edge)
    x2 = pad_rows(x2_src.read(block.c0, block.c1, dtype=kfn.dtype), edge)
    b1 = s1.take(slice(block.r0, block.r1))
    i, j = _block_pairs(block)
    diag = {k: np.asarray(b1.diag[k]) for k in kfn.kinds} if block.diagonal else None
    return BlockInput(block, x1, b1.pad(edge), x2,
                      s2.take(slice(block.c0, block.c1)).pad(edge), i, j, diag)


def block_tile(kfn, pair_batch: int, bi: BlockInput, devices,
               on_batch: Optional[Callable[[int], None]] = None,
               stop: Optional[Callable[[], object]] = None) -> Optional[dict]:
    """One block's tile (kind -> array of the block's shape), or ``None`` when
    ``stop()`` turned true before all its pairs were evaluated."""
    block, i, j = bi.block, bi.i, bi.j
    if kfn.uses_grid(bi.x1.shape[0], bi.x2.shape[0], pair_batch):
        return _grid_tile(kfn, bi, (devices or [None])[0], on_batch, stop)
    vals = kfn.pair_values(bi.x1, bi.s1, bi.x2, bi.s2, i, j, pair_batch, devices,
                           on_batch, stop)
    if vals is None:
        return None
    tile = {}
    for k in kfn.kinds:
        if not block.diagonal:  # every pair, in row-major order (Block.local_pairs)
            tile[k] = vals[k].reshape(block.shape)
            continue
        t = np.zeros(block.shape, kfn.dtype)
        t[i, j] = vals[k]
        t[j, i] = vals[k]
        d = np.arange(block.shape[0])
        t[d, d] = bi.diag[k]
        tile[k] = t
    return tile


def _grid_tile(kfn, bi: BlockInput, device, on_batch, stop) -> Optional[dict]:
    """A flat-input block's tile from one grid call over its padded inputs; a diagonal
    tile keeps its strict lower triangle, mirrored, and the per-input pass's diagonal,
    as a tile from pair batches does."""
    if stop is not None and stop():
        return None
    block = bi.block
    grid = kfn.grid_values(bi.x1, bi.s1, bi.x2, bi.s2, device)
    h, w = block.shape
    tile = {}
    for k in kfn.kinds:
        t = np.ascontiguousarray(grid[k][:h, :w])
        if block.diagonal:
            low = np.tril(t, -1)
            t = low + low.T
            t[np.diag_indices(h)] = bi.diag[k]
        tile[k] = t
    if on_batch is not None:
        on_batch(bi.n_evaluated)
    return tile


Tiles = Iterator[tuple]  # (block, tile, pairs already reported through on_pairs)


class LocalBackend:
    """Blocks computed in this process, one after another, each block's pair batches
    spread over ``devices``; a requested stop (:mod:`kernelcli._interrupt`) is honoured
    between per-input slices and between pair batches."""

    def __init__(self, kfn, devices, block: int, pair_batch: int):
        self.kfn, self.devices, self.block, self.pair_batch = kfn, devices, block, pair_batch

    def __enter__(self) -> "LocalBackend":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def input_stats(self, src):
        """Per-input variances of every row of ``src``, streamed by slices."""
        from ..kernels import Stats

        parts = []
        for s, e in stats_slices(src.n):
            _interrupt.check()
            parts.append(self.kfn.stats(src.read(s, e, dtype=self.kfn.dtype), self.devices))
        return Stats.concat(parts)

    def tiles(self, blocks, rows, columns, s1, s2, wanted=lambda b: True,
              on_pairs: Optional[Callable[[int], None]] = None) -> Tiles:
        """``(block, tile, evaluated)`` for each block that ``wanted(block)`` (asked
        just before it is computed) accepts."""
        from ..kernels import release_free_memory

        for block in blocks:
            _interrupt.check()
            if not wanted(block):
                continue
            t0 = time.perf_counter()
            bi = block_input(self.kfn, rows, columns, s1, s2, block, self.block)
            tile = block_tile(self.kfn, self.pair_batch, bi, self.devices, on_pairs,
                              _interrupt.requested)
            if tile is None:
                _interrupt.check()  # the stop that ended the batches: raises
            yield block, tile, bi.n_evaluated
            del tile, bi
            release_free_memory(time.perf_counter() - t0)  # freed buffers not resident


class Tally:
    """Progress over a set of blocks, reported through a callback."""

    def __init__(self, blocks, done: set, progress, devices=()):
        # updated by the computing thread (pairs) and the tile writer's (blocks)
        self._lock = threading.RLock()
        self.blocks = list(blocks)
        self.where = (devices[0].platform, len(devices)) if devices else ("", 0)
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
                                   self.this_run, *self.where))

    def pairs(self, m: int, computed: bool = True):
        with self._lock:
            self.pairs_done += m
            if computed:
                self.this_run += m
            self.report()

    def block_done(self, extra_pairs: int = 0, computed: bool = True):
        with self._lock:
            self.pairs_done += extra_pairs
            if computed:
                self.this_run += extra_pairs
            self.blocks_done += 1
            self.report()


def pending_blocks(store: RunStore, blocks) -> tuple[list, set]:
    done = store.done_keys()
    return [b for b in blocks if b.key not in done], done


def backend_of(job: Job):
    """The backend ``job.cfg.compute.executor`` names."""
    if job.cfg.compute.executor == "ray":
        from ._ray import RayBackend

        return RayBackend(job)
    return LocalBackend(job.kfn, job.devices, job.plan.block, job.plan.pair_batch)


def execute(job: Job, store: RunStore, progress: Optional[Callable[[Progress], None]] = None,
            after_tile: Optional[Callable[[object], None]] = None, blocks=None) -> None:
    """Compute every block of ``blocks`` (default: all of ``job.plan``) whose tile
    ``store`` lacks, on the backend the configuration names. A block whose tile
    appears meanwhile (written by another process of a job array) is skipped."""
    blocks = job.plan.blocks if blocks is None else list(blocks)
    pending, done = pending_blocks(store, blocks)
    local = job.cfg.compute.executor != "ray"  # Ray actors run on the cluster's devices
    tally = Tally(blocks, done, progress, job.devices if local else ())
    tally.report()
    if not pending and not needs_test_diagonal(job, store):
        return
    rows, columns = job.inputs.rows, job.inputs.columns

    def publish(block, tile, reported) -> None:  # on the writer's thread, in order
        check_tile(block, tile)
        store.write_tile(block, tile)
        del tile
        tally.block_done(block.n_pairs - reported)  # the rest: diagonal, or not reported
        if after_tile is not None:
            after_tile(block)

    with backend_of(job) as backend, TileWriter(publish) as writer:

        def wanted(block) -> bool:
            writer.check()  # a tile that could not be written stops the computation
            if store.has(block):  # another process wrote it meanwhile
                tally.block_done(block.n_pairs, computed=False)
                return False
            return True

        def on_pairs(m: int) -> None:
            tally.pairs(m)
            writer.check()

        s1 = backend.input_stats(rows)
        s2 = s1 if job.inputs.symmetric else backend.input_stats(columns)
        write_test_diagonal(job, store, s1)
        for block, tile, reported in backend.tiles(pending, rows, columns, s1, s2, wanted,
                                                   on_pairs):
            writer.put(block, tile, reported)
            del tile
        writer.finish()


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
