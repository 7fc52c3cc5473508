"""A convolution and the nonlinearity after it, one output row at a time.

On a full covariance ``(P, H, H', W, W')`` a convolution is a few streaming
passes over arrays of ``(H*W)^2`` entries per pair (4 MiB at 32x32 in float32),
and the nonlinearity after it another few: memory traffic, not arithmetic,
would set the pace. Output row ``h`` of the convolution needs only input rows
``h*s - low + t`` (``t < k``), so both layers can run row by row: the input
rows and every intermediate (128 KiB at 32x32) stay in the core's cache, and
each layer reads its input and writes its output once.

Inputs with other numbers of spatial axes run the same way: rows over the first
spatial axis, each row then windowed jointly along the remaining axes' pairs
(none for sequences, whose row is ``(P, 1, L')``; two for volumes).

In the per-input pass (an input with itself) the nonlinearity's variances are
the diagonal of the convolution's output, which the row loop has not built yet;
they equal the convolution of the input's diagonal (a joint shift maps the
diagonal to itself), computed first, and written over the diagonal entries of
each row, so the angle there is exactly 0 as it must be.

Two shortcuts of a pair pass on the CPU plan (``_compose.forward`` asks for them):

* the network's first convolution, on the raw inputs, is a matrix product over
  patches (:func:`patch_rows`): its output row is the channel-and-tap mean of
  products of the two inputs' ``k1 x k2 x C`` patches, one GEMM per row, instead
  of the input's Gram over channels (a product with an inner size of ``C``, 3 for
  images: no GEMM at all, and its ``(H*W)^2`` entries written through memory)
  followed by the window's shifted sums;
* a global pooling layer right after the nonlinearity sums each row as it is
  produced (``pool``): the covariances are never written.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..spec import Conv
from ._linear import affine, map_ntk
from ._spatial import joint_window, out_size, pads, tap
from ._state import State, reusable


def _conv_row(x, r, layer: Conv):
    """Row ``r`` of the joint-shift mean of ``x`` (``(P, a1, a1', ..., an, an')``):
    ``(P, 1, a1o', a2o, a2o', ...)``; ``(P, 1, Ho', Wo, Wo')`` for images."""
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
    for i in range(1, len(layer.filter)):  # the remaining axes: (3, 4) for images
        total = joint_window(total, (1 + 2 * i, 2 + 2 * i), layer.filter[i],
                             layer.strides[i], layer.padding)
    return total


def patches(x, layer: Conv):
    """``(P, o1, ..., on, K)``: at each output position of ``layer`` on ``x``
    (``(P, a1, ..., an, C)``), the ``K = prod(filter) * C`` input values its window
    reads (zero, or wrapped for CIRCULAR, outside the input)."""
    p = x[..., None, :]  # (P, a1, ..., an, taps, C)
    for i, (k, s) in enumerate(zip(layer.filter, layer.strides)):
        p = jnp.concatenate([tap(p, (1 + i,), t, k, s, layer.padding) for t in range(k)],
                            axis=-2)
    return p.reshape(p.shape[:-2] + (-1,))


_LETTERS = "abcdefgh"


def patch_rows(x1, x2, layer: Conv):
    """``row(r)``: row ``r`` of the joint-shift mean of the raw inputs' covariance
    (what ``_conv_row`` computes from their Gram over channels), ``(P, 1, o1', o2,
    o2', ...)``, from ``x1``, ``x2`` (``(P, a1, ..., an, C)``): the mean over taps
    and channels of products of patches, one matrix product per row."""
    p1, p2 = patches(x1, layer), patches(x2, layer)
    scale = 1.0 / p1.shape[-1]
    n = x1.ndim - 2
    a, b = _LETTERS[:n], _LETTERS[:n].upper()
    spec = f"p{a[1:]}k,p{b}k->p{b[0]}" + "".join(i + j for i, j in zip(a[1:], b[1:]))

    def row(r):
        mine = lax.dynamic_index_in_dim(p1, r, axis=1, keepdims=False)
        out = jnp.einsum(spec, mine, p2, precision=lax.Precision.HIGHEST)
        return out[:, None] * scale

    return row


def conv_pointwise(state: State, layer: Conv, pointwise, v1, v2, standard: bool,
                   self_pair: bool = False, spare=None, inputs=None,
                   pool: str = "") -> State:
    """``pointwise(conv(state))`` computed row by row; ``v1``: ``(P, Ho, Wo)``,
    ``v2``: ``(P, Ho', Wo')`` (one size per spatial axis) are the nonlinearity's
    per-input variances. With ``self_pair`` (then ``v1 is v2``) the convolution's
    diagonal is set to ``v1``.

    ``spare``: arrays no longer needed (an earlier layer's covariances), written
    over row by row when their shape and dtype match the output's. XLA's CPU
    buffer assignment gives every loop's carry an allocation of its own, so
    without this a depth-L network held 2L covariances per pair (176 MiB at
    depth 21, 32x32) instead of the two layers' worth in flight; handing the
    dead input of the layer before over as this loop's carry makes consecutive
    layers ping-pong between two sets of buffers.
    """
    outs = tuple(out_size(n, k, s, layer.padding) for n, k, s in
                 zip(state.spatial_shape, layer.filter, layer.strides))
    ho, rest = outs[0], outs[1:]
    shape = state.nngp.shape[:1] + tuple(n for o in outs for n in (o, o))
    fan_in = state.channels * math.prod(layer.filter)
    has_ntk = state.ntk is not None
    row_shape = (1, 1) + shape[2:]  # one row of one pair: (1, 1, Ho', Wo, Wo')

    if inputs is None:
        def mean_nngp(r):
            return _conv_row(state.nngp, r, layer)
    else:  # the raw inputs' covariance (its NTK is the scalar 0: nothing to convolve)
        mean_nngp = patch_rows(*inputs, layer)

    def row_of(r):
        mean_ntk = map_ntk(state, lambda a: _conv_row(a, r, layer))
        row = affine(state, mean_nngp(r), mean_ntk, layer.W_std,
                     layer.b_std, fan_in, standard, layer.width)
        v_row = lax.dynamic_slice_in_dim(v1, r, 1, axis=1)              # (P, 1, Wo)
        if self_pair:
            # the row's diagonal: second position in row r (h' == r), the other axes
            # equal (w == w')
            iota = [lax.broadcasted_iota(jnp.int32, row_shape, d)
                    for d in range(2, len(row_shape))]
            on_diag = iota[0] == r
            for i in range(len(rest)):
                on_diag = on_diag & (iota[1 + 2 * i] == iota[2 + 2 * i])
            v_diag = v_row[(slice(None), slice(None), None) + (slice(None), None) * len(rest)]
            row = row.replace(nngp=jnp.where(on_diag, v_diag, row.nngp))
        return pointwise(row, v_row, v2)

    if pool:
        return _pooled_rows(state, row_of, ho, pool, has_ntk, layer.width, shape)

    def body(r, carry):
        nngp, ntk = carry
        row = row_of(r)
        nngp = lax.dynamic_update_slice_in_dim(nngp, row.nngp, r, axis=1)
        if has_ntk:
            ntk = lax.dynamic_update_slice_in_dim(ntk, row.ntk, r, axis=1)
        return nngp, ntk

    spare_nngp, spare_ntk = spare or (None, None)
    dtype = state.nngp.dtype
    no_ntk = jnp.zeros(shape[:1] + (0,) + shape[2:], dtype)  # a carry placeholder
    init = (reusable(spare_nngp, shape, dtype),
            reusable(spare_ntk, shape, dtype) if has_ntk else no_ntk)
    nngp, ntk = lax.fori_loop(0, ho, body, init)
    return state.replace(nngp=nngp, ntk=ntk if has_ntk else None, channels=layer.width)


def _pooled_rows(state: State, row_of, ho: int, pool: str, has_ntk: bool, width: int,
                 shape) -> State:
    """The global pooling of the rows ``row_of(r)``, ``r < ho``, summed as they come."""
    def total(a):
        return jnp.sum(a, axis=tuple(range(1, a.ndim)))

    def body(r, carry):
        row = row_of(r)
        return (carry[0] + total(row.nngp),
                carry[1] + total(row.ntk) if has_ntk else carry[1])

    zero = jnp.zeros(shape[:1], state.nngp.dtype)
    nngp, ntk = lax.fori_loop(0, ho, body, (zero, zero))
    if pool == "avg":
        count = math.prod(shape[1:])
        nngp, ntk = nngp / count, ntk / count
    return state.replace(nngp=nngp, ntk=ntk if has_ntk else None, channels=width,
                         spatial=False, full=False)
