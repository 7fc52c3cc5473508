"""Kernel ridge regression on stored kernels: references are direct numpy solves in float64."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from kernelcli.errors import BudgetError, DataError, KernelcliError, UsageError
from kernelcli.solvers import (
    H5KernelOperator,
    NotConvergedError,
    NotPositiveDefiniteError,
    accuracy,
    cholesky_factor,
    choose_solver,
    evaluate,
    load_kernel,
    mse,
    one_hot,
    predict,
    predictive_variance,
    solve_cg,
    solve_cg_ridges,
    solve_cholesky,
    solve_memory_bytes,
)


def psd_kernel(n, d=None, seed=0, m=0):
    """A well-conditioned PSD kernel X X^T / d (n, n) of d > n features, and K(test, train)."""
    d = d or 3 * n
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n + m, d))
    k = x @ x.T / d
    return np.ascontiguousarray(k[:n, :n]), np.ascontiguousarray(k[n:, :n]), k[n:, n:]


def direct(k, y, reg):
    return np.linalg.solve(k + reg * np.eye(len(k)), y)


@pytest.mark.parametrize("n, c", [(7, 1), (60, 3), (300, 10)])  # 300 spans two 256-row blocks
@pytest.mark.parametrize("trace_scaled", [True, False])
def test_cholesky_alpha_and_predictions_equal_direct_solve(n, c, trace_scaled):
    k, k_test, _ = psd_kernel(n, seed=n, m=11)
    y = np.random.default_rng(1).standard_normal((n, c))
    ridges = [0.0, 1e-6, 1e-2, 3.0]
    alphas = solve_cholesky(k, y, ridges, trace_scaled=trace_scaled)
    assert list(alphas) == ridges
    for r, alpha in alphas.items():
        reg = r * np.trace(k) / n if trace_scaled else r
        ref = direct(k, y, reg)
        assert alpha.dtype == np.float64 and alpha.shape == (n, c)
        np.testing.assert_allclose(alpha, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
        np.testing.assert_allclose(predict(k_test, alpha), k_test @ ref, rtol=1e-9, atol=1e-9)


def test_trace_scaled_ridge_means_the_same_for_any_kernel_scale():
    k, k_test, _ = psd_kernel(40, m=5)
    y = one_hot(np.arange(40) % 4)
    base = predict(k_test, solve_cholesky(k, y, [0.1])[0.1])
    scaled = predict(1e3 * k_test, solve_cholesky(1e3 * k, y, [0.1])[0.1])
    np.testing.assert_allclose(scaled, base, rtol=1e-10)
    absolute = solve_cholesky(k, y, [0.1], trace_scaled=False)[0.1]
    np.testing.assert_allclose(absolute, direct(k, y, 0.1), rtol=1e-10)
    assert not np.allclose(absolute, solve_cholesky(k, y, [0.1])[0.1])


def test_float32_kernel_is_solved_in_float64():
    k, _, _ = psd_kernel(50)
    k32 = k.astype(np.float32)
    y = one_hot(np.arange(50) % 5)
    alpha = solve_cholesky(k32, y, [1e-3])[1e-3]
    k64 = k32.astype(np.float64)
    np.testing.assert_allclose(alpha, direct(k64, y, 1e-3 * np.trace(k64) / 50), rtol=1e-9)


def test_ridge_zero_interpolates_the_training_labels():
    k, _, _ = psd_kernel(80, d=400)
    y = one_hot(np.arange(80) % 10)
    for r, alpha in solve_cholesky(k, y, [0.0, 1e-10]).items():
        np.testing.assert_allclose(predict(k, alpha), y, atol=1e-6)
        assert accuracy(predict(k, alpha), np.arange(80) % 10) == 1.0


def test_callers_kernel_is_left_bit_for_bit_unchanged():
    k, _, _ = psd_kernel(30)
    k[0, 0] = -5.0  # indefinite: the failure path must restore too
    before = k.copy()
    with pytest.raises(NotPositiveDefiniteError):
        solve_cholesky(k, np.ones((30, 1)), [1e-6])
    assert np.array_equal(k, before)
    k, _, _ = psd_kernel(30)
    before = k.copy()
    solve_cholesky(k, np.ones((30, 2)), [1e-3, 1.0])
    assert np.array_equal(k, before)


def indefinite_kernel(n=40):
    rng = np.random.default_rng(3)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = np.linspace(1.0, 2.0, n)
    s[-1] = -0.5
    return (u * s) @ u.T


def test_indefinite_kernel_raises_a_clear_error_not_nans():
    k = indefinite_kernel()
    with pytest.raises(NotPositiveDefiniteError) as err:
        solve_cholesky(k, np.ones((40, 2)), [1e-6], kind="ntk")
    msg = str(err.value)
    assert "the ntk kernel plus ridge 1e-06 x trace/n" in msg
    assert "not positive definite" in msg and "n=40" in msg
    assert "its smallest eigenvalue is -0.5, so use a larger ridges= (e.g. " in msg
    suggested = float(re.search(r"\(e\.g\. ([^)]+)\)$", msg)[1])
    solve_cholesky(k, np.ones((40, 2)), [suggested], kind="ntk")  # the advice works
    assert isinstance(err.value, KernelcliError) and err.value.exit_code == 1
    with pytest.raises(NotPositiveDefiniteError, match="n=40"):
        cholesky_factor(k, 0.0, kind="nngp")
    with pytest.raises(NotPositiveDefiniteError, match="conjugate gradients"):
        solve_cg_ridges(k, np.ones((40, 2)), [0.0], kind="ntk")


def test_bad_ridges_kernels_and_targets_are_named():
    k, _, _ = psd_kernel(10)
    with pytest.raises(UsageError, match="ridges=: -1"):
        solve_cholesky(k, np.ones((10, 1)), [-1])
    with pytest.raises(UsageError, match="ridges=: nan"):
        solve_cholesky(k, np.ones((10, 1)), [float("nan")])
    with pytest.raises(UsageError, match="no ridge"):
        solve_cholesky(k, np.ones((10, 1)), [])
    bad = k.copy()
    bad[3, 4] = np.nan
    with pytest.raises(DataError, match="row 3, column 4"):
        solve_cholesky(bad, np.ones((10, 1)), [1e-3])
    with pytest.raises(DataError, match="n = 10 rows"):
        solve_cholesky(k, np.ones((9, 1)), [1e-3])
    with pytest.raises(DataError, match="square"):
        solve_cholesky(k[:, :9], np.ones((10, 1)), [1e-3])


@pytest.mark.parametrize("trace_scaled", [True, False])
def test_cg_equals_cholesky_in_memory(trace_scaled):
    k, _, _ = psd_kernel(120)
    y = one_hot(np.arange(120) % 7, center=True)
    ridges = [1e-4, 1e-2, 1.0]
    chol = solve_cholesky(k, y, ridges, trace_scaled=trace_scaled)
    seen = []
    cg = solve_cg_ridges(k, y, ridges, trace_scaled=trace_scaled, tol=1e-10,
                         on_iteration=lambda i, res: seen.append((i, res)))
    products = [i for i, _ in seen]  # a step's product, and a float64 one at each
    assert products == sorted(set(products)) and products[0] >= 1  # reliable update
    assert seen[-1][1] <= 1e-10
    for r in ridges:
        np.testing.assert_allclose(cg[r], chol[r], atol=1e-6 * np.abs(chol[r]).max())


def write_kernel(path, **datasets):
    with h5py.File(path, "w") as f:
        for name, k in datasets.items():
            f.create_dataset(name, data=k)
    return path


def test_cg_on_a_streamed_hdf5_kernel_equals_cholesky(tmp_path):
    k, k_test, _ = psd_kernel(150, m=20)
    path = write_kernel(tmp_path / "kernels.h5", ntk=k.astype(np.float32),
                        test=k_test.astype(np.float32))
    op = H5KernelOperator(path, "ntk", block_rows=16)  # 150 rows: 10 blocks, a ragged last one
    assert op.shape == (150, 150) and op.block_bytes == 16 * 150 * 8
    y = one_hot(np.arange(150) % 10)
    ridges = [1e-3, 0.1]
    cg = solve_cg_ridges(op, y, ridges, kind="ntk")
    chol = solve_cholesky(load_kernel(path, "ntk"), y, ridges)
    test_op = H5KernelOperator(path, "test", block_rows=7)
    for r in ridges:
        np.testing.assert_allclose(cg[r], chol[r], atol=1e-6 * np.abs(chol[r]).max())
        np.testing.assert_allclose(predict(test_op, cg[r]),
                                   predict(load_kernel(path, "test"), chol[r]), atol=1e-6)


def test_hdf5_operator_products_diagonal_and_load_agree_with_the_array(tmp_path):
    rng = np.random.default_rng(0)
    rect = rng.standard_normal((23, 17)).astype(np.float32)
    sq = rng.standard_normal((19, 19))
    path = write_kernel(tmp_path / "k.h5", rect=rect, sq=sq)
    op = H5KernelOperator(path, "rect", block_rows=5)
    v = rng.standard_normal((17, 3))
    np.testing.assert_allclose(op @ v, rect.astype(np.float64) @ v, rtol=1e-12)
    np.testing.assert_allclose(op.matmul(v[:, 0]), rect.astype(np.float64) @ v[:, 0], rtol=1e-12)
    sq_op = H5KernelOperator(path, "sq", block_rows=4)
    np.testing.assert_array_equal(sq_op.diagonal(), np.diagonal(sq))
    assert sq_op.trace() == pytest.approx(np.trace(sq))
    loaded = load_kernel(path, "rect")
    assert loaded.dtype == np.float64 and np.array_equal(loaded, rect.astype(np.float64))
    with pytest.raises(DataError, match="not square"):
        op.diagonal()
    with pytest.raises(DataError, match="holds no dataset 'nngp'; it holds: rect, sq"):
        H5KernelOperator(path, "nngp")
    with pytest.raises(DataError, match="does not exist"):
        H5KernelOperator(tmp_path / "missing.h5", "ntk")


def test_solve_cg_on_a_vector_with_per_column_ridges():
    k, _, _ = psd_kernel(50)
    b = np.random.default_rng(2).standard_normal(50)
    res = solve_cg(lambda v: k @ v, b, ridge_term=0.3, tol=1e-12)
    assert res.x.shape == (50,) and res.residual[0] <= 1e-12
    np.testing.assert_allclose(res.x, direct(k, b, 0.3), rtol=1e-9)
    bb = np.stack([b, 2 * b, np.zeros(50)], axis=1)
    res = solve_cg(lambda v: k @ v, bb, ridge_term=np.array([0.3, 1.0, 5.0]),
                   tol=1e-10)
    np.testing.assert_allclose(res.x[:, 1], direct(k, 2 * b, 1.0), rtol=1e-8)
    assert np.array_equal(res.x[:, 2], np.zeros(50))


def test_cg_that_cannot_converge_in_time_says_what_to_change():
    k, _, _ = psd_kernel(60)
    with pytest.raises(NotConvergedError, match="after 3 products.*use a larger ridges=$") as err:
        solve_cg_ridges(k, np.ones((60, 1)), [1e-6], maxiter=3, kind="nngp",
                        rank=0)
    assert "nngp kernel with ridge 1e-06" in str(err.value) and err.value.exit_code == 1
    # the advice names only what this call has, and followed, it works
    solve_cg_ridges(k, np.ones((60, 1)), [1e6], maxiter=3, kind="nngp", rank=0)
    with pytest.raises(UsageError, match="^tol=: 0.0 is not accepted"):
        solve_cg_ridges(k, np.ones((60, 1)), [1e-6], tol=0.0)


def test_predictive_variance_equals_the_direct_formula():
    k, k_test, k_tt = psd_kernel(40, m=6)
    ridge = 1e-2
    chol = cholesky_factor(k, ridge)
    reg = ridge * np.trace(k) / 40
    ref = np.diag(k_tt) - np.einsum("ij,ji->i", k_test, direct(k, k_test.T, reg))
    np.testing.assert_allclose(predictive_variance(np.diag(k_tt), k_test, chol), ref, rtol=1e-9)
    assert np.all(predictive_variance(np.diag(k), k, cholesky_factor(k, 0.0)) < 1e-8)


def test_one_hot_plain_and_centred():
    y = one_hot([2, 0, 1])
    np.testing.assert_array_equal(y, [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    yc = one_hot([2, 0, 1], num_classes=10, center=True)
    assert yc.shape == (3, 10) and yc[0, 2] == pytest.approx(0.9) and yc[0, 0] == -0.1
    np.testing.assert_allclose(yc.sum(axis=1), 0.0, atol=1e-15)
    with pytest.raises(DataError, match="class 5 at row 1"):
        one_hot([0, 5], num_classes=3)
    with pytest.raises(DataError, match="negative"):
        one_hot([0, -1])


def test_accuracy_and_mse_on_a_toy_case():
    pred = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    labels = np.array([0, 1, 1])
    assert accuracy(pred, labels) == pytest.approx(2 / 3)
    squared = (0.01 + 0.01 + 0.04 + 0.04 + 0.36 + 0.36) / 6
    assert mse(pred, one_hot(labels)) == pytest.approx(squared)
    out = evaluate({0.1: pred, 1.0: one_hot(labels)}, labels, one_hot(labels))
    assert out[1.0] == {"accuracy": 1.0, "mse": 0.0}
    assert out[0.1] == {"accuracy": pytest.approx(2 / 3), "mse": pytest.approx(squared)}


def test_solver_choice_follows_the_memory_and_names_the_alternative():
    assert solve_memory_bytes(60_000) == 2 * 8 * 60_000**2  # the kernel and its factor
    assert choose_solver(1000, "auto", available_bytes=10**9) == "cholesky"
    assert choose_solver(60_000, "auto", available_bytes=16 * 2**30) == "cg"
    assert choose_solver(60_000, "cg", available_bytes=2 * 2**30) == "cg"
    with pytest.raises(BudgetError, match="solver= cg on 60,000 training rows needs "):
        choose_solver(60_000, "cg", available_bytes=1)  # CG is costed too
    with pytest.raises(BudgetError) as err:
        choose_solver(60_000, "cholesky", available_bytes=16 * 2**30)
    msg = str(err.value)
    assert "60,000 x 60,000" in msg and "53.6 GiB" in msg and "26.8 GiB each" in msg
    assert "16 GiB is available" in msg and "use solver= cg" in msg
    with pytest.raises(UsageError, match="solver=: 'lu'.*auto, cholesky, eigen, cg"):
        choose_solver(10, "lu")
