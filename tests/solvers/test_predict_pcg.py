"""The Nystrom-preconditioned conjugate gradients of ``predict --solver cg``: the same
answers as Cholesky, in fewer products with K on an ill-conditioned kernel, every
ridge and fold at once (small n: cheap)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from kernelcli.errors import NotConvergedError, UsageError
from kernelcli.solvers import (
    ArrayOperator,
    H5KernelOperator,
    fold_masks,
    load_kernel,
    solve_cg_folds,
    solve_cg_ridges,
    solve_cholesky,
)

# the preconditioner inside solve_cg is what is tested, not only the solve it speeds up
from kernelcli.solvers._cg import _cg
from kernelcli.solvers._cg_folds import FOLD_TOL
from kernelcli.solvers._precondition import NystromPreconditioner, landmarks, pivoted_cholesky

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


def assert_agrees_with_cholesky_per_fold(k, y, alphas, held, folds):
    """Every ridge's weights match Cholesky's to 1e-6 relative, and every fold's held-out
    predictions a direct solve on its training rows to within ten times the folds'
    tolerance (they stop there: their predictions only score the ridges)."""
    n = k.shape[0]
    reg_unit = np.trace(k) / n
    for r in RIDGES:
        assert rel(alphas[r], solve_cholesky(k, y, [r])[r]) < 1e-6
        for out in fold_masks(n, folds):
            keep = ~out
            a = np.linalg.solve(k[np.ix_(keep, keep)] + r * reg_unit * np.eye(keep.sum()),
                                y[keep])
            assert rel(held[r][out], k[np.ix_(out, keep)] @ a) < 10 * FOLD_TOL


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
    assert_agrees_with_cholesky_per_fold(k, y, alphas, held, folds)


def test_progress_reports_the_columns_still_running():
    """Once the folds stop at their tolerance, the residual reported is the whole set's
    on its way to ``tol``, not the folds' standing still."""
    k, y = rbf_kernel(200), targets(200)
    seen: list = []
    solve_cg_folds(k, y, RIDGES, 5, rank=20, tol=1e-10,
                   on_iteration=lambda p, r: seen.append(r))
    assert min(seen) <= 1e-9 < FOLD_TOL


def test_the_preconditioner_is_exact_at_full_rank():
    """With every column a landmark, ``P = K + reg I``: CG ends in one or two products."""
    n = 80
    k, y = rbf_kernel(n), targets(n)
    out, products = counted(solve_cg_ridges, k, y, [1e-3], rank=n, mixed=False)
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


class CountedOperator(H5KernelOperator):
    """The streamed operator, counting its float64 and float32 passes over the file."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.passes = {"float64": 0, "float32": 0}

    def matmul(self, v):
        self.passes["float64"] += 1
        return super().matmul(v)

    def matmul32(self, v):
        self.passes["float32"] += 1
        return super().matmul32(v)


def test_mixed_precision_agrees_with_cholesky_for_every_ridge_and_fold(tmp_path):
    """float32 products inside CG, float64 residuals: the stored float32 kernel's own
    solution (Cholesky on it in float64) to 1e-6, each fold's held-out predictions too."""
    n, folds = 150, 5
    path = tmp_path / "kernels.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("ntk", data=rbf_kernel(n).astype(np.float32))
    op = CountedOperator(path, "ntk", block_rows=32)  # 5 blocks, a ragged last one
    k, y = load_kernel(path, "ntk"), targets(n)
    alphas, held = solve_cg_folds(op, y, RIDGES, folds, rank=30)
    assert op.passes["float32"] > op.passes["float64"] > 0  # the fast path ran
    reg_unit = np.trace(k) / n
    for r in RIDGES:
        assert rel(alphas[r], solve_cholesky(k, y, [r])[r]) < 1e-6
        assert rel(k @ alphas[r], k @ solve_cholesky(k, y, [r])[r]) < 1e-6
        for out in fold_masks(n, folds):
            keep = ~out
            a = np.linalg.solve(k[np.ix_(keep, keep)] + r * reg_unit * np.eye(keep.sum()),
                                y[keep])
            assert rel(held[r][out], k[np.ix_(out, keep)] @ a) < 10 * FOLD_TOL
    plain = CountedOperator(path, "ntk", block_rows=32)
    exact = solve_cg_ridges(plain, y, RIDGES, rank=30, mixed=False)
    assert plain.passes["float32"] == 0
    for r in RIDGES:
        assert rel(solve_cg_ridges(op, y, [r], rank=30)[r], exact[r]) < 1e-7


def test_the_operators_float32_product_and_landmark_columns(tmp_path):
    rng = np.random.default_rng(3)
    k = rbf_kernel(40)
    path = tmp_path / "k.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("nngp", data=k.astype(np.float32))
    op = H5KernelOperator(path, "nngp", block_rows=9)
    k32 = load_kernel(path, "nngp")
    v = rng.standard_normal((40, 3))
    fast = op.matmul32(v)
    assert fast.dtype == np.float64 and rel(fast, k32 @ v) < 1e-5
    idx = landmarks(40, 7)
    assert np.array_equal(op.columns(idx), k32[:, idx])
    assert np.array_equal(ArrayOperator(k).columns(idx), k[:, idx])
    assert rel(ArrayOperator(k).matmul32(v), k @ v) < 1e-5
    with pytest.raises(UsageError) as err:
        solve_cg_ridges(k, targets(40), [1e-3], mixed="yes")
    assert str(err.value) == "mixed=: 'yes' is not accepted; give true or false"


def test_pivoted_cholesky_is_exact_at_full_rank_and_skips_duplicate_rows():
    """Drawn by the residual diagonal, a row already explained is not drawn again: the
    kernel of 30 distinct points, each twice, needs 30 directions, not 60."""
    x = np.random.default_rng(4).standard_normal((30, 3))
    xx = np.vstack([x, x])
    k = np.exp(-((xx[:, None] - xx[None]) ** 2).sum(-1))
    low = pivoted_cholesky(lambda idx: k[:, idx], np.diagonal(k), 60, block=7)
    assert low.shape[1] <= 30
    assert rel(low @ low.T, k) < 1e-8
    again = pivoted_cholesky(lambda idx: k[:, idx], np.diagonal(k), 60, block=7)
    assert np.array_equal(low, again)  # reproducible


@pytest.mark.parametrize("pivot", [True, False])
def test_both_landmark_choices_agree_with_cholesky_for_every_fold(pivot):
    """Pivoted (the operator gives its diagonal) and uniform landmarks (it does not)."""
    n, folds = 120, 5
    k, y = rbf_kernel(n), targets(n)

    class NoDiagonal(ArrayOperator):
        diagonal = property()  # hasattr is False: uniform landmarks

        def trace(self):
            return float(np.trace(self.k))

    op = ArrayOperator(k) if pivot else NoDiagonal(k)
    alphas, held = solve_cg_folds(op, y, RIDGES, folds, rank=40)
    assert_agrees_with_cholesky_per_fold(k, y, alphas, held, folds)


def test_the_xla_block_products_match_numpy_to_their_rounding(tmp_path):
    """The operator's products (a jitted XLA dot per row block, both dtypes, a vector
    and a matrix, a ragged last block) are numpy's to the dtype's rounding, and a block
    XLA must copy (not 64-byte aligned) gives the same bits as an aligned one."""
    # the aligned buffers the product writes into (their layout is the point)
    from kernelcli.solvers._operator import aligned_empty, block_product, transposed

    rng = np.random.default_rng(4)
    k = rbf_kernel(45)
    path = tmp_path / "k.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("ntk", data=k)
        f.create_dataset("nngp", data=k.astype(np.float32))
    v = rng.standard_normal((45, 4))
    op64, op32 = H5KernelOperator(path, "ntk", block_rows=8), H5KernelOperator(path, "nngp")
    k32 = k.astype(np.float32)
    bound32 = 1e-6 * (np.abs(k32) @ np.abs(v))  # float32 accumulation over 45 terms
    for w in (v, v[:, 0]):
        assert op64.matmul(w).shape == w.shape and rel(op64.matmul(w), k @ w) < 1e-13
        assert op64.matmul32(w).dtype == np.float64
        err = np.abs(op32.matmul32(w) - k32.astype(np.float64) @ w.astype(np.float32))
        assert (err <= (bound32 if w.ndim == 2 else bound32[:, 0])).all()
    block = aligned_empty((10, 45), np.float32)
    block[:] = k32[:10]
    raw = np.empty(10 * 45 + 1, np.float32)[1:].reshape(10, 45)  # 4-byte offset
    raw[:] = block
    vt = transposed(v.astype(np.float32))
    assert block.ctypes.data % 64 == 0 and raw.ctypes.data % 64 != 0
    assert np.array_equal(block_product(block, vt), block_product(raw, vt))


def test_the_final_check_sends_back_only_the_columns_it_fails():
    """A column whose recurrence claims a residual that its float64 residual denies goes
    back to iterate and is checked again alone; the others keep their product, so the
    returned ``K x`` (the folds' held-out predictions) is every column's, as a fresh
    product gives it. A float32-like product wrong by 1e-4 makes the recurrences drift."""
    n, c = 120, 8
    k = rbf_kernel(n)
    ridge = np.full(c, 1e-2 * np.trace(k) / n)
    for seed in range(10):
        e = np.random.default_rng(seed).standard_normal((n, n)) * 1e-4 * np.abs(k).max()
        wrong = k + (e + e.T) / 2
        exact: list = []
        b = targets(n, c, seed=seed)
        try:
            out = _cg(lambda v: exact.append(v.shape[1]) or k @ v, b.copy(), ridge, 1e-10,
                      2_000, None, str, lambda *a: "not converged", fast=lambda v: wrong @ v)
        except NotConvergedError:
            continue
        if exact[-1] < c:  # the last check was of the columns sent back only
            break
    else:
        pytest.fail("no seed made the final check send a column back")
    np.testing.assert_allclose(out.kx, k @ out.x, rtol=0, atol=1e-12 * np.abs(k @ out.x).max())
    true = np.linalg.norm(b - k @ out.x - ridge * out.x, axis=0) / np.linalg.norm(b, axis=0)
    assert (out.residual <= 1e-10).all()
    np.testing.assert_allclose(true, out.residual, rtol=1e-5)
