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

A machine shared with other work: a warm call's wall time is what the run will see
while the load stays as it is, but a call of two rounds waits for its slowest device,
and a tenth of a second is at the mercy of the scheduler (such calls measured up to
twice their neighbours' time at a load of 4 to 7 on 2 cores). So the pairs are timed
in one call of about :data:`SAMPLE_SECONDS` (at most a block's pairs, the memory the
run's own tiles take), whose batches the devices take from one queue as compute's do;
the per-input pass and a grid's calls are repeated and their median taken. The
process's CPU time beside that wall time says what share of its cores it got
(``cores_share``): below one the estimate holds while the load stays, and
``seconds_estimate_idle`` is the time with the cores to itself.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable, Optional

import numpy as np

from .._stop import Stop, check
from ..pipeline import STATS_ROWS, Job, block_input, block_tile, compute_streams, stats_slices
from ._results import Timing

# Seconds of warm calls timed: long enough that the scheduler's slices on a loaded
# machine average out, short beside a run worth estimating (at a load of 7 on 2 cores
# calls of two rounds took 0.22-0.72 s where compute's rate was 0.34 s). The pair
# batches: one call of that many rounds (a round is a batch per device), at most
# _MAX_ROUNDS. Where one call is a grid's (one block, one device), calls repeated and
# their median taken: at least _MIN_CALLS and this long, at most _MAX_CALLS or twice as
# long. The per-input pass: the same for a quarter of the time.
SAMPLE_SECONDS = 1.5
_MIN_CALLS, _MAX_CALLS, _MAX_ROUNDS = 3, 10, 256


def _rounds(calls: int, devices: int) -> int:
    return -(-calls // devices)


def _warm(call: Callable[[], object], check_stop: Callable[[], None], seconds: float):
    """The median wall time of warm ``call()``s repeated for about ``seconds``, and the
    share of the wall time that the process's CPU time filled, summed over the calls."""
    walls: list = []
    cpu = wall = 0.0
    while not walls or (len(walls) < _MAX_CALLS and wall < 2 * seconds
                        and (wall < seconds or len(walls) < _MIN_CALLS)):
        check_stop()
        t, c = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - t)
        cpu += time.process_time() - c
        wall += walls[-1]
        check_stop()
    return statistics.median(walls), cpu / max(wall, 1e-9)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) or 1


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

    def _check():
        check(stop)

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
    warm_stats, _ = _warm(lambda: kfn.stats(sample, devices, batch=b0), _check,
                          SAMPLE_SECONDS / 4)
    per_row_round = warm_stats / (b0 * _rounds(-(-sample.shape[0] // b0), d))
    stats_seconds = 0.0
    for src in sets:
        for s, e in stats_slices(src.n):
            b = kfn.stats_rows(e - s)
            stats_seconds += _rounds(-(-(e - s) // b), d) * b * per_row_round

    # The pair batches of the first block (at row and column 0): two rounds of calls on
    # every device cold then warm, then, where that was quick, one call of the rounds
    # that fill SAMPLE_SECONDS (never more than the block's or the whole run's).
    block = plan.blocks[0]
    s1 = kfn.stats(rows.read(0, block.r1, dtype=kfn.dtype), devices)
    s2 = s1 if job.inputs.symmetric else kfn.stats(columns.read(0, block.c1, dtype=kfn.dtype),
                                                   devices)
    bi = block_input(kfn, rows, columns, s1, s2, block, plan.block)
    pb = plan.pair_batch
    if kfn.uses_grid(plan.block, plan.block, pb):  # one grid call per block, one device
        cold_pairs, _ = _timed(lambda: block_tile(kfn, pb, bi, devices))
        warm_pairs, busy = _warm(lambda: block_tile(kfn, pb, bi, devices), _check,
                                 SAMPLE_SECONDS)
        first_warm, take, parallel = warm_pairs, max(bi.n_evaluated, 1), 1
        pairs_seconds = len(plan.blocks) * warm_pairs
    else:
        parallel = d
        evaluated = [blk.n_evaluated for blk in plan.blocks]
        pair_rounds = sum(_rounds(-(-n // pb), d) for n in evaluated if n)
        take = min(len(bi.i), 2 * d * pb)
        sample_rounds = _rounds(-(-take // pb), d)
        cold_pairs, _ = _pairs_call(kfn, bi, take, pb, devices, stop)
        warm_pairs, busy = _pairs_call(kfn, bi, take, pb, devices, stop)
        first_warm = warm_pairs  # the same call as the cold one, less its compilation
        block_rounds = _rounds(-(-len(bi.i) // pb), d)  # a tile's memory, no more
        if warm_pairs < SAMPLE_SECONDS and min(pair_rounds, block_rounds) > sample_rounds:
            sample_rounds = min(_MAX_ROUNDS, pair_rounds, block_rounds, max(
                sample_rounds, int(SAMPLE_SECONDS * sample_rounds / max(warm_pairs, 1e-9))))
            take = sample_rounds * d * pb
            warm_pairs, busy = _pairs_call(kfn, bi, take, pb, devices, stop)
        pairs_seconds = pair_rounds * warm_pairs / sample_rounds
    # the share of the cores its calls run on that the process had while they ran
    used = min(parallel, cores())
    share = min(1.0, busy / used)

    # A tile as the store serialises it, and the result's bytes moved three times.
    write, tile_bytes = _tile_write_seconds(kfn, (block.r1 - block.r0, block.c1 - block.c0))
    result_bytes = (plan.n1 + plan.n_test) * plan.n2 * kfn.dtype.itemsize * len(kfn.kinds)
    writes_seconds = len(plan.blocks) * write + 3 * result_bytes * write / max(tile_bytes, 1)

    compile_seconds = max(0.0, cold_stats - warm_stats) + max(0.0, cold_pairs - first_warm)
    total = startup + compile_seconds + stats_seconds + pairs_seconds + writes_seconds
    return Timing(seconds_estimate=total, startup_seconds=startup,
                  compile_seconds=compile_seconds, stats_seconds=stats_seconds,
                  pairs_seconds=pairs_seconds, writes_seconds=writes_seconds,
                  # the process's: all its devices at once, so pairs x it = pairs_seconds
                  seconds_per_pair=pairs_seconds / max(plan.pairs_total, 1),
                  seconds_per_pair_per_device=warm_pairs * parallel / take,
                  timed_devices=parallel, timed_cores=used, cores_share=share, load_average=os.getloadavg()[0],
                  # the computing parts at the share the load left, on free cores
                  seconds_estimate_idle=total - (1 - share) * (stats_seconds + pairs_seconds),
                  timed_on=_timed_on(kfn))


def _timed_on(kfn) -> str:
    """The machine the times hold for: its CPU (:func:`~kernelcli.kernels._cpu_level.
    describe`; on an accelerator, the device too) and the native library's variant."""
    import jax

    from ..kernels import describe_cpu, native_library

    where = describe_cpu()
    if jax.default_backend() != "cpu":
        where = f"{jax.devices()[0].device_kind} on {where}"
    if kfn.engine.native and native_library() is not None:
        where += f", native library {native_library().variant}"
    return where


def _pairs_call(kfn, bi, n: int, pb: int, devices, stop) -> tuple[float, float]:
    """One call of ``n`` of the block's pairs (repeated past its end), the devices taking
    batches from one queue as compute's do: its wall seconds and the process's CPU
    seconds per wall second."""
    ii, jj = np.resize(bi.i, n), np.resize(bi.j, n)
    check(stop)
    t, c = time.perf_counter(), time.process_time()
    kfn.pair_values(bi.x1, bi.s1, bi.x2, bi.s2, ii, jj, pb, devices)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    check(stop)
    return wall, cpu / max(wall, 1e-9)


def _tile_write_seconds(kfn, shape) -> tuple[float, int]:
    """Seconds to serialise one tile of ``shape`` per kind as an HDF5 file (in memory:
    ``estimate`` writes nothing; the store's fsyncs are not counted), and its bytes."""
    from ..store import tile_write_seconds

    tile = np.zeros(shape, kfn.dtype)
    return tile_write_seconds(kfn.kinds, tile), tile.nbytes * len(kfn.kinds)
