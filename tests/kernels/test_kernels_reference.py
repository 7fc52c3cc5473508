"""An exact numpy reference for the spatial cases the neural-tangents fixtures do not
cover (strides, VALID and CIRCULAR padding, even filters, non-square images, one
channel), and the engine held to it.

The numpy reference (``reference_kernels``) tracks the joint covariance of all
inputs at every position pair, ``K[a, b, h, h', w, w']``, and moves it through
each layer with explicit 0/1 selector matrices (one per filter tap and axis)
instead of the engine's strided slices; per-input variances are read off its
diagonal, so a self pair's ReLU angle is exactly 0 as in the engine.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from test_kernels_properties import KINDS, arch_of, assert_psd, inputs, kernel_fn, rel

from kernelcli.config import (
    ABRelu,
    AvgPool,
    Conv,
    Dense,
    Erf,
    Flatten,
    GlobalAvgPool,
    Identity,
    Relu,
    bind_layers,
)
from kernelcli.run import kernel_matrix

# --- exact numpy reference (ntk parameterization) ---------------------------------------------

def _selectors(size: int, k: int, s: int, padding: str):
    """One (n_out, size) 0/1 matrix per tap: row o picks input o*s + t - low
    (nothing when it falls in zero padding; wrapped around for CIRCULAR)."""
    if padding == "VALID":
        n_out, low = (size - k) // s + 1, 0
    else:  # lax's SAME split; CIRCULAR pads the same amounts, with wrapped values
        n_out = -(-size // s)
        low = max((n_out - 1) * s + k - size, 0) // 2
    mats = []
    for t in range(k):
        m = np.zeros((n_out, size))
        for o in range(n_out):
            i = o * s + t - low
            if padding == "CIRCULAR":
                m[o, i % size] = 1.0
            elif 0 <= i < size:
                m[o, i] = 1.0
        mats.append(m)
    return mats


def _joint_taps(K, axes, mats):
    """Mean over taps of ``S_t K S_t^T`` on a pair of axes (both positions shift together)."""
    a, b = axes
    spec = "abhHwW"
    out_spec = spec.replace(spec[a], "o").replace(spec[b], "p")
    return sum(np.einsum(f"o{spec[a]},p{spec[b]},{spec}->{out_spec}", m, m, K)
               for m in mats) / len(mats)


def _pool_axes(K, axes, mats):
    """Average pooling: ``P K P^T`` with ``P`` the mean selector (positions shift independently)."""
    p = sum(mats) / len(mats)
    a, b = axes
    spec = "abhHwW"
    out_spec = spec.replace(spec[a], "o").replace(spec[b], "p")
    return np.einsum(f"o{spec[a]},p{spec[b]},{spec}->{out_spec}", p, p, K)


def _variances(K):
    """Per-input, per-position variances, broadcastable against ``K``."""
    n = K.shape[0]
    if K.ndim == 2:
        v = np.diagonal(K).copy()
        return v[:, None], v[None, :]
    v = np.einsum("aahhww->ahw", K)
    return (v.reshape(n, 1, K.shape[2], 1, K.shape[4], 1),
            v.reshape(1, n, 1, K.shape[2], 1, K.shape[4]))


def reference_kernels(layers, x: np.ndarray):
    """Exact NNGP and NTK (ntk parameterization) of all pairs of rows of ``x``."""
    x = np.asarray(x, np.float64)
    layers = bind_layers(layers, x.shape[1:])  # one filter/strides entry per (H, W) axis
    if x.ndim == 2:
        K = x @ x.T / x.shape[1]
    else:
        K = np.einsum("ahwc,bHWc->abhHwW", x, x) / x.shape[-1]
    T = np.zeros_like(K)
    for layer in layers:
        if isinstance(layer, (Dense, Conv)):
            if isinstance(layer, Conv):
                for axes, k, s, size in (((2, 3), layer.filter[0], layer.strides[0], K.shape[2]),
                                         ((4, 5), layer.filter[1], layer.strides[1], K.shape[4])):
                    mats = _selectors(size, k, s, layer.padding)
                    K, T = _joint_taps(K, axes, mats), _joint_taps(T, axes, mats)
            b2 = 0.0 if layer.b_std is None else layer.b_std ** 2
            K = layer.W_std ** 2 * K + b2
            T = layer.W_std ** 2 * T + K
        elif isinstance(layer, (Relu, ABRelu)):
            a, b = (0.0, 1.0) if isinstance(layer, Relu) else (layer.a, layer.b)
            v1, v2 = _variances(K)
            sin_part = np.sqrt(np.maximum(v1 * v2 - K * K, 0))
            theta = np.arctan2(sin_part, K)
            f = (a - b) ** 2 / (2 * math.pi)
            kdot = (a * a + b * b) / 2 - f * theta
            K, T = f * sin_part + kdot * K, T * kdot
        elif isinstance(layer, Erf):
            v1, v2 = _variances(K)
            prod = (1 + 2 * v1) * (1 + 2 * v2)
            T = T * (4 / math.pi) / np.sqrt(prod - 4 * K * K)
            K = (2 / math.pi) * np.arcsin(2 * K / np.sqrt(prod))
        elif isinstance(layer, AvgPool):
            for axes, k, s, size in (((2, 3), layer.window[0], layer.strides[0], K.shape[2]),
                                     ((4, 5), layer.window[1], layer.strides[1], K.shape[4])):
                mats = _selectors(size, k, s, layer.padding)
                K, T = _pool_axes(K, axes, mats), _pool_axes(T, axes, mats)
        elif isinstance(layer, GlobalAvgPool):
            K, T = K.mean(axis=(2, 3, 4, 5)), T.mean(axis=(2, 3, 4, 5))
        elif isinstance(layer, Flatten):
            if K.ndim == 6:  # mean over the spatial diagonal
                hw = K.shape[2] * K.shape[4]
                K, T = np.einsum("abhhww->ab", K) / hw, np.einsum("abhhww->ab", T) / hw
        elif isinstance(layer, Identity):
            pass
        else:  # pragma: no cover
            raise TypeError(layer)
    return {"nngp": K, "ntk": T}


# Spatial cases outside the fixtures: strides, VALID / CIRCULAR, even and non-square
# filters, non-square images, one channel; with and without the full covariance.
SPATIAL_CASES = {
    "circular_strided_pool_gap_6x4x1": ((6, 4, 1), (
        "conv: {filter: [3, 2], strides: [2, 1], padding: CIRCULAR, W_std: 1.5, b_std: 0.1}",
        "relu",
        "conv: {filter: [2, 3], padding: CIRCULAR, W_std: 1.4, b_std: 0.0}", "relu",
        "avg_pool: {window: [2, 2], strides: [1, 1], padding: SAME}",
        "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")),
    "circular_flatten_4x6x1": ((4, 6, 1), (
        "conv: {filter: [3, 3], padding: CIRCULAR, W_std: 1.4142135623730951, b_std: 0.2}",
        "relu",
        "conv: {filter: [3, 1], strides: [1, 2], padding: CIRCULAR, W_std: 1.3, b_std: 0.0}",
        "erf", "flatten", "dense: {W_std: 1.0, b_std: 0.1}")),
    "valid_strided_pool_flatten_7x5x2": ((7, 5, 2), (
        "conv: {filter: [3, 3], strides: [2, 1], padding: VALID, W_std: 1.5, b_std: 0.1}",
        "relu",
        "avg_pool: {window: [2, 2], strides: [1, 1], padding: VALID}",
        "conv: {filter: [2, 2], padding: VALID, W_std: 1.2, b_std: 0.0}", "relu",
        "flatten", "dense: {W_std: 1.0, b_std: 0.0}")),
    "same_even_filter_strided_5x6x3": ((5, 6, 3), (
        "conv: {filter: [2, 2], strides: [2, 2], padding: SAME, W_std: 1.5, b_std: 0.1}",
        "erf",
        "conv: {filter: [3, 1], padding: SAME, W_std: 1.4, b_std: 0.0}",
        "leaky_relu: {alpha: 0.1}",
        "avg_pool: {window: [3, 2], strides: [2, 1], padding: SAME}",
        "flatten", "dense: {W_std: 1.0, b_std: 0.0}")),
    "vectors_D7": ((7,), (
        "dense: {W_std: 1.5, b_std: 0.1}", "relu", "dense: {W_std: 1.2, b_std: 0.2}",
        "erf", "dense: {W_std: 1.0, b_std: 0.0}", "abrelu: {a: -0.5, b: 1.5}",
        "dense: {W_std: 1.0, b_std: 0.0}")),
}


# Regression guard: in the full-covariance layout (a pool ahead) the jitted
# ``v1 * v2 - c * c`` used to be contracted into an FMA, leaving the rounding
# residue of ``c * c`` where it must be exactly 0 (a self pair's spatial
# diagonal) and a ReLU angle ~1e-8 there: the NTK diagonal was off ~1e-10..1e-9.
# Found by the diagonal tests below (held to 1e-12); fixed in the engine.
POOLED = {"circular_strided_pool_gap_6x4x1", "valid_strided_pool_flatten_7x5x2",
          "same_even_filter_strided_5x6x3"}


@functools.cache
def spatial_case(case):
    shape, items = SPATIAL_CASES[case]
    arch = arch_of(*items)
    x = inputs(5, shape, seed=1)
    kfn = kernel_fn(arch, shape)
    assert kfn.full_cov == (case in POOLED)
    return reference_kernels(arch.layers, x), kernel_matrix(kfn, x)


@pytest.mark.parametrize("case", sorted(SPATIAL_CASES))
@pytest.mark.slow
def test_spatial_cases_match_exact_numpy_reference(case):
    """Off-diagonal entries (pairs of distinct inputs), NNGP and NTK, float64, 1e-10.
    (Rectangular K(x1, x2) is the same pair evaluation; see the pair-batch tests.)"""
    ref, sym = spatial_case(case)
    off = ~np.eye(5, dtype=bool)
    for kind in KINDS:
        assert ref[kind].shape == (5, 5)
        scale = np.max(np.abs(ref[kind]))
        err = np.max(np.abs(sym[kind] - ref[kind])[off]) / scale
        assert err <= 1e-10, (case, kind, err)
        assert np.array_equal(sym[kind], sym[kind].T)
        assert_psd(sym[kind], f"{case} {kind}")


@pytest.mark.parametrize("case", sorted(SPATIAL_CASES))
def test_spatial_cases_diagonal_matches_exact_numpy_reference(case):
    """Self pairs: both sides have the ReLU angle exactly 0, so the diagonal agrees to 1e-12."""
    ref, sym = spatial_case(case)
    for kind in KINDS:
        err = np.max(np.abs(np.diag(sym[kind]) - np.diag(ref[kind]))) / np.max(np.abs(ref[kind]))
        assert err <= 1e-12, (case, kind, err)


def test_circular_padding_differs_from_zero_padding():
    """Guards the reference comparison above: the padding mode really matters there."""
    shape, items = SPATIAL_CASES["circular_strided_pool_gap_6x4x1"]
    x = inputs(4, shape)
    circ = reference_kernels(arch_of(*items).layers, x)["nngp"]
    same = reference_kernels(arch_of(*(i.replace("CIRCULAR", "SAME") for i in items)).layers, x)
    assert rel(same["nngp"], circ) > 1e-2
