"""A convolution and the nonlinearity after it, one output row at a time.

On a full covariance ``(P, H, H', W, W')`` a convolution is a few streaming
passes over arrays of ``(H*W)^2`` entries per pair (4 MiB at 32x32 in float32),
and the nonlinearity after it another few: memory traffic, not arithmetic,
would set the pace. Output row ``h`` of the convolution needs only input rows
``h*s - low + t`` (``t < k``), so both layers can run row by row: the input
rows and every intermediate (128 KiB at 32x32) stay in the core's cache, and
each layer reads its input and writes its output once.

In the per-input pass (an input with itself) the nonlinearity's variances are
the diagonal of the convolution's output, which the row loop has not built yet;
they equal the convolution of the input's diagonal (a joint shift maps the
diagonal to itself), computed first, and written over the diagonal entries of
each row, so the angle there is exactly 0 as it must be.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..spec._layers import Conv
from ._linear import affine, conv, map_ntk
from ._spatial import joint_window, out_size, pads, tap
from ._state import State, diagonal


def _conv_row(x, r, layer: Conv):
    """Row ``r`` of the joint-shift mean of ``x`` (``(P, H, H', W, W')``):
    ``(P, 1, Ho', Wo, Wo')``."""
    size = x.shape[1]
    k, s = layer.filter[0], layer.strides[0]
    lo, _ = pads(size, k, s, layer.padding)
    total = None
    for t in range(k):
        q = r * s - lo + t
        if layer.padding == "CIRCULAR":
            row = lax.dynamic_slice_in_dim(x, q % size, 1, axis=1)
        else:
            inside = (q >= 0) & (q < size)
            row = lax.dynamic_slice_in_dim(x, jnp.clip(q, 0, size - 1), 1, axis=1)
            row = jnp.where(inside, row, jnp.zeros((), x.dtype))
        row = tap(row, (2,), t, k, s, layer.padding)
        total = row if total is None else total + row
    total = total * (1.0 / k)
    return joint_window(total, (3, 4), layer.filter[1], layer.strides[1], layer.padding)


def conv_pointwise(state: State, layer: Conv, pointwise, v1, v2, standard: bool,
                   self_pair: bool = False, spare=None) -> State:
    """``pointwise(conv(state))`` computed row by row; ``v1``: ``(P, Ho, Wo)``,
    ``v2``: ``(P, Ho', Wo')`` are the nonlinearity's per-input variances. With
    ``self_pair`` (then ``v1 is v2``) the convolution's diagonal is set to ``v1``.

    ``spare``: arrays no longer needed (an earlier layer's covariances), written
    over row by row when their shape and dtype match the output's. XLA's CPU
    buffer assignment gives every loop's carry an allocation of its own, so
    without this a depth-L network held 2L covariances per pair (176 MiB at
    depth 21, 32x32) instead of the two layers' worth in flight; handing the
    dead input of the layer before over as this loop's carry makes consecutive
    layers ping-pong between two sets of buffers.
    """
    h = state.nngp.shape[1]
    ho = out_size(h, layer.filter[0], layer.strides[0], layer.padding)
    wo = out_size(state.nngp.shape[3], layer.filter[1], layer.strides[1], layer.padding)
    shape = state.nngp.shape[:1] + (ho, ho, wo, wo)
    fan_in = state.channels * layer.filter[0] * layer.filter[1]
    has_ntk = state.ntk is not None

    def body(r, carry):
        nngp, ntk = carry
        mean_ntk = map_ntk(state, lambda a: _conv_row(a, r, layer))
        row = affine(state, _conv_row(state.nngp, r, layer), mean_ntk, layer.W_std,
                     layer.b_std, fan_in, standard, layer.width)
        v_row = lax.dynamic_slice_in_dim(v1, r, 1, axis=1)              # (P, 1, Wo)
        if self_pair:
            h2 = lax.broadcasted_iota(jnp.int32, (1, 1, ho, wo, wo), 2)
            w1 = lax.broadcasted_iota(jnp.int32, (1, 1, ho, wo, wo), 3)
            w2 = lax.broadcasted_iota(jnp.int32, (1, 1, ho, wo, wo), 4)
            on_diag = (h2 == r) & (w1 == w2)
            row = row.replace(nngp=jnp.where(on_diag, v_row[:, :, None, :, None], row.nngp))
        row = pointwise(row, v_row, v2)
        nngp = lax.dynamic_update_slice_in_dim(nngp, row.nngp, r, axis=1)
        if has_ntk:
            ntk = lax.dynamic_update_slice_in_dim(ntk, row.ntk, r, axis=1)
        return nngp, ntk

    zeros = jnp.zeros(shape, state.nngp.dtype)
    init = [zeros, zeros if has_ntk else zeros[:, :0]]
    for k, a in enumerate(spare or ()):
        if getattr(a, "shape", None) == tuple(init[k].shape) and a.dtype == zeros.dtype:
            init[k] = a
    nngp, ntk = lax.fori_loop(0, ho, body, tuple(init))
    return state.replace(nngp=nngp, ntk=ntk if has_ntk else None, channels=layer.width)


def conv_pointwise_repeated(state: State, layer: Conv, pointwise, m: int, v1s, v2s,
                            standard: bool, spare=None):
    """``m`` identical (convolution, nonlinearity) layers as one loop over layers.

    ``state``: full covariances whose shape the convolution keeps and whose NTK is
    an array (or absent). ``v1s``, ``v2s``: ``(m, P, H, W)`` per-layer variances,
    or ``None`` for the per-input pass (each layer's variances are then the
    convolved diagonal of its input, as in :func:`conv_pointwise` with
    ``self_pair``). ``spare``: dead arrays to write into (see ``conv_pointwise``).

    XLA compiles the loop body once instead of ``m`` copies of it, so compile
    time and code size no longer grow with depth (a 21-layer network's programs
    took 10-15 s to compile). The body runs two layers, ``A -> B`` then
    ``B -> A``, so the two sets of buffers swap roles without a copy.

    Returns ``(state, spare, recorded)``: the output state, the arrays of the
    input of the last layer (now dead), and the ``(m, P, H, W)`` variances the
    per-input pass used (``None`` for pairs).
    """
    self_pair = v1s is None
    has_ntk = state.ntk is not None
    a = (state.nngp, state.ntk)
    b = tuple(s if s is not None and getattr(s, "shape", None) == state.nngp.shape
              and s.dtype == state.nngp.dtype else jnp.zeros_like(state.nngp)
              for s in (spare or (None, None)))
    b = (b[0], b[1] if has_ntk else None)
    rec_shape = (m,) + state.nngp.shape[:2] + state.nngp.shape[3:4]
    recs = jnp.zeros(rec_shape, state.nngp.dtype) if self_pair else None

    def layer_at(i, src, dst, recs):
        st = state.replace(nngp=src[0], ntk=src[1])
        if self_pair:
            diag = st.replace(nngp=diagonal(src[0], True), ntk=None, full=False)
            v = conv(diag, layer, standard).nngp                           # (P, H, W)
            recs = lax.dynamic_update_index_in_dim(recs, v, i, axis=0)
            va = vb = v
        else:
            va = lax.dynamic_index_in_dim(v1s, i, keepdims=False)
            vb = lax.dynamic_index_in_dim(v2s, i, keepdims=False)
        out = conv_pointwise(st, layer, pointwise, va, vb, standard, self_pair=self_pair,
                             spare=dst)
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
    out = state.replace(nngp=a[0], ntk=a[1], channels=layer.width)
    return out, b, recs
