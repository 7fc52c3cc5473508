"""k-fold cross-validation in the conjugate gradients of the whole set (numpy only).

CG has no factor for the closed-form leave-one-out of ``_selection``: each fold is a
masked column of the same run (``(M K M + reg I) x = M y``, the system of the fold's
training rows, in place), so the folds share every product with K and cost no extra
pass per iteration; their held-out predictions come from the run's last (float64)
product. The folds' columns stop at their own tolerance (``FOLD_TOL``), the whole
set's go on to ``_cg.TOL``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

from ._cg import (
    TOL,
    _by_rows,
    _cg,
    _check_rank,
    _check_tol,
    _diagonal,
    _failures,
    _fast,
    _regularisers,
    _system,
)
from ._precondition import DEFAULT_RANK, NystromPreconditioner
from ._selection import fold_masks

# The folds' relative residual. Their solutions only score the ridges; at 1e-3 a
# held-out accuracy lies within 2e-4 of the folds solved to 1e-5 (four examples in
# 20,000, both kinds at N = 20,000; the choices the same), a fifteenth of the score's
# own sampling error there (3e-3), for 27-30% fewer column products in all.
FOLD_TOL = 1e-3


class _FoldTargets:
    """The (n, k) right-hand sides of the folds' systems, ``mask[:, group] * y`` tiled
    over the ridges and fold groups, made column by column where CG needs them (its
    start and its float64 residuals) instead of held beside ``x``, ``r`` and ``p``: one
    ``n x k`` float64 array fewer (0.11 GiB at n = 50,000 and 300 columns). The same
    products, so the same values as the array."""

    def __init__(self, mask: np.ndarray, group: np.ndarray, y: np.ndarray):
        self.mask, self.group, self.y = mask, group, y
        self.shape = (mask.shape[0], group.size)

    def columns(self, cols: np.ndarray) -> np.ndarray:
        out = self.mask[:, self.group[cols]]  # a copy: indexed
        _by_rows(np.multiply, out, self.y, cols % self.y.shape[1])
        return out


def solve_cg_folds(k_train, targets, ridges: Iterable[float], folds: int = 5, *,
                   trace_scaled: bool = True, tol: float = TOL,
                   fold_tol: float = FOLD_TOL,
                   maxiter: Optional[int] = None, kind: str = "kernel",
                   on_iteration: Optional[Callable[[int, float], None]] = None,
                   rank: int = DEFAULT_RANK, mixed: bool = True
                   ) -> tuple[dict[float, np.ndarray], dict[float, np.ndarray]]:
    """``({ridge: alpha (n, C)}, {ridge: held-out predictions (n, C)})``: the fit of
    ``solve_cg_ridges`` and k-fold cross-validation, in one CG run.

    Row ``i`` is held out in fold ``i mod folds``; each fold is solved on the other
    rows with the whole set's regulariser (``ridge * trace(K)/n``) and predicts its
    own rows. The ``(folds + 1) x C x len(ridges)`` columns share every product
    with K; the held-out predictions come from the last (float64) one. ``rank``,
    ``mixed``: as in ``solve_cg_ridges``; each fold is preconditioned on its own rows.
    ``fold_tol``: the folds' relative residual (at least ``tol``): their solutions only
    score the ridges, so they stop where the held-out predictions are settled far
    below the scores' own resolution (see ``FOLD_TOL``), and the whole set's columns,
    which make the published coefficients, go on to ``tol``.
    """
    sweep, op, y = _system(k_train, targets, ridges, kind)
    n, c = y.shape
    held = fold_masks(n, folds)
    regs = _regularisers(op, sweep, trace_scaled)
    keep = np.vstack([np.ones((1, n), bool), ~held]).astype(np.float64)  # (F+1, n)
    per_ridge = keep.shape[0] * c
    # column j of the (n, R (F+1) C) system solves on the rows of fold group[j]: the
    # (n, F+1) mask, not one column of it per CG column (n x 300 float64 at 5 ridges)
    group = np.tile(np.repeat(np.arange(keep.shape[0]), c), len(sweep))
    mask = np.ascontiguousarray(keep.T)
    b = _FoldTargets(mask, group, y)
    ridge_cols = np.repeat(np.asarray(regs, dtype=np.float64), per_ridge)
    maxiter = _check_tol(tol, maxiter, n)
    _check_tol(fold_tol, maxiter, n)
    col_tol = np.where(group == 0, tol, max(tol, fold_tol))

    not_pd, not_converged = _failures(kind, sweep, regs, trace_scaled, col_tol, per_ridge)
    pre = None
    if _check_rank(rank):
        pre = NystromPreconditioner(op.matmul, n, ridge_cols, rank, masks=keep > 0,
                                    group=group, columns=getattr(op, "columns", None),
                                    diagonal=_diagonal(op)).apply
    out = _cg(op.matmul, b, ridge_cols, col_tol, maxiter, on_iteration, not_pd, not_converged,
              mask=mask, precond=pre, fast=_fast(op, mixed), group=group)
    fold_cols = np.concatenate([np.arange(i * per_ridge + c, (i + 1) * per_ridge)
                                for i in range(len(sweep))])
    # every fold's alpha times K: the final float64 residual's product had it (the
    # folds' x are zero outside their rows)
    assert out.kx is not None  # _cg returns its last product
    fold_pred = out.kx[:, fold_cols]
    alphas, held_out = {}, {}
    for i, r in enumerate(sweep):
        alphas[r] = out.x[:, i * per_ridge:i * per_ridge + c].copy()
        pred = np.empty((n, c))
        for f in range(held.shape[0]):
            s = (i * held.shape[0] + f) * c
            pred[held[f]] = fold_pred[held[f], s:s + c]
        held_out[r] = pred
    return alphas, held_out
