"""A run's memory budget, and what the planner needs of the engine.

:func:`memory_budget` is the budget a plan is made within (``compute.memory``, or the
free memory of the devices or the host); :func:`engine_facts` are the compiled
kernel's numbers the planner reads and :func:`engine_costs` the one place they become
a :class:`~kernelcli.plan.EngineCosts` -- a local run's from its own kernel function,
a Ray run's from what its first actor reported (:mod:`._ray_worker`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from .._system import memory_available
from ..plan import EngineCosts, auto_budget
from ._devices import device_memory_available

# Headroom left on an accelerator's free memory with compute.memory: auto: a smaller
# share than the host's (nothing else of the process lives there), for the allocator's
# fragmentation and the buffers XLA keeps between calls.
DEVICE_HEADROOM = (0.1, 256 << 20)


def memory_budget(requested: Optional[int], devices, count: Optional[int] = None
                  ) -> tuple[int, str, str]:
    """``(bytes per device, source, memory)``: the plan's budget, what bound it (see
    :attr:`~kernelcli.pipeline._job.Job.memory_source`) and which memory it is: ``"device"``
    on accelerators (their own memory, ``compute.memory`` included), else ``"host"``.

    ``requested`` (``compute.memory``) wins when given. Otherwise, on accelerators, the
    least free device's memory (:func:`~kernelcli.pipeline._devices.device_memory_available`)
    less a headroom; where a device does not report its memory, and on CPU, the host's
    free memory less a headroom, shared by ``count`` devices (default: ``devices``, the
    devices that compute; a Ray actor counts the actors of its node)."""
    on_device = any(getattr(d, "platform", "cpu") != "cpu" for d in devices)
    found = device_memory_available(devices) if on_device else None
    memory = "device" if on_device else "host"
    if requested is not None:
        return requested, "compute.memory", memory
    if found is not None:
        return auto_budget(found[0], *DEVICE_HEADROOM), found[1], "device"
    available, source = memory_available()
    return auto_budget(available) // (count or len(devices)), source, "host"


# The compiled kernel's numbers the planner reads (EngineCosts less compiled_memory).
FACTS = ("chunk", "flat_input", "cov_elements", "layers", "kinds", "itemsize", "engine",
         "min_call")


def engine_facts(kfn) -> dict:
    """:data:`FACTS` of the kernel function ``kfn`` (plain values: a Ray actor sends
    them to the driver)."""
    return dict(chunk=kfn.chunk, flat_input=kfn.flat_input,
                cov_elements=1 if kfn.flat_input else kfn.cov_elements,
                layers=kfn.n_layers, kinds=tuple(kfn.kinds), itemsize=kfn.dtype.itemsize,
                engine=kfn.engine.name, min_call=kfn.call_batch(1))


def engine_costs(facts: dict, compiled_memory: Callable[[int, int, int], int]) -> EngineCosts:
    """The planner's :class:`~kernelcli.plan.EngineCosts` from :func:`engine_facts` (of
    a local kernel function, or as an actor reported them) and the measurement of a
    compiled program's memory."""
    fields: dict[str, Any] = {k: (tuple(facts[k]) if k == "kinds" else facts[k]) for k in FACTS}
    return EngineCosts(**fields, compiled_memory=compiled_memory)


class Planning(NamedTuple):
    """What a backend gives the planner (:meth:`~kernelcli.pipeline._backend.Backend.plan_inputs`):
    the driver's kernel function, the engine's costs, the budget per device, what bound
    it and which memory it is, how many devices a plan counts, and this process's
    devices (shown; those that compute, for a local run)."""

    kfn: object
    costs: EngineCosts
    budget: int
    source: str
    memory: str
    n_devices: int
    devices: list
