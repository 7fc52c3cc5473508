"""Choosing the ridge without the test set: leave-one-out and k-fold scores (numpy only).

A ridge chosen by test accuracy overstates that accuracy; the held-out error on the
training set does not look at the test set. For kernel ridge regression the
leave-one-out residuals have a closed form from the factorisation that the fit
already made (for ``K + reg I = L L^T``, ``alpha = (K + reg I)^{-1} Y``):

    r_i = alpha_i / [(K + reg I)^{-1}]_ii,    the prediction without row i: y_i - r_i

with the diagonal of the inverse the squared column norms of ``L^{-1}``
(``inverse_diagonal``: ``n^3 / 3`` flops, as much as the factorisation, in column
blocks so that no second ``n x n`` matrix is held). The regulariser stays the one of
the whole set (``ridge * trace(K)/n``). Conjugate gradients have no factor: there
the score is k-fold cross-validation (``_cg.solve_cg_folds``), folds ``i mod k``.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from ..errors import DataError, UsageError
from ._targets import accuracy, mse

_INV_BLOCK = 256  # columns of L^{-1} per slab, rows per block, of inverse_diagonal


def inverse_diagonal(chol: np.ndarray, block: int = _INV_BLOCK) -> np.ndarray:
    """``diag((L L^T)^{-1})`` (n,) float64 for the lower factor ``chol`` (n, n).

    Columns ``j0:j1`` of ``L^{-1}`` vanish above row ``j0``, so each slab of
    ``block`` columns is a forward substitution from row ``j0`` on; memory is one
    ``n x block`` slab. The diagonal blocks of ``L`` are inverted once and the
    substitution is then matrix products only: a block solve per slab and row
    block would cost more than the products themselves.
    """
    n = chol.shape[0]
    step = max(1, int(block))
    inv = {i0: np.linalg.inv(chol[i0:i0 + step, i0:i0 + step]) for i0 in range(0, n, step)}
    out = np.zeros(n)
    for j0 in range(0, n, step):
        j1 = min(j0 + step, n)
        x = np.zeros((n - j0, j1 - j0))
        x[:j1 - j0] = inv[j0]
        for i0 in range(j1, n, step):
            i1 = min(i0 + step, n)
            x[i0 - j0:i1 - j0] = -inv[i0] @ (chol[i0:i1, j0:i0] @ x[:i0 - j0])
        out[j0:j1] = np.einsum("ij,ij->j", x, x)
    return out


def loo_predictions(chol: np.ndarray, alpha: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Leave-one-out predictions (n, C) of every training row: ``y_i - alpha_i / d_i``."""
    d = inverse_diagonal(chol)
    if alpha.shape[0] != d.shape[0] or np.shape(targets) != alpha.shape:
        raise DataError(f"loo_predictions: chol {chol.shape}, alpha {alpha.shape} and "
                        f"targets {np.shape(targets)} do not agree")
    return np.asarray(targets, dtype=np.float64) - alpha / d[:, None]


def held_out_scores(predictions: np.ndarray, labels, targets) -> dict:
    """``{"accuracy", "mse"}`` of held-out predictions (n, C) of the training rows."""
    return {"accuracy": accuracy(predictions, labels), "mse": mse(predictions, targets)}


def fold_masks(n: int, folds: int) -> np.ndarray:
    """(folds, n) bool: row ``i`` is held out in fold ``i mod folds`` (interleaved, so
    a training set sorted by class still gives every fold every class)."""
    if int(folds) != folds or folds < 2 or folds > n:
        raise UsageError.naming(f"<<folds>>: {folds!r} is not accepted; give an integer "
                                f"from 2 to n = {n:,} (the training rows)")
    return np.arange(n)[None, :] % int(folds) == np.arange(int(folds))[:, None]


def choose_ridge(scores: Mapping[float, Optional[dict]], ridges: Sequence[float]) -> Optional[float]:
    """The ridge with the best held-out score: highest accuracy, then lowest MSE,
    then the larger ridge (the better conditioned solve). ``None`` scores (a ridge
    that failed) are skipped; ``None`` when every ridge failed."""
    best, key = None, None
    for r in ridges:
        s = scores.get(r)
        if s is None:
            continue
        k = (s["accuracy"], -s["mse"], r)
        if key is None or k > key:
            best, key = r, k
    return best
