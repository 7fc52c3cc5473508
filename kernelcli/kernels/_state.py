"""The kernel state that every layer maps to a new one.

For a batch of P input pairs ``(x1[i], x2[j])`` the state holds

* ``nngp`` and ``ntk`` (``ntk`` is ``None`` when only the NNGP is wanted), of
  shape ``(P, a1, a1', ..., an, an')`` for inputs with ``n`` spatial axes (1 to
  3: sequences, images, volumes; ``(P, H, H', W, W')`` for images) when the full
  spatial covariance is tracked (``full=True``: needed up to the last pooling
  layer), ``(P, a1, ..., an)`` (``(P, H, W)``) when only its spatial diagonal is
  (``full=False``), or ``(P,)`` once the spatial axes are gone
  (``spatial=False``: after ``flatten`` / ``global_avg_pool``, or for vector
  inputs);
* ``channels``: the width feeding the next affine layer, which only the
  ``standard`` parameterization's NTK reads.

The full covariance interleaves the two inputs' axes, ``(a1, a1', a2, a2', ...)``,
so a convolution or a pooling window acts on one adjacent pair of axes at a
time: spatial axis ``i`` (from 0) is the pair ``(1 + 2i, 2 + 2i)`` of a full
covariance and axis ``1 + i`` of a diagonal one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class State:
    nngp: Any
    ntk: Optional[Any]
    full: bool
    spatial: bool
    channels: int

    def replace(self, **kw) -> State:
        return replace(self, **kw)

    @property
    def n_axes(self) -> int:
        """How many spatial axes the feature map has (0 once they are gone)."""
        if not self.spatial:
            return 0
        return (self.nngp.ndim - 1) // 2 if self.full else self.nngp.ndim - 1

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        """Spatial sizes of the current feature map, one per axis (``(H, W)`` for
        images); ``()`` once the spatial axes are gone."""
        if self.full:
            return tuple(self.nngp.shape[1::2])
        return tuple(self.nngp.shape[1:]) if self.spatial else ()

    @property
    def hw(self) -> tuple[int, ...]:
        """:attr:`spatial_shape` (the name is from when every input was an image)."""
        return self.spatial_shape


def diagonal(cov, full: bool):
    """Spatial diagonal: ``(P, a1, a1', ..., an, an') -> (P, a1, ..., an)`` when
    ``full`` (``(P, H, H, W, W) -> (P, H, W)``), else as is."""
    if not full:
        return cov
    # each step moves the diagonal of the leading pair of axes to the end:
    # (P, H, H, W, W) -> (P, W, W, H) -> (P, H, W)
    d = cov
    for _ in range((cov.ndim - 1) // 2):
        d = jnp.diagonal(d, axis1=1, axis2=2)
    return d


def to_diagonal(state: State) -> State:
    """Drop the off-diagonal spatial covariance once no pooling layer needs it."""
    if not (state.spatial and state.full):
        return state
    ntk = state.ntk
    if ntk is not None and not isinstance(ntk, float):
        ntk = diagonal(ntk, True)
    return state.replace(nngp=diagonal(state.nngp, True), ntk=ntk, full=False)


def reusable(spare, shape, dtype):
    """``spare`` (a dead array, or ``None``) where it can hold an array of ``shape``
    and ``dtype``, else zeros of that shape: the initial carry of a loop that
    writes every entry, so its values never matter, only its buffer."""
    if getattr(spare, "shape", None) == tuple(shape) and spare.dtype == dtype:
        return spare
    return jnp.zeros(shape, dtype)


class PairVariances:
    """Per-input variances for pair evaluations, read by layer order.

    ``v1[k]`` and ``v2[k]`` are the spatial diagonals (shape ``(n, H_k, W_k)``, one
    size per spatial axis, or ``(n,)``) of the k-th layer that needs variances (a nonlinearity or
    ``layer_norm``), one row per input; ``rows1``, ``rows2`` (``(P,)`` int) pick
    the first and second image of each pair (``None``: already laid out per pair).
    Each layer gathers only its own variances, when it runs, so a chunk of pairs
    never holds the gathered variances of every layer at once (at depth 21 those
    were 10x the chunk's covariances).

    How a loop over a run of repeated layers reads layer ``i``'s variances (``run``)
    is the engines' one difference here. The cpu engine (``stacks is None``) branches on
    ``i`` with ``lax.switch``, one branch per layer: each branch gathers its own
    layer's rows, nothing is copied up front (a stack of a run's per-input arrays
    would be ``m`` copies of them per call: twice the temporaries of a flatten
    network's pair batch). The accelerator engine cannot branch: XLA:GPU reads a
    switch's index on the host, a round trip per layer. It slices layer ``i`` out of
    a stack of the run's per-input arrays at the traced index instead (a dynamic
    slice on the device): ``stacks`` is ``{first: (s1, s2)}``, the ``(m, n, ...)``
    stacks of ``v1[first:first + m]`` and ``v2[...]`` (:func:`stack_run`), made once
    per call outside the layers; a run without one is stacked where it is read.

    ``images``: the two inputs' tables that ``rows1`` and ``rows2`` index, for the
    native diagonal chain that makes the input's diagonal itself (:meth:`tables`).
    """

    def __init__(self, v1, v2, rows1=None, rows2=None, stacks=None, images=None):
        self.v1, self.v2, self.rows1, self.rows2, self.k = v1, v2, rows1, rows2, 0
        self.stacks, self.images = stacks, images

    def _take(self, k):
        def pick(v, rows):
            return v if rows is None else v[rows]

        return pick(self.v1[k], self.rows1), pick(self.v2[k], self.rows2)

    def __call__(self, state: State):
        self.k += 1
        return self._take(self.k - 1)

    def tables(self, m: int, pairs: int, inputs=None):
        """The next ``m`` layers' per-input records as the native diagonal chain reads
        them (the variances' roots, which its per-input pass records), ungathered:
        ``(v1s, v2s, rows1, rows2, images)``, each side's ``m`` tables, the row of each
        of the ``pairs`` pairs in them (``int32``; laid out per pair: row ``p`` is pair
        ``p``), and the two inputs' images read by the same rows: ``images`` where the
        rows were given, else ``inputs`` (the pairs' own); ``None`` where neither is."""
        first = self.k
        self.k += m

        def rows(r):
            return (jnp.arange(pairs, dtype=jnp.int32) if r is None
                    else jnp.asarray(r).astype(jnp.int32))

        laid_out = self.rows1 is None and self.rows2 is None
        return (self.v1[first:first + m], self.v2[first:first + m], rows(self.rows1),
                rows(self.rows2), inputs if laid_out else self.images)

    def run(self, m: int):
        """The next ``m`` layers' variances as ``at(i) -> (va, vb)`` for a traced
        layer index ``i`` (inside a loop over layers); only layer ``i``'s pairs' rows
        are gathered. A branch per layer (cpu engine) or a dynamic slice of their stack
        (accelerator engine), as the class says."""
        first = self.k
        self.k += m
        if self.stacks is None:
            branches = [lambda t=t: self._take(first + t) for t in range(m)]
            return lambda i: lax.switch(i, branches)
        s1, s2 = self.stacks.get(first) or stack_run(self.v1, self.v2, first, m)

        def at(i):
            def pick(s, rows):
                v = lax.dynamic_index_in_dim(s, i, 0, keepdims=False)
                return v if rows is None else v[rows]

            return pick(s1, self.rows1), pick(s2, self.rows2)

        return at


def stack_run(v1, v2, first: int, m: int):
    """The per-input variances of layers ``first .. first + m - 1`` (a run of repeated
    layers, so all of one shape), stacked: ``((m, n1, ...), (m, n2, ...))``."""
    return jnp.stack(v1[first:first + m]), jnp.stack(v2[first:first + m])


class SelfVariances:
    """Variances of a per-input (self-pair) pass: read off the state and recorded.
    ``runs``: ``(first, m)`` of each run of ``m`` repeated layers whose variances
    were recorded from index ``first`` on (what a pair pass reads with ``run``)."""

    def __init__(self):
        self.recorded: list[Any] = []
        self.runs: list[tuple[int, int]] = []

    def __call__(self, state: State):
        d = diagonal(state.nngp, state.full) if state.spatial else state.nngp
        self.recorded.append(d)
        return d, d


def outer(v1, v2, state: State):
    """Combine per-position terms of the two inputs to the state's layout.

    ``v1``, ``v2``: ``(P, a1, ..., an)`` (``(P, H, W)``; or ``(P,)``). Returns a
    broadcastable pair so that ``v1 * v2`` has the shape of ``state.nngp`` without
    being materialised by itself (XLA fuses the broadcast into the consumer):
    ``v1[:, :, None, :, None]`` and ``v2[:, None, :, None, :]`` for images.
    """
    if state.spatial and state.full:
        n = v1.ndim - 1
        return (v1[(slice(None),) + (slice(None), None) * n],
                v2[(slice(None),) + (None, slice(None)) * n])
    return v1, v2
