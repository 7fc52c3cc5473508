"""The one executor driver: compute the missing tiles of a run, write them, report.

:func:`execute` is the same for every backend (:mod:`._backend`): it finds the blocks
the store lacks, runs the per-input pass (through the job's backend), writes the test
set's diagonal, then takes the backend's tiles as they come, checks and writes each,
and tallies progress. A backend provides exactly two things -- the per-input pass of
a row source and the tiles of a list of blocks -- so skipping a tile another process
wrote meanwhile, the tally and the test diagonal exist once:

* :class:`~._local.LocalBackend`: blocks one after another in this process, each
  block's pair batches spread over the local devices by the engine's runner;
* :class:`~._ray.RayBackend`: blocks fed to kernel actors on a Ray cluster, one per GPU.

Both run :mod:`._block_tile`'s per-block computation on the same inputs, so a tile is the
same bits whichever ran it, and :func:`~._matrix.kernel_matrix` assembles an
in-memory matrix by the same route. A block becomes a tile file only when all its
pairs are done, so a kill loses at most the blocks in flight. Tiles are checked,
written, packed (:mod:`kernelcli.store._packs`) and counted by one background thread
(:class:`~._writer.TileWriter`) while the next block computes.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from .. import _env
from ..errors import KernelcliError
from ..store import RunStore
from ._job import Job
from ._progress_value import Progress
from ._tile_checks import check_diagonal, check_tile
from ._tile_writer import TileWriter


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
        self.text = ""

    def report(self):
        if self.progress is not None:
            self.progress(Progress(self.pairs_done, self.pairs_total, self.blocks_done,
                                   len(self.blocks), time.monotonic() - self.t0,
                                   self.this_run, platform=self.where[0],
                                   devices=self.where[1], note=self.text))

    def note(self, text: str):
        """What the backend says of its workers, reported when it changes."""
        with self._lock:
            if text != self.text:
                self.text = text
                self.report()

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


def execute(job: Job, store: RunStore, progress: Optional[Callable[[Progress], None]] = None,
            after_tile: Optional[Callable[[object], None]] = None, blocks=None) -> None:
    """Compute every block of ``blocks`` (default: all of ``job.plan``) whose tile
    ``store`` lacks, on the job's backend (which honours the call's stop). A block
    whose tile appears meanwhile (written by another process of a job array) is
    skipped."""
    blocks = job.plan.blocks if blocks is None else list(blocks)
    packer = store.packer(blocks, _env.pack_tiles())  # packs what earlier processes left
    pending, done = pending_blocks(store, blocks)
    backend = job.backend
    assert backend is not None  # prepare() opened it
    tally = Tally(blocks, done, progress, backend.progress_devices)
    tally.report()
    if not pending and not needs_test_diagonal(job, store):
        return

    def publish(block, tile, reported) -> None:  # on the writer's thread, in order
        check_tile(block, tile)
        store.write_tile(block, tile)
        del tile
        packer.add(block.key)  # a pack, once enough are loose (then the tiles go)
        tally.block_done(block.n_pairs - reported)  # the rest: diagonal, or not reported
        if after_tile is not None:
            after_tile(block)

    recorder = _ClusterRecord(store, tally)
    backend.watch(recorder)
    try:
        _compute(job, backend, pending, tally, publish, store)
    finally:
        backend.watch(None)
        recorder.close()


def _compute(job: Job, backend, pending, tally: Tally, publish, store: RunStore) -> None:
    rows, columns = job.inputs.rows, job.inputs.columns
    with TileWriter(publish) as writer:

        def wanted(block) -> bool:
            writer.check()  # a tile that could not be written stops the computation
            if store.has(block):  # another process wrote it meanwhile
                tally.block_done(block.n_pairs, computed=False)
                return False
            return True

        def on_pairs(m: int) -> None:
            tally.pairs(m)
            writer.check()

        s1 = backend.input_stats(job.kfn, rows)
        s2 = s1 if job.inputs.symmetric else backend.input_stats(job.kfn, columns)
        write_test_diagonal(job, store, s1)
        for block, tile, reported in backend.tiles(job.kfn, job.plan, pending, rows, columns,
                                                   s1, s2, wanted, on_pairs):
            writer.put(block, tile, reported)
            del tile
        writer.finish()


class _ClusterRecord:
    """The backend's word on its workers (a Ray driver's
    :class:`~._ray_pool.ClusterState`): on the progress line, and in the run directory
    (``shards/ray.json``, which ``status`` shows) once there is something to say; once
    more when computing ends (``running: false``). A record that cannot be written is
    skipped: it is never worth failing a run for."""

    def __init__(self, store: RunStore, tally: Tally):
        self.store, self.tally = store, tally
        self.last: Optional[dict] = None

    def __call__(self, state) -> None:
        self.tally.note(state.note)
        if state.note or self.last is not None:
            self.last = state.to_dict()
            self._write(running=True)

    def close(self) -> None:
        if self.last is not None:
            self._write(running=False)

    def _write(self, running: bool) -> None:
        try:
            self.store.mark_ray(dict(self.last or {}, running=running))
        except (OSError, KernelcliError):
            pass


def needs_test_diagonal(job: Job, store: RunStore) -> bool:
    return bool(job.plan.n_test and job.cfg.kernel.test_diagonal
                and not store.test_diag.exists())


def write_test_diagonal(job: Job, store: RunStore, s1) -> None:
    """Store ``K(t, t)`` of every test row (kind -> (n_test,)), from the per-input pass
    over ``rows`` (``s1``), once: before any test tile, so a finished run has it."""
    if needs_test_diagonal(job, store):
        n1 = job.plan.n1
        diag = {k: np.asarray(s1.diag[k][n1:]) for k in job.kfn.kinds}
        check_diagonal(diag, n1, "the test set's self-kernels")
        store.test_diag.write(diag)
