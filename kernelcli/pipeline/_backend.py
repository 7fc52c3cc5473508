"""Where a run's tiles are computed: the :class:`Backend` protocol, and the one place
a configuration's ``compute.executor`` picks its implementation (:func:`open_backend`).

Two implementations, side by side: :class:`~._local.LocalBackend` (this process's
devices) and :class:`~._ray.RayBackend` (kernel actors on a Ray cluster). A backend
plans (:meth:`Backend.plan_inputs`: the kernel function, the engine's costs, the
memory budget, for the devices that will compute) and computes (the per-input pass of
a row source, the tiles of a list of blocks, both by :mod:`._block_tile`'s per-block
computation); :func:`~._executor.execute` does the rest -- skipping a tile another
process wrote meanwhile, the tally, the test diagonal, checking and writing the tiles
-- once for both. A backend is made for one call, with that call's ``stop``
(:mod:`kernelcli._stop`), which it honours at its safe points.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

from .._stop import Stop
from ..data import RowSource
from ._block_tile import KernelFnSpec
from ._budget import Planning
from ._local import LocalBackend


class Backend(Protocol):
    """What :func:`~._job.prepare` and :func:`~._executor.execute` need of a backend."""

    @property
    def platform(self) -> str:
        """The platform of the devices that compute (known once planned)."""

    @property
    def progress_devices(self) -> Sequence[Any]:
        """This process's devices that compute (progress names them; none for Ray)."""

    def plan_inputs(self, spec: KernelFnSpec, engine: str) -> Planning:
        """The kernel function of ``spec`` with ``engine`` (``compute.engine``, or the
        one an existing run recorded) for the devices that compute, its costs and the
        memory budget."""

    def input_stats(self, kfn, src: RowSource):
        """Per-input variances of every row of ``src`` (read by
        :func:`~._block.stats_slices`)."""

    def tiles(self, kfn, plan, blocks, rows: RowSource, columns: RowSource, s1, s2,
              wanted: Callable[[object], bool] = ...,
              on_pairs: Optional[Callable[[int], None]] = None) -> Iterator[tuple]:
        """``(block, tile, pairs reported through on_pairs)`` for each block that
        ``wanted(block)`` accepts, in any order."""

    def watch(self, callback: Optional[Callable[[object], None]]) -> None:
        """Give ``callback`` each change of the state of the workers (a Ray backend's
        :class:`~._ray_pool.ClusterState`: actors awaited, nodes lost, blocks requeued;
        a local backend has nothing to say); ``None``: stop."""

    def close(self) -> None:
        """Release what the backend holds (idempotent)."""


def open_backend(compute, stop: Optional[Stop] = None) -> Backend:
    """The backend the configuration's ``compute`` section names (its ``executor``),
    honouring ``stop``."""
    if compute.executor == "ray":
        from ._ray import RayBackend

        return RayBackend.for_compute(compute, stop)
    return LocalBackend.for_compute(compute, stop)
