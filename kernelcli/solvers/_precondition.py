"""A Nystrom preconditioner for conjugate gradients on ``(K + reg I) x = b`` (numpy only).

``K`` is approximated from ``rank`` landmark columns ``C = K[:, S]`` (read as the
rows ``S`` of the symmetric stored kernel where the operator has ``columns``, else
one pass over it, as ``K @ E_S``) as ``K ~ C W^+ C^T = B B^T``, ``W = K[S, S]``
(Williams & Seeger 2001; as a preconditioner: Gardner et al. 2018, Falkon, Rudi et
al. 2017). With the thin SVD ``B = Q diag(s) V^T`` the preconditioner
``P = B B^T + reg I`` is inverted in closed form on ``Q``'s span and scaled on the
rest as in Frangella, Tropp & Udell 2023 (randomized Nystrom preconditioning):
``P^{-1} v = (s_r^2 + reg) Q diag(1 / (s^2 + reg)) Q^T v + (v - Q Q^T v)``, ``s_r``
the smallest kept singular value, so one factorisation serves every ridge. Each
cross-validation fold, a principal submatrix ``K[M, M]``, gets its own ``Q`` from the
rows ``B[M]`` (the Nystrom approximation of that submatrix with the same landmarks),
so the folds are preconditioned as well as the whole set; the folds share ``B``
itself (``Q_M = B[M] V_M diag(1 / s_M)``, only the small ``V_M`` per fold), so the
memory is one ``n x rank`` matrix whatever the number of folds.

Landmarks: with the kernel's diagonal, randomly pivoted Cholesky (Chen, Epperly,
Tropp & Webber 2023, block version): each block of landmarks is drawn with
probabilities proportional to the diagonal of the residual ``K - B B^T``, so rows the
landmarks so far already explain are rarely drawn again, and ``B`` is the partial
Cholesky factor itself; without it, a uniform sample. Both from a fixed seed
(reproducible runs). All float64 but the factor kept for the iteration and its two products there
(float32); no matrix here is larger than ``n x rank``.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import numpy.typing as npt

DEFAULT_RANK = 1000  # landmark columns; memory n * rank * 4 bytes (the factor in float32)
_CHUNK_ROWS = 4096  # rows of the factor in one product (or widened to float64)
_SEED = 0
LANDMARK_BLOCK = 100  # landmarks drawn per step of the pivoted Cholesky (one read of their rows)


def landmarks(n: int, rank: int) -> np.ndarray:
    """``rank`` distinct sorted row indices of ``0..n-1`` (a fixed-seed sample)."""
    rank = min(int(rank), n)
    return np.sort(np.random.default_rng(_SEED).choice(n, size=rank, replace=False))


def pivoted_cholesky(columns: Callable[[np.ndarray], np.ndarray], diagonal: np.ndarray,
                     rank: int, block: int = LANDMARK_BLOCK) -> np.ndarray:
    """``L`` (n, <= rank), ``K ~ L L^T``: block randomly pivoted Cholesky from the
    columns ``K[:, idx]`` (sorted, distinct ``idx``) and the diagonal of ``K``.

    Each step draws ``block`` rows with probability proportional to the residual
    diagonal ``diag(K - L L^T)``, and adds the Nystrom factor of the residual on them
    (an eigendecomposition of the block's residual, dropping dependent directions).
    Stops early when the residual diagonal is (numerically) zero."""
    d = np.maximum(np.asarray(diagonal, dtype=np.float64), 0.0)
    n = d.size
    rank = min(int(rank), n)
    floor = 1e-13 * (d.max() if n else 0.0)
    rng = np.random.default_rng(_SEED)
    out = np.empty((n, rank))
    k = 0
    while k < rank:
        total = d.sum()
        if not total > floor * n or not np.isfinite(total):
            break
        s = np.unique(rng.choice(n, size=min(block, rank - k), p=d / total))
        g = columns(s) - out[:, :k] @ out[s, :k].T  # (n, |s|): the residual's columns
        w, v = np.linalg.eigh((g[s] + g[s].T) / 2)
        keep = w > max(w[-1] * 1e-10, floor) if w.size else w > 0
        add = g @ (v[:, keep] / np.sqrt(w[keep]))
        t = min(add.shape[1], rank - k)
        if t == 0:
            break
        out[:, k:k + t] = add[:, -t:]  # eigh's order is ascending: the largest kept
        d = np.maximum(d - np.einsum("ij,ij->i", add[:, -t:], add[:, -t:]), 0.0)
        d[s] = 0.0  # drawn rows are explained exactly (up to rounding)
        k += t
    return out[:, :k]


def _uniform_factor(matvec, columns, n: int, rank: int) -> np.ndarray:
    """``B = C W^{-1/2}`` for uniformly drawn landmarks, dropping those that duplicate
    others (a singular ``W``) rather than failing."""
    idx = landmarks(n, rank)
    if columns is not None:
        c = columns(idx)  # (n, r): K[:, S]
    else:
        e = np.zeros((n, idx.size))
        e[idx, np.arange(idx.size)] = 1.0
        c = matvec(e)
        del e
    w = c[idx]
    vals, vecs = np.linalg.eigh((w + w.T) / 2)
    keep = vals > vals[-1] * 1e-10 if vals.size and vals[-1] > 0 else vals > np.inf
    return c @ (vecs[:, keep] / np.sqrt(vals[keep]))


def _basis(gram: np.ndarray, rows: int) -> tuple:
    """``(W, s^2)`` with ``Q = B_M W`` orthonormal, from ``gram = B_M^T B_M`` (``rows``:
    of ``B_M``), keeping the leading half (the Nystrom estimates of the trailing
    eigenvalues are too small, and the last one kept scales the rest of the space)
    and dropping the directions of tiny ``s``."""
    s2, v = np.linalg.eigh((gram + gram.T) / 2)
    s2, v = s2[::-1], v[:, ::-1]
    keep = s2 > s2[0] * 1e-12 if s2.size and s2[0] > 0 else np.zeros(s2.shape, bool)
    if gram.shape[0] < rows:  # at full rank the basis is exact: keep it whole
        keep[(gram.shape[0] + 1) // 2:] = False
    return np.ascontiguousarray(v[:, keep] / np.sqrt(s2[keep])), s2[keep]


def _row_chunks(n: int):
    """Slices of ``_CHUNK_ROWS`` rows covering ``0..n-1``, in order."""
    for s in range(0, n, _CHUNK_ROWS):
        yield slice(s, s + _CHUNK_ROWS)


def _widened(b32: np.ndarray):
    """``(rows, chunk)``: the float32 factor's rows widened to float64 ``_CHUNK_ROWS`` at
    a time (a float64 copy of the whole factor is what keeping it in float32 saves)."""
    for rows in _row_chunks(b32.shape[0]):
        yield rows, b32[rows].astype(np.float64)


class NystromPreconditioner:
    """``apply(r, cols)``: ``P^{-1} r`` for the CG columns ``cols`` (indices into
    ``ridge`` and ``group``); column ``j`` uses fold basis ``group[j]``.

    ``matvec``: ``V (n, k) -> K @ V``; ``columns``: ``idx -> K[:, idx]`` (used instead of
    ``matvec`` when given); ``diagonal``: ``K``'s diagonal (n,), with ``columns``: the
    landmarks by pivoted Cholesky; ``ridge`` (k,) the absolute regularizer per
    column; ``masks``: ``None`` or (G, n) booleans, the rows each group solves on
    (group ``g`` of column ``j`` is ``group[j]``; rows outside stay zero).
    """

    def __init__(self, matvec: Callable[[np.ndarray], np.ndarray], n: int,
                 ridge: np.ndarray, rank: int = DEFAULT_RANK,
                 masks: Optional[np.ndarray] = None, group: Optional[npt.ArrayLike] = None,
                 columns: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                 diagonal: Optional[np.ndarray] = None):
        self.ridge = np.asarray(ridge, dtype=np.float64)
        if columns is not None and diagonal is not None:
            b = pivoted_cholesky(columns, diagonal, rank)
        else:
            b = _uniform_factor(matvec, columns, n, rank)
        # kept in float32 (half the memory: 0.2 GB at n = 50,000, rank 1,000): the factor
        # rounded is another Nystrom factor, and the bases below are made from it, so P
        # stays symmetric positive definite; CG's float64 residuals decide the accuracy
        self.b = b.astype(np.float32)
        del b
        gram = self._gram(self.b)
        if masks is None:
            self.masks = None
            self.bases = [_basis(gram, n)]
            self.group = np.zeros(self.ridge.size, dtype=int)
        else:
            self.masks = np.asarray(masks, dtype=bool)
            self.bases = []
            for m in self.masks:
                # the fold's Gram: the whole one less the rows left out
                self.bases.append(_basis(gram - self._gram(self.b[~m]), int(m.sum())))
            self.group = np.asarray(group, dtype=int)

    @staticmethod
    def _gram(b32: np.ndarray) -> np.ndarray:
        """``B^T B`` in float64 of a float32 ``B``."""
        out = np.zeros((b32.shape[1], b32.shape[1]))
        for _, c in _widened(b32):
            out += c.T @ c
        return out

    def _bt(self, r: np.ndarray) -> np.ndarray:
        """``B^T r`` (rank, k) float64, by float32 products ``_CHUNK_ROWS`` rows at a time
        (see ``apply``; no float32 copy of the whole ``r``)."""
        out = np.zeros((self.b.shape[1], r.shape[1]))
        for rows in _row_chunks(self.b.shape[0]):
            out += self.b[rows].T @ r[rows].astype(np.float32)
        return out

    def _b(self, d: np.ndarray) -> np.ndarray:
        """``B d`` (n, k) float64, by float32 products ``_CHUNK_ROWS`` rows at a time."""
        d32 = d.astype(np.float32)
        out = np.empty((self.b.shape[0], d.shape[1]))
        for rows in _row_chunks(self.b.shape[0]):
            out[rows] = self.b[rows] @ d32
        return out

    @property
    def rank(self) -> int:
        return max(w.shape[1] for w, _ in self.bases)

    def apply(self, r: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``P^{-1} r`` for the CG columns ``cols``. Its two ``n x rank`` products are
        float32 (twice float64's rate, a fifth of a pass's time at rank 1,000 in
        float64): their rounding, about 1e-7 of ``|B| |d|``, perturbs the
        preconditioner by that much of the step, far inside what preconditioned CG
        tolerates (inexact preconditioning, Golub & Ye 1999); CG's float64 residuals
        still decide the accuracy."""
        ridge = self.ridge[cols]
        groups = self.group[cols]
        inside = None if self.masks is None else self.masks[groups].T  # (n, k)
        if inside is not None:
            r = r * inside  # the fold's rows only (CG keeps the rest zero already)
        coef = self._bt(r)  # (rank, k): B^T r, shared by every fold's basis
        d = np.zeros_like(coef)
        for g in np.unique(groups):
            sel = np.flatnonzero(groups == g)
            w, s2 = self.bases[g]
            c = w.T @ coef[:, sel]  # Q^T r in the fold's basis
            # the complement of Q is scaled by the smallest kept eigenvalue, not by
            # 1 / reg: K is not small there when the spectrum decays slowly
            lam = ridge[sel]
            tail = (s2[-1] if s2.size else 0.0) + lam
            d[:, sel] = w @ (c * (tail[None, :] / (s2[:, None] + lam[None, :]) - 1.0))
        z = self._b(d)
        z += r  # r + B d, formed in place
        if inside is not None:
            z *= inside
        return z
