"""Transposed convolution of a covariance (``conv_transpose``).

Along one axis, ``lax.conv_transpose`` spreads input position ``i`` to the output
positions ``a`` with ``i*s = a + t - low`` for the filter taps ``t < k``: it is a
stride-1 convolution of the input dilated by ``s`` (``s - 1`` zeros between
entries) and padded by ``(low, high)``. As for ``conv``, the same weight meets both
positions of a covariance entry, so the map on a covariance is the mean over the
taps of a joint shift of the dilated, padded covariance: ``K'(a, b) = 1/k * sum_t
D(a + t, b + t)``. Under ``CIRCULAR`` (neural-tangents' definition) the output has
``n*s`` positions and reads the dilated input cyclically, offset by half the
filter's overhang ``max(k - s, 0) // 2``.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
from jax import lax

from ..config import transpose_out
from ._spatial import axis_groups


def transpose_pads(k: int, s: int, padding: str) -> tuple[int, int]:
    """``(low, high)`` padding of the dilated input (lax's ``conv_transpose`` rule)."""
    if padding == "VALID":
        total, low = k + s - 2 + max(k - s, 0), k - 1
    else:  # SAME
        total = k + s - 2
        low = k - 1 if s > k - 1 else -(-total // 2)
    return low, total - low


def _joint_mean(x, axes: Sequence[int], k: int, n_out: int):
    """``1/k * sum_t x[a + t]`` jointly along ``axes`` for ``a < n_out``."""
    total = None
    for t in range(k):
        start, limit = [0] * x.ndim, list(x.shape)
        for a in axes:
            start[a], limit[a] = t, t + n_out
        piece = lax.slice(x, start, limit)
        total = piece if total is None else total + piece
    assert total is not None  # k >= 1 taps
    return total * (1.0 / k)


def _transpose_axis(x, axes: Sequence[int], k: int, s: int, padding: str):
    size = x.shape[axes[0]]
    n_out = transpose_out(size, k, s, padding)
    zero = jnp.zeros((), x.dtype)
    if padding == "CIRCULAR":
        # dilated to exactly n*s positions, then read cyclically from offset `start`
        config = [(0, 0, 0)] * x.ndim
        for a in axes:
            config[a] = (0, s - 1, s - 1)
        d = lax.pad(x, zero, config)
        start = max(k - s, 0) // 2 - (k - 1)
        width = [(0, 0)] * x.ndim
        for a in axes:
            width[a] = (-start, k - 1 + start)
        return _joint_mean(jnp.pad(d, width, mode="wrap"), axes, k, n_out)
    low, high = transpose_pads(k, s, padding)
    config = [(0, 0, 0)] * x.ndim
    for a in axes:
        config[a] = (low, high, s - 1)
    return _joint_mean(lax.pad(x, zero, config), axes, k, n_out)


def transpose_cov(x, filt: Sequence[int], strides: Sequence[int], padding: str, full: bool):
    """Transposed convolution of a covariance: ``x`` of shape ``(P, a1, a1', ..., an, an')``
    if ``full`` else ``(P, a1, ..., an)``, returned in the same layout at the output size."""
    for axes, k, s in zip(axis_groups(len(filt), full), filt, strides, strict=True):
        x = _transpose_axis(x, axes, k, s, padding)
    return x
