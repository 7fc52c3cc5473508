"""The window geometry at its boundary: every window from 1 to 3n + 3 wide, strides 1
to 3, on axes of 1 to 5 positions, under SAME (a window may overhang the axis on both
sides, as neural-tangents allows), VALID and CIRCULAR where the window fits.

The oracle is independent of the padding code: a SAME window as the first layer (a pool
after a 1x1 convolution without bias) reads zeros outside the input, so it equals a VALID window over the input padded explicitly
with those zeros (lax's SAME rule: ``total = (out - 1) * s + k - n``, the smaller half
first). Both execution engines, both kernels, float64; each kernel also finite and
symmetric. Computed on one device: each program compiles once (conftest.one_device).
The overhang cases against neural-tangents itself are reference fixtures
(``tests/fixtures/make_spatial.py``: ``spatial_overhang_*``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import kernelcli
from conftest import one_device
from kernelcli import stax

LAYERS = ("conv", "conv_local", "avg_pool", "sum_pool")


def _window(kind: str, k, s, padding: str):
    if kind == "conv":
        return stax.Conv(1, k, s, padding, W_std=1.3, b_std=0.2)
    if kind == "conv_local":
        return stax.ConvLocal(1, k, s, padding, W_std=1.3, b_std=0.2)
    if kind == "avg_pool":
        return stax.AvgPool(k, s, padding)
    return stax.SumPool(k, s, padding)


def _net(kind, k, s, padding, head):
    # a pool needs a Gaussian layer before the nonlinearity: a 1x1 conv without a bias,
    # which keeps the explicit padding's zeros zero
    first = [] if kind.startswith("conv") else [stax.Conv(1, (1,) * len(k), W_std=1.3,
                                                          b_std=0.0)]
    return stax.serial(*first, _window(kind, k, s, padding), stax.Erf(),
                       stax.Flatten() if head == "flatten" else stax.GlobalAvgPool(),
                       stax.Dense(1, 1.0, 0.1))


def _same_pads(n: int, k: int, s: int) -> tuple:
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


@st.composite
def geometries(draw):
    dims = draw(st.integers(1, 2))
    sizes = tuple(draw(st.integers(1, 5)) for _ in range(dims))
    windows = tuple(draw(st.integers(1, 3 * n + 3)) for n in sizes)
    strides = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    return (sizes, windows, strides, draw(st.sampled_from(LAYERS)),
            draw(st.sampled_from(("flatten", "gap"))),
            draw(st.sampled_from(("cpu", "accelerator"))))


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(geometries())
def test_a_same_window_is_a_valid_window_over_the_explicitly_padded_input(geometry):
    sizes, k, s, kind, head, engine = geometry
    x = np.random.default_rng(sum(sizes) + sum(k)).standard_normal((3,) + sizes + (2,))
    same = kernelcli.kernel_fn(_net(kind, k, s, "SAME", head))(
        x, dtype="float64", engine=engine, devices=one_device())
    pads = [(0, 0)] + [_same_pads(n, kk, ss) for n, kk, ss in zip(sizes, k, s)] + [(0, 0)]
    valid = kernelcli.kernel_fn(_net(kind, k, s, "VALID", head))(
        np.pad(x, pads), dtype="float64", engine=engine, devices=one_device())
    for a, b in zip(same, valid):
        assert np.all(np.isfinite(a)) and np.array_equal(a, a.T)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(st.integers(1, 5), st.integers(1, 18), st.integers(1, 3),
       st.sampled_from(("VALID", "CIRCULAR")), st.sampled_from(LAYERS))
def test_valid_and_circular_windows_at_the_boundary_are_finite_and_symmetric(n, k, s,
                                                                            padding, kind):
    assume(padding != "VALID" or k <= n)  # a VALID window that does not fit is refused
    x = np.random.default_rng(n * 31 + k).standard_normal((3, n, 2))
    for kernel in kernelcli.kernel_fn(_net(kind, (k,), (s,), padding, "flatten"))(
            x, dtype="float64", devices=one_device()):
        assert np.all(np.isfinite(kernel)) and np.array_equal(kernel, kernel.T)
        assert np.linalg.eigvalsh(kernel).min() > -1e-12 * np.abs(kernel).max()
