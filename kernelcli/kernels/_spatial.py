"""Spatial maps of covariances: convolution (joint shifts), pooling, padding.

A k x k convolution with i.i.d. weights maps a covariance ``K(p, q)`` to the
mean of ``K(p + d, q + d)`` over the k^2 filter offsets ``d`` (the same weight
multiplies both positions). The offsets factor per axis, so the map is one
k-tap pass over the (h, h') axis pair and one over (w, w'): 2k summands per
output instead of k^2. Average pooling shifts the two positions independently,
so it is one k-tap pass per single axis. Sum pooling is the same passes without
the division; ``normalize_edges`` divides by the taps inside the input. Inputs
with 1 or 3 spatial axes take the same passes over their 1 or 3 axis pairs
(``(1 + 2i, 2 + 2i)`` of a full covariance, ``1 + i`` of a diagonal one, for
spatial axis ``i``).

Every pass is a sum of strided slices of a padded array; XLA fuses the pad,
the slices and the sum (and the elementwise consumer) into one loop.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..config import spatial_out as out_size  # the shape rule the config check uses


def pads(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """``(low, high)`` padding that lax's SAME rule uses (CIRCULAR pads the same amounts)."""
    if padding == "VALID":
        return (0, 0)
    total = max((out_size(size, k, s, padding) - 1) * s + k - size, 0)
    return (total // 2, total - total // 2)


def _pad(x, axes: Sequence[int], lo_hi: tuple[int, int], padding: str):
    if lo_hi == (0, 0):
        return x
    width = [(0, 0)] * x.ndim
    for a in axes:
        width[a] = lo_hi
    if padding == "CIRCULAR":
        return jnp.pad(x, width, mode="wrap")
    return jnp.pad(x, width)


def _shifted(x, axes: Sequence[int], d: int):
    """``x`` shifted by ``d`` along every axis in ``axes`` (out-of-range reads are 0):
    ``y[..., p, ...] = x[..., p + d, ...]``. A pad of a slice, which XLA fuses
    into its consumer without materialising a padded copy of ``x``."""
    if d == 0:
        return x
    if any(abs(d) >= x.shape[a] for a in axes):
        # a SAME window wider than about twice its axis: this tap reads only padding
        return jnp.zeros_like(x)
    start, limit = [0] * x.ndim, list(x.shape)
    config = [(0, 0, 0)] * x.ndim
    for a in axes:
        n = x.shape[a]
        if d > 0:
            start[a], config[a] = d, (0, d, 0)
        else:
            limit[a], config[a] = n + d, (-d, 0, 0)
    return lax.pad(lax.slice(x, start, limit), jnp.zeros((), x.dtype), config)


def tap(x, axes: Sequence[int], t: int, k: int, s: int, padding: str):
    """Tap ``t`` of a ``k``-tap window at stride ``s``, jointly along ``axes``:
    ``y[o] = x[o*s - low + t]`` with zero (SAME, VALID) or wrapped (CIRCULAR)
    reads outside the array; ``o`` runs over the output positions."""
    size = x.shape[axes[0]]
    n_out = out_size(size, k, s, padding)
    lo, hi = pads(size, k, s, padding)
    if s == 1 and padding != "CIRCULAR":
        y = _shifted(x, axes, t - lo)
        if n_out == size:
            return y
        start, limit = [0] * x.ndim, list(x.shape)
        for a in axes:
            limit[a] = n_out
        return lax.slice(y, start, limit)
    xp = _pad(x, axes, (lo, hi), padding)
    start, limit, strides = [0] * x.ndim, list(xp.shape), [1] * x.ndim
    for a in axes:
        start[a], limit[a], strides[a] = t, t + (n_out - 1) * s + 1, s
    return lax.slice(xp, start, limit, strides)


def window_sum(x, axes: Sequence[int], k: int, s: int, padding: str):
    """The sum of the ``k`` taps of a window at stride ``s``, all of ``axes``
    shifting together."""
    total = None
    for t in range(k):
        piece = tap(x, axes, t, k, s, padding)
        total = piece if total is None else total + piece
    return total


def joint_window(x, axes: Sequence[int], k: int, s: int, padding: str):
    """One axis of a convolution: all of ``axes`` (an image's axis in both
    inputs, or one axis of a diagonal covariance) shift together."""
    return window_sum(x, axes, k, s, padding) * (1.0 / k)


def axis_groups(n: int, full: bool):
    """The axes each spatial axis ``i < n`` of a covariance occupies: the pair
    ``(1 + 2i, 2 + 2i)`` of a full covariance, ``(1 + i,)`` of a diagonal one."""
    return [(1 + 2 * i, 2 + 2 * i) if full else (1 + i,) for i in range(n)]


def conv_cov(x, filt: Sequence[int], strides: Sequence[int], padding: str, full: bool):
    """Convolution of a covariance. ``x``: ``(P, a1, a1', ..., an, an')`` if ``full``
    else ``(P, a1, ..., an)`` (``(P, H, H', W, W')``, ``(P, H, W)`` for images), with
    ``filt`` and ``strides`` one entry per spatial axis; returns the same layout at
    the output resolution."""
    for axes, k, s in zip(axis_groups(len(filt), full), filt, strides, strict=True):
        x = joint_window(x, axes, k, s, padding)
    return x


def edge_counts(size: int, k: int, s: int, padding: str) -> np.ndarray:
    """How many taps of each output position's window fall inside the input
    (``(n_out,)``): ``k`` everywhere but at SAME padding's edges."""
    lo, _ = pads(size, k, s, padding)
    starts = np.arange(out_size(size, k, s, padding)) * s - lo
    return np.minimum(starts + k, size) - np.maximum(starts, 0)


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = len(v)
    return v.reshape(shape)


def avg_pool_cov(x, window: Sequence[int], strides: Sequence[int], padding: str,
                 normalize_edges: bool = False):
    """Average pooling of a full covariance ``(P, a1, a1', ..., an, an')``, one single axis at
    a time (the two images' windows move independently). Zero padding counts in the
    mean (neural-tangents' default ``normalize_edges=False``); with ``normalize_edges``
    and SAME padding each output divides by the taps inside the input instead."""
    for i, (k, s) in enumerate(zip(window, strides, strict=True)):
        for axis in (1 + 2 * i, 2 + 2 * i):
            if normalize_edges and padding == "SAME":
                n = edge_counts(x.shape[axis], k, s, padding)
                x = window_sum(x, (axis,), k, s, padding) / _along(
                    n.astype(x.dtype), axis, x.ndim)
            else:
                x = joint_window(x, (axis,), k, s, padding)
    return x


def sum_pool_cov(x, window: Sequence[int], strides: Sequence[int], padding: str):
    """Sum pooling of a full covariance ``(P, a1, a1', ..., an, an')``: the windows' sums."""
    for i, (k, s) in enumerate(zip(window, strides, strict=True)):
        for axis in (1 + 2 * i, 2 + 2 * i):
            x = window_sum(x, (axis,), k, s, padding)
    return x
