"""The cpu engine's convolution of a spatial diagonal (``kernels/_diagonal_conv.py``, each axis
padded once) against the joint-shift mean of ``_spatial.conv_cov`` that it replaces:
the same sums in the same order, for each padding, strides and even/odd filters."""

from __future__ import annotations

import numpy as np

from kernelcli.config import Conv

# the diagonal convolution against the full one: both internal, their agreement the point
from kernelcli.kernels._diagonal_conv import conv_mean
from kernelcli.kernels._spatial import conv_cov

CASES = [((7, 6), "SAME", 3, 1), ((7, 6), "VALID", 2, 2), ((7, 6), "CIRCULAR", 5, 2),
         ((5, 5, 6), "SAME", 3, 1)]


def test_padded_once_gives_the_joint_shift_mean():
    rng = np.random.default_rng(0)
    for shape, padding, k, s in CASES:
        x = rng.standard_normal((3,) + shape).astype(np.float32)
        axes = len(shape)
        layer = Conv(filter=(k,) * axes, strides=(s,) * axes, padding=padding)
        want = np.asarray(conv_cov(x, layer.filter, layer.strides, padding, False))
        got = np.asarray(conv_mean(x, layer))
        case = (shape, padding, k, s)
        assert got.shape == want.shape, case
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=0, err_msg=str(case))


def test_block_is_the_conv_then_the_nonlinearity():
    """``block`` (the two layers of a pair pass in one conditional) against the two
    layers one after the other, with an NTK array and with the raw input's scalar
    zero, strided and not, in float32 (rounding apart: the sums fuse) and float64."""
    # the diagonal chain against the full one on a state made here
    from kernelcli.kernels._diagonal_conv import block, conv
    from kernelcli.kernels._nonlinear import abrelu
    from kernelcli.kernels._state import State
    from kernelcli.kernels._xla import x64_scope

    rng = np.random.default_rng(1)
    for dtype, float64, tol in (("float32", False, 2e-6), ("float64", True, 1e-14)):
        with x64_scope(dtype):
            for layer in (Conv(filter=(3, 3), strides=(1, 1), padding="SAME", W_std=1.5,
                               b_std=0.1),
                          Conv(filter=(2, 2), strides=(2, 2), padding="VALID")):
                v = rng.uniform(1, 2, (4, 6, 6)).astype(dtype)
                c = (v * rng.uniform(-1, 1, v.shape)).astype(dtype)
                for ntk in (rng.uniform(0, 1, v.shape).astype(dtype), 0.0):
                    state = State(nngp=c, ntk=ntk, full=False, spatial=True, channels=3)
                    after = conv(state, layer, False)
                    va = np.asarray(conv(state.replace(nngp=v, ntk=None), layer, False).nngp)
                    vb = va[::-1].copy()
                    want = abrelu(after, va, vb, 0.0, 1.0, float64)
                    got = block(state, layer,
                                lambda st, x, y, e=float64: abrelu(st, x, y, 0.0, 1.0, e),
                                va, vb, False)
                    for key in ("nngp", "ntk"):
                        g, w = np.asarray(getattr(got, key)), np.asarray(getattr(want, key))
                        assert g.dtype == np.dtype(dtype) and g.shape == w.shape
                        np.testing.assert_allclose(g, w, rtol=tol, atol=tol,
                                                   err_msg=f"{dtype} {layer} {key}")
