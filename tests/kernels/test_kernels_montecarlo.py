"""Monte-Carlo oracle, independent of neural-tangents: finite-width random networks.

Each architecture (the same YAML the engine reads) is also run as an actual
network of width ``WIDTH`` in plain JAX, NTK parameterization, built layer by
layer from ``tests/finite_nets.py`` (one finite network per layer type). The
empirical NNGP is the mean over output units and draws of ``f(x1) f(x2)``; it must come within ``MC_TOL`` (of the kernel's max) of our
NNGP. For an fc net the empirical NTK (sum over parameters of gradient outer
products, ``jax.jacobian``) must come within 10% of our NTK.

gelu, erf, abrelu/leaky_relu and layer_norm have no neural-tangents fixture:
this file is their only oracle.

The networks run in float32 with explicit dtypes (64-bit mode may be on, because
the engine enables it for float64 kernels); parameters come from seeded numpy
generators, so every run draws the same networks.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from finite_nets import apply, init_params
from kernelcli.config import Dense, check_architecture, parse_config
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

F32 = jnp.float32
WIDTH = 256          # hidden channels / units
OUT = 512            # readout units: each is one more sample of f(x1) f(x2)
FLAT_OUT = 64        # after flatten the readout has fan_in H*W*WIDTH: fewer units, same cost
MC_TOL = 0.05        # of max |K|
# Networks per estimate. Measured over seeds 0-4 with these settings the NNGP error
# stays below 3.4% of max (2.4% for seed 0, which the tests use); the NTK's below 4%.
DRAWS = 96


def arch_of(*items: str, parameterization: str = "ntk"):
    text = (f"data: {{x1: a.npy}}\narchitecture:\n  parameterization: {parameterization}\n"
            "  layers:\n" + "".join(f"    - {item}\n" for item in items))
    return parse_config(text, base_dir=Path("/cfg")).architecture


def images(n=4, shape=(6, 6, 2), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + shape)
    # correlate the inputs a little so that off-diagonal entries are not ~0
    return (x + 0.7 * rng.standard_normal((1,) + shape)).astype(np.float32)


def empirical_nngp(arch, x: np.ndarray, draws: int, seed: int = 0, width: int = WIDTH,
                   out: int = OUT, shifts: tuple = ()) -> np.ndarray:
    """Mean over ``draws`` networks and ``out`` output units of ``f(x1) f(x2)``.

    ``shifts``: circular shifts of the spatial axes (``np.roll``'s); with some, ``f``
    of an input is the mean of ``f(roll(x, s))`` over them: the kernel of the data
    augmented by those translations (``local_avg_pool``'s).

    Parameters are drawn with numpy (compiling JAX's PRNG would cost more than all
    the draws); the forward pass is compiled once."""
    assert isinstance(arch.layers[-1], Dense), "the oracle wants a dense readout"
    xj = jnp.asarray(x, F32)
    rng = np.random.default_rng(seed)
    axes = tuple(range(1, x.ndim - 1))
    rolled = jnp.asarray(np.concatenate([np.roll(x, s, axis=axes) for s in shifts]), F32) \
        if shifts else None

    @jax.jit
    def gram(params):
        f = apply(arch.layers, xj, params)
        if rolled is None:
            return f @ f.T / f.shape[1]
        g = jnp.mean(apply(arch.layers, rolled, params).reshape(len(shifts), len(x), -1),
                     axis=0)
        return g @ g.T / g.shape[1]

    total = np.zeros((len(x), len(x)))
    for _ in range(draws):
        params, out_shape = init_params(arch.layers, x.shape[1:], rng, width, out)
        assert out_shape == (out,)
        total += np.asarray(gram(params), np.float64)
    return total / draws


_OURS = {}


def our_kernels(arch, x: np.ndarray, kinds=("nngp", "ntk")):
    """Our float64 kernels (memoised: a test may ask twice for the same network)."""
    key = (arch, tuple(kinds), x.shape, x.tobytes())
    if key not in _OURS:
        check_architecture(arch, x.shape[1:])
        kfn = build_kernel_fn(arch, x.shape[1:], kinds, "float64")
        _OURS[key] = kernel_matrix(kfn, np.float64(x))
    return _OURS[key]


def assert_mc_close(arch, x, draws: int, tol: float = MC_TOL, seed: int = 0, out: int = OUT):
    ours = our_kernels(arch, x, ("nngp",))["nngp"]
    emp = empirical_nngp(arch, x, draws, seed, out=out)
    err = np.max(np.abs(emp - ours)) / np.max(np.abs(ours))
    assert err <= tol, (f"empirical NNGP off by {err:.3%} of max (tol {tol:.0%})\n"
                        f"ours:\n{ours}\nempirical:\n{emp}")
    return err


# --- NNGP: conv / fc / residual ----------------------------------------------------------------

SQ2 = 1.4142135623730951


def test_conv_relu_global_avg_pool_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.1}}",
                   "relu",
                   f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.1}}",
                   "relu", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(), draws=DRAWS)


def test_conv_relu_flatten_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.0}}",
                   "relu",
                   f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.0}}",
                   "relu", "flatten", "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(), draws=DRAWS, out=FLAT_OUT)


def test_fc_relu_nngp_matches_finite_width_networks():
    arch = arch_of("flatten", f"dense: {{W_std: {SQ2}, b_std: 0.1}}", "relu",
                   f"dense: {{W_std: {SQ2}, b_std: 0.1}}", "relu",
                   f"dense: {{W_std: {SQ2}, b_std: 0.1}}")
    assert_mc_close(arch, images(), draws=4 * DRAWS, out=128)


def test_residual_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.0}}",
                   "residual: [relu, {conv: {W_std: 1.4142135623730951, b_std: 0.0}}, relu, "
                   "{dense: {W_std: 1.0, b_std: 0.0}}]",
                   "relu", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(), draws=DRAWS)


def test_strided_circular_conv_and_avg_pool_nngp_match_finite_width_networks():
    """CIRCULAR padding, strides, a non-square image and one input channel."""
    arch = arch_of("conv: {filter: [3, 2], strides: [2, 1], padding: CIRCULAR, W_std: 1.5, "
                   "b_std: 0.1}", "relu",
                   "conv: {filter: [2, 3], padding: CIRCULAR, W_std: 1.4, b_std: 0.0}", "relu",
                   "avg_pool: {window: [2, 2], strides: [1, 1], padding: SAME}",
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(6, 4, 1)), draws=DRAWS)


# --- NNGP: activations and layer_norm without a neural-tangents fixture -----------------------

@pytest.mark.parametrize("act", ["gelu", "erf", "abrelu: {a: -0.4, b: 1.3}",
                                 "leaky_relu: {alpha: 0.2}"])
def test_activation_nngp_matches_finite_width_networks(act):
    # the second activation sees a covariance already shaped by the first (a per-pixel
    # dense layer between them keeps the draws cheap)
    arch = arch_of("conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.2}", act,
                   "dense: {W_std: 1.5, b_std: 0.2}", act,
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(), draws=DRAWS)


def _assert_layer_norm_matters(items, x):
    """The MC tolerance can see layer_norm: dropping it moves the kernel by > 2 MC_TOL."""
    with_ln = our_kernels(arch_of(*items), x, ("nngp",))["nngp"]
    without = our_kernels(arch_of(*[i for i in items if i != "layer_norm"]), x, ("nngp",))["nngp"]
    gap = np.max(np.abs(with_ln - without)) / np.max(np.abs(with_ln))
    assert gap > 2 * MC_TOL, f"layer_norm changes the kernel by only {gap:.2%}"


@pytest.mark.slow
def test_layer_norm_before_global_avg_pool_nngp_matches_finite_width_networks():
    # layer_norm on an image normalises over channels at each pixel (full spatial
    # covariance here, since a pool lies ahead); erf keeps the pooled kernel from
    # being dominated by a constant mean. Inputs are scaled up so normalising matters.
    items = ("conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.3}", "layer_norm",
             "erf", "conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.0}",
             "layer_norm", "erf", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    x = 3.0 * images()
    _assert_layer_norm_matters(items, x)
    assert_mc_close(arch_of(*items), x, draws=DRAWS)


@pytest.mark.slow
def test_layer_norm_before_flatten_nngp_matches_finite_width_networks():
    items = ("conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.3}", "layer_norm",
             "relu", "conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.3}",
             "layer_norm", "gelu", "flatten", "dense: {W_std: 1.0, b_std: 0.0}")
    x = 3.0 * images()
    # (dropping layer_norm here changes the kernel ~20-fold: no guard needed)
    assert_mc_close(arch_of(*items), x, draws=DRAWS, out=FLAT_OUT)


def test_fc_layer_norm_on_vectors_matches_finite_width_networks():
    """Rank-2 inputs (N, D): layer_norm over the units of a dense layer."""
    items = ("dense: {W_std: 2.0, b_std: 0.5}", "layer_norm", "erf",
             "dense: {W_std: 1.5, b_std: 0.1}")
    x = images(n=4, shape=(10,), seed=3) * 2.0
    _assert_layer_norm_matters(items, x)
    assert_mc_close(arch_of(*items), x, draws=2 * DRAWS)


# --- NTK -------------------------------------------------------------------------------------

def empirical_ntk(arch, x: np.ndarray, draws: int, width: int, seed: int = 0) -> np.ndarray:
    """Mean over draws of ``sum_params J(x1) J(x2)^T`` for a one-output network."""
    xj = jnp.asarray(x, F32)
    rng = np.random.default_rng(seed)

    def f(params):
        return apply(arch.layers, xj, params)[:, 0]

    @jax.jit
    def ntk(params):
        jac = jax.jacobian(f)(params)     # leaves: (N, *param shape)
        flat = [j.reshape(len(xj), -1) for j in jax.tree_util.tree_leaves(jac)]
        return sum(j @ j.T for j in flat)

    total = np.zeros((len(x), len(x)))
    for _ in range(draws):
        params, _ = init_params(arch.layers, x.shape[1:], rng, width, 1)
        total += np.asarray(ntk(params), np.float64)
    return total / draws


def test_fc_ntk_matches_empirical_ntk():
    arch = arch_of("flatten", f"dense: {{W_std: {SQ2}, b_std: 0.1}}", "relu",
                   f"dense: {{W_std: {SQ2}, b_std: 0.1}}", "relu",
                   "dense: {W_std: 1.0, b_std: 0.2}")
    x = images()
    ours = our_kernels(arch, x)["ntk"]
    emp = empirical_ntk(arch, x, draws=64, width=512)
    err = np.max(np.abs(emp - ours)) / np.max(np.abs(ours))
    assert err <= 0.10, f"empirical NTK off by {err:.2%} of max\nours:\n{ours}\nemp:\n{emp}"
