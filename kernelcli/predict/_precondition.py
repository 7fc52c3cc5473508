"""A Nystrom preconditioner for conjugate gradients on ``(K + reg I) x = b`` (numpy only).

``K`` is approximated from ``rank`` landmark columns ``C = K[:, S]`` (read as the
rows ``S`` of the symmetric stored kernel where the operator has ``columns``, else
one pass over it, as ``K @ E_S``) as ``K ~ C W^+ C^T = B B^T``, ``W = K[S, S]``
(Williams & Seeger 2001; as a preconditioner: Gardner et al. 2018, Falkon, Rudi et
al. 2017). With the thin SVD ``B = Q diag(s) V^T`` the preconditioner
``P = B B^T + reg I`` is inverted in closed form on ``Q``'s span and scaled on the
rest as in Frangella, Tropp & Udell 2023 (randomized Nystrom preconditioning):
``P^{-1} v = (s_r^2 + reg) Q diag(1 / (s^2 + reg)) Q^T v + (v - Q Q^T v)``, ``s_r``
the smallest kept singular value, so one factorisation serves every ridge. Each cross-validation fold, a principal
submatrix ``K[M, M]``, gets its own ``Q`` from the rows ``B[M]`` (the Nystrom
approximation of that submatrix with the same landmarks), so the folds are
preconditioned as well as the whole set. Landmarks: a fixed-seed uniform sample
(reproducible runs). All float64; no matrix here is larger than ``n x rank``.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

DEFAULT_RANK = 1000  # landmark columns; memory n * rank * 8 bytes per fold
_SEED = 0


def landmarks(n: int, rank: int) -> np.ndarray:
    """``rank`` distinct sorted row indices of ``0..n-1`` (a fixed-seed sample)."""
    rank = min(int(rank), n)
    return np.sort(np.random.default_rng(_SEED).choice(n, size=rank, replace=False))


def _basis(b: np.ndarray) -> tuple:
    """``(Q, s^2)``, ``b = Q diag(s) V^T`` (from the eigendecomposition of ``b^T b``: a
    rank x rank problem, cheaper than an SVD of the tall ``b``), keeping the leading half
    (the Nystrom estimates of the trailing eigenvalues are too small, and the last one
    kept scales the rest of the space) and dropping the directions of tiny ``s``."""
    s2, v = np.linalg.eigh(b.T @ b)
    s2, v = s2[::-1], v[:, ::-1]
    keep = s2 > s2[0] * 1e-12 if s2.size and s2[0] > 0 else np.zeros(s2.shape, bool)
    if b.shape[1] < b.shape[0]:  # at full rank the basis is exact: keep it whole
        keep[(b.shape[1] + 1) // 2:] = False
    q = b @ (v[:, keep] / np.sqrt(s2[keep]))
    return np.ascontiguousarray(q), s2[keep]


class NystromPreconditioner:
    """``apply(r, cols)``: ``P^{-1} r`` for the CG columns ``cols`` (indices into
    ``ridge`` and ``group``); column ``j`` uses fold basis ``group[j]``.

    ``matvec``: ``V (n, k) -> K @ V``; ``columns``: ``idx -> K[:, idx]`` (used instead of
    ``matvec`` when given); ``ridge`` (k,) the absolute regularizer per
    column; ``masks``: ``None`` or (G, n) booleans, the rows each group solves on
    (group ``g`` of column ``j`` is ``group[j]``; rows outside stay zero).
    """

    def __init__(self, matvec: Callable[[np.ndarray], np.ndarray], n: int,
                 ridge: np.ndarray, rank: int = DEFAULT_RANK,
                 masks: Optional[np.ndarray] = None, group: Optional[Sequence[int]] = None,
                 columns: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        self.ridge = np.asarray(ridge, dtype=np.float64)
        idx = landmarks(n, rank)
        if columns is not None:
            c = columns(idx)  # (n, r): K[:, S]
        else:
            e = np.zeros((n, idx.size))
            e[idx, np.arange(idx.size)] = 1.0
            c = matvec(e)
            del e
        w = c[idx]
        w = (w + w.T) / 2
        # B = C W^{-1/2} by an eigendecomposition of W: landmarks that duplicate others
        # (a singular W) are dropped rather than failing
        vals, vecs = np.linalg.eigh(w)
        keep = vals > vals[-1] * 1e-10 if vals.size and vals[-1] > 0 else vals > np.inf
        b = c @ (vecs[:, keep] / np.sqrt(vals[keep]))
        del c
        if masks is None:
            self.masks = None
            self.bases = [_basis(b)]
            self.group = np.zeros(self.ridge.size, dtype=int)
        else:
            self.masks = np.asarray(masks, dtype=bool)
            self.bases = [_basis(b[m]) for m in self.masks]
            self.group = np.asarray(group, dtype=int)

    @property
    def rank(self) -> int:
        return max(q.shape[1] for q, _ in self.bases)

    def apply(self, r: np.ndarray, cols: np.ndarray) -> np.ndarray:
        ridge = self.ridge[cols]
        z = np.zeros_like(r)
        groups = self.group[cols]
        for g in np.unique(groups):
            sel = np.flatnonzero(groups == g)
            q, s2 = self.bases[g]
            rows = slice(None) if self.masks is None else self.masks[g]
            rg = r[rows][:, sel]
            lam = ridge[sel]
            coef = q.T @ rg  # (rank, k)
            # the complement of Q is scaled by the smallest kept eigenvalue, not by
            # 1 / reg: K is not small there when the spectrum decays slowly
            tail = (s2[-1] if s2.size else 0.0) + lam
            zg = rg - q @ coef + q @ (coef * (tail[None, :] / (s2[:, None] + lam[None, :])))
            if self.masks is None:
                z[:, sel] = zg
            else:
                z[np.ix_(self.masks[g], sel)] = zg
        return z
