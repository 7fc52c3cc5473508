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
actor (:meth:`RayBackend.plan_inputs`, from :func:`~._job.prepare`): the engine
resolved from the worker's platform, its memory budget and its compiled programs'
memory.

:class:`RayBackend` is one of the executor driver's two backends (:mod:`._backend`;
:func:`~._executor.execute` checks, writes and tallies the tiles). Bit-identity with
the local backend: the per-input pass runs on the same row slices the local backend
reads (:func:`~._block.stats_slices`), and each tile on an actor is
:func:`~._block.block_tile`, the local backend's own per-block computation, on the
same padded inputs and pair batches.

Faults (:mod:`._ray_pool`): the actors are fed by an :class:`~._ray_pool.ActorPool`, at
most :data:`~._ray_pool.PER_ACTOR` blocks queued on each (one computing, the next
already shipped), so the inputs in flight are bounded. When an actor's process or node
is lost, its queued and running blocks go back to the queue for the actors that are
left and a new actor is asked for in its place; a block lost with more than
:data:`~._ray_pool.MAX_RETRIES` actors fails the run. Placing actors is bounded
(``KERNELCLI_RAY_WAIT_SECONDS``): the run goes on with the actors it has, or fails with
one line when it has none. A call that raises fails the run (the same computation would
raise again), naming the cause; the tiles written are kept. What the pool sees (actors
awaited, nodes lost, blocks requeued) goes to :meth:`RayBackend.watch`'s callback: the
progress line and the run directory's ``shards/ray.json``, which ``status`` shows.

A stop (the ``stop`` the backend is given, :mod:`kernelcli._stop`; the CLI's signal
handlers request it): the driver's wait loops check it every half second; on a stop
the actors are killed, Ray is shut down (when this run started it) and
:class:`~kernelcli.errors.Interrupted` is raised. ``ray.init`` installs a SIGTERM
handler of its own in the driver (one that raises ``SystemExit`` anywhere); the
caller's handler is put back right after it.

A local instance (no ``compute.address``, no ``RAY_ADDRESS``) listens on 127.0.0.1
only: by default Ray's head, raylet, object manager and workers listen on every
address of the host (gRPC on ``::``), open to the network. Ray (2.60) binds its
servers to loopback when the node's address is 127.0.0.1, but ``ray.init`` turns
``_node_ip_address="127.0.0.1"`` into the host's address unless its
``ENABLE_RAY_CLUSTER`` switch is off (what ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
sets when Ray is imported); it is turned off for the ``ray.init`` call alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
from typing import Any, Callable, Optional

from .. import _env
from .._stop import Stop, check
from ..data import RowSource
from ..errors import ComputeError, ConfigError
from ._block_tile import KernelFnSpec, block_input, stats_slices
from ._budget import Planning, engine_costs
from ._devices import local_devices
from ._ray_pool import ActorPool, call_failed, describe

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

def _connect(ray, address: Optional[str]) -> bool:
    """Connect (or start a local instance); whether this call did it."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False)
    local = address is None and not _env.get("RAY_ADDRESS")
    if address is None:
        kwargs["include_dashboard"] = False
    if local:
        kwargs["_node_ip_address"] = "127.0.0.1"
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        with _loopback_only(local):
            ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "RAY_ADDRESS / a new local instance"
        raise ComputeError.naming(f"cannot connect to the Ray cluster at {where} "
                                  f"(compute.address / <<address>>): {describe(exc)}") from None
    finally:
        # ray.init replaces the driver's SIGTERM handler with one that raises SystemExit
        # at any bytecode; this library installs no handlers, so the caller's stays.
        if main and before is not None and signal.getsignal(signal.SIGTERM) is not before:
            signal.signal(signal.SIGTERM, before)
    return True


@contextlib.contextmanager
def _loopback_only(local: bool):
    """While a local instance starts: Ray's switch that would turn 127.0.0.1 into the
    host's address, off (see the module docstring), then as it was."""
    if not local:
        yield
        return
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


class RayBackend:
    """Blocks fed to one run's kernel actors on a Ray cluster: the executor driver's
    other backend (:class:`~kernelcli.pipeline._backend.Backend`, beside :mod:`._local`).

    Made from the configuration's ``compute`` section; :meth:`plan_inputs` connects and
    asks for the first actor, which plans; :meth:`input_stats` and :meth:`tiles` grow
    the pool to its full size. :meth:`close` (with the job) kills the actors and shuts
    Ray down when this backend started it. A requested ``stop`` is honoured in the
    driver's wait loops, every half second."""

    def __init__(self, compute, stop: Optional[Stop] = None):
        self.ray = require_ray()
        self.compute, self.stop = compute, stop
        self.pool: Optional[ActorPool] = None
        self.started = False
        self.info: Optional[dict] = None
        self._watch: Optional[Callable] = None

    @classmethod
    def for_compute(cls, compute, stop: Optional[Stop] = None) -> RayBackend:
        return cls(compute, stop)

    @property
    def platform(self) -> str:
        """The workers' platform (known once planned)."""
        assert self.info is not None, "the platform is known once planned"
        return self.info["platform"]

    @property
    def progress_devices(self) -> tuple:
        return ()  # the actors run on the cluster's devices, not this process's

    @property
    def actors(self) -> list:
        """The actors asked for and not lost (placed or still on their way)."""
        return [] if self.pool is None else self.pool.handles

    @property
    def inflight(self) -> dict:
        """The calls sent and not yet answered."""
        return {} if self.pool is None else self.pool.inflight

    def watch(self, callback: Optional[Callable]) -> None:
        """Give each new :class:`~._ray_pool.ClusterState` (actors awaited, nodes lost,
        blocks requeued) to ``callback`` (``None``: to nobody)."""
        self._watch = callback
        if self.pool is not None:
            self.pool.watch = callback

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self, spec: KernelFnSpec, engine: str) -> None:
        ray, compute = self.ray, self.compute
        self.started = _connect(ray, compute.address)
        from ._ray_worker import KernelWorker

        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        size = gpus if gpus >= 1 else cpus
        if compute.devices is not None:
            size = min(size, compute.devices)
        size = max(1, size)
        ask = {"num_gpus": 1} if gpus >= 1 else {"num_cpus": 1}
        # A CPU node's actors share its memory: as many as it has CPUs (at most
        # the pool), the count a local run there would give its host devices.
        share = 1 if gpus >= 1 else max(1, min(size, _cpus_per_node(ray)))
        # no restarts by Ray: a lost actor's blocks go to the others (._ray_pool)
        worker = ray.remote(KernelWorker).options(max_restarts=0, max_task_retries=0, **ask)
        self.args = (spec, engine, compute.memory, share)
        self.pool = ActorPool(ray, lambda: worker.remote(*self.args), size,
                              "GPU" if gpus >= 1 else "CPU", self.stop)
        self.pool.watch = self._watch
        self.pool.grow(1)

    def _started(self) -> ActorPool:
        if self.pool is None:
            raise RuntimeError("the actors are started by plan_inputs()")
        return self.pool

    def call(self, method: str, *args):
        """One call on an actor, waited for (responsive to a stop; a lost actor's call is
        made again on another)."""
        return self._started().call(method, *args)

    def plan_inputs(self, spec: KernelFnSpec, engine: str) -> Planning:
        """What the planner needs, from the first actor: the driver's kernel function is
        built for the worker's engine (it only reads and pads the inputs), the costs and
        budget are the worker's; the devices shown are this driver's."""
        try:
            self._start(spec, engine)
            info = self.call("info")
            # the other actors take the engine and the CPU level of the first ("auto"
            # could resolve differently on another node, and another node's CPU may
            # compute at another level: tiles of either would differ in their last bits)
            spec = dataclasses.replace(spec, cpu_level=info["cpu_level"])
            self.args = (spec, info["engine"], *self.args[2:])
            kfn = spec.build(info["engine"], info["platform"])

            def compiled_memory(rows: int, cols: int, pairs: int) -> int:
                return self.call("compiled_memory", rows, cols, pairs)

            self.info = info
            return Planning(kfn, engine_costs(info, compiled_memory), info["budget"],
                            info["source"], info["memory"], info["devices"],
                            local_devices(None))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.started:
            self.started = False
            self.ray.shutdown()

    def input_stats(self, kfn, src: RowSource):
        from ..kernels import Stats

        pool = self._started()
        pool.grow(pool.planned)
        slices = list(enumerate(stats_slices(src.n)))

        def submit(actor, item):
            s, e = item[1]
            return actor.stats.remote(src.read(s, e, dtype=kfn.dtype))

        try:
            parts = dict(pool.run(slices, submit,
                                  name=lambda item: f"rows {item[1][0]}:{item[1][1]} of the "
                                                    f"per-input pass"))
        except BaseException:
            self.close()
            raise
        return Stats.concat([parts[item] for item in slices])

    def tiles(self, kfn, plan, blocks, rows: RowSource, columns: RowSource, s1, s2,
              wanted=lambda b: True, on_pairs=None):
        """``(block, tile, 0)`` as the actors return them (no per-batch progress)."""
        pool = self._started()
        pool.grow(pool.planned)

        def submit(actor, block):
            bi = block_input(kfn, rows, columns, s1, s2, block, plan.block)
            return actor.tile.remote(plan.pair_batch, bi)

        try:
            for block, tile in pool.run(blocks, submit, name=lambda b: f"block {b.key}",
                                        wanted=wanted):
                yield block, tile, 0
        except BaseException:
            self.close()  # a stop or a failure: the actors go (and Ray, when started here)
            raise


def _cpus_per_node(ray) -> int:
    """The most CPUs any live node of the cluster offers."""
    counts = [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return max(counts or [1])


# the connection and error text, public for predict's band actors (run/_predict_spread)
connect_ray, describe_ray_error = _connect, describe


def _get_all(ray, refs, stop: Optional[Stop] = None):
    """``ray.get`` that stays responsive to ``stop`` and names a failed task's cause."""
    pending = list(refs)
    while True:
        check(stop)
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        if not pending:
            break
    try:
        return ray.get(list(refs))
    except ray.exceptions.RayError as exc:
        raise call_failed(ray, exc) from None
