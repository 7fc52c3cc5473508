"""Choosing the ridge without the test set: leave-one-out and k-fold scores (numpy only).

A ridge chosen by test accuracy overstates that accuracy; the held-out error on the
training set does not look at the test set. For kernel ridge regression the
leave-one-out residuals have a closed form from the factorisation that the fit
already made (for ``K + reg I = L L^T``, ``alpha = (K + reg I)^{-1} Y``):

    r_i = alpha_i / [(K + reg I)^{-1}]_ii,    the prediction without row i: y_i - r_i

with the diagonal of the inverse the squared column norms of ``L^{-1}``
(``inverse_diagonal``: ``n^3 / 3`` flops, as much as the factorisation, made in the
factor's own memory where the caller is done with it). The regulariser stays the one of
the whole set (``ridge * trace(K)/n``). Conjugate gradients have no factor: there
the score is k-fold cross-validation (``_cg_folds.solve_cg_folds``), folds ``i mod k``.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from ..errors import DataError, UsageError
from ._targets import accuracy, mse


def inverse_diagonal(chol: np.ndarray, overwrite: bool = False) -> np.ndarray:
    """``diag((L L^T)^{-1})`` (n,) float64 for the lower factor ``chol`` (n, n).

    The squared column norms of ``L^{-1}``, inverted by LAPACK's blocked triangular
    inverse (``dtrtri``, matrix products: about twice the rate of the substitution by
    slabs it replaces, bench/history/): ``chol``'s transpose is the Fortran-ordered
    upper factor LAPACK takes, so no copy is made with ``overwrite`` (``chol`` then
    holds ``L^{-1}``: the caller's last use of it), one ``n x n`` copy without.
    """
    from scipy.linalg import lapack  # type: ignore[import-untyped]  # no stubs

    upper = np.asarray(chol, dtype=np.float64).T  # Fortran-ordered: L^T, upper
    inv, info = lapack.dtrtri(upper, lower=0, overwrite_c=int(overwrite))
    if info != 0:
        raise DataError(f"inverse_diagonal: the factor is singular at row {info - 1}")
    return np.einsum("ij,ij->i", inv, inv)  # rows of (L^T)^{-1}: columns of L^{-1}


def loo_predictions(chol: np.ndarray, alpha: np.ndarray, targets: np.ndarray,
                    overwrite: bool = False) -> np.ndarray:
    """Leave-one-out predictions (n, C) of every training row: ``y_i - alpha_i / d_i``
    (``overwrite``: ``chol`` may be overwritten, see :func:`inverse_diagonal`)."""
    if alpha.shape[0] != chol.shape[0] or np.shape(targets) != alpha.shape:
        raise DataError(f"loo_predictions: chol {chol.shape}, alpha {alpha.shape} and "
                        f"targets {np.shape(targets)} do not agree")
    d = inverse_diagonal(chol, overwrite)
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
