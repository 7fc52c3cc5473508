"""Runs of identical (convolution, nonlinearity) layers as one loop over layers.

Deep convolutional networks repeat one block: the 21-layer CNN of
neural-tangents' performance table is 21 identical ``conv, relu`` pairs. Traced
layer by layer, XLA compiles 21 copies of the same row loops (10-15 s per
program at depth 21) and, on CPU, gives every loop's carry buffers of their
own (2 covariances per layer per pair alive at once: 176 MiB per pair at depth
21 on 32x32 inputs). As one ``fori_loop`` over the layers the body is compiled
once and the two sets of buffers (a layer's input and output) swap roles from
one layer to the next.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
from jax import lax

from ._maps import is_pointwise, kernel_map
from ._spatial import out_size
from ._state import State, diagonal, reusable


def repeats(layers: Sequence, k: int, state: State) -> int:
    """How many identical (convolution, nonlinearity) pairs start at ``layers[k]``
    and can run as one loop; 0 when fewer than two.

    The loop needs a state whose layout the block keeps: spatial covariances
    (full or diagonal) that the convolution maps to their own shape and width,
    and an NTK array (not the raw input's scalar zero).
    """
    conv, act = layers[k], layers[k + 1] if k + 1 < len(layers) else None
    if not (kernel_map(conv).fuses and is_pointwise(act) and state.spatial
            and not isinstance(state.ntk, float) and state.channels == conv.width):
        return 0
    if any(out_size(n, k, s, conv.padding) != n
           for n, k, s in zip(state.spatial_shape, conv.filter, conv.strides, strict=True)):
        return 0
    m = 0
    while (k + 2 * m + 1 < len(layers) and layers[k + 2 * m] == conv
           and layers[k + 2 * m + 1] == act):
        m += 1
    return m if m >= 2 else 0


def repeat_layers(state: State, m: int, block, at, spare=None):
    """``m`` applications of ``block`` as one loop.

    ``block(state, va, vb, dst) -> (state, v)``: one (convolution, nonlinearity)
    pair with the nonlinearity's per-input variances ``va``, ``vb`` (``None`` in
    the per-input pass: the block derives them and returns them as ``v``), writing
    into the dead arrays ``dst`` where it can. ``at(i) -> (va, vb)``: layer ``i``'s
    variances (``PairVariances.run``), or ``None`` in the per-input pass.
    ``spare``: dead arrays of the state's shape, or ``None``.

    Returns ``(state, spare, recorded)``: the output, the dead input of the last
    layer, and the ``(m, P, H, W)`` variances (one size per spatial axis) the per-input pass derived (``None``
    for pairs). The body runs two layers, ``A -> B`` then ``B -> A``, so the two
    sets of buffers swap roles without a copy.
    """
    self_pass = at is None
    has_ntk = state.ntk is not None
    a = (state.nngp, state.ntk)
    spare_nngp, spare_ntk = spare or (None, None)
    shape, dtype = state.nngp.shape, state.nngp.dtype
    b = (reusable(spare_nngp, shape, dtype),
         reusable(spare_ntk, shape, dtype) if has_ntk else None)
    diag_shape = diagonal(state.nngp, state.full).shape
    recs = jnp.zeros((m,) + diag_shape, state.nngp.dtype) if self_pass else None

    def layer_at(i, src, dst, recs):
        st = state.replace(nngp=src[0], ntk=src[1])
        va, vb = (None, None) if self_pass else at(i)
        out, v = block(st, va, vb, dst)
        if self_pass:
            recs = lax.dynamic_update_index_in_dim(recs, v, i, axis=0)
        return (out.nngp, out.ntk), recs

    def two_layers(t, carry):
        a, b, recs = carry
        b, recs = layer_at(2 * t, a, b, recs)
        a, recs = layer_at(2 * t + 1, b, a, recs)
        return a, b, recs

    a, b, recs = lax.fori_loop(0, m // 2, two_layers, (a, b, recs))
    if m % 2:
        new, recs = layer_at(m - 1, a, b, recs)
        a, b = new, a
    return state.replace(nngp=a[0], ntk=a[1]), b, recs
