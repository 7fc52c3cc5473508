"""Linear layers as state maps: the input kernel, dense, conv, pooling, flatten.

Affine layers under the ``ntk`` parameterization (``z = W_std/sqrt(fan_in) W x
+ b_std b``) map ``nngp -> W_std^2 * A(nngp) + b_std^2`` and ``ntk -> W_std^2 *
A(ntk) + nngp'``, where ``A`` is the identity for ``dense`` (per pixel) and the
joint-shift mean for ``conv``. Under ``standard`` the NNGP is the same and the
NTK gets the weights' own gradient, ``fan_in * A(nngp)`` (fan_in = input
channels x filter size), plus 1 for a bias (``b_std`` not null).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..config import AvgPool, Conv, Dense, bound_axes
from ._spatial import avg_pool_cov, conv_cov
from ._state import State, diagonal

# Full float32 precision for every contraction: GPUs' default for float32 dots is TF32
# (about 1e-3 relative); on CPU it changes nothing.
_FULL = lax.Precision.HIGHEST

# Einsum letters of the spatial axes of inputs with 1, 2, 3 of them (the second
# input's are the upper case ones).
_AXIS_LETTERS = {1: "l", 2: "hw", 3: "dhw"}


def input_state(x1, x2, full: bool, want_ntk: bool) -> State:
    """Kernel of the raw inputs: channel-mean of products (neural-tangents' convention).

    ``x1``, ``x2``: ``(P, a1, ..., an, C)`` inputs with ``n`` spatial axes (1 to 3:
    ``(P, L, C)``, ``(P, H, W, C)``, ``(P, D, H, W, C)``) or ``(P, D)`` vectors, row
    p of each forming pair p. Returns ``nngp`` of shape ``(P, a1, a1', ..., an,
    an')`` if ``full`` (``(P, H, H', W, W')``), ``(P, a1, ..., an)`` otherwise,
    ``(P,)`` for vectors; ``ntk`` is the scalar ``0.0`` (or ``None`` when the NTK is
    not wanted).
    """
    c = x1.shape[-1]
    if x1.ndim == 2:
        nngp = jnp.einsum("pc,pc->p", x1, x2, precision=_FULL) / c
        spatial = False
    else:
        a = _AXIS_LETTERS[x1.ndim - 2]
        b = a.upper()
        if full:  # "phwc,pHWc->phHwW"
            pairs = "".join(i + j for i, j in zip(a, b, strict=True))
            nngp = jnp.einsum(f"p{a}c,p{b}c->p{pairs}", x1, x2, precision=_FULL) / c
        else:     # "phwc,phwc->phw"
            nngp = _channel_products(x1, x2) / c
        spatial = True
    # The raw input has no parameters: its NTK is exactly zero. A scalar zero
    # keeps the first layer from convolving an all-zero covariance.
    ntk = 0.0 if want_ntk else None
    return State(nngp=nngp, ntk=ntk, full=full and spatial, spatial=spatial, channels=c)


def _channel_products(x1, x2):
    """``sum_c x1[..., c] * x2[..., c]``: with few channels as that sum written out. As
    an einsum it is a dot with every pixel a batch and the channels its contraction,
    which XLA:CPU runs as one tiny product per pixel (about 11 us a pair, profiled)."""
    if x1.shape[-1] > 16:
        return jnp.sum(x1 * x2, axis=-1)
    total = x1[..., 0] * x2[..., 0]
    for k in range(1, x1.shape[-1]):
        total = total + x1[..., k] * x2[..., k]
    return total


def map_ntk(state: State, f):
    """``f(state.ntk)``, unless the NTK is absent (None) or still the input's scalar zero."""
    if state.ntk is None or isinstance(state.ntk, float):
        return state.ntk
    return f(state.ntk)


def affine(state: State, mean_nngp, mean_ntk, W_std, b_std, fan_in, standard, width):
    nngp = W_std ** 2 * mean_nngp
    if b_std is not None:
        nngp = nngp + b_std ** 2
    ntk = None
    if state.ntk is not None:
        if standard:
            ntk = fan_in * mean_nngp + W_std ** 2 * mean_ntk
            if b_std is not None:
                ntk = ntk + 1.0
        else:
            ntk = W_std ** 2 * mean_ntk + nngp
    return state.replace(nngp=nngp, ntk=ntk, channels=width)


def dense(state: State, layer: Dense, standard: bool) -> State:
    return affine(state, state.nngp, state.ntk, layer.W_std, layer.b_std,
                   state.channels, standard, layer.width)


def conv(state: State, layer: Conv, standard: bool) -> State:
    def a(x):
        return conv_cov(x, bound_axes(layer.filter), bound_axes(layer.strides), layer.padding,
                        state.full)

    ntk = map_ntk(state, a)
    fan_in = state.channels * math.prod(bound_axes(layer.filter))
    return affine(state, a(state.nngp), ntk, layer.W_std, layer.b_std,
                   fan_in, standard, layer.width)


def avg_pool(state: State, layer: AvgPool) -> State:
    def a(x):
        return avg_pool_cov(x, bound_axes(layer.window), bound_axes(layer.strides),
                            layer.padding, layer.normalize_edges)

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a))


def global_avg_pool(state: State) -> State:
    """Mean over all position pairs (full covariance) -> ``(P,)``."""
    axes = tuple(range(1, state.nngp.ndim))  # (1, 2, 3, 4) for images

    def a(x):
        return jnp.mean(x, axis=axes)

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a),
                         spatial=False, full=False)


def flatten(state: State) -> State:
    """Mean over the spatial diagonal -> ``(P,)``; channels become ``C*H*W`` (the
    channels times every spatial size)."""
    if not state.spatial:
        return state
    axes = tuple(range(1, state.n_axes + 1))  # (1, 2) for images

    def a(x):
        return jnp.mean(diagonal(x, state.full), axis=axes)

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a),
                         spatial=False, full=False,
                         channels=state.channels * math.prod(state.spatial_shape))
