"""Choosing the ridge on the training set: the closed-form leave-one-out equals n
refits without one row each, CG's k-fold equals a refit per fold, and the choice
follows the held-out accuracy, then MSE."""

from __future__ import annotations

import numpy as np
import pytest
from test_predict import psd_kernel

from kernelcli.errors import UsageError
from kernelcli.solvers import (
    cholesky_factor,
    choose_ridge,
    fold_masks,
    held_out_scores,
    inverse_diagonal,
    loo_predictions,
    one_hot,
    solve_cg_folds,
    solve_cholesky,
    solve_with_factor,
)


def refit_without(k, y, rows, reg):
    """Predictions for ``rows`` of a fit on the other rows, with the regulariser ``reg``."""
    keep = np.setdiff1d(np.arange(len(k)), rows)
    a = np.linalg.solve(k[np.ix_(keep, keep)] + reg * np.eye(len(keep)), y[keep])
    return k[np.ix_(rows, keep)] @ a


@pytest.mark.parametrize("n", [9, 300, 700])  # 700 spans two column blocks of 512
def test_inverse_diagonal_equals_the_inverse(n):
    k, _, _ = psd_kernel(n, seed=n)
    chol = cholesky_factor(k, 1e-3)
    want = np.diag(np.linalg.inv(k + 1e-3 * np.trace(k) / n * np.eye(n)))
    np.testing.assert_allclose(inverse_diagonal(chol), want, rtol=1e-9)
    kept = chol.copy()
    np.testing.assert_allclose(inverse_diagonal(chol, overwrite=False), want, rtol=1e-9)
    assert np.array_equal(chol, kept)  # without overwrite the factor is left as it was


@pytest.mark.parametrize("ridge", [0.0, 1e-3, 1.0])
def test_closed_form_leave_one_out_equals_n_refits(ridge):
    n = 30
    k, _, _ = psd_kernel(n, seed=4)
    labels = np.arange(n) % 3
    y = one_hot(labels)
    chol = cholesky_factor(k, ridge)
    loo = loo_predictions(chol, solve_with_factor(chol, y), y)
    reg = ridge * np.trace(k) / n
    want = np.vstack([refit_without(k, y, [i], reg) for i in range(n)])
    np.testing.assert_allclose(loo, want, rtol=1e-8, atol=1e-10)
    scores = held_out_scores(loo, labels, y)
    assert scores["accuracy"] == np.mean(np.argmax(want, 1) == labels)
    assert scores["mse"] == pytest.approx(np.mean((want - y) ** 2), rel=1e-8)


def test_cg_folds_equal_a_refit_per_fold_and_the_fit_equals_cholesky():
    n, folds = 47, 5  # folds of 10 and 9 rows
    k, _, _ = psd_kernel(n, seed=5)
    y = one_hot(np.arange(n) % 4, center=True)
    ridges = [1e-3, 0.1]
    alphas, held = solve_cg_folds(k, y, ridges, folds, tol=1e-12, fold_tol=1e-12)
    chol = solve_cholesky(k, y, ridges)
    masks = fold_masks(n, folds)
    for r in ridges:
        np.testing.assert_allclose(alphas[r], chol[r], rtol=1e-7, atol=1e-9)
        reg = r * np.trace(k) / n
        for f in range(folds):
            rows = np.flatnonzero(masks[f])
            np.testing.assert_allclose(held[r][rows], refit_without(k, y, rows, reg),
                                       rtol=1e-7, atol=1e-9)


def test_folds_interleave_and_bad_counts_are_named():
    m = fold_masks(7, 3)
    assert m.shape == (3, 7) and np.array_equal(m.sum(0), np.ones(7))
    assert list(np.flatnonzero(m[1])) == [1, 4]
    for bad in (1, 8, 2.5):
        with pytest.raises(UsageError, match=r"folds=: .* is not accepted; give an integer "
                                             r"from 2 to n = 7"):
            fold_masks(7, bad)


def test_the_choice_is_best_accuracy_then_lowest_mse_then_the_larger_ridge():
    s = {1e-4: {"accuracy": 0.9, "mse": 0.05}, 1e-2: {"accuracy": 0.9, "mse": 0.04},
         1.0: {"accuracy": 0.8, "mse": 0.01}, 0.0: None}
    assert choose_ridge(s, [0.0, 1e-4, 1e-2, 1.0]) == 1e-2
    tie = {1e-4: {"accuracy": 0.9, "mse": 0.04}, 1e-2: {"accuracy": 0.9, "mse": 0.04}}
    assert choose_ridge(tie, [1e-4, 1e-2]) == 1e-2
    assert choose_ridge({0.0: None}, [0.0]) is None
