"""The elementwise nonlinearities (sin/cos, erf(a, b, c), sigmoid_like, rbf, exp,
gaussian, monomial, rectified_monomial, sign, abs, hermite) against oracles that do
not come from neural-tangents.

Their neural-tangents fixtures (``tests/fixtures/elem_*``, made by
``make_elementwise.py``) are checked by ``test_kernels_fixtures.py``. Here:

* each map on single covariance entries against the expectation it stands for,
  ``E[f(u) f(w)]`` (NNGP) and ``E[f'(u) f'(w)]`` (``Kdot``) for ``(u, w)`` Gaussian:
  by 2-D Gauss-Hermite quadrature for the smooth functions (exact for polynomials),
  by Monte Carlo for the kinked ones (sign, abs, rectified_monomial);
* ``rectified_monomial``: it has no neural-tangents reference on the diagonal (there
  neural-tangents' kernel is NaN, autodiff of the arc-cosine form at angle 0), so its
  closed form (Cho and Saul's arc-cosine kernel through a recurrence) is checked
  against relu (degree 1), the step function (degree 0), the exact self-kernel
  ``(2n-1)!! v**n / 2`` and Monte Carlo, on self pairs too; its fixtures are
  rectangular (only entries between different inputs);
* whole networks against finite-width random networks (``finite_nets.py``), and the
  order of float32 against float64 at the edges: large variances, ``gaussian`` with
  ``b > 0`` close to where it diverges, and past it (``+inf``, never NaN).

This file runs with ``jax_debug_nans`` on (conftest): no formula may produce a NaN,
even in a branch a ``where`` discards.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from scipy.special import erf as sp_erf
from test_kernels_montecarlo import (
    DRAWS,
    FLAT_OUT,
    MC_TOL,
    arch_of,
    assert_mc_close,
    images,
    our_kernels,
)

from kernelcli.config import parse_architecture

# each elementwise map on its own, against its closed form or quadrature
from kernelcli.kernels._maps import kernel_map
from kernelcli.kernels._nonlinear import erf as plain_erf
from kernelcli.kernels._state import State

# (variance 1, variance 2, covariance): positive, negative, small and self pairs
PAIRS = np.array([[0.8, 1.3, 0.6], [1.1, 0.7, -0.5], [0.5, 0.9, 0.05], [1.2, 1.2, 1.2],
                  [0.6, 0.6, 0.6]])


def layer_of(item):
    return parse_architecture({"layers": ["dense", yaml.safe_load(item), "dense"]}).layers[1]


def apply_map(item, pairs=PAIRS, dtype="float64"):
    """The layer's map on entries ``(v1, v2, c)``, with an incoming NTK of 1: returns
    ``(nngp, Kdot)`` as float64 numpy."""
    layer = layer_of(item)
    with jax.enable_x64(dtype == "float64"):
        a = jnp.asarray(pairs, dtype)
        state = State(nngp=a[:, 2], ntk=jnp.ones_like(a[:, 2]), full=False, spatial=False,
                      channels=1)
        f = kernel_map(layer).pointwise(layer, dtype == "float64")
        out = f(state, a[:, 0], a[:, 1])
        return np.asarray(out.nngp, np.float64), np.asarray(out.ntk, np.float64)


# --- the functions and their derivatives, in numpy float64 -------------------------

def hermite_poly(n):
    coeffs = np.polynomial.hermite_e.herme2poly([0] * n + [1]) / math.sqrt(math.factorial(n))
    return (np.polynomial.Polynomial(coeffs), np.polynomial.Polynomial(coeffs).deriv())


SMOOTH = {
    "sin: {a: 1.2, b: 0.8, c: 0.3}": (lambda x: 1.2 * np.sin(0.8 * x + 0.3),
                                      lambda x: 0.96 * np.cos(0.8 * x + 0.3)),
    "cos: {a: 0.9, b: 1.1, c: -0.2}": (lambda x: 0.9 * np.cos(1.1 * x - 0.2),
                                       lambda x: -0.99 * np.sin(1.1 * x - 0.2)),
    "erf: {a: 1.5, b: 0.7, c: 0.2}": (lambda x: 1.5 * sp_erf(0.7 * x) + 0.2,
                                      lambda x: 1.05 * 2 / math.sqrt(math.pi)
                                      * np.exp(-0.49 * x * x)),
    "sigmoid_like": (lambda x: 0.5 * sp_erf(x / 2.4020563531719796) + 0.5,
                     lambda x: 0.5 / 2.4020563531719796 * 2 / math.sqrt(math.pi)
                     * np.exp(-(x / 2.4020563531719796) ** 2)),
    "rbf: {gamma: 0.7}": (lambda x: math.sqrt(2) * np.sin(math.sqrt(1.4) * x + math.pi / 4),
                          lambda x: math.sqrt(2.8) * np.cos(math.sqrt(1.4) * x + math.pi / 4)),
    "exp: {a: 0.8, b: 0.6}": (lambda x: 0.8 * np.exp(0.6 * x),
                              lambda x: 0.48 * np.exp(0.6 * x)),
    "gaussian": (lambda x: np.exp(-x * x), lambda x: -2 * x * np.exp(-x * x)),
    "gaussian: {a: 1.3, b: 0.15}": (lambda x: 1.3 * np.exp(0.15 * x * x),
                                    lambda x: 0.39 * x * np.exp(0.15 * x * x)),
    **{f"monomial: {{degree: {n}}}": (lambda x, n=n: x ** n,
                                      lambda x, n=n: n * x ** max(n - 1, 0))
       for n in range(6)},
}
for _n in range(5):
    SMOOTH[f"hermite: {{degree: {_n}}}"] = hermite_poly(_n)

KINKED = {
    "sign": (np.sign, lambda x: 0 * x),
    "abs": (np.abs, np.sign),
    **{f"rectified_monomial: {{degree: {n}}}": (
        lambda x, n=n: np.where(x >= 0, np.maximum(x, 0) ** n, 0.0),
        lambda x, n=n: n * np.where(x >= 0, np.maximum(x, 0) ** max(n - 1, 0), 0.0))
       for n in range(6)},
}


def _pair_samples(v1, v2, c, z1, z2):
    """``(u, w)`` with variances ``v1``, ``v2`` and covariance ``c`` from standard ``z``."""
    u = math.sqrt(v1) * z1
    rho = c / math.sqrt(v1 * v2)
    w = math.sqrt(v2) * (rho * z1 + math.sqrt(max(1 - rho * rho, 0.0)) * z2)
    return u, w


def quadrature(f, pairs, nodes=100):
    """``E[f(u) f(w)]`` by a tensor Gauss-Hermite rule (probabilists')."""
    x, wts = np.polynomial.hermite_e.hermegauss(nodes)
    wts = wts / wts.sum()
    z1, z2 = np.meshgrid(x, x, indexing="ij")
    weight = np.outer(wts, wts)
    return np.array([np.sum(weight * f(u) * f(w))
                     for u, w in (_pair_samples(*p, z1, z2) for p in pairs)])


def monte_carlo(f, pairs, n=2_000_000, seed=0):
    rng = np.random.default_rng(seed)
    z1, z2 = rng.standard_normal((2, n))
    return np.array([np.mean(f(u) * f(w)) for u, w in (_pair_samples(*p, z1, z2)
                                                        for p in pairs)])


def hermite_pairs():
    """Unit variances: hermite's kernel assumes them (it follows layer_norm)."""
    return np.array([[1.0, 1.0, 0.6], [1.0, 1.0, -0.45], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


@pytest.mark.parametrize("item", list(SMOOTH))
def test_smooth_maps_are_the_expectations_they_stand_for(item):
    f, df = SMOOTH[item]
    pairs = hermite_pairs() if item.startswith("hermite") else PAIRS
    nngp, kdot = apply_map(item, pairs)
    want, want_dot = quadrature(f, pairs), quadrature(df, pairs)
    np.testing.assert_allclose(nngp, want, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(kdot, want_dot, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("item", list(KINKED))
def test_kinked_maps_match_monte_carlo(item):
    f, df = KINKED[item]
    nngp, kdot = apply_map(item)
    for got, want in ((nngp, monte_carlo(f, PAIRS)), (kdot, monte_carlo(df, PAIRS))):
        scale = max(np.max(np.abs(want)), 1e-3)
        assert np.max(np.abs(got - want)) / scale < 1e-2, (item, got, want)


# --- rectified_monomial: closed form ------------------------------------------------

def _double_factorial(n):
    return math.prod(range(n, 0, -2))


def test_rectified_monomial_of_degree_1_is_relu_and_of_degree_0_the_step():
    relu, relu_dot = apply_map("relu")
    one, one_dot = apply_map("rectified_monomial: {degree: 1}")
    np.testing.assert_allclose(one, relu, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(one_dot, relu_dot, rtol=1e-14, atol=1e-15)
    zero, zero_dot = apply_map("rectified_monomial: {degree: 0}")
    theta = np.arccos(np.clip(PAIRS[:, 2] / np.sqrt(PAIRS[:, 0] * PAIRS[:, 1]), -1, 1))
    np.testing.assert_allclose(zero, (math.pi - theta) / (2 * math.pi), rtol=1e-14)
    assert np.all(zero_dot == 0)   # the step function's derivative is 0 almost everywhere


@pytest.mark.parametrize("n", range(6))
def test_rectified_monomial_self_pairs_are_exact(n):
    """``E[max(u, 0)**(2n)] = (2n-1)!! v**n / 2``; ``Kdot = n**2`` times that of ``n-1``,
    exact where neural-tangents is NaN."""
    v = np.array([0.3, 1.0, 2.5])
    nngp, kdot = apply_map(f"rectified_monomial: {{degree: {n}}}", np.stack([v, v, v], 1))
    np.testing.assert_allclose(nngp, _double_factorial(2 * n - 1) * v ** n / 2, rtol=1e-14)
    want_dot = 0 * v if n == 0 else n * n * _double_factorial(2 * n - 3) * v ** (n - 1) / 2
    np.testing.assert_allclose(kdot, want_dot, rtol=1e-14)


def test_relu_network_equals_rectified_monomial_of_degree_1():
    """Through pooling (the fused conv + nonlinearity rows and the per-input pass)."""
    conv = "conv: {filter: [3, 3], padding: SAME, W_std: 1.4, b_std: 0.1}"
    x = images(n=3, shape=(5, 5, 2))
    relu = our_kernels(arch_of(conv, "relu", conv, "relu", "global_avg_pool", "dense"), x)
    rect = our_kernels(arch_of(conv, "rectified_monomial: {degree: 1}", conv,
                               "rectified_monomial: {degree: 1}", "global_avg_pool", "dense"), x)
    for kind in ("nngp", "ntk"):
        np.testing.assert_allclose(rect[kind], relu[kind], rtol=1e-12)


# --- edges: large arguments and divergence, float32 against float64 ---------------

EDGES = [
    ("exp: {a: 1.0, b: 1.2}", [[16.0, 17.0, 15.0], [20.0, 20.0, 20.0], [18.0, 5.0, -3.0]]),
    ("gaussian", [[200.0, 150.0, 170.0], [300.0, 300.0, 300.0], [1e4, 1e4, 9.99e3]]),
    # 4 b v = 0.9 and 0.99 on the self pairs: near divergence
    ("gaussian: {a: 1.0, b: 0.25}", [[0.9, 0.9, 0.9], [0.99, 0.99, 0.99], [0.9, 0.5, 0.6]]),
    ("rbf: {gamma: 2.0}", [[300.0, 310.0, 304.0], [500.0, 500.0, 500.0]]),
    ("sin: {a: 1.0, b: 3.0, c: 0.5}", [[40.0, 42.0, 40.5], [40.0, 40.0, 40.0]]),
    ("monomial: {degree: 5}", [[1e3, 2e3, 1.2e3], [5e3, 5e3, -5e3], [1e3, 1e3, 1e3]]),
    ("rectified_monomial: {degree: 5}", [[1e3, 2e3, 1.2e3], [1e3, 1e3, 1e3],
                                         [1e3, 2e3, -1.4e3]]),
    ("hermite: {degree: 10}", [[1.0, 1.0, 0.999], [1.0, 1.0, -1.0], [1.0, 1.0, 1.0]]),
]


@pytest.mark.parametrize("item, pairs", EDGES, ids=[e[0] for e in EDGES])
def test_float32_stays_within_1e_4_of_float64_at_the_edges(item, pairs):
    pairs = np.array(pairs)
    for got, want in zip(apply_map(item, pairs, "float32"), apply_map(item, pairs)):
        assert np.all(np.isfinite(got))
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err < 1e-4, (item, got, want)


def test_gaussian_with_positive_b_is_infinite_where_it_diverges_never_nan():
    """``E[exp(b u**2) exp(b w**2)]`` is finite only while ``I - 2b Sigma`` is positive
    definite: a self pair's variance below ``1/(4b)`` (here 1)."""
    pairs = np.array([[0.99, 0.99, 0.99], [1.0, 1.0, 1.0], [1.5, 1.5, 1.5],
                      [0.9, 1.6, 0.2],      # off-diagonal, finite: det > 0
                      [0.9, 1.6, 1.1],      # off-diagonal, diverges: det < 0
                      [3.0, 0.1, 0.0]])     # 1 - 2b v1 < 0
    for dtype in ("float64", "float32"):
        nngp, kdot = apply_map("gaussian: {a: 1.0, b: 0.25}", pairs, dtype)
        assert np.all(np.isfinite(nngp[[0, 3]])) and np.all(np.isfinite(kdot[[0, 3]]))
        assert np.all(nngp[[1, 2, 4, 5]] == np.inf) and np.all(kdot[[1, 2, 4, 5]] == np.inf)
    assert nngp[0] == pytest.approx(1 / math.sqrt(1 - 0.99), rel=1e-5)


def test_sign_self_pairs_are_exactly_1_and_a_zero_variance_gives_0():
    pairs = np.array([[0.7, 0.7, 0.7], [2.0, 2.0, 2.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    for dtype in ("float64", "float32"):
        nngp, kdot = apply_map("sign", pairs, dtype)
        assert list(nngp) == [1.0, 1.0, 0.0, 0.0] and np.all(kdot == 0)


def test_bare_erf_keeps_its_map():
    """``erf`` without parameters runs the map it always had (bit-identical programs);
    ``erf: {a: 1, b: 1, c: 0}`` is the same layer."""
    layer = layer_of("erf")
    assert layer == layer_of("erf: {a: 1, b: 1.0, c: 0}")
    with jax.enable_x64(True):
        a = jnp.asarray(PAIRS)
        state = State(nngp=a[:, 2], ntk=jnp.ones_like(a[:, 2]), full=False, spatial=False,
                      channels=1)
        got = kernel_map(layer).pointwise(layer, True)(state, a[:, 0], a[:, 1])
        want = plain_erf(state, a[:, 0], a[:, 1], True)
        assert np.array_equal(got.nngp, want.nngp) and np.array_equal(got.ntk, want.ntk)
    scaled, _ = apply_map("erf: {a: 1.0, b: 2.0, c: 0.0}")
    np.testing.assert_allclose(scaled, apply_map("erf", PAIRS * 4)[0], rtol=1e-14)


# --- finite-width networks ---------------------------------------------------------

# (rectified_monomial of degree 2 is checked on conv networks below: two of them in a
# row on vectors leave a finite-width bias near the tolerance)
FC_ITEMS = ["sin: {a: 1.2, b: 0.8, c: 0.3}", "cos: {a: 0.9, b: 1.1, c: -0.2}",
            "erf: {a: 1.5, b: 0.7, c: 0.2}", "sigmoid_like", "rbf: {gamma: 0.5}",
            "exp: {a: 0.8, b: 0.6}", "gaussian", "gaussian: {a: 1.0, b: 0.05}",
            "monomial: {degree: 2}", "rectified_monomial: {degree: 0}", "sign", "abs"]


@pytest.mark.parametrize("act", FC_ITEMS)
def test_fc_nngp_matches_finite_width_networks(act):
    arch = arch_of("dense: {W_std: 1.2, b_std: 0.2}", act, "dense: {W_std: 1.0, b_std: 0.1}",
                   act, "dense: {W_std: 1.0, b_std: 0.1}")
    # inputs of variance ~1: exp's and gaussian's heavy tails keep a finite-variance
    # estimate only for moderate variances (gaussian with b > 0: below 1/(8b))
    x = images(n=4, shape=(10,), seed=3) * 0.6
    assert_mc_close(arch, x, draws=2 * DRAWS, out=128)


def test_hermite_after_layer_norm_matches_finite_width_networks():
    arch = arch_of("dense: {W_std: 2.0, b_std: 0.5}", "layer_norm", "hermite: {degree: 3}",
                   "dense: {W_std: 1.5, b_std: 0.1}", "layer_norm", "identity",
                   "hermite: {degree: 2}", "dense: {W_std: 1.0, b_std: 0.1}")
    x = images(n=4, shape=(10,), seed=3) * 2.0
    assert_mc_close(arch, x, draws=2 * DRAWS, out=128)


@pytest.mark.parametrize("act", ["rectified_monomial: {degree: 2}",
                                 "rectified_monomial: {degree: 0}"])
def test_conv_rectified_monomial_pooled_matches_finite_width_networks(act):
    """The full covariance, self pairs included (where neural-tangents is NaN)."""
    arch = arch_of("conv: {filter: [3, 3], padding: SAME, W_std: 1.4, b_std: 0.2}", act,
                   "conv: {filter: [3, 3], padding: SAME, W_std: 1.0, b_std: 0.2}", act,
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(), draws=DRAWS)


def test_conv_rectified_monomial_flatten_matches_finite_width_networks():
    arch = arch_of("conv: {filter: [3, 3], padding: SAME, W_std: 1.4, b_std: 0.2}",
                   "rectified_monomial: {degree: 2}", "flatten",
                   "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(), draws=DRAWS, out=FLAT_OUT, tol=MC_TOL)


# --- routes --------------------------------------------------------------------------

@pytest.mark.parametrize("act", ["rectified_monomial: {degree: 2}", "sign",
                                 "gaussian: {a: 1.0, b: 0.1}"])
@pytest.mark.slow
def test_a_run_of_identical_blocks_as_one_loop_equals_the_blocks_one_by_one(act, monkeypatch):
    """Pooled (full covariance: the fused conv + nonlinearity rows, and the per-input
    pass that writes the variances over the diagonal), pairs and self-kernels."""
    from kernelcli.config import check_architecture
    from kernelcli.kernels import _compose, build_kernel_fn
    from kernelcli.run import kernel_matrix

    shape = (4, 4, 1)
    arch = arch_of(*["conv: {filter: [3, 3], W_std: 1.1, b_std: 0.1}", act] * 3,
                   "global_avg_pool", "dense: {W_std: 1.0}")
    check_architecture(arch, shape)
    x1, x2 = images(n=3, shape=shape, seed=1), images(n=2, shape=shape, seed=2)

    def both():
        k = build_kernel_fn(arch, shape, ("nngp", "ntk"), "float64")
        return kernel_matrix(k, x1, x2), k.stats(x1).diag

    looped, looped_diag = both()
    monkeypatch.setattr(_compose, "repeats", lambda layers, k, state: 0)
    unrolled, unrolled_diag = both()
    for kind in ("nngp", "ntk"):
        np.testing.assert_allclose(looped[kind], unrolled[kind], rtol=1e-13)
        np.testing.assert_allclose(looped_diag[kind], unrolled_diag[kind], rtol=1e-13)
        assert np.all(np.isfinite(looped_diag[kind])) and np.all(looped_diag[kind] > 0)
