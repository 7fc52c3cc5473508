"""The convolution of a spatial diagonal on the cpu engine: each axis padded once; with
the nonlinearity after it, one program.

After the last pooling layer (and in networks without pooling: the flatten nets) a
pair's state is its spatial diagonal, ``(P, H, W)``, and a convolution maps it by
the joint-shift mean of ``_spatial.conv_cov``: per axis, the mean of ``k`` shifted
copies. ``conv_cov`` builds each shifted copy as a pad of a slice; XLA:CPU fuses
those into their sum with a bounds check per element and tap, which does not
vectorise (profiled on cnn5_flatten). Here each axis is padded once and the
taps are static (strided) slices of the padded array: the same sums in the same
order (``tap 0 + tap 1 + ...``, then ``* (1/k)``, axis by axis), so the same values,
at about half the cost.

In a pair pass a convolution and the nonlinearity after it run as one ``block``
(one conditional, the convolution's sums fused into the nonlinearity's loops).

The accelerator engine keeps ``conv_cov`` (its structure tests fix its programs); full
covariances keep their row loops (``_fused``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..config import Conv, bound_axes
from ._linear import affine, map_ntk
from ._spatial import out_size, pads
from ._state import PairVariances, State


def applies(layer, state: State) -> bool:
    """Whether ``layer`` is a convolution of a spatial diagonal (this module's case)."""
    return isinstance(layer, Conv) and state.spatial and not state.full


def fuses(layer, state: State, variances) -> bool:
    """Whether ``layer`` and the nonlinearity after it run as one ``block``: a
    convolution of a diagonal in a pair pass (the per-input pass keeps the two layers
    apart: it records the convolution's output as the nonlinearity's variances)."""
    return applies(layer, state) and isinstance(variances, PairVariances)


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
    assert total is not None  # k >= 1 taps
    return total * (1.0 / k)


def conv_mean(x, layer: Conv):
    """The joint-shift mean of a diagonal ``(P, a1, ..., an)``, one axis at a time."""
    filt, strides = bound_axes(layer.filter), bound_axes(layer.strides)
    for i, (k, s) in enumerate(zip(filt, strides, strict=True)):
        x = window_mean(x, 1 + i, k, s, layer.padding)
    return x


def conv(state: State, layer: Conv, standard: bool) -> State:
    """``_linear.conv`` of a diagonal state (see the module's docstring)."""
    def a(x):
        return conv_mean(x, layer)

    fan_in = state.channels * math.prod(bound_axes(layer.filter))
    return affine(state, a(state.nngp), map_ntk(state, a), layer.W_std, layer.b_std,
                  fan_in, standard, layer.width)


def block(state: State, layer: Conv, pointwise, va, vb, standard: bool) -> State:
    """``conv`` and then ``pointwise(state, va, vb)`` (the nonlinearity after it, with
    its per-input variances) on a batch of pairs' diagonals, as one program with no
    intermediate written back.

    The layers need a fusion boundary between them: without one a deep network fuses
    each layer's window into the next and re-evaluates it (``_compose._by_slabs``).
    The slab loop that gave one wrote the convolution's output, then ran the
    nonlinearity over it in place, copying the array it updated every step: three
    more passes over the covariances per layer. Here the boundary is a conditional
    whose two branches are this same function (so which one runs never matters, and
    the predicate is any value computed at run time): its operands and results are
    buffers, and inside it the convolution's sums fuse into the nonlinearity's loops
    (measured on cnn5_flatten and cnn21_flatten, both dtypes)."""
    kept = state.ntk if isinstance(state.ntk, float) else None  # the raw input's zero

    def both(nngp, ntk, va, vb):
        st = state.replace(nngp=nngp, ntk=ntk if kept is None else kept)
        out = pointwise(conv(st, layer, standard), va, vb)
        return out.nngp, out.ntk

    nngp, ntk = lax.cond(va.reshape(-1)[0] >= 0, both, both, state.nngp,
                         None if kept is not None else state.ntk, va, vb)
    return state.replace(nngp=nngp, ntk=ntk, channels=layer.width)
