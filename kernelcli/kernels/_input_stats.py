"""``Stats``: what the per-input pass of ``KernelFn`` gives each pair evaluation."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._runner import pad_rows


class Stats(NamedTuple):
    """Per-input quantities. ``variances[k]``: ``(n, H_k, W_k)`` (one size per spatial
    axis) or ``(n,)``;
    ``diag[kind]``: ``(n,)``, the kernel of each input with itself."""

    variances: tuple[np.ndarray, ...]
    diag: dict[str, np.ndarray]

    def take(self, rows) -> Stats:
        return Stats(tuple(v[rows] for v in self.variances),
                     {k: v[rows] for k, v in self.diag.items()})

    def pad(self, n: int) -> Stats:
        """The variances with their last row repeated up to ``n`` rows; no diagonal."""
        return Stats(tuple(pad_rows(v, n) for v in self.variances), {})

    @staticmethod
    def concat(parts) -> Stats:
        """One ``Stats`` of consecutive rows from those of each part, in order."""
        parts = list(parts)
        return Stats(tuple(np.concatenate(vs)
                           for vs in zip(*(p.variances for p in parts), strict=True)),
                     {k: np.concatenate([p.diag[k] for p in parts]) for k in parts[0].diag})
