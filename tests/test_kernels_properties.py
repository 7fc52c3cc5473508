"""Structural properties of the kernel engine, and an exact numpy reference for the
spatial cases the neural-tangents fixtures do not cover (strides, VALID and
CIRCULAR padding, even filters, non-square images, one channel, vector inputs).

The numpy reference (``reference_kernels``) tracks the joint covariance of all
inputs at every position pair, ``K[a, b, h, h', w, w']``, and moves it through
each layer with explicit 0/1 selector matrices (one per filter tap and axis)
instead of the engine's strided slices; per-input variances are read off its
diagonal, so a self pair's ReLU angle is exactly 0 as in the engine.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kernelcli.errors import ConfigError
from kernelcli.kernels import build_kernel_fn
from kernelcli.spec import (ABRelu, AvgPool, Conv, Dense, Erf, Flatten, GlobalAvgPool, Identity,
                            Relu, bind_layers, check_architecture, parse_config)
from kernelcli.run import kernel_matrix

KINDS = ("nngp", "ntk")
SQ2 = 1.4142135623730951
FEW = settings(max_examples=4, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def arch_of(*items: str, parameterization: str = "ntk"):
    text = (f"data: {{x1: a.npy}}\narchitecture:\n  parameterization: {parameterization}\n"
            "  layers:\n" + "".join(f"    - {item}\n" for item in items))
    return parse_config(text, base_dir=Path("/cfg")).architecture


def inputs(n, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n,) + tuple(shape)) + 0.5 * rng.standard_normal(tuple(shape))


def kernel_fn(arch, shape, kinds=KINDS, dtype="float64"):
    check_architecture(arch, tuple(shape))
    return build_kernel_fn(arch, tuple(shape), kinds, dtype)


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def assert_psd(k, label=""):
    eig = np.linalg.eigvalsh(np.asarray(k, np.float64))
    scale = np.max(np.abs(eig))
    assert eig.min() >= -1e-8 * scale, f"{label}: min eig {eig.min():.3e} vs max {scale:.3e}"


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


@functools.lru_cache(maxsize=None)
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


# --- pair batches ---------------------------------------------------------------------------

PAIR_NETS = {
    # a pool ahead: full spatial covariance
    "gap": ((5, 5, 2), ("conv: {filter: [3, 3], padding: SAME, W_std: 1.4, b_std: 0.1}", "relu",
                        "avg_pool", "dense: {W_std: 1.4, b_std: 0.0}", "gelu",
                        "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.1}")),
    # no pool: spatial diagonal only
    "flatten": ((5, 4, 3), ("conv: {filter: [3, 3], strides: [2, 1], W_std: 1.4, b_std: 0.1}",
                            "relu", "conv: {W_std: 1.4, b_std: 0.0}", "erf", "flatten",
                            "dense: {W_std: 1.0, b_std: 0.1}")),
    # flatten first: the engine's Gram-matrix path
    "flat_input": ((4, 3, 2), ("flatten", "dense: {W_std: 1.5, b_std: 0.1}", "relu",
                               "dense: {W_std: 1.2, b_std: 0.0}", "erf",
                               "dense: {W_std: 1.0, b_std: 0.1}")),
}


# a pooling net with the engine's pair chunk forced to its minimum (8x8 images: 4096
# float64 covariance entries per pair), so that the pair batches and the per-input
# pass split into several chunks, with a remainder
PAIR_NETS["gap_chunked"] = ((8, 8, 1), PAIR_NETS["gap"][1])
CHUNK_BYTES = {"gap_chunked": 1}


@functools.lru_cache(maxsize=None)
def pair_net(name):
    shape, items = PAIR_NETS[name]
    if name in CHUNK_BYTES:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KERNELCLI_CHUNK_BYTES", str(CHUNK_BYTES[name]))
            kfn = kernel_fn(arch_of(*items), shape)
        assert kfn.chunk <= 4, f"chunk {kfn.chunk}: too large to split these batches"
    else:
        kfn = kernel_fn(arch_of(*items), shape)
    x1, x2 = inputs(6, shape, seed=2), inputs(5, shape, seed=3)
    return kfn, x1, x2, kernel_matrix(kfn, x1, x2), kfn.stats(x1), kfn.stats(x2)


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
@settings(FEW, max_examples=3)
@given(pairs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), min_size=1, max_size=12),
       pair_batch=st.integers(1, 7))
@pytest.mark.slow
def test_pair_batches_equal_full_rectangle(name, pairs, pair_batch):
    kfn, x1, x2, full, s1, s2 = pair_net(name)
    i = np.array([p[0] for p in pairs], np.int32)
    j = np.array([p[1] for p in pairs], np.int32)
    got = kfn.pair_values(x1, s1, x2, s2, i, j, pair_batch)
    for kind in KINDS:
        assert got[kind].shape == (len(pairs),)
        assert rel(got[kind], full[kind][i, j]) <= 1e-12, kind


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
def test_pairs_call_returns_one_value_per_pair(name):
    kfn, x1, x2, full, s1, s2 = pair_net(name)
    i = np.array([5, 0, 3, 3], np.int32)
    j = np.array([4, 0, 1, 1], np.int32)
    got = kfn.pairs(x1, s1, x2, s2, i, j)
    for kind in KINDS:
        assert got[kind].shape == (4,) and got[kind].dtype == np.float64
        assert rel(np.asarray(got[kind]), full[kind][i, j]) <= 1e-12, kind


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
@pytest.mark.slow
def test_symmetric_matrix_equals_rectangular_matrix_of_the_same_inputs(name):
    """The diagonal comes from ``stats`` (self pass), the rest from ``pairs``.

    Off the diagonal the two agree to 1e-12. On it, ``matrix(x1, copy of x1)``
    pairs each input with an identical copy through ``pairs``, whose covariance
    and the ``stats`` variances are the same number rounded by two different
    programs: the ReLU angle there is ~sqrt(eps) ~ 1e-8 instead of 0, and the NTK
    (not the NNGP) moves by ~1e-10..1e-8 -- the same effect the fixtures see in
    neural-tangents' diagonal, so it gets the same 3e-8 (inherent to computing an
    angle near 0 from rounded inputs, not an engine bug).
    """
    kfn, x1, _, _, _, _ = pair_net(name)
    sym = kernel_matrix(kfn, x1)
    rect = kernel_matrix(kfn, x1, x1.copy())
    off = ~np.eye(len(x1), dtype=bool)
    for kind in KINDS:
        scale = np.max(np.abs(sym[kind]))
        assert np.max(np.abs(sym[kind] - rect[kind])[off]) / scale <= 1e-12, kind
        tol = 1e-12 if kind == "nngp" else 3e-8
        assert np.max(np.abs(np.diag(sym[kind]) - np.diag(rect[kind]))) / scale <= tol, kind


# --- equivalent networks ----------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def full_and_diagonal_paths():
    """A 1x1 average pool (stride 1) is the identity, but it forces the engine to
    carry the full spatial covariance up to it; the kernels must not change.
    One network with SAME, VALID and CIRCULAR convolutions, strides, even filters."""
    body = ("conv: {filter: [3, 2], strides: [1, 2], padding: SAME, W_std: 1.5, b_std: 0.1}",
            "relu",
            "conv: {filter: [2, 3], padding: VALID, W_std: 1.4, b_std: 0.0}", "erf",
            "conv: {filter: [3, 3], strides: [2, 1], padding: CIRCULAR, W_std: 1.4, b_std: 0.1}",
            "leaky_relu: {alpha: 0.1}")
    head = ("flatten", "dense: {W_std: 1.0, b_std: 0.1}")
    shape = (7, 9, 2)
    x = inputs(4, shape)
    diag = kernel_fn(arch_of(*body, *head), shape)
    full = kernel_fn(arch_of(*body, "avg_pool: {window: [1, 1], strides: [1, 1]}", *head), shape)
    assert not diag.full_cov and full.full_cov
    return kernel_matrix(diag, x), kernel_matrix(full, x)


@pytest.mark.slow
def test_full_covariance_path_equals_diagonal_path():
    """Off-diagonal entries (NNGP and NTK) and the NNGP diagonal, to 1e-12."""
    a, b = full_and_diagonal_paths()
    off = ~np.eye(4, dtype=bool)
    for kind in KINDS:
        assert rel(b[kind][off], a[kind][off]) <= 1e-12, kind
    assert rel(b["nngp"], a["nngp"]) <= 1e-12


@pytest.mark.slow
def test_full_covariance_path_equals_diagonal_path_on_the_ntk_diagonal():
    """The NTK diagonal, to 1e-12: where the FMA regression showed (see the note above
    ``test_spatial_cases_diagonal_matches_exact_numpy_reference``)."""
    a, b = full_and_diagonal_paths()
    assert rel(np.diag(b["ntk"]), np.diag(a["ntk"])) <= 1e-12


@pytest.mark.parametrize("parameterization", ["ntk", "standard"])
def test_flatten_first_equals_dense_network_on_flattened_vectors(parameterization):
    shape = (3, 4, 2)
    layers = ("dense: {W_std: 1.5, b_std: 0.1, width: 3}", "relu",
              "dense: {W_std: 1.2, b_std: 0.2, width: 2}", "gelu",
              "dense: {W_std: 1.0, b_std: null}")
    x = inputs(5, shape)
    img = kernel_fn(arch_of("flatten", *layers, parameterization=parameterization), shape)
    vec = kernel_fn(arch_of(*layers, parameterization=parameterization), (24,))
    a, b = kernel_matrix(img, x), kernel_matrix(vec, x.reshape(5, -1))
    for kind in KINDS:
        assert rel(a[kind], b[kind]) <= 1e-12, kind


@pytest.mark.parametrize("name", sorted(set(PAIR_NETS) - set(CHUNK_BYTES)))
def test_nngp_alone_equals_nngp_of_both_kinds(name):
    both_fn, x1, x2, both, _, _ = pair_net(name)
    shape, items = PAIR_NETS[name]
    text = ("data: {x1: a.npy}\nkernel: {kinds: [nngp], dtype: float64}\n"
            "architecture:\n  layers:\n" + "".join(f"    - {i}\n" for i in items))
    cfg = parse_config(text, base_dir=Path("/cfg"))
    assert cfg.kernel.kinds == ("nngp",)
    alone_fn = kernel_fn(cfg.architecture, shape, cfg.kernel.kinds, cfg.kernel.dtype)
    alone = kernel_matrix(alone_fn, x1, x2)
    assert set(alone) == {"nngp"}
    assert rel(alone["nngp"], both["nngp"]) <= 1e-13


@pytest.mark.parametrize("head", ["global_avg_pool", "flatten"])
@pytest.mark.slow
def test_float32_matches_float64_for_every_layer_kind(head):
    """float32 (polynomial angle, float32 arithmetic) within 1e-4 of float64, for
    every nonlinearity and layer_norm, with (pooled) and without the full covariance."""
    shape = (5, 5, 2)
    # relu and erf are covered in float32 by the fixtures; leaky_relu is an abrelu
    items = ("conv: {filter: [3, 3], W_std: 1.5, b_std: 0.1}", "layer_norm", "gelu",
             "conv: {filter: [2, 2], W_std: 1.4, b_std: 0.1}", "abrelu: {a: -0.3, b: 1.2}",
             head, "dense: {W_std: 1.0, b_std: 0.1}")
    if head == "global_avg_pool":
        items = items[:3] + ("avg_pool: {window: [2, 2], strides: [1, 1]}",) + items[3:]
    arch = arch_of(*items)
    x = inputs(4, shape)
    k64 = kernel_matrix(kernel_fn(arch, shape, dtype="float64"), x)
    k32 = kernel_matrix(kernel_fn(arch, shape, dtype="float32"), x)
    for kind in KINDS:
        assert k32[kind].dtype == np.float32
        assert rel(k32[kind], k64[kind]) <= 1e-4, (kind, rel(k32[kind], k64[kind]))


# --- random small architectures ---------------------------------------------------------------

ACTS = ["relu", "erf", "gelu", "abrelu: {a: -0.5, b: 1.0}", "leaky_relu: {alpha: 0.2}"]


@st.composite
def image_architectures(draw):
    h, w = draw(st.integers(3, 6)), draw(st.integers(3, 6))
    c = draw(st.integers(1, 3))
    items = []
    for _ in range(draw(st.integers(1, 2))):
        fh, fw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        pad = draw(st.sampled_from(["SAME", "VALID", "CIRCULAR"]))
        wstd = draw(st.sampled_from([1.0, 1.4, 2.0]))
        bstd = draw(st.sampled_from([0.0, 0.1, "null"]))
        items.append(f"conv: {{filter: [{fh}, {fw}], strides: [{sh}, {sw}], padding: {pad}, "
                     f"W_std: {wstd}, b_std: {bstd}}}")
        if draw(st.booleans()):
            items.append("layer_norm")
        items.append(draw(st.sampled_from(ACTS)))
        if draw(st.booleans()):
            k = draw(st.integers(1, 2))
            items.append(f"avg_pool: {{window: [{k}, {k}], strides: [1, 1], "
                         f"padding: {draw(st.sampled_from(['SAME', 'VALID']))}}}")
    items.append(draw(st.sampled_from(["flatten", "global_avg_pool"])))
    items.append("dense: {W_std: 1.0, b_std: 0.1}")
    param = draw(st.sampled_from(["ntk", "standard"]))
    return (h, w, c), items, param


@FEW
@given(spec=image_architectures(), seed=st.integers(0, 2 ** 16))
@pytest.mark.slow
def test_random_architectures_give_symmetric_psd_kernels(spec, seed):
    shape, items, param = spec
    arch = arch_of(*items, parameterization=param)
    try:
        check_architecture(arch, shape)
    except ConfigError:
        assume(False)        # e.g. a VALID window larger than the image
    x = inputs(5, shape, seed=seed)
    k = kernel_matrix(build_kernel_fn(arch, shape, KINDS, "float64"), x)
    for kind in KINDS:
        assert np.all(np.isfinite(k[kind]))
        assert np.array_equal(k[kind], k[kind].T)
        assert_psd(k[kind], f"{items} {kind}")
        assert np.all(np.diag(k[kind]) > 0)


@FEW
@given(d=st.integers(1, 9), depth=st.integers(1, 3),
       acts=st.lists(st.sampled_from(ACTS + ["layer_norm"]), min_size=3, max_size=3),
       param=st.sampled_from(["ntk", "standard"]), seed=st.integers(0, 2 ** 16))
def test_vector_inputs_give_symmetric_psd_kernels(d, depth, acts, param, seed):
    """The rank-2 input path, (N, D), with random depth and activations."""
    items = []
    for act in acts[:depth]:
        items += ["dense: {W_std: 1.5, b_std: 0.1, width: 2}", act]
    items.append("dense: {W_std: 1.0, b_std: 0.0}")
    arch = arch_of(*items, parameterization=param)
    x = inputs(5, (d,), seed=seed)
    k = kernel_matrix(kernel_fn(arch, (d,)), x)
    for kind in KINDS:
        assert np.all(np.isfinite(k[kind]))
        assert np.array_equal(k[kind], k[kind].T)
        assert_psd(k[kind], f"{items} {kind}")

