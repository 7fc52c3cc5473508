"""The convolution of a spatial diagonal on the CPU plan: each axis padded once.

After the last pooling layer (and in networks without pooling: the flatten nets) a
pair's state is its spatial diagonal, ``(P, H, W)``, and a convolution maps it by
the joint-shift mean of ``_spatial.conv_cov``: per axis, the mean of ``k`` shifted
copies. ``conv_cov`` builds each shifted copy as a pad of a slice; XLA:CPU fuses
those into their sum with a bounds check per element and tap, which does not
vectorise (BENCHMARKS.md, issue 26 point 4). Here each axis is padded once and the
taps are static (strided) slices of the padded array: the same sums in the same
order (``tap 0 + tap 1 + ...``, then ``* (1/k)``, axis by axis), so the same values,
at about half the cost.

The accelerator plan keeps ``conv_cov`` (its structure tests fix its programs); full
covariances keep their row loops (``_fused``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..spec import Conv
from ._linear import affine, map_ntk
from ._spatial import out_size, pads
from ._state import State


def applies(layer, state: State) -> bool:
    """Whether ``layer`` is a convolution of a spatial diagonal (this module's case)."""
    return isinstance(layer, Conv) and state.spatial and not state.full


def _padded(x, axis: int, lo_hi, padding: str):
    if lo_hi == (0, 0):
        return x
    if padding == "CIRCULAR":
        width = [(0, 0)] * x.ndim
        width[axis] = lo_hi
        return jnp.pad(x, width, mode="wrap")
    config = [(0, 0, 0)] * x.ndim
    config[axis] = (lo_hi[0], lo_hi[1], 0)
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def window_mean(x, axis: int, k: int, s: int, padding: str):
    """The mean of the ``k`` taps of a window at stride ``s`` along ``axis``: tap ``t``
    of output ``o`` reads ``x[o*s - low + t]`` (zero outside, wrapped for CIRCULAR)."""
    size = x.shape[axis]
    n_out = out_size(size, k, s, padding)
    xp = _padded(x, axis, pads(size, k, s, padding), padding)
    total = None
    for t in range(k):
        piece = lax.slice_in_dim(xp, t, t + (n_out - 1) * s + 1, s, axis)
        total = piece if total is None else total + piece
    return total * (1.0 / k)


def conv_mean(x, layer: Conv):
    """The joint-shift mean of a diagonal ``(P, a1, ..., an)``, one axis at a time."""
    for i, (k, s) in enumerate(zip(layer.filter, layer.strides)):
        x = window_mean(x, 1 + i, k, s, layer.padding)
    return x


def conv(state: State, layer: Conv, standard: bool) -> State:
    """``_linear.conv`` of a diagonal state (see the module's docstring)."""
    def a(x):
        return conv_mean(x, layer)

    fan_in = state.channels * math.prod(layer.filter)
    return affine(state, a(state.nngp), map_ntk(state, a), layer.W_std, layer.b_std,
                  fan_in, standard, layer.width)
