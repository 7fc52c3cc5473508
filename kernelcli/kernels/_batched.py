"""The accelerator engine's layers: each one pass over the whole pair batch.

On a GPU a program step should be a few large kernels: the cpu engine's loops over
covariance rows (``_fused``) and cache-sized slabs (``_compose._by_slabs``) would
each be a launch of a few microseconds' work. Here a (convolution,
nonlinearity) pair is one elementwise pass over the batch -- the shifted sums of
``_linear.conv`` feeding the nonlinearity -- and every other layer is its map on
the whole batch.

A layer's output is a fusion boundary (:func:`boundary`). Without one XLA may
fuse a layer into the next as an expression and re-evaluate it at each of the
next convolution's taps: a deep network without pooling becomes 9^depth work
and compile time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..config import Conv
from . import _linear
from ._state import State, diagonal


def boundary(state: State) -> State:
    """``state`` with its covariances materialised: XLA fuses nothing across it.

    ``lax.optimization_barrier`` on the layer's output arrays, which XLA:GPU keeps
    through fusion (it drops barriers only after scheduling). XLA:CPU drops them
    before fusion, and its fusion re-evaluates chains of cheap operations (the
    multiply-adds that carry NNGP and NTK from layer to layer) at every tap of the
    next convolution: a 16-layer network without pooling or repeats (32x32, float32)
    compiled in 49 s with ever larger fusions. So on CPU each array also goes
    through ``rem(x, +inf)``, which is ``x`` bit for bit for every finite ``x``
    (covariances are finite) and which XLA counts as expensive and never
    duplicates into several consumers: the same network then compiles in a few
    seconds, in time linear in depth. (The accelerator engine runs on CPUs only to be
    tested and compared; the cpu engine's loops are its boundaries.)
    """
    if not state.spatial:
        return state
    arrays = (state.nngp,) if state.ntk is None or isinstance(state.ntk, float) else (
        state.nngp, state.ntk)
    arrays = materialised(arrays)
    if len(arrays) == 1:
        return state.replace(nngp=arrays[0])
    return state.replace(nngp=arrays[0], ntk=arrays[1])


def materialised(arrays: tuple) -> tuple:
    """``arrays`` computed once, bit for bit, whatever reads them (see
    :func:`boundary`: a barrier, and on CPU ``rem(x, +inf)``)."""
    if jax.default_backend() == "cpu":
        arrays = tuple(lax.rem(a, jnp.asarray(jnp.inf, a.dtype)) for a in arrays)
    return lax.optimization_barrier(arrays)


def with_diagonal(cov, v):
    """The full covariance ``cov`` (``(P, a1, a1', ..., an, an')``) with its spatial
    diagonal (``a_i == a_i'`` for every axis) set to ``v`` (``(P, a1, ..., an)``)."""
    n = (cov.ndim - 1) // 2
    on_diag = None
    for i in range(n):
        eq = (lax.broadcasted_iota(jnp.int32, cov.shape, 1 + 2 * i)
              == lax.broadcasted_iota(jnp.int32, cov.shape, 2 + 2 * i))
        on_diag = eq if on_diag is None else on_diag & eq
    assert on_diag is not None  # a full covariance has spatial axes
    return jnp.where(on_diag, v[(slice(None),) + (slice(None), None) * n], cov)


def block(conv: Conv, pointwise, standard: bool):
    """One (convolution, nonlinearity) pair as ``(state, va, vb, spare) -> (state, v)``,
    as ``_compose._block`` but in one pass over the batch (``spare`` is not needed).

    In the per-input pass (``va is None``) on a full covariance the nonlinearity's
    variances are the convolution of the input's diagonal (a joint shift maps the
    diagonal to itself), and the convolution's output diagonal is set to exactly
    those values, so the angle there is exactly 0 (as ``_fused`` does row by row).
    """
    def run(state: State, va, vb, spare=None):
        self_pair = va is None
        out = _linear.conv(state, conv, standard)
        if self_pair:
            if state.full:
                diag = state.replace(nngp=diagonal(state.nngp, True), ntk=None, full=False)
                # once: XLA would otherwise recompute the variances (a multiply-add)
                # inside each consumer's fusion, contracting them to an FMA in one and
                # not the other, and the angle at the diagonal would not be 0
                (va,) = materialised((_linear.conv(diag, conv, standard).nngp,))
                out = out.replace(nngp=with_diagonal(out.nngp, va))
            else:
                va = out.nngp
            vb = va
        return boundary(pointwise(out, va, vb)), va

    return run
