"""What runs on a Ray worker: :class:`KernelWorker`, the actor that holds one run's
compiled kernel function (``compute.executor: ray``, see :mod:`._ray`).

An actor, not a task per block: Ray gives a task that asks for a GPU its default
``max_calls=1``, so every such task is a fresh worker process that imports JAX,
initialises CUDA, preallocates device memory and compiles the kernel again. An
actor is one long-lived process per GPU (or CPU slot): it builds the
:class:`~kernelcli.kernels.KernelFn` once from the configuration (the architecture
travels, never a pickled compiled function), compiles each program shape once and
is then fed blocks. The first actor also answers what the planner needs
(:meth:`KernelWorker.info`, :meth:`KernelWorker.compiled_memory`), so the plan is
made for the worker's platform and memory, not the driver's (a GPU-less head node
must not give a CPU-shaped plan).
"""

from __future__ import annotations

import os
from typing import Optional

from ._block_tile import KernelFnSpec, block_tile
from ._budget import engine_facts, memory_budget

# jax's monitoring event of one XLA compilation (the same name from jax 0.4.30 on)
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class KernelWorker:
    """One actor per GPU (``num_gpus=1``), or per CPU slot on a CPU-only cluster.

    ``spec``: the :class:`~._block_tile.KernelFnSpec` it builds from; ``engine``:
    for the first actor ``compute.engine`` as configured ("auto" resolves on its node),
    or the engine an existing run recorded; for the others the engine the first resolved
    to; ``memory``: ``compute.memory`` (``None``: from
    this worker's free memory, shared by ``share`` actors of its node).
    """

    def __init__(self, spec: KernelFnSpec, engine: str, memory: Optional[int], share: int):
        from ..kernels import pin_cpu_level

        # before jax's backend starts: the run's CPU level, or for a new run's first
        # actor this node's (KERNELCLI_CPU_LEVEL, else its best), which the run records
        pin_cpu_level(spec.cpu_level)
        import jax

        self.compiles = 0
        # This process is the actor's own (it ends with the actor): counting its
        # compilations changes nothing outside it, and makes "compiled once" testable.
        jax.monitoring.register_event_duration_secs_listener(self._count)
        self.platform = jax.default_backend()
        self.n_local = len(jax.local_devices())
        self.kfn = spec.build(engine, self.platform)
        self.builds = 1
        self.memory, self.share = memory, max(1, int(share))

    def _count(self, event: str, duration_secs: float, **kwargs) -> None:
        if event == _COMPILE_EVENT:
            self.compiles += 1

    def info(self) -> dict:
        """What :func:`~._job.prepare` plans with: this worker's platform, the devices a
        plan counts, the memory budget per device and its source, and the engine's
        numbers (:func:`~._budget.engine_facts`: :class:`~kernelcli.plan.EngineCosts`
        without ``compiled_memory``, which is :meth:`compiled_memory`)."""
        import jax

        # A CPU node's actors share its cores and memory as a local run's host devices
        # do (one per core); a GPU actor has its device to itself.
        devices = self.share if self.platform == "cpu" else 1
        budget, source, memory = memory_budget(self.memory, jax.local_devices()[:1], devices)
        return dict(platform=self.platform, devices=devices, budget=budget, source=source,
                    memory=memory, cpu_level=self.kfn.engine.cpu_level,
                    **engine_facts(self.kfn))

    def where(self) -> tuple:
        """``(node id, node address)`` of this actor: answered once it is placed and
        built (the driver feeds it only then), and kept so that the driver can tell a lost
        node from a lost process."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def compiled_memory(self, rows: int, cols: int, pairs: int) -> int:
        return self.kfn.compiled_memory(rows, cols, pairs)

    def stats(self, x):
        return self.kfn.stats(x)

    def tile(self, pair_batch: int, bi):
        return block_tile(self.kfn, pair_batch, bi, None)

    def counters(self) -> dict:
        """How often this actor built its kernel function and compiled a program (tests)."""
        return {"builds": self.builds, "compiles": self.compiles, "pid": os.getpid()}
