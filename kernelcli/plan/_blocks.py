"""One block of the kernel matrix: a validated value object, like a zarr chunk spec.

A block is the unit of durability: the executor computes all its pairs, the store
writes it as one tile, and the tile's existence records that it is done. Its key is
a pure function of its grid coordinates, so a resumed run finds the same names.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Block:
    """Rows ``[r0, r1)`` against columns ``[c0, c1)`` of the ``(n1, n2)`` kernel matrix.

    ``row``, ``col`` are the block's coordinates in the block grid. ``diagonal`` is
    true only for a block on the diagonal of a symmetric run: then rows and columns
    are the same range and only its lower triangle (``i >= j``, diagonal included)
    is computed; the rest follows by symmetry.
    """

    row: int
    col: int
    r0: int
    r1: int
    c0: int
    c1: int
    diagonal: bool = False

    def __post_init__(self):
        for name in ("row", "col", "r0", "r1", "c0", "c1"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"Block `{name}` (={value!r}) must be an integer")
            if value < 0:
                raise ValueError(f"Block `{name}` (={value}) must be >= 0")
        if not self.r0 < self.r1:
            raise ValueError(f"Block rows [r0, r1) = [{self.r0}, {self.r1}) must not be empty")
        if not self.c0 < self.c1:
            raise ValueError(f"Block columns [c0, c1) = [{self.c0}, {self.c1}) must not be empty")
        if self.row > 99999 or self.col > 99999:
            raise ValueError(f"Block ({self.row}, {self.col}) is beyond the 5-digit key space")
        if self.diagonal and (self.row != self.col or (self.r0, self.r1) != (self.c0, self.c1)):
            raise ValueError(
                f"diagonal Block must have row == col and equal row/column ranges; got "
                f"({self.row}, {self.col}), rows [{self.r0}, {self.r1}), "
                f"columns [{self.c0}, {self.c1})"
            )

    @property
    def key(self) -> str:
        """Stable name of the block, e.g. ``'r00003c00001'``."""
        return f"r{self.row:05d}c{self.col:05d}"

    @property
    def shape(self) -> tuple[int, int]:
        """``(r1 - r0, c1 - c0)``: the shape of the block's tile."""
        return (self.r1 - self.r0, self.c1 - self.c0)

    @property
    def n_pairs(self) -> int:
        """Pair evaluations the block needs: ``n*(n+1)//2`` on the diagonal, else ``h*w``."""
        h, w = self.shape
        return h * (h + 1) // 2 if self.diagonal else h * w

    @property
    def n_evaluated(self) -> int:
        """Pairs the engine evaluates pair by pair (:meth:`evaluated_pairs`): a diagonal
        block's own diagonal, each input with itself, comes from the per-input pass."""
        return self.n_pairs - (self.r1 - self.r0 if self.diagonal else 0)

    def evaluated_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`local_pairs` less a diagonal block's ``i == j`` (:attr:`n_evaluated`)."""
        i, j = self.local_pairs()
        if self.diagonal:
            keep = i != j
            i, j = i[keep], j[keep]
        return i, j

    def local_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Local indices ``(i, j)``, each int32 of shape ``(n_pairs,)``, in row-major order.

        Global indices are ``r0 + i`` and ``c0 + j``. A diagonal block lists only
        ``i >= j``.
        """
        h, w = self.shape
        if self.diagonal:
            i, j = np.tril_indices(h)
        else:
            i, j = np.divmod(np.arange(h * w), w)
        return i.astype(np.int32), j.astype(np.int32)
