"""The CPU plan's convolution of a spatial diagonal (``kernels/_diagonal.py``, each axis
padded once) against the joint-shift mean of ``_spatial.conv_cov`` that it replaces:
the same sums in the same order, for each padding, strides and even/odd filters."""

from __future__ import annotations

import numpy as np

from kernelcli.kernels._diagonal import conv_mean
from kernelcli.kernels._spatial import conv_cov
from kernelcli.spec import Conv

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
