"""The pure per-block computation, which both backends run: a tile is a function of a
block's inputs and a kernel function alone.

Per block: its rows of ``x1`` and columns of ``x2`` and their per-input variances,
padded to the block edge so every call has one shape and XLA compiles once
(:func:`block_input`), the block's pairs in batches of ``plan.pair_batch``, and the
tile from the values (:func:`block_tile`). A diagonal block of a symmetric run
evaluates only its strict lower triangle; its diagonal is the inputs' self-kernels
from the per-input pass, which reads the rows in :func:`stats_slices`. The local
backend (:mod:`._local`) and a Ray actor (:mod:`._ray_worker`) run exactly this on
exactly these inputs, so a tile is the same bits whichever ran it.

:meth:`KernelFnSpec.build` builds the kernel function anywhere (the driver, a Ray
worker) from a :class:`KernelFnSpec`, which travels to Ray's workers (a frozen
dataclass of plain values: Ray pickles it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from ..config import Architecture, Engine, RunConfig
from ..data import RowSource

if TYPE_CHECKING:  # jax is imported lazily
    from ..kernels import Stats
    from ..plan import Block

STATS_ROWS = 1024  # rows of an input read (and passed to the per-input pass) at once


def stats_slices(n: int, rows: int = STATS_ROWS) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row slices the per-input pass reads, in order: every
    backend reads exactly these, so the per-input numbers are the same bits."""
    return [(s, min(s + rows, n)) for s in range(0, n, rows)]


@dataclass(frozen=True)
class KernelFnSpec:
    """What builds a run's kernel function anywhere (a Ray worker too): the
    architecture, one example's shape, the kinds, the dtype and ``kernel.augment``; and
    for an existing run what it recorded, since each changes the kernel's last bits:
    ``chunk``, the cpu engine's pairs per chunk, and ``stored_engine``, the engine with
    its native revision and library (``None`` for a new run: ``KERNELCLI_CHUNK_BYTES``
    or the default, and ``compute.engine`` resolved where the kernel is built, with
    today's revision and that process's library). ``cpu_level``: the CPU level the run
    computes at (a stored run's; on Ray, once the first actor has said its own, every
    actor's and the record's); ``None``: each process's own."""

    architecture: Architecture
    input_shape: tuple[int, ...]
    kinds: tuple[str, ...]
    dtype: str
    augment: tuple[str, ...] = ()
    chunk: Optional[int] = None
    stored_engine: Optional[Engine] = None
    cpu_level: Optional[str] = None

    @classmethod
    def of(cls, cfg: RunConfig, input_shape, chunk: Optional[int] = None,
           stored_engine: Optional[Engine] = None) -> KernelFnSpec:
        """The spec of ``cfg``'s kernel on examples of ``input_shape``."""
        return cls(cfg.architecture, tuple(int(s) for s in input_shape),
                   tuple(cfg.kernel.kinds), cfg.kernel.dtype, tuple(cfg.kernel.augment),
                   chunk, stored_engine, stored_engine.cpu_level if stored_engine else None)

    def build(self, engine: str, platform: str, stop=None):
        """The kernel function with ``engine`` (``compute.engine``, or the engine an
        existing run recorded) resolved for ``platform``; ``stop`` is honoured while the
        native engine's library is built."""
        from ..kernels import build_kernel_fn, resolve_engine

        name = resolve_engine(engine, platform, self.architecture.layers, self.input_shape,
                              stop)
        stored = self.stored_engine
        return build_kernel_fn(self.architecture, self.input_shape, self.kinds, self.dtype,
                               self.augment, engine=name, chunk=self.chunk,
                               native_revision=stored.native_revision if stored else None,
                               native_library=stored.native_library if stored else None,
                               cpu_level=self.cpu_level)


@dataclass
class BlockInput:
    """Everything one block's computation needs, as plain arrays (picklable, so a Ray
    task gets exactly what the local backend uses): the block's rows of ``x1`` and
    columns of ``x2`` and their per-input variances, padded to the block edge so
    every call has one shape; the local pairs to evaluate; and, for a diagonal
    block, the self-kernels of its rows (its diagonal)."""

    block: Block
    x1: np.ndarray
    s1: Stats             # variances padded to the edge
    x2: np.ndarray
    s2: Stats
    i: np.ndarray
    j: np.ndarray
    diag: Optional[dict]  # kind -> (rows,) for a diagonal block, else None

    @property
    def n_evaluated(self) -> int:
        return len(self.i)


def block_input(kfn, x1_src: RowSource, x2_src: RowSource, s1, s2, block,
                edge: int) -> BlockInput:
    """Read and pad the inputs of ``block`` (``s1``, ``s2``: stats of all rows)."""
    from ..kernels import pad_rows

    x1 = pad_rows(x1_src.read(block.r0, block.r1, dtype=kfn.dtype), edge)
    x2 = pad_rows(x2_src.read(block.c0, block.c1, dtype=kfn.dtype), edge)
    b1 = s1.take(slice(block.r0, block.r1))
    i, j = block.evaluated_pairs()
    diag = {k: np.asarray(b1.diag[k]) for k in kfn.kinds} if block.diagonal else None
    return BlockInput(block, x1, b1.pad(edge), x2,
                      s2.take(slice(block.c0, block.c1)).pad(edge), i, j, diag)


def block_tile(kfn, pair_batch: int, bi: BlockInput, devices,
               on_batch: Optional[Callable[[int], None]] = None,
               stop: Optional[Callable[[], object]] = None) -> Optional[dict]:
    """One block's tile (kind -> array of the block's shape), or ``None`` when
    ``stop()`` turned true before all its pairs were evaluated."""
    block, i, j = bi.block, bi.i, bi.j
    if kfn.uses_grid(bi.x1.shape[0], bi.x2.shape[0], pair_batch):
        return _grid_tile(kfn, bi, (devices or [None])[0], on_batch, stop)
    vals = kfn.pair_values(bi.x1, bi.s1, bi.x2, bi.s2, i, j, pair_batch, devices,
                           on_batch, stop)
    if vals is None:
        return None
    tile = {}
    for k in kfn.kinds:
        if not block.diagonal:  # every pair, in row-major order (Block.local_pairs)
            tile[k] = vals[k].reshape(block.shape)
            continue
        t = np.zeros(block.shape, kfn.dtype)
        t[i, j] = vals[k]
        t[j, i] = vals[k]
        d = np.arange(block.shape[0])
        assert bi.diag is not None  # block_input gives a diagonal block its diagonal
        t[d, d] = bi.diag[k]
        tile[k] = t
    return tile


def _grid_tile(kfn, bi: BlockInput, device, on_batch, stop) -> Optional[dict]:
    """A flat-input block's tile from one grid call over its padded inputs; a diagonal
    tile keeps its strict lower triangle, mirrored, and the per-input pass's diagonal,
    as a tile from pair batches does."""
    if stop is not None and stop():
        return None
    block = bi.block
    grid = kfn.grid_values(bi.x1, bi.s1, bi.x2, bi.s2, device)
    h, w = block.shape
    tile = {}
    for k in kfn.kinds:
        t = np.ascontiguousarray(grid[k][:h, :w])
        if block.diagonal:
            low = np.tril(t, -1)
            t = low + low.T
            assert bi.diag is not None  # block_input gives a diagonal block its diagonal
            t[np.diag_indices(h)] = bi.diag[k]
        tile[k] = t
    if on_batch is not None:
        on_batch(bi.n_evaluated)
    return tile
