"""Whole kernel matrices in memory, by the route ``kernelcli compute`` takes.

:func:`kernel_matrix` plans the matrix as ``compute`` plans a run (block edge and
pair batch from the planner, within the memory budget), runs the per-input pass
and the blocks on the executor's local backend, and places each tile where
assembly would: a benchmark of it is a benchmark of ``compute`` less the store,
and its matrix is bit for bit the ``kernels.h5`` of a run with the same plan.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from numpy.typing import DTypeLike

from .._stop import Stop
from .._system import memory_available
from ..data import RowSource
from ..errors import BudgetError
from ..plan import auto_budget, plan_run
from ._budget import memory_budget
from ._devices import default_devices
from ._local import LocalBackend, local_costs


class _Rows(RowSource):
    """An in-memory array read by rows, as the run's data sources are."""

    def __init__(self, x: np.ndarray):
        self.x = x

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def example_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def read(self, start: int, stop: int, dtype: Optional[DTypeLike] = None) -> np.ndarray:
        return np.asarray(self.x[start:stop], dtype=dtype)

    def close(self) -> None:
        """Nothing to release: the caller's array."""


def kernel_matrix(kfn, x1, x2=None, *, memory: Optional[int] = None, devices=None,
                  block: Optional[int] = None,
                  pair_batch: Optional[int] = None,
                  stop: Optional[Stop] = None) -> dict[str, np.ndarray]:
    """The kernels of ``kfn`` (a :class:`~kernelcli.kernels.KernelFn`) between the rows
    of ``x1`` (``(n1, *input_shape)``) and of ``x2`` (``(n2, ...)``): ``{kind: (n1, n2)}``.

    With ``x2=None`` the matrix is ``K(x1, x1)``: only its lower triangle of blocks is
    computed (a diagonal block's strict lower triangle; the diagonal from the
    per-input pass) and mirrored, so it is exactly symmetric.

    ``memory``: bytes per device (default: what ``compute.memory: auto`` gives: on
    accelerators their free device memory, else the host's);
    ``devices``: default all local ones (on CPU with one host device, that device once
    per core: :func:`~._devices.default_devices`); ``block``, ``pair_batch``: as a run's plan
    (default: the planner's choice, as in ``compute``); ``stop``: a
    :class:`~kernelcli.run.Stop` another thread may request (the call then raises
    :class:`~kernelcli.errors.Interrupted` at its next safe point).

    Raises :class:`~kernelcli.errors.BudgetError` when the matrices do not fit the
    host's memory (:func:`check_output`), before anything is computed.
    """
    devices = list(devices or default_devices(kfn))
    a1 = np.asarray(x1, dtype=kfn.dtype)
    symmetric = x2 is None
    a2 = a1 if symmetric else np.asarray(x2, dtype=kfn.dtype)
    check_output(a1.shape[0], a2.shape[0], kfn.kinds, kfn.dtype)
    budget, _, which = memory_budget(memory, devices)
    plan = plan_run(a1.shape[0], a2.shape[0], symmetric=symmetric, costs=local_costs(kfn, stop),
                    budget_bytes=budget, devices=len(devices), block=block,
                    pair_batch=pair_batch, memory=which)
    rows = _Rows(a1)
    columns = rows if symmetric else _Rows(a2)
    out = {k: np.empty((a1.shape[0], a2.shape[0]), kfn.dtype) for k in kfn.kinds}
    with LocalBackend(devices, stop) as backend:
        s1 = backend.input_stats(kfn, rows)
        s2 = s1 if symmetric else backend.input_stats(kfn, columns)
        for b, tile, _ in backend.tiles(kfn, plan, plan.blocks, rows, columns, s1, s2):
            for k in kfn.kinds:
                out[k][b.r0:b.r1, b.c0:b.c1] = tile[k]
                if symmetric and not b.diagonal:
                    out[k][b.c0:b.c1, b.r0:b.r1] = tile[k].T
    return out


def check_output(n1: int, n2: int, kinds, dtype, available=None) -> None:
    """Refuse ``len(kinds)`` matrices of ``(n1, n2)`` of ``dtype`` that the host's free
    memory (``available``: ``(bytes, source)``, default :func:`memory_available`) less
    the headroom ``compute.memory: auto`` keeps cannot hold: they are returned whole,
    in memory, unlike a run's kernels, which are written to disk by tiles."""
    need = len(kinds) * n1 * n2 * np.dtype(dtype).itemsize  # Python ints: no overflow
    free, source = available or memory_available()
    budget = auto_budget(free)
    if need > budget:
        matrices = "matrix" if len(kinds) == 1 else "matrices"
        raise BudgetError(
            f"x1, x2: the output, {len(kinds)} {matrices} of shape ({n1}, {n2}) in "
            f"{np.dtype(dtype).name}, takes {need} bytes ({need / 2**30:.1f} GiB), more than "
            f"the {budget} bytes of host memory this call may use ({source} less headroom); "
            f"accepted: fewer inputs, or `kernelcli compute`, which writes the kernels to "
            f"disk by tiles")
