"""The local backend: a run's blocks computed in this process, one after another,
each block's pair batches spread over the local devices by the engine's runner.

One of the two implementations of :class:`~kernelcli.pipeline._backend.Backend` (the other
is :mod:`._ray`); the per-block computation is :mod:`._block_tile`'s, the same a Ray actor
runs. A requested stop (the ``stop`` it is given, :mod:`kernelcli._stop`) is honoured
between per-input slices, between pair batches and around each compilation the
planner asks for.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

from .._stop import Stop, check
from ..data import RowSource
from ._block_tile import KernelFnSpec, block_input, block_tile, stats_slices
from ._budget import Planning, engine_costs, engine_facts, memory_budget
from ._devices import compute_streams, local_devices

Tiles = Iterator[tuple]  # (block, tile, pairs already reported through on_pairs)


def local_costs(kfn, stop: Optional[Stop] = None):
    """The planner's costs of the compiled kernel ``kfn``; each memory measurement is a
    compilation, and a requested ``stop`` is honoured before and after each."""

    def compiled_memory(rows: int, cols: int, pairs: int) -> int:
        check(stop)
        out = kfn.compiled_memory(rows, cols, pairs)
        check(stop)
        return out

    return engine_costs(engine_facts(kfn), compiled_memory)


class LocalBackend:
    """Blocks computed in this process on ``devices`` (default: ``compute.devices`` of
    them, :func:`~._devices.local_devices`); ``memory``: ``compute.memory`` (``None``:
    from the free memory). Calls go to :func:`~._devices.compute_streams`'s devices, one
    thread per device: on CPU all to the first, so each program compiles once."""

    def __init__(self, devices=None, stop: Optional[Stop] = None,
                 memory: Optional[int] = None):
        self.devices = list(devices) if devices is not None else local_devices(None)
        self.stop, self.memory = stop, memory

    @classmethod
    def for_compute(cls, compute, stop: Optional[Stop] = None) -> LocalBackend:
        """The backend of a configuration's ``compute`` section."""
        return cls(local_devices(compute.devices), stop, compute.memory)

    @property
    def platform(self) -> str:
        return self.devices[0].platform

    @property
    def progress_devices(self) -> list:
        """The devices that compute here (progress names them)."""
        return self.devices

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass

    def watch(self, callback) -> None:
        """Nothing to watch: this process's devices come and go with it."""

    def plan_inputs(self, spec: KernelFnSpec, engine: str) -> Planning:
        """The kernel function of ``spec`` for these devices, its costs and the budget."""
        kfn = spec.build(engine, self.platform, self.stop)
        check(self.stop)
        budget, source, memory = memory_budget(self.memory, self.devices)
        return Planning(kfn, local_costs(kfn, self.stop), budget, source, memory,
                        len(self.devices), self.devices)

    def input_stats(self, kfn, src: RowSource):
        """Per-input variances of every row of ``src``, streamed by slices."""
        from ..kernels import Stats

        parts, streams = [], compute_streams(kfn, self.devices)
        for s, e in stats_slices(src.n):
            check(self.stop)
            parts.append(kfn.stats(src.read(s, e, dtype=kfn.dtype), streams))
        return Stats.concat(parts)

    def tiles(self, kfn, plan, blocks, rows: RowSource, columns: RowSource, s1, s2,
              wanted=lambda b: True, on_pairs: Optional[Callable[[int], None]] = None
              ) -> Tiles:
        """``(block, tile, evaluated)`` for each block that ``wanted(block)`` (asked
        just before it is computed) accepts; ``plan`` gives the block edge and the
        pair batch."""
        from ..kernels import release_free_memory

        stop, streams = self.stop, compute_streams(kfn, self.devices)
        for block in blocks:
            check(stop)
            if not wanted(block):
                continue
            t0 = time.perf_counter()
            bi = block_input(kfn, rows, columns, s1, s2, block, plan.block)
            tile = block_tile(kfn, plan.pair_batch, bi, streams, on_pairs, stop)
            if tile is None:
                check(stop)  # the stop that ended the batches: raises
            yield block, tile, bi.n_evaluated
            del tile, bi
            release_free_memory(time.perf_counter() - t0)  # freed buffers not resident
