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

The loop carries the convolution's next row (before the affine map) from one step
to the next, and each step applies the nonlinearity to the row it was handed.
XLA:CPU copies a cheap producer, such as the window's sum of shifted rows, into
every fusion that reads it, and the nonlinearity's chain is cut into four loops
(at its square roots, its division, and its two outputs): computed in the same
step, the window was summed four times per row; carried, it is summed once and
read from a buffer (profiled on the pooling nets in float32).

In the per-input pass (an input with itself) the nonlinearity's variances are
the diagonal of the convolution's output, which the row loop has not built yet;
they equal the convolution of the input's diagonal (a joint shift maps the
diagonal to itself), computed first, and written over the diagonal entries of
each row, so the angle there is exactly 0 as it must be.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ..config import Conv, bound_axes
from ._linear import affine, map_ntk
from ._spatial import joint_window, out_size, pads, tap
from ._state import State, reusable


def _conv_row(x, r, layer: Conv):
    """Row ``r`` of the joint-shift mean of ``x`` (``(P, a1, a1', ..., an, an')``):
    ``(P, 1, a1o', a2o, a2o', ...)``; ``(P, 1, Ho', Wo, Wo')`` for images."""
    size = x.shape[1]
    filt, strides = bound_axes(layer.filter), bound_axes(layer.strides)
    k, s = filt[0], strides[0]
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
    assert total is not None  # k >= 1 taps
    total = total * (1.0 / k)
    for i in range(1, len(filt)):  # the remaining axes: (3, 4) for images
        total = joint_window(total, (1 + 2 * i, 2 + 2 * i), filt[i], strides[i],
                             layer.padding)
    return total


def conv_pointwise(state: State, layer: Conv, pointwise, v1, v2, standard: bool,
                   self_pair: bool = False, spare=None) -> State:
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
    filt = bound_axes(layer.filter)
    outs = tuple(out_size(n, k, s, layer.padding) for n, k, s in
                 zip(state.spatial_shape, filt, bound_axes(layer.strides), strict=True))
    ho, rest = outs[0], outs[1:]
    shape = state.nngp.shape[:1] + tuple(n for o in outs for n in (o, o))
    fan_in = state.channels * math.prod(filt)
    has_ntk = state.ntk is not None
    row_shape = (1, 1) + shape[2:]  # one row of one pair: (1, 1, Ho', Wo, Wo')

    def means(r):
        """The convolution's row ``r`` (before the affine map), both kinds: what
        the loop carries from one step to the next."""
        mean_ntk = map_ntk(state, lambda a: _conv_row(a, r, layer))
        return _conv_row(state.nngp, r, layer), mean_ntk

    def body(r, carry):
        nngp, ntk, mean_nngp, mean_ntk = carry
        row = affine(state, mean_nngp, mean_ntk if carries_ntk else state.ntk,
                     layer.W_std, layer.b_std, fan_in, standard, layer.width)
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
        row = pointwise(row, v_row, v2)
        nngp = lax.dynamic_update_slice_in_dim(nngp, row.nngp, r, axis=1)
        if has_ntk:
            ntk = lax.dynamic_update_slice_in_dim(ntk, row.ntk, r, axis=1)
        next_nngp, next_ntk = means(jnp.minimum(r + 1, ho - 1))
        return nngp, ntk, next_nngp, next_ntk if carries_ntk else mean_ntk

    spare_nngp, spare_ntk = spare or (None, None)
    dtype = state.nngp.dtype
    no_ntk = jnp.zeros(shape[:1] + (0,) + shape[2:], dtype)  # a carry placeholder
    first_nngp, first_ntk = means(0)
    carries_ntk = first_ntk is not None and not isinstance(first_ntk, float)
    init = (reusable(spare_nngp, shape, dtype),
            reusable(spare_ntk, shape, dtype) if has_ntk else no_ntk,
            first_nngp, first_ntk if carries_ntk else no_ntk[:, :, :0])
    nngp, ntk, _, _ = lax.fori_loop(0, ho, body, init)
    return state.replace(nngp=nngp, ntk=ntk if has_ntk else None, channels=layer.width)
