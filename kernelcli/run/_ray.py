"""Tile jobs on a Ray cluster (``compute.executor: ray``; optional extra).

The driver (the ``kernelcli`` process) keeps the plan and the store, exactly as a
local run: it reads the data, feeds the missing blocks to the cluster and writes each
tile itself, atomically, as it comes back (in any order), so ``resume`` and
``status`` work as for a local run and a killed driver loses only the tiles in
flight. The cluster's workers need kernelcli (and Ray) installed, but neither the
data nor the run directory: a block travels as its rows and columns.

The work is done by actors (:class:`~._ray_worker.KernelWorker`): one per GPU
(``num_gpus=1``; as many as the cluster has GPUs, at most ``compute.devices``), or on
a CPU-only cluster one per CPU (``num_cpus=1``, as the tasks of earlier versions
asked). Each builds the kernel function once, from the configuration, and keeps its
compiled programs for every block it is fed. Not tasks: Ray gives a task that asks
for a GPU its default ``max_calls=1``, so each would be a fresh process that
re-imports JAX, re-initialises CUDA and recompiles. The plan is made on the first
actor (:class:`RaySession`, from :func:`~._job.prepare`): the engine resolved from the
worker's platform, its memory budget and its compiled programs' memory.

:class:`RayBackend` is one of the executor driver's two backends
(:func:`~._executor.execute` checks, writes and tallies the tiles). Bit-identity
with the local backend: the per-input pass runs on the same row slices the local
backend reads (:func:`stats_slices`), and each tile on an actor is
:func:`block_tile`, the local backend's own per-block computation, on the same
padded inputs and pair batches. At most :data:`PER_ACTOR` blocks are queued on an
actor at once (one computing, the next already shipped), so the inputs in flight are
bounded. An actor whose process dies is restarted and its queued calls are retried
(``MAX_RETRIES`` times); a call that raises fails the run (the same computation would
raise again), naming the cause; the tiles written are kept.

SIGINT / SIGTERM (:mod:`kernelcli._interrupt`): the driver's wait loops check for a
requested stop every half second; on a stop the actors are killed, Ray is shut down
(when this run started it) and :class:`~kernelcli.errors.Interrupted` is raised.
``ray.init`` installs a SIGTERM handler of its own in the driver (one that raises
``SystemExit`` anywhere); the caller's handler is put back right after it.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Optional

from .. import _interrupt
from ..errors import ComputeError, ConfigError
from ._executor import block_input, stats_slices
from ._job import Job

MAX_RETRIES = 3

_INSTALL = "pip install 'kernelcli[ray]'"


def require_ray():
    """The ``ray`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"compute.executor: ray needs the Ray package, which is not "
                          f"installed; install it with `{_INSTALL}` (on this machine and "
                          f"every node of the cluster), or use executor: local") from None
    return ray


# -- the driver -----------------------------------------------------------------------

def _describe(exc) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def _connect(ray, address: Optional[str]) -> bool:
    """Connect (or start a local instance); whether this call did it."""
    if ray.is_initialized():
        return False
    kwargs = dict(logging_level=logging.ERROR, log_to_driver=False)
    if address is None:
        kwargs["include_dashboard"] = False
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "RAY_ADDRESS / a new local instance"
        raise ComputeError.naming(f"cannot connect to the Ray cluster at {where} "
                                  f"(compute.address / <<address>>): {_describe(exc)}") from None
    finally:
        # ray.init replaces the driver's SIGTERM handler with one that raises SystemExit
        # at any bytecode; this library installs no handlers, so the caller's stays.
        if main and before is not None and signal.getsignal(signal.SIGTERM) is not before:
            signal.signal(signal.SIGTERM, before)
    return True


class RaySession:
    """A connection to the cluster and one run's kernel actors: made by
    :func:`~._job.prepare` (the first actor plans), used by :class:`RayBackend` (the
    pool grows to its full size there) and closed with the job: actors killed, Ray
    shut down when this session started it."""

    def __init__(self, cfg, spec: tuple, engine: str):
        self.ray = ray = require_ray()
        self.spec = spec
        self.actors: list = []
        self.started = _connect(ray, cfg.compute.address)
        try:
            from ._ray_worker import KernelWorker

            resources = ray.cluster_resources()
            gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
            size = gpus if gpus >= 1 else cpus
            if cfg.compute.devices is not None:
                size = min(size, cfg.compute.devices)
            self.size = max(1, size)
            ask = {"num_gpus": 1} if gpus >= 1 else {"num_cpus": 1}
            # A CPU node's actors share its memory: as many as it has CPUs (at most
            # the pool), the count a local run there would give its host devices.
            share = 1 if gpus >= 1 else max(1, min(self.size, _cpus_per_node(ray)))
            self.worker = ray.remote(KernelWorker).options(
                max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES, **ask)
            self.args = (spec, engine, cfg.compute.memory, share)
            self.grow(1)
        except BaseException:
            self.close()
            raise

    def grow(self, n: int) -> list:
        """The first ``n`` actors (started as needed; at most the pool's size)."""
        while len(self.actors) < min(n, self.size):
            self.actors.append(self.worker.remote(*self.args))
        return self.actors

    def call(self, method: str, *args):
        """One call on the first actor, waited for (responsive to a stop)."""
        return _get_all(self.ray, [getattr(self.actors[0], method).remote(*args)])[0]

    def plan_inputs(self):
        """``(kfn, costs, budget, source, memory, devices)`` for :func:`~._job.plan_run`, from
        the first actor: the driver's kernel function is built for the worker's engine
        (it only reads and pads the inputs), the costs and budget are the worker's."""
        from ..plan import EngineCosts
        from ._job import build_for_engine

        info = self.call("info")
        kfn = build_for_engine(self.spec, info["engine"], info["platform"])

        def compiled_memory(rows: int, cols: int, pairs: int) -> int:
            return self.call("compiled_memory", rows, cols, pairs)

        costs = EngineCosts(chunk=info["chunk"], flat_input=info["flat_input"],
                            cov_elements=info["cov_elements"], layers=info["layers"],
                            kinds=tuple(info["kinds"]), itemsize=info["itemsize"],
                            compiled_memory=compiled_memory, engine=info["engine"])
        self.info = info
        return kfn, costs, info["budget"], info["source"], info["memory"], info["devices"]

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort; the driver is leaving anyway
                pass
        self.actors = []
        if self.started:
            self.started = False
            self.ray.shutdown()


def _cpus_per_node(ray) -> int:
    """The most CPUs any live node of the cluster offers."""
    counts = [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return max(counts or [1])


PER_ACTOR = 2  # blocks queued on one actor: one computing, the next already shipped


class RayBackend:
    """Blocks fed to the job's kernel actors (the executor driver's other backend);
    on the way out the session is closed (actors killed, Ray shut down when this run
    started it)."""

    def __init__(self, job: Job):
        self.ray = require_ray()
        self.job = job
        self.kfn = job.kfn
        self.session = job.ray
        self.inflight: dict = {}  # ref -> (actor index, block)

    def __enter__(self) -> "RayBackend":
        if self.session is None:  # a job prepared for another executor
            raise ComputeError("the Ray executor needs a job prepared with "
                               "compute.executor: ray")
        self.actors = self.session.grow(self.session.size)
        return self

    def __exit__(self, *exc) -> None:
        self.inflight.clear()
        self.session.close()

    def input_stats(self, src):
        from ..kernels import Stats

        refs = []
        for n, (s, e) in enumerate(stats_slices(src.n)):
            _interrupt.check()
            actor = self.actors[n % len(self.actors)]
            refs.append(actor.stats.remote(src.read(s, e, dtype=self.kfn.dtype)))
        return Stats.concat(_get_all(self.ray, refs))

    def tiles(self, blocks, rows, columns, s1, s2, wanted=lambda b: True, on_pairs=None):
        """``(block, tile, 0)`` as the actors return them (no per-batch progress)."""
        ray, inflight, plan = self.ray, self.inflight, self.job.plan
        todo = iter(blocks)
        load = [0] * len(self.actors)

        def submit():
            while min(load) < PER_ACTOR:
                _interrupt.check()
                block = next(todo, None)
                if block is None:
                    return
                if not wanted(block):
                    continue
                a = load.index(min(load))
                bi = block_input(self.kfn, rows, columns, s1, s2, block, plan.block)
                inflight[self.actors[a].tile.remote(plan.pair_batch, bi)] = (a, block)
                load[a] += 1

        submit()
        while inflight:
            _interrupt.check()
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                a, block = inflight.pop(ref)
                load[a] -= 1
                yield block, _get_all(ray, [ref])[0], 0
            submit()

def _get_all(ray, refs):
    """``ray.get`` that stays responsive to a stop and names a failed task's cause."""
    pending = list(refs)
    while True:
        _interrupt.check()
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        if not pending:
            break
    try:
        return ray.get(list(refs))
    except ray.exceptions.RayError as exc:
        if "RESOURCE_EXHAUSTED" in str(exc):  # a device out of memory on the worker:
            # the out-of-memory error of a local run (run/_api.py), naming the budget
            raise RuntimeError(f"RESOURCE_EXHAUSTED on a Ray worker: {_describe(exc)}") from None
        raise ComputeError(f"a kernel actor's call failed on the Ray cluster (a dead actor "
                           f"is restarted {MAX_RETRIES} times): {_describe(exc)}; completed "
                           f"tiles are kept") from None
