"""Where ``predict --solver cg``'s products with K run (``--executor``): in this process
(``local``), in local worker processes (``processes``), on Ray actors (``ray``), or
in the shards of a job array (``shards``: :mod:`._predict_shards`, files for pipes).

Both spread executors run the same protocol (:mod:`kernelcli.solvers._bands`): one
worker per row band of the training kernel, created once per kind and kept for the
whole solve, holding its band in memory when it fits (``cache_bytes``); each product
sends ``V`` to every worker and stacks the bands' results in row order, bit-identical
to the single-process product.

``processes``: one process per band, started with ``spawn`` (no forked copy of the
coordinator's state), fed through a pipe; the cheap test of the protocol, and a way to
use the cores of one large machine. A worker that dies (a signal, the OOM killer) is
seen at once through its process sentinel, never waited for: it is started again and
its band recomputed, at most ``MAX_RESTARTS`` times per band in a solve, then the solve
stops with an error naming the band (never a result without that band). A product that
gets no answer within ``timeout_s`` stops the solve too (a stopped or wedged worker;
``V`` is sent from a thread, so even a worker that never reads cannot block the wait).
Each reply carries its product's number, checked.

``ray``: one actor per band (:class:`~kernelcli.solvers._bands.BandWorker`), connected
and, without an address, started as the compute's executor does
(:func:`kernelcli.pipeline._ray.connect_ray`: a local instance listens on 127.0.0.1 only). An
actor whose process dies is restarted by Ray and its call retried (``MAX_RESTARTS``
times). The workers read the run directory at the coordinator's path: on a cluster it
must be on a file system every node mounts there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import Optional, Union

from .._stop import Stop, check
from ..errors import ComputeError, ConfigError, UsageError
from ..solvers import DEFAULT_BAND_CACHE_BYTES, BandOperator, BandWorker, band_bounds, serve_band
from ._predict_shards import ShardBands
from ._predict_shards import coordinate as coordinate

PREDICT_EXECUTORS = ("local", "processes", "ray", "shards")
MAX_RESTARTS = 3  # per band and solve: a worker that keeps dying is not retried forever
MAX_WORKERS = 1024
DEFAULT_TIMEOUT_S = 3600.0  # one product of one band, at most
START_TIMEOUT_S = 600.0  # the workers' start (imports, reading a band into memory)
_POLL_S = 0.5  # how often a wait looks at ``stop``


def check_executor(executor: str, workers: Optional[int], address: Optional[str],
                   solver: str) -> None:
    """Refuse (exit 2) an executor, worker count or address predict cannot use."""
    if executor not in PREDICT_EXECUTORS:
        raise UsageError.naming(f"<<executor>>: {executor!r} is not accepted; give one of "
                                f"{', '.join(PREDICT_EXECUTORS)}")
    if executor != "local" and solver != "cg":
        raise UsageError.naming(f"<<executor>> {executor}: only conjugate gradients' products "
                                f"are spread over workers; give <<solver>> cg (not {solver})")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_WORKERS):
        raise UsageError.naming(f"<<workers>>: {workers!r} is not accepted; give an integer "
                                f"from 1 to {MAX_WORKERS}")
    if workers is not None and executor == "local":
        raise UsageError.naming("<<workers>> needs <<executor>> processes, ray or shards")
    if workers is None and executor == "shards":
        raise UsageError.naming("<<executor>> shards needs <<workers>> N, the number of "
                                "shards of the job array serving the bands")
    if address is not None and executor != "ray":
        raise UsageError.naming("<<address>> needs <<executor>> ray")


def without_spread(run_dir, kwargs: dict) -> dict:
    """``kwargs`` of ``predict`` without the executor's, for the landmark route, which
    solves in this process: asking for workers there is refused (exit 2)."""
    asked = {k: kwargs.pop(k) for k in ("executor", "workers", "address") if k in kwargs}
    if asked and (asked.get("executor", "local"), asked.get("workers"),
                  asked.get("address")) != ("local", None, None):
        raise UsageError.naming(f"<<executor>>, <<workers>>, <<address>>: {run_dir} is a "
                                f"landmark run (data.landmarks), solved in this process by "
                                f"Nystrom regression; drop them")
    return kwargs


def _send_quietly(conn, msg) -> None:
    with contextlib.suppress(OSError, EOFError, ValueError):  # a worker gone: seen in _collect
        conn.send(msg)


def _how(exitcode) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


class ProcessBands:
    """One spawned process per band of ``base`` (an ``H5KernelOperator``)."""

    def __init__(self, base, workers: Optional[int] = None,
                 cache_bytes: int = DEFAULT_BAND_CACHE_BYTES,
                 timeout_s: float = DEFAULT_TIMEOUT_S, stop: Optional[Stop] = None):
        self.base, self.cache_bytes, self.timeout_s, self.stop = base, cache_bytes, timeout_s, stop
        self.bounds = band_bounds(base.shape[0], base.block_rows, workers or os.cpu_count() or 1)
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list = [None] * len(self.bounds)
        self.conns: list = [None] * len(self.bounds)
        self.senders: list = [[] for _ in self.bounds]  # each band's sends in flight
        self.deaths = [0] * len(self.bounds)
        self.iteration = 0
        try:
            for i in range(len(self.bounds)):
                self._start(i)
            self._collect({i: None for i in range(len(self.bounds))}, -1, START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def _start(self, i: int) -> None:
        s, e = self.bounds[i]
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=serve_band, daemon=True, name=f"kernelcli-band-{s}",
                                args=(child, str(self.base.path), self.base.dataset, s, e,
                                      self.base.block_rows, self.cache_bytes))
        proc.start()
        child.close()
        self.procs[i], self.conns[i] = proc, parent

    def pids(self) -> list:
        """The workers' process ids, band by band (tests kill them)."""
        return [p.pid for p in self.procs]

    def _died(self, i: int, msg) -> None:
        """Worker ``i`` is gone: start it again and resend ``msg`` (its product, or None
        while starting), or raise once it died ``MAX_RESTARTS`` times."""
        proc, (s, e) = self.procs[i], self.bounds[i]
        proc.join(5)
        if proc.is_alive():  # its pipe closed but the process lingers: it is no worker now
            proc.kill()
            proc.join()
        self.deaths[i] += 1
        self._close_pipe(i)
        if self.deaths[i] > MAX_RESTARTS:
            raise ComputeError(f"the worker of rows {s:,} to {e:,} of {self.base.dataset!r} "
                               f"({self.base.path}) died {self.deaths[i]} times (last: "
                               f"{_how(proc.exitcode)}); the CG solve stops, as it cannot "
                               f"go on without that band; predict again, or with fewer "
                               f"workers if memory ran out")
        self._start(i)
        if msg is not None:
            self._send(i, msg)

    def _send(self, i: int, msg) -> None:
        """Send from a thread: a send larger than the pipe's buffer waits for the worker
        to read, and a stopped worker would never read (the wait in :meth:`_collect`
        has the timeout). A worker that dies meanwhile is seen there by its sentinel."""
        sender = threading.Thread(target=_send_quietly, args=(self.conns[i], msg),
                                  daemon=True, name="kernelcli-band-send")
        sender.start()
        self.senders[i] = [t for t in self.senders[i] if t.is_alive()] + [sender]

    def _close_pipe(self, i: int) -> None:
        """Close band ``i``'s pipe once its process is gone and its sender is done: a
        closed descriptor is reused at once (by the next pipe), and a sender still
        writing to the old number would write into it. Every send still in flight is
        waited for, not only the last: ``close`` sends its farewell while a product's
        send to a stopped worker may still be writing."""
        for sender in self.senders[i]:
            sender.join()  # the peer is gone: the write ends (EPIPE) at once
        self.senders[i] = []
        self.conns[i].close()

    def _collect(self, sent: dict, iteration: int, timeout_s: Optional[float] = None) -> list:
        """The replies to product ``iteration`` (``sent``: band -> message), in band
        order; a worker that dies is restarted and sent its message again."""
        out = [None] * len(self.bounds)
        pending = set(sent)
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while pending:
            check(self.stop)
            if time.monotonic() > deadline:
                s, e = self.bounds[min(pending)]
                raise ComputeError(f"the worker of rows {s:,} to {e:,} of "
                                   f"{self.base.dataset!r} gave no answer in "
                                   f"{timeout_s:g} s; the CG solve stops")
            by = {}
            for i in pending:
                by[self.conns[i]] = by[self.procs[i].sentinel] = i
            for obj in wait(list(by), timeout=_POLL_S):
                i = by[obj]
                if i not in pending or obj is not self.conns[i]:
                    continue  # a sentinel: the pipe says whether anything is left to read
                try:
                    got, value, error = self.conns[i].recv()
                except (EOFError, OSError):
                    self._died(i, sent[i])
                    continue
                if error is not None:  # the same band would fail again: no retry
                    s, e = self.bounds[i]
                    raise ComputeError(f"the worker of rows {s:,} to {e:,} of "
                                       f"{self.base.dataset!r} failed: {error}")
                if got == -1 and iteration != -1:
                    continue  # a restarted worker's greeting; its product's answer follows
                if got != iteration:
                    raise ComputeError(f"a CG band worker answered product {got} while "
                                       f"product {iteration} was asked; the solve stops")
                out[i] = value
                pending.discard(i)
            for i in list(pending):  # a dead worker whose pipe holds nothing more
                if not self.procs[i].is_alive() and not self.conns[i].poll():
                    self._died(i, sent[i])
        return out

    def product(self, v, exact: bool) -> list:
        self.iteration += 1
        msg = (self.iteration, v, exact)
        for i in range(len(self.bounds)):
            self._send(i, msg)
        return self._collect({i: msg for i in range(len(self.bounds))}, self.iteration)

    def close(self) -> None:
        for i, conn in enumerate(self.conns):
            if conn is not None:
                self._send(i, None)
        for proc in self.procs:
            if proc is not None:
                proc.join(1)  # a worker told to end does so at once
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        for i, conn in enumerate(self.conns):
            if conn is not None:
                self._close_pipe(i)


class RayBands:
    """One Ray actor per band of ``base``, on the cluster at ``address`` (or RAY_ADDRESS,
    or a new local instance)."""

    def __init__(self, base, workers: Optional[int] = None, address: Optional[str] = None,
                 cache_bytes: int = DEFAULT_BAND_CACHE_BYTES, stop: Optional[Stop] = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        try:
            import ray
        except ImportError:
            raise ConfigError("predict --executor ray needs the Ray package, which is not "
                              "installed; install it with `pip install 'kernelcli[ray]'`, "
                              "or use --executor processes") from None
        from ..pipeline import connect_ray

        self.ray, self.stop, self.timeout_s, self.actors = ray, stop, timeout_s, []
        self.started = connect_ray(ray, address)
        try:
            # an actor asks for one CPU: more actors than the cluster's CPUs never start
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            size = min(workers or cpus, cpus)
            self.bounds = band_bounds(base.shape[0], base.block_rows, size)
            actor = ray.remote(BandWorker).options(
                num_cpus=1, max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)
            self.actors = [actor.remote(str(base.path), base.dataset, s, e, base.block_rows,
                                        cache_bytes) for s, e in self.bounds]
            self._get([a.ping.remote() for a in self.actors])
        except BaseException:
            self.close()
            raise

    def _get(self, refs) -> list:
        from ..pipeline import describe_ray_error

        pending = list(refs)
        deadline = time.monotonic() + self.timeout_s
        while pending:
            check(self.stop)
            if time.monotonic() > deadline:
                raise ComputeError(f"{len(pending)} of the {len(refs)} CG band actors gave no "
                                   f"answer in {self.timeout_s:g} s (each asks for one free "
                                   f"CPU of the Ray cluster); the CG solve stops")
            _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
        try:
            return self.ray.get(list(refs))
        except self.ray.exceptions.RayError as exc:
            raise ComputeError(f"a CG band actor failed on the Ray cluster (a dead actor is "
                               f"restarted {MAX_RESTARTS} times): {describe_ray_error(exc)}") from None

    def product(self, v, exact: bool) -> list:
        ref = self.ray.put(v)
        return self._get([a.product.remote(ref, exact) for a in self.actors])

    def close(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor)
        self.actors = []
        if self.started:
            self.started = False
            self.ray.shutdown()


@contextlib.contextmanager
def spread(base, executor: str = "local", workers: Optional[int] = None,
           address: Optional[str] = None, cache_bytes: int = DEFAULT_BAND_CACHE_BYTES,
           stop: Optional[Stop] = None, coordination=None):
    """``base`` itself (``local``), or a :class:`BandOperator` over its bands on the
    executor's workers, closed (workers ended) when the block ends."""
    if executor == "local":
        yield base
        return
    pool: Union[ShardBands, ProcessBands, RayBands]
    if executor == "shards":
        assert workers is not None  # check_executor refused shards without workers
        pool = ShardBands(base, coordination, workers, stop=stop)
    elif executor == "processes":
        pool = ProcessBands(base, workers, cache_bytes, stop=stop)
    else:
        pool = RayBands(base, workers, address, cache_bytes, stop=stop)
    try:
        yield BandOperator(base, pool, pool.bounds)
    finally:
        pool.close()
