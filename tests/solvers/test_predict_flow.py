"""Finite-time gradient-flow predictions against neural-tangents 0.6.5's
``predict.gradient_descent_mse_ensemble`` (tests/fixtures/predict_reference.npz, made
by tests/fixtures/make_predict_reference.py; neural-tangents itself is not needed),
and against closed forms: t = 0 is the prior, t = inf the ridge solution."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from kernelcli.errors import NotPositiveDefiniteError, UsageError
from kernelcli.solvers import (
    check_times,
    cholesky_factor,
    eigen,
    flow_basis,
    flow_mean,
    flow_weights,
    gradient_flow,
    nngp_flow_covariance,
    nngp_flow_variance,
    ntk_covariance,
    ntk_flow_covariance,
    ntk_flow_variance,
    predictive_variance,
    solve_cholesky,
)

# the wording of the not-positive-definite advice, at its edges
from kernelcli.solvers._messages import not_pd_message, suggest_ridge

REFERENCE = Path(__file__).parents[1] / "fixtures" / "predict_reference.npz"


@pytest.fixture(scope="module")
def ref():
    with np.load(REFERENCE) as f:
        return {k: f[k] for k in f.files}


def blocks(ref, kind):
    n = int(ref["n_train"])
    k = ref[f"k_{kind}"]
    return k[:n, :n], k[n:, :n], np.diag(k[n:, n:]).copy()


@pytest.mark.parametrize("kind", ["nngp", "ntk"])
def test_mean_and_variance_equal_neural_tangents(ref, kind):
    k, k_td, k_tt = blocks(ref, kind)
    nngp = blocks(ref, "nngp")
    assert np.isinf(ref["times"][-1])  # the reference's last row is its t=None solve
    for r, diag_reg in enumerate(ref["diag_regs"]):
        mean, var = gradient_flow(k, k_td, ref["y_train"], ref["times"], float(diag_reg),
                                  k_test_diag=k_tt, kind=kind,
                                  ntk_with=nngp if kind == "ntk" else None)
        want_mean, want_var = ref[f"{kind}_mean_{r}"], ref[f"{kind}_var_{r}"]
        assert mean.shape == want_mean.shape == (6, 7, 3) and var.shape == (6, 7)
        np.testing.assert_allclose(mean, want_mean, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(var, want_var, rtol=1e-10, atol=1e-10)


def test_the_whole_covariance_has_the_variance_as_its_diagonal(ref):
    """nngp/ntk_flow_covariance (kernelcli.nt.predict's compute_cov, checked against
    neural-tangents in tests/stax/test_nt_predict.py) and the variances of a run's
    predictions (this file's reference) are one formula."""
    n = int(ref["n_train"])
    times, ridge = [0.0, 3.0, np.inf], 0.01
    nngp_train, nngp_td = ref["k_nngp"][:n, :n], ref["k_nngp"][n:, :n]
    nngp_tt = ref["k_nngp"][n:, n:]
    basis = flow_basis(eigen(nngp_train), nngp_td, ref["y_train"])
    np.testing.assert_allclose(
        np.diagonal(nngp_flow_covariance(basis, nngp_tt, ridge, times), axis1=1, axis2=2),
        nngp_flow_variance(basis, np.diag(nngp_tt), ridge, times), rtol=1e-12, atol=1e-14)
    eig = eigen(ref["k_ntk"][:n, :n])
    basis = flow_basis(eig, ref["k_ntk"][n:, :n], ref["y_train"])
    weights = flow_weights(eig, ridge, times, basis.normalization)
    cov = ntk_covariance(eig, nngp_train, nngp_td, np.diag(nngp_tt))
    np.testing.assert_allclose(
        np.diagonal(ntk_flow_covariance(basis, cov, nngp_tt, weights), axis1=1, axis2=2),
        ntk_flow_variance(basis, cov, weights), rtol=1e-12, atol=1e-14)


def test_time_zero_is_the_prior_and_infinity_the_ridge_solution(ref):
    k, k_td, k_tt = blocks(ref, "nngp")
    y = ref["y_train"]
    mean, var = gradient_flow(k, k_td, y, [0, np.inf], 0.1, k_test_diag=k_tt)
    assert np.array_equal(mean[0], np.zeros_like(mean[0])) and np.array_equal(var[0], k_tt)
    alpha = solve_cholesky(k, y, [0.1])[0.1]
    np.testing.assert_allclose(mean[1], k_td @ alpha, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var[1], predictive_variance(k_tt, k_td, cholesky_factor(k, 0.1)),
                               rtol=1e-9, atol=1e-12)


def test_one_eigendecomposition_serves_every_ridge(ref):
    """K + reg I has K's eigenvectors: shifting the eigenvalues equals decomposing again."""
    k, k_td, _ = blocks(ref, "ntk")
    y = ref["y_train"]
    eig = eigen(k)
    basis = flow_basis(eig, k_td, y)
    times = [1.0, 50.0]
    reg = 0.3 * np.trace(k) / len(k)
    shifted = eigen(k + reg * np.eye(len(k)))
    direct = flow_mean(flow_basis(shifted, k_td, y),
                       flow_weights(shifted, 0.0, times, y.size))
    np.testing.assert_allclose(flow_mean(basis, flow_weights(eig, 0.3, times, y.size)),
                               direct, rtol=1e-10, atol=1e-12)
    absolute = flow_weights(eig, reg, times, y.size, trace_scaled=False)
    np.testing.assert_allclose(absolute, flow_weights(eig, 0.3, times, y.size), rtol=1e-14)


def test_time_is_in_units_of_the_mean_over_all_target_entries(ref):
    """Twice the classes (y.size doubled) take twice the time to the same point."""
    k, k_td, _ = blocks(ref, "ntk")
    y = ref["y_train"]
    y2 = np.hstack([y, y])
    one, _ = gradient_flow(k, k_td, y, [5.0])
    two, _ = gradient_flow(k, k_td, y2, [10.0])
    np.testing.assert_allclose(two[0][:, :3], one[0], rtol=1e-12)


def test_directions_without_positive_curvature_are_not_learned():
    k = np.diag([2.0, 1.0, 0.0, -1e-14])
    w = flow_weights(eigen(k), 0.0, [3.0, np.inf], 4)
    assert np.all(np.isfinite(w)) and np.array_equal(w[:, :2], np.zeros((2, 2)))
    np.testing.assert_allclose(w[1, 2:], [1.0, 0.5])


def test_a_time_past_the_float_range_is_the_limit_without_a_warning():
    k = np.diag([2.0, 1.0, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = flow_weights(eigen(k), 0.0, [1e308, np.inf], 3)
    np.testing.assert_array_equal(w[0], w[1])


def test_the_suggested_ridge_is_one_the_option_accepts():
    assert suggest_ridge(0) == "1e-06" and suggest_ridge(1e-4) == "0.01"
    assert suggest_ridge(1e11) == "1e+12" and suggest_ridge(1e12) == ""
    assert "no larger ridge is accepted" in not_pd_message("nngp", 1e12, True, 1e12, 3, "x")


@pytest.mark.parametrize("times, message", [
    ([-1], "times=: -1 is not accepted; give numbers >= 0 or inf (e.g. 1,10,inf)"),
    ([float("nan")], "times=: nan is not accepted"),
    (["soon"], "times=: 'soon' is not a number"),
    ([], "times=: no time given"),
])
def test_bad_times_are_named(times, message):
    with pytest.raises(UsageError) as err:
        check_times(times)
    assert message in str(err.value)


@pytest.mark.parametrize("ridge, smallest", [(1e-300, -3e-4), (0.0, -1.85e3), (1e-6, -0.5)])
def test_a_suggested_ridge_followed_makes_the_kernel_positive_definite(ridge, smallest):
    """The suggestion comes from the smallest eigenvalue the Cholesky route measured, not
    from the ridge given (100 x 1e-300 is no ridge at all): following it solves."""
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((30, 30)))
    s = np.linspace(100.0, 300.0, 30)  # a positive trace: a trace-scaled ridge can help
    s[0] = smallest
    k = (u * s) @ u.T
    with pytest.raises(NotPositiveDefiniteError) as err:
        solve_cholesky(k, np.ones((30, 1)), [ridge])
    msg = str(err.value)
    assert f"its smallest eigenvalue is {smallest:.3g}, so use a larger ridges= (e.g. " in msg
    suggested = float(re.search(r"\(e\.g\. ([^)]+)\)$", msg)[1])
    assert suggested > ridge
    solve_cholesky(k, np.ones((30, 1)), [suggested])  # the advice works


def test_a_kernel_no_ridge_can_help_is_said_to_be_invalid():
    k = np.diag([-5.0, 1.0, 1.0])  # trace < 0: every trace-scaled ridge shifts it down
    with pytest.raises(NotPositiveDefiniteError) as err:
        solve_cholesky(k, np.ones((3, 1)), [1e-3])
    assert str(err.value).endswith(
        "its smallest eigenvalue is -5: no accepted ridge (at most 1e+12) makes it "
        "positive definite, so the kernel itself is not a valid one: check it with "
        "`kernelcli verify RUN_DIR`")
