"""Structural properties of the kernel engine: networks that must give the same
kernel do (a full spatial covariance or its diagonal, flatten first or a dense network
on flattened vectors, float32 within 1e-4 of float64), and random small architectures
give symmetric PSD kernels.

The helpers here (``arch_of``, ``inputs``, ``kernel_fn``, ``rel``, ``assert_psd``,
``KINDS``, ``FEW``) serve the other kernel tests too. The exact numpy reference for the
spatial cases is in test_kernels_reference.py, the pair batches in test_kernels_pairs.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kernelcli.config import check_architecture, parse_config
from kernelcli.errors import ConfigError
from kernelcli.kernels import build_kernel_fn
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


# --- equivalent networks ----------------------------------------------------------------------

@functools.cache
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
    ``POOLED`` in test_kernels_reference.py)."""
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

