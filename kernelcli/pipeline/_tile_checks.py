"""What a computed tile must satisfy before it is published.

Inputs are bounded at load so that float32 cannot overflow, but a tile is the last
point where a wrong number can still be stopped: a NaN or an infinity anywhere, or a
self-kernel K(x, x) that is not positive on a diagonal block (every NNGP and NTK is
positive semi-definite, and a zero one makes the next layer's angle undefined), is an
error naming the rows, and the tile is never written.
"""

from __future__ import annotations

import numpy as np

from ..errors import ComputeError


def check_tile(block, tile: dict) -> None:
    """Raise :class:`ComputeError` when ``tile`` (kind -> block-shaped array) is not
    finite everywhere or, on a diagonal block, positive on its diagonal."""
    for kind, values in tile.items():
        bad = ~np.isfinite(values)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ComputeError(
                f"block {block.key}: {int(bad.sum()):,} {kind} values are not finite (first "
                f"K[{block.r0 + i}, {block.c0 + j}] = {values[i, j]}); the inputs or the "
                f"architecture's parameters overflow {values.dtype}: try kernel.dtype: "
                f"float64 or smaller inputs; nothing was written for this block")
        if block.diagonal:
            diag = np.diagonal(values)
            low = np.flatnonzero(~(diag > 0))
            if low.size:
                row = block.r0 + int(low[0])
                raise ComputeError(
                    f"block {block.key}: {low.size:,} {kind} self-kernels are not positive "
                    f"(first K[{row}, {row}] = {diag[low[0]]}): input row {row} is all zero "
                    f"or underflows {values.dtype}; a layer with b_std > 0 or "
                    f"kernel.dtype: float64 avoids it; nothing was written for this block")


def check_diagonal(values: dict, first_row: int, what: str) -> None:
    """The same rules for per-input self-kernels (kind -> ``(n,)``) of rows from
    ``first_row``, e.g. the test diagonal."""
    for kind, diag in values.items():
        diag = np.asarray(diag)
        low = np.flatnonzero(~(np.isfinite(diag) & (diag > 0)))
        if low.size:
            row = first_row + int(low[0])
            raise ComputeError(
                f"{what}: {low.size:,} {kind} self-kernels are not finite and positive "
                f"(first, of row {row}: {diag[low[0]]}); nothing was written")
