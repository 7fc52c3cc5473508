"""``estimate --time``: the wall time of ``compute``, from the run's own route timed
on a sample of its work.

What a ``compute`` of the configuration spends, and how each part is found:

* start-up: importing, opening and fingerprinting the data, building the kernel
  and the planner's memory model -- the same steps ``estimate`` takes first, so
  this process's age once they are done says what they cost;
* compilation: the per-input program and the pair program, once per device;
  the first calls below pay it, the second (warm) calls do not;
* the per-input pass: warm calls of the per-input program on every device at
  once, ``rounds`` of them for the whole run (a round is one call per device);
* the pair batches: warm batches of exactly ``plan.pair_batch`` pairs of the first
  block on every device at once, scaled to the rounds of every block;
* tile writes and assembly: a tile serialised as the store writes it (HDF5, in
  memory) per block, and the result's bytes moved three times (tiles written, read
  back, ``kernels.h5`` written).

A warm persistent compilation cache (which this very estimate fills) removes the
compilation part from the next run: it is reported apart (``compile_seconds``).
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from .._stop import Stop, check
from ..pipeline import STATS_ROWS, Job, block_input, block_tile, compute_streams, stats_slices
from ._results import Timing


def _rounds(calls: int, devices: int) -> int:
    return -(-calls // devices)


def time_run(job: Job, startup: float, stop: Optional[Stop] = None) -> Timing:
    """The parts of ``compute``'s wall time for ``job``, in seconds, and their sum;
    ``startup``: this process's age when ``job`` was prepared; a requested ``stop`` is
    honoured before and after each timed call."""

    def _timed(fn):
        check(stop)
        t = time.perf_counter()
        out = fn()
        check(stop)
        return time.perf_counter() - t, out

    plan, kfn = job.plan, job.kfn
    devices = compute_streams(kfn, job.devices)  # as the run calls them
    d = len(devices)
    rows, columns = job.inputs.rows, job.inputs.columns

    # The per-input pass: one round of calls (one per device) of the first slice's
    # size, cold then warm; a call's time taken as proportional to its rows.
    sets = [rows] if job.inputs.symmetric else [rows, columns]
    b0 = kfn.stats_rows(min(rows.n, STATS_ROWS))
    sample = rows.read(0, min(rows.n, b0 * d), dtype=kfn.dtype)
    cold_stats, _ = _timed(lambda: kfn.stats(sample, devices, batch=b0))
    warm_stats, _ = _timed(lambda: kfn.stats(sample, devices, batch=b0))
    per_row_round = warm_stats / (b0 * _rounds(-(-sample.shape[0] // b0), d))
    stats_seconds = 0.0
    for src in sets:
        for s, e in stats_slices(src.n):
            b = kfn.stats_rows(e - s)
            stats_seconds += _rounds(-(-(e - s) // b), d) * b * per_row_round

    # The pair batches of the first block (at row and column 0): up to two rounds of
    # calls on every device, cold then warm.
    block = plan.blocks[0]
    s1 = kfn.stats(rows.read(0, block.r1, dtype=kfn.dtype), devices)
    s2 = s1 if job.inputs.symmetric else kfn.stats(columns.read(0, block.c1, dtype=kfn.dtype),
                                                   devices)
    bi = block_input(kfn, rows, columns, s1, s2, block, plan.block)
    pb = plan.pair_batch
    if kfn.uses_grid(plan.block, plan.block, pb):  # one grid call per block, one device
        cold_pairs, _ = _timed(lambda: block_tile(kfn, pb, bi, devices))
        warm_pairs, _ = _timed(lambda: block_tile(kfn, pb, bi, devices))
        take = max(bi.n_evaluated, 1)
        pairs_seconds = len(plan.blocks) * warm_pairs
    else:
        take = min(len(bi.i), 2 * d * pb)
        bi.i, bi.j = bi.i[:take], bi.j[:take]
        sample_rounds = _rounds(-(-take // pb), d)
        cold_pairs, _ = _timed(lambda: kfn.pair_values(bi.x1, bi.s1, bi.x2, bi.s2, bi.i,
                                                       bi.j, pb, devices))
        warm_pairs, _ = _timed(lambda: kfn.pair_values(bi.x1, bi.s1, bi.x2, bi.s2, bi.i,
                                                       bi.j, pb, devices))
        evaluated = [blk.n_evaluated for blk in plan.blocks]
        pair_rounds = sum(_rounds(-(-n // pb), d) for n in evaluated if n)
        pairs_seconds = pair_rounds * warm_pairs / sample_rounds

    # A tile as the store serialises it, and the result's bytes moved three times.
    write, tile_bytes = _tile_write_seconds(kfn, (block.r1 - block.r0, block.c1 - block.c0))
    result_bytes = (plan.n1 + plan.n_test) * plan.n2 * kfn.dtype.itemsize * len(kfn.kinds)
    writes_seconds = len(plan.blocks) * write + 3 * result_bytes * write / max(tile_bytes, 1)

    compile_seconds = max(0.0, cold_stats - warm_stats) + max(0.0, cold_pairs - warm_pairs)
    total = startup + compile_seconds + stats_seconds + pairs_seconds + writes_seconds
    return Timing(seconds_estimate=total, startup_seconds=startup,
                  compile_seconds=compile_seconds, stats_seconds=stats_seconds,
                  pairs_seconds=pairs_seconds, writes_seconds=writes_seconds,
                  seconds_per_pair=warm_pairs * d / take if take else 0.0)


def _tile_write_seconds(kfn, shape) -> tuple[float, int]:
    """Seconds to serialise one tile of ``shape`` per kind as an HDF5 file (in memory:
    ``estimate`` writes nothing; the store's fsyncs are not counted), and its bytes."""
    from ..store import tile_write_seconds

    tile = np.zeros(shape, kfn.dtype)
    return tile_write_seconds(kfn.kinds, tile), tile.nbytes * len(kfn.kinds)
