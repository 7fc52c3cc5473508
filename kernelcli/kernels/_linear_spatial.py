"""State maps of the spatial family: locally connected and transposed convolutions,
sum pooling, local average pooling (the maps of ``conv`` and ``avg_pool`` are in
``_linear``).

``conv_local`` has a weight (and a bias) of its own at every output position, so
outputs at different positions are independent: its covariance is zero off the
spatial diagonal, and its diagonal is the same joint-shift mean of the input's
diagonal as a ``conv``'s. It therefore reads only the diagonal of its input. On a
full covariance (a pool lies ahead) it computes on the diagonal and puts the result
back on the diagonal of a full covariance of zeros (``to_full``). Fan-in (standard
parameterization) is that of ``conv``: input channels times filter size, as in
neural-tangents.

``local_avg_pool`` reads only the band of its input's covariance around the spatial
diagonal that its window covers, ``w_1 * w_2 * ...`` entries per position (one gather),
not the ``(H W)^2`` a stride-1 pool over the whole covariance would walk.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..config import ConvLocal, ConvTranspose, LocalAvgPool, SumPool, bound_axes
from ._linear import affine, map_ntk
from ._spatial import conv_cov, sum_pool_cov
from ._state import State, to_diagonal
from ._transpose import transpose_cov

# Inputs with at most this many channels take ``channel_gram`` on the cpu engine.
GRAM_CHANNELS = 16


def channel_gram(x1, x2):
    """The input kernel of a full covariance, ``_linear.input_state``'s
    ``einsum("phwc,pHWc->phHwW") / C``, as the sum over channels of outer products
    (``x1[..., c]`` along the first input's axes times ``x2[..., c]`` along the
    second's), for inputs with few channels (``GRAM_CHANNELS``) on the cpu engine.

    XLA:CPU computes the einsum as one ``(HW, C) x (C, HW)`` product, fast, and then
    transposes its ``[h, w, H, W]`` result to the covariance's ``[h, H, w, W]``
    layout twice, element by element, which cost several times the product; this sum
    is written in its layout at once (1.2-1.4 ms a pair before, 0.18-0.21 after)."""
    c = x1.shape[-1]
    n = x1.ndim - 2
    first = (slice(None),) + (slice(None), None) * n
    second = (slice(None),) + (None, slice(None)) * n
    total = None
    for k in range(c):
        term = x1[..., k][first] * x2[..., k][second]
        total = term if total is None else total + term
    return total / c


def embed_diagonal(d):
    """``(P, a1, ..., an)`` -> ``(P, a1, a1', ..., an, an')``, zero off the diagonal."""
    n = d.ndim - 1
    out = d
    for i in range(n):
        size = d.shape[1 + i]
        eye = jnp.eye(size, dtype=d.dtype).reshape((1,) * (1 + 2 * i) + (size, size)
                                                  + (1,) * (n - 1 - i))
        out = jnp.expand_dims(out, 2 + 2 * i) * eye
    return out


def to_full(state: State) -> State:
    """A diagonal state whose off-diagonal covariances are zero, as a full one."""
    if state.full or not state.spatial:
        return state
    return state.replace(nngp=embed_diagonal(state.nngp),
                         ntk=map_ntk(state, embed_diagonal), full=True)


def _fan_in(state: State, layer) -> int:
    n = state.channels
    for k in layer.filter:
        n *= k
    return n


def conv_local(state: State, layer: ConvLocal, standard: bool) -> State:
    diag = to_diagonal(state)

    def a(x):
        return conv_cov(x, bound_axes(layer.filter), bound_axes(layer.strides), layer.padding,
                        False)

    out = affine(diag, a(diag.nngp), map_ntk(diag, a), layer.W_std, layer.b_std,
                 _fan_in(state, layer), standard, layer.width)
    return to_full(out) if state.full else out


def conv_transpose(state: State, layer: ConvTranspose, standard: bool) -> State:
    def a(x):
        return transpose_cov(x, bound_axes(layer.filter), bound_axes(layer.strides),
                             layer.padding, state.full)

    return affine(state, a(state.nngp), map_ntk(state, a), layer.W_std, layer.b_std,
                  _fan_in(state, layer), standard, layer.width)


def sum_pool(state: State, layer: SumPool) -> State:
    def a(x):
        return sum_pool_cov(x, bound_axes(layer.window), bound_axes(layer.strides),
                            layer.padding)

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a))


def global_sum_pool(state: State) -> State:
    """Sum over all position pairs (full covariance) -> ``(P,)``."""
    def a(x):
        return jnp.sum(x, axis=tuple(range(1, x.ndim)))

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a),
                         spatial=False, full=False)


def window_offsets(n: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, weights)`` of a ``local_avg_pool`` window ``w`` along an axis of size
    ``n``: the circular offsets ``(s' - s) mod n`` between two translations ``s, s'``
    drawn independently from the window (``-(w - 1) / 2 .. (w - 1) / 2``, odd ``w``; every
    translation when ``w == n``), each weighted by the share of the ``w^2`` pairs that
    give it (a triangle; uniform over every offset when ``w == n``)."""
    shifts = np.arange(n) if w == n else np.arange(-(w // 2), w // 2 + 1)
    offsets, counts = np.unique((shifts[None, :] - shifts[:, None]) % n, return_counts=True)
    return offsets, counts / len(shifts) ** 2


def band(x, windows):
    """The band of a full covariance ``(P, a1, a1', ..., an, an')`` that ``windows``
    (one per axis) covers, and its weights: ``(P, a1, |D1|, ..., an, |Dn|)``, entry
    ``[p, i, j, ...]`` the covariance between position ``i`` and ``(i + D[j]) mod a``
    along each axis, and one ``(|Dk|,)`` weight vector per axis (:func:`window_offsets`)."""
    sizes = x.shape[1::2]
    k = len(sizes)
    index: list = [slice(None)]
    weights = []
    for i, (n, w) in enumerate(zip(sizes, windows, strict=True)):
        d, weight = window_offsets(n, w)
        weights.append(weight)
        first = np.arange(n).reshape((1,) * (2 * i) + (n, 1) + (1,) * (2 * (k - 1 - i)))
        second = ((np.arange(n)[:, None] + d[None, :]) % n).reshape(
            (1,) * (2 * i) + (n, len(d)) + (1,) * (2 * (k - 1 - i)))
        index += [first, second]
    return x[tuple(index)], weights


def band_entries(spatial: tuple, window) -> int:
    """Entries of the band :func:`local_avg_pool` reads, per array and pair."""
    return math.prod(n * len(window_offsets(n, w)[0])
                     for n, w in zip(spatial, bound_axes(window), strict=True))


def local_avg_pool(state: State, layer: LocalAvgPool) -> State:
    """Li et al.'s LAP (``config.LocalAvgPool``): the ``flatten`` kernel of the inputs
    translated independently within the window, averaged over the pairs of
    translations, ``mean_{s, s'} mean_p Sigma[p + s, p + s']`` (circular), which is a
    weighted mean over positions and offsets of the band the window covers -> ``(P,)``;
    a full input. Channels become ``C * H * W``, as after ``flatten``."""
    windows = bound_axes(layer.window)

    def a(x):
        b, weights = band(x, windows)
        for weight in weights:  # each axis: mean over positions,
            b = jnp.tensordot(b, jnp.asarray(weight, b.dtype) / b.shape[1],  # weighted
                              axes=([2], [0]))  # sum over offsets
            b = jnp.sum(b, axis=1)
        return b

    return state.replace(nngp=a(state.nngp), ntk=map_ntk(state, a), spatial=False,
                         full=False, channels=state.channels * math.prod(state.spatial_shape))
