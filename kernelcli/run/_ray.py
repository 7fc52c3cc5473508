"""Tile jobs as tasks on a Ray cluster (``compute.executor: ray``; optional extra).

The driver (the ``kernelcli`` process) keeps the plan and the store, exactly as a
local run: it reads the data, submits one task per missing block and writes each
tile itself, atomically, as its task returns, so ``resume`` and ``status`` work as
for a local run and a killed driver loses only the tiles in flight. The cluster's
workers need kernelcli (and Ray) installed, but neither the data nor the run
directory: a task gets its block's rows and columns as arrays.

:class:`RayBackend` is one of the executor driver's two backends
(:func:`~._executor.execute` checks, writes and tallies the tiles). Bit-identity
with the local backend: the per-input pass runs as tasks on the same row slices
the local backend reads (:func:`stats_slices`), and each tile task runs
:func:`block_tile`, the local backend's own per-block computation, on the same
padded inputs and pair batches. A task asks for one GPU when the
cluster has GPUs, else one CPU; a task whose worker dies, or that raises, is
retried (``max_retries``).

SIGINT / SIGTERM (:mod:`kernelcli._interrupt`): the driver's wait loops check for a
requested stop every half second; on a stop the tasks in flight are cancelled, Ray is
shut down (when this call started it) and :class:`~kernelcli.errors.Interrupted` is
raised. ``ray.init`` installs a SIGTERM handler of its own in the driver (one that
raises ``SystemExit`` anywhere); the caller's handler is put back right after it.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Optional

from .. import _interrupt
from ..errors import ComputeError, ConfigError
from ._executor import block_input, block_tile, stats_slices
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


# -- what runs on a worker ----------------------------------------------------------

_KERNELS: dict = {}  # per worker process: the compiled kernel of each spec, reused by tasks


def _kernel_fn(spec):
    key = repr(spec)
    kfn = _KERNELS.get(key)
    if kfn is None:
        from ..kernels import build_kernel_fn

        arch, shape, kinds, dtype, augment = spec
        kfn = _KERNELS[key] = build_kernel_fn(arch, shape, kinds, dtype, augment)
    return kfn


def _stats_task(spec, x):
    return _kernel_fn(spec).stats(x)


def _tile_task(spec, pair_batch, bi):
    return block_tile(_kernel_fn(spec), pair_batch, bi, None)


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


class RayBackend:
    """Tile jobs as Ray tasks (the executor driver's other backend): connected on
    entry, and on the way out the tasks in flight cancelled and Ray shut down (when
    this backend started it)."""

    def __init__(self, job: Job):
        self.ray = require_ray()
        self.job = job
        self.kfn = job.kfn
        self.inflight: dict = {}
        self.started = False

    def __enter__(self) -> "RayBackend":
        ray, job = self.ray, self.job
        self.started = _connect(ray, job.cfg.compute.address)
        try:
            resources = ray.cluster_resources()
            gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
            ask = {"num_gpus": 1} if gpus >= 1 else {"num_cpus": 1}
            self.slots = max(1, gpus if gpus >= 1 else cpus)
            opts = dict(max_retries=MAX_RETRIES, retry_exceptions=True, **ask)
            self.stats_remote = ray.remote(_stats_task).options(name="kernelcli_stats", **opts)
            self.tile_remote = ray.remote(_tile_task).options(name="kernelcli_tile", **opts)
            spec = (job.cfg.architecture, tuple(job.inputs.x1.example_shape),
                    tuple(self.kfn.kinds), job.cfg.kernel.dtype, tuple(self.kfn.augment))
            self.spec_ref = ray.put(spec)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ref in self.inflight:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort; the driver is leaving anyway
                pass
        self.inflight.clear()
        if self.started:
            self.started = False
            self.ray.shutdown()

    def input_stats(self, src):
        from ..kernels import Stats

        refs = []
        for s, e in stats_slices(src.n):
            _interrupt.check()
            refs.append(self.stats_remote.remote(self.spec_ref,
                                                 src.read(s, e, dtype=self.kfn.dtype)))
            self.inflight[refs[-1]] = None
        parts = _get_all(self.ray, refs)
        for r in refs:
            self.inflight.pop(r, None)
        return Stats.concat(parts)

    def tiles(self, blocks, rows, columns, s1, s2, wanted=lambda b: True, on_pairs=None):
        """``(block, tile, 0)`` as tasks return (no per-batch progress from a task)."""
        ray, inflight, plan = self.ray, self.inflight, self.job.plan
        todo = iter(blocks)
        window = 2 * self.slots  # tasks queued at once: every slot busy, inputs bounded

        def submit():
            while len(inflight) < window:
                _interrupt.check()
                block = next(todo, None)
                if block is None:
                    return
                if not wanted(block):
                    continue
                bi = block_input(self.kfn, rows, columns, s1, s2, block, plan.block)
                inflight[self.tile_remote.remote(self.spec_ref, plan.pair_batch, bi)] = block

        submit()
        while inflight:
            _interrupt.check()
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                block = inflight.pop(ref)
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
        raise ComputeError(f"a tile task failed on the Ray cluster after {MAX_RETRIES} "
                           f"retries: {_describe(exc)}; completed tiles are kept") from None
