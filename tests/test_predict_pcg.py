"""The Nystrom-preconditioned conjugate gradients of ``predict --solver cg``: the same
answers as Cholesky, in fewer products with K on an ill-conditioned kernel, every
ridge and fold at once (small n: cheap)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcli.errors import UsageError
from kernelcli.predict import solve_cg_folds, solve_cg_ridges, solve_cholesky
from kernelcli.predict._precondition import NystromPreconditioner, landmarks
from kernelcli.predict._selection import fold_masks

RIDGES = (1e-6, 1e-3, 1.0)


def rbf_kernel(n: int, seed: int = 1) -> np.ndarray:
    """A smooth RBF kernel on 20-d points: a slowly decaying, ill-conditioned spectrum."""
    x = np.random.default_rng(seed).standard_normal((n, 20))
    return np.exp(-0.05 * ((x[:, None] - x[None]) ** 2).sum(-1))


def targets(n: int, c: int = 3, seed: int = 2) -> np.ndarray:
    return np.eye(c)[np.random.default_rng(seed).integers(0, c, n)]


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def counted(solve, *args, **kw):
    """``(result, products with K)`` of a CG solve, counted by its ``on_iteration``."""
    seen = [0]
    out = solve(*args, on_iteration=lambda p, r: seen.__setitem__(0, p), **kw)
    return out, seen[0]


def test_preconditioned_ridges_agree_with_cholesky_in_fewer_products():
    k, y = rbf_kernel(300), targets(300)
    ref = solve_cholesky(k, y, RIDGES)
    plain, plain_products = counted(solve_cg_ridges, k, y, RIDGES, rank=0)
    pre, pre_products = counted(solve_cg_ridges, k, y, RIDGES, rank=60)
    for r in RIDGES:
        assert rel(pre[r], ref[r]) < 1e-6
        assert rel(k @ pre[r], k @ ref[r]) < 1e-6  # the predictions on the training set
    assert pre_products < plain_products / 1.5, (pre_products, plain_products)


def test_every_ridge_and_fold_at_once_agree_with_direct_fold_solves():
    n, folds = 200, 5
    k, y = rbf_kernel(n), targets(n)
    (alphas, held), pre_products = counted(solve_cg_folds, k, y, RIDGES, folds, rank=100)
    _, plain_products = counted(solve_cg_folds, k, y, RIDGES, folds, rank=0)
    assert pre_products < plain_products
    reg_unit = np.trace(k) / n
    for r in RIDGES:
        assert rel(alphas[r], solve_cholesky(k, y, [r])[r]) < 1e-6
        for out in fold_masks(n, folds):
            keep = ~out
            a = np.linalg.solve(k[np.ix_(keep, keep)] + r * reg_unit * np.eye(keep.sum()),
                                y[keep])
            assert rel(held[r][out], k[np.ix_(out, keep)] @ a) < 1e-6


def test_the_preconditioner_is_exact_at_full_rank():
    """With every column a landmark, ``P = K + reg I``: CG ends in one or two products."""
    n = 80
    k, y = rbf_kernel(n), targets(n)
    out, products = counted(solve_cg_ridges, k, y, [1e-3], rank=n)
    assert products <= 2
    assert rel(out[1e-3], solve_cholesky(k, y, [1e-3])[1e-3]) < 1e-8


def test_a_fold_basis_spans_only_its_rows_and_duplicate_landmarks_are_dropped():
    n = 60
    x = np.random.default_rng(0).standard_normal((n // 2, 3))
    k = np.exp(-((np.vstack([x, x])[:, None] - np.vstack([x, x])[None]) ** 2).sum(-1))
    keep = np.ones((2, n), bool)
    keep[1, ::3] = False
    pre = NystromPreconditioner(lambda v: k @ v, n, np.full(2, 1e-3), rank=n,
                                masks=keep, group=[0, 1])
    assert pre.rank <= n // 2  # the duplicated rows add nothing to the basis
    z = pre.apply(np.ones((n, 2)) * keep.T, np.array([0, 1]))
    assert np.all(z[~keep[1], 1] == 0) and np.isfinite(z).all()
    assert np.array_equal(landmarks(n, 10), landmarks(n, 10))  # reproducible


@pytest.mark.parametrize("rank", [-1, 2.5, True])
def test_a_bad_rank_is_refused_naming_it(rank):
    k, y = rbf_kernel(20), targets(20)
    with pytest.raises(UsageError) as err:
        solve_cg_ridges(k, y, [1e-3], rank=rank)
    assert str(err.value) == (f"rank=: {rank!r} is not accepted; give an integer >= 0 "
                              f"(0: no preconditioner)")
