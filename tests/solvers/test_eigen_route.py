"""The eigen route: one eigendecomposition serves every ridge, and gives what one
Cholesky factorisation per ridge gives (coefficients, leave-one-out predictions,
posterior variances, the not-positive-definite refusal); ``auto`` takes the route
the machine's rates price lowest among those that fit."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_predict import psd_kernel

from kernelcli.solvers import (
    Rates,
    cholesky_factor,
    choose_solver,
    eigen,
    eigen_sweep,
    eigen_variances,
    loo_predictions,
    one_hot,
    predictive_variance,
    route_costs,
    solve_with_factor,
)

RIDGES = (0.0, 1e-6, 1e-2, 1.0)


def test_every_ridge_equals_its_own_cholesky_solve():
    # rank 120 < n: the small ridges make an ill-conditioned system, as kernels are
    k, kt, ktt = psd_kernel(200, d=120, seed=4, m=30)
    y = one_hot(np.arange(200) % 3, 3)
    eig = eigen(k)
    sweep = eigen_sweep(eig, y, RIDGES[1:])
    var = eigen_variances(eig, kt, np.diag(ktt), RIDGES[1:])
    for i, ridge in enumerate(RIDGES[1:]):
        chol = cholesky_factor(k, ridge)
        alpha = solve_with_factor(chol, y)
        scale = np.abs(k @ alpha).max()
        # what predictions are made of: K alpha agrees far below 1e-6 of its scale
        assert np.abs(k @ sweep[ridge]["alpha"] - k @ alpha).max() <= 1e-8 * scale
        np.testing.assert_allclose(var[i], predictive_variance(np.diag(ktt), kt, chol),
                                   rtol=1e-7, atol=1e-12)
        held = loo_predictions(chol, alpha, y, overwrite=True)
        np.testing.assert_allclose(sweep[ridge]["held_out"], held, rtol=1e-6, atol=1e-9)


def test_a_ridge_that_leaves_the_kernel_indefinite_is_refused_as_cholesky_does():
    k, _, _ = psd_kernel(50, d=20, seed=1)
    k = k - 0.01 * np.eye(50)  # negative eigenvalues: rank 20 of 50
    eig, y = eigen(k), one_hot(np.arange(50) % 2, 2)
    out = eigen_sweep(eig, y, (0.0, 1.0))
    msg = out[0.0]["error"]
    assert msg.startswith("the kernel kernel plus ridge 0 x trace/n (= 0 on the diagonal) is "
                          "not positive definite (its smallest eigenvalue plus the ridge is "
                          "-0.01 at n=50); its smallest eigenvalue is -0.01, so use a larger "
                          "<<ridges>> (e.g. ")
    assert "alpha" in out[1.0]
    # the advice, followed, works
    suggested = float(re.search(r"\(e\.g\. ([^)]+)\)$", msg)[1])
    assert "alpha" in eigen_sweep(eig, y, (suggested,))[suggested]


RATES = Rates(dense=50e9, stream=100e9)  # multiply-adds per second: a 2-core machine's


@pytest.mark.parametrize("n, ridges, want", [
    (2_000, 5, "cholesky"),    # a handful of ridges: a factorisation each is cheaper
    (2_000, 64, "eigen"),      # a long sweep: one eigendecomposition serves them all
    (20_000, 5, "cg"),         # passes over the stored kernel beat n^3 work
])
def test_auto_takes_the_route_priced_lowest(n, ridges, want):
    costs = {c.route: c for c in route_costs(n, n // 10, 10, ridges, 2, 5, 0, 2**40, RATES)}
    assert min(costs.values(), key=lambda c: c.seconds).route == want
    assert choose_solver(n, "auto", 2**40, n // 10, 10, ridges, 2, 5, rates=RATES) == want
    # what fits decides before what is quicker
    budget = costs[want].bytes - 1
    fitting = [c for c in costs.values() if c.bytes <= budget]
    if fitting:
        assert choose_solver(n, "auto", budget, n // 10, 10, ridges, 2, 5, rates=RATES) == \
            min(fitting, key=lambda c: c.seconds).route
