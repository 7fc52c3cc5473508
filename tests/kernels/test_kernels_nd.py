"""Sequences ``(N, L, C)`` and volumes ``(N, D, H, W, C)``: 1-D and 3-D networks.

neural-tangents fixtures of both (``tests/fixtures/seq_*``, ``vol_*``, written by
``tests/fixtures/make_nd.py``) are checked with every other fixture in
``test_kernels_fixtures.py``. Here: the Monte-Carlo oracle on 1-D and 3-D convs
and pools (``finite_nets`` builds networks of any rank), and the kernels of
inputs with a spatial axis of size 1 against those of the same data with that
axis dropped (a 1-D net is the 2-D net of ``(L, 1, C)`` images).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_montecarlo import DRAWS, FLAT_OUT, SQ2, arch_of, assert_mc_close, images

from conftest import one_device
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

# --- Monte Carlo ------------------------------------------------------------------------------

def test_1d_conv_relu_avg_pool_global_avg_pool_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: 3, padding: SAME, W_std: {SQ2}, b_std: 0.1}}", "relu",
                   "avg_pool: {window: [2]}",
                   f"conv: {{filter: [2], strides: [2], padding: CIRCULAR, W_std: {SQ2}}}",
                   "relu", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(10, 2)), draws=DRAWS)


def test_1d_conv_relu_flatten_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: [3], padding: VALID, W_std: {SQ2}, b_std: 0.1}}", "relu",
                   "flatten", "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(shape=(8, 2)), draws=DRAWS, out=FLAT_OUT)


def test_3d_conv_relu_avg_pool_global_avg_pool_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: [3, 1, 2], strides: [1, 2, 1], padding: SAME, "
                   f"W_std: {SQ2}, b_std: 0.1}}", "relu",
                   "avg_pool: {window: [2, 1, 2], strides: 1, padding: SAME}",
                   f"conv: {{filter: 2, padding: CIRCULAR, W_std: {SQ2}, b_std: 0.0}}", "relu",
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(4, 4, 3, 1)), draws=DRAWS)


def test_3d_conv_relu_flatten_nngp_matches_finite_width_networks():
    arch = arch_of(f"conv: {{filter: 2, padding: VALID, W_std: {SQ2}, b_std: 0.1}}", "relu",
                   "flatten", "dense: {W_std: 1.0, b_std: 0.1}")
    assert_mc_close(arch, images(shape=(3, 3, 3, 1)), draws=DRAWS, out=FLAT_OUT)


# --- a spatial axis of size 1 changes nothing -------------------------------------------------

NETS = {
    "gap": ("conv: {{filter: {f}, strides: {s}, padding: SAME, W_std: 1.5, b_std: 0.1}}",
            "relu", "avg_pool: {{window: {w}, strides: {one}, padding: SAME}}",
            "conv: {{filter: {f}, padding: CIRCULAR, W_std: 1.5}}", "erf",
            "residual: [relu, {{conv: {{filter: {f}, W_std: 1.4}}}}]", "layer_norm", "gelu",
            "global_avg_pool", "dense"),
    "flatten": ("conv: {{filter: {f}, strides: {s}, padding: VALID, W_std: 1.5, b_std: 0.1}}",
                "relu", "repeat: {{times: 2, layers: [{{conv: {{filter: {f}, W_std: 1.4}}}}, "
                "relu]}}", "flatten", "dense"),
}


def _net(name: str, f, s, w, one):
    return arch_of(*(item.format(f=list(f), s=list(s), w=list(w), one=list(one))
                     for item in NETS[name]))


@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("rank", [1, 3])
def test_kernels_equal_those_with_a_size_one_axis_dropped(net, rank):
    """A 1-D network on ``(L, C)`` is the 2-D one on ``(L, 1, C)`` with filters
    ``(k, 1)``; a 3-D one on ``(1, H, W, C)`` with filters ``(1, k, k)`` the 2-D one on
    ``(H, W, C)``: both kernels, to rounding (the loops run in another order; float64)."""
    x = images(n=4, shape=(7, 5, 2) if rank == 3 else (7, 2), seed=5)
    if rank == 1:
        small, big = _net(net, [3], [2], [2], [1]), _net(net, [3, 1], [2, 1], [2, 1], [1, 1])
        x_small, x_big = x, x[:, :, None, :]
    else:
        small, big = _net(net, [3, 2], [2, 1], [2, 2], [1, 1]), \
            _net(net, [1, 3, 2], [1, 2, 1], [1, 2, 2], [1, 1, 1])
        x_small, x_big = x, x[:, None]
    # on one device: each program compiles once (conftest.one_device)
    a = kernel_matrix(build_kernel_fn(small, x_small.shape[1:], ("nngp", "ntk"), "float64"),
                      x_small, devices=one_device())
    b = kernel_matrix(build_kernel_fn(big, x_big.shape[1:], ("nngp", "ntk"), "float64"), x_big,
                      devices=one_device())
    for kind in ("nngp", "ntk"):
        err = np.max(np.abs(a[kind] - b[kind])) / np.max(np.abs(a[kind]))
        assert err <= 1e-13, f"{net} rank {rank} {kind}: {err:.2e}"
