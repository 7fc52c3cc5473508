"""What one traced program evaluates: the layers on a batch of pairs, and the
per-input pass.

* ``LayerPass``: the network on states. It knows the layout of the input's
  covariance and of the state at each readout point (``full_needs``, from
  ``_compose.full_needed``); runs the network on one chunk of pairs (``run``,
  ``forward``): with ``architecture.readouts`` one pass over the body up to the
  last readout, the head applied to the state after each readout's layers, one
  kernel per readout and kind (``nngp_d3``), each what the truncated network
  computes alone; and the per-input pass (``self_fn``), which with
  ``kernel.augment`` averages ``K(x, g x)`` over the flip group (``_flip_group.py``).
* ``Traced``: the three functions the compiled programs trace (per-input pass,
  pair batch, whole-block grid), in chunks of pairs on the cpu engine, each pair
  evaluated against the flipped copies of its second input under ``augment``.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..config import Engine
from . import _flip_group
from ._compose import forward, full_needed
from ._flat import FlatRoute
from ._linear import input_state
from ._linear_spatial import GRAM_CHANNELS, channel_gram
from ._runner import pad_rows
from ._state import PairVariances, SelfVariances, stack_run
from ._xla import x64_scope


def full_needs(arch, spatial: bool):
    """``(input, points)``: whether the input's covariance must be full, and, with
    readouts, the state at each readout point (``full_needed``): full where the
    head, or the body up to the next readout, needs it."""
    layers, ro = arch.layers, arch.readouts
    points = () if ro is None else ro.after
    if not spatial:
        return False, (False,) * len(points)
    if ro is None:
        return full_needed(layers)[0], ()
    head = full_needed(ro.head)[0]
    needs, ahead = [], False
    for i in reversed(range(len(points))):
        needs.append(head or ahead)
        ahead = full_needed(layers[points[i - 1] if i else 0:points[i]], needs[-1])[0]
    return ahead, tuple(reversed(needs))


class LayerPass:
    """The network of ``arch`` (bound to ``input_shape``) on kernel states.

    ``base_kinds``: the kinds computed (``"nngp"``, ``"ntk"``); ``group``: the flip
    group, identity first; ``n_spatial``: the input's spatial axes; ``standard``:
    standard parameterization; ``dtype``: the computation's (float64 takes the maps'
    float64 approximations, ``float64``); ``engine``: the execution engine, whose
    layers the passes run (the accelerator engine's ``_batched`` ones, with no row or
    slab loops; the native engine's custom calls, ``_native``, of its revision).
    """

    def __init__(self, arch, input_shape: Sequence[int], base_kinds: tuple[str, ...],
                 group, n_spatial: int, standard: bool, dtype, engine: Engine):
        self.arch = arch
        self.base_kinds = base_kinds
        self.group = group
        self.n_spatial = n_spatial
        self.standard = standard
        self.dtype = np.dtype(dtype)
        self.float64 = self.dtype == np.float64
        self.engine = engine
        self.want_ntk = "ntk" in base_kinds
        self.input_full, self.readout_full = full_needs(arch, len(input_shape) >= 2)
        self.flat = FlatRoute(arch.layers, input_shape, self.want_ntk, self.forward)

    def run(self, xa, xb, variances, seen=None):
        state = input_state(xa, xb, self.input_full, self.want_ntk)
        if (state.full and not self.engine.batched and xa.shape[-1] <= GRAM_CHANNELS):
            state = state.replace(nngp=channel_gram(xa, xb))
        if seen is not None:
            seen(state)
        if self.flat.flattens_images:  # ``state`` traced for its size (the chunk) only
            return self.flat.rows(xa, xb, variances)
        # the native engine's first layer may make the input's covariance from the images
        inputs = (xa, xb) if self.engine.native else None
        return self.forward(self.arch.layers, state, variances, seen=seen, inputs=inputs)

    def forward(self, layers, state, variances, skipped: int = 0, seen=None, inputs=None):
        """The outputs of ``layers`` (the body, its first ``skipped`` layers already
        applied) from ``state``: with readouts, one pass over the body that applies the
        head after each readout's layers, the state kept full where the body ahead or
        the head needs it (``full_needs``; the head's output is dropped once read).
        ``seen``, ``inputs``: as for ``forward``."""
        ro = self.arch.readouts
        if ro is None:
            return self.outputs(forward(layers, state, variances, self.standard,
                                        self.float64, seen=seen, engine=self.engine,
                                        inputs=inputs))
        out, start = {}, 0
        for after, full in zip(ro.after, self.readout_full, strict=True):
            stop = after - skipped
            state = forward(layers[start:stop], state, variances, self.standard,
                            self.float64, out=full, seen=seen, engine=self.engine)
            head = forward(ro.head, state, variances, self.standard, self.float64, seen=seen,
                           engine=self.engine)
            out.update(self.outputs(head, f"_d{after}"))
            start = stop
        return out

    def self_fn(self, x, seen=None, rec=None):
        """``(variances, outputs)`` of each input of ``x`` with itself."""
        rec = SelfVariances() if rec is None else rec
        out = self.run(x, x, rec, seen)
        v = tuple(rec.recorded)
        if len(self.group) > 1:  # K_G(x, x) = mean over g of K(x, g x)
            values = [out] + [
                self.run(x, _flip_group.flip_rows(x, g),
                         PairVariances(v, _flip_group.flip_variances(v, g, self.n_spatial),
                                       stacks={} if self.engine.batched else None))
                for g in self.group[1:]]
            out = {k: _flip_group.mean_over(jnp.stack([o[k] for o in values]), len(self.group), 0)
                   for k in out}
        return v, out

    def outputs(self, state, suffix: str = ""):
        out = {"nngp": state.nngp}
        if self.want_ntk:
            out["ntk"] = jnp.broadcast_to(state.ntk, state.nngp.shape)
        return {k + suffix: out[k] for k in self.base_kinds}


class Trace(NamedTuple):
    """One trace of the per-input pass that computes nothing (kept: a kernel
    function's shapes never change). ``shapes``: ``(variances, outputs)`` of one
    input with itself, as shapes; ``largest``: the most covariance entries one pair
    holds after any layer (branches included); ``runs``: ``(first, m)`` of each run
    of repeated layers, by variance index (``SelfVariances.runs``)."""

    shapes: tuple
    largest: int
    runs: tuple


def trace(net: LayerPass, input_shape: tuple[int, ...]) -> Trace:
    sizes = []
    rec = SelfVariances()

    def seen(state):
        sizes.append(state.nngp[0].size)

    with x64_scope(net.dtype):
        shapes = jax.eval_shape(lambda x: net.self_fn(x, seen, rec),
                                jax.ShapeDtypeStruct((1,) + input_shape, net.dtype))
    return Trace(shapes, max(sizes), tuple(rec.runs))


class Traced:
    """The functions the compiled programs trace: ``stats_fn`` (the per-input pass),
    ``pairs_fn`` (a batch of index pairs) and ``grid_fn`` (every pair of a flat-input
    block). ``chunk``: pairs per step of the cpu engine's chunk loop; ``flat_input``:
    pairs through the Gram-matrix route; ``runs``: ``Trace.runs``."""

    def __init__(self, net: LayerPass, chunk: int, flat_input: bool, runs: tuple):
        self._net = net
        self._chunk = chunk
        self._flat_input = flat_input
        self._runs = runs

    def _chunked(self, fn, *rows):
        """``fn`` over chunks of ``chunk`` rows of the ``rows`` arrays (padded
        with repeats of the last row), one loop iteration per chunk, concatenated.

        Chunks keep the working set (a few covariances) cache-sized and the
        temporaries allocated once per call, whatever the batch; the layers see
        the chunk as an explicit leading axis, so they can cut it into slabs.

        The accelerator engine has no chunks: ``fn`` on all the rows at once.
        """
        if self._net.engine.batched:
            return fn(*rows)
        n = rows[0].shape[0]
        c = min(self._chunk, n)
        m = -(-n // c) * c
        padded = [pad_rows(r, m) for r in rows]
        out = jax.lax.map(lambda args: fn(*args),
                          tuple(r.reshape((m // c, c) + r.shape[1:]) for r in padded))
        return jax.tree_util.tree_map(lambda a: a.reshape((m,) + a.shape[2:])[:n], out)

    def stats_fn(self, x):
        return self._chunked(self._net.self_fn, x)

    def pairs_fn(self, x1, v1, x2, v2, i, j):
        group = self._net.group
        if len(group) == 1:
            return self._plain_pairs_fn(x1, v1, x2, v2, i, j)
        size = len(group)
        xs, vs = _flip_group.stacked(group, self._net.n_spatial, x2, v2)
        ii, jj = _flip_group.expanded(size, x2.shape[0], i, j)
        out = self._plain_pairs_fn(x1, v1, xs, vs, ii, jj)
        return {k: _flip_group.mean_over(a.reshape(-1, size), size, 1) for k, a in out.items()}

    def grid_fn(self, x1, v1, x2, v2):
        group, flat = self._net.group, self._net.flat
        if len(group) == 1:
            return flat.grid(x1, v1, x2, v2)
        size, n2 = len(group), x2.shape[0]
        out = flat.grid(x1, v1, *_flip_group.stacked(group, self._net.n_spatial, x2, v2))
        return {k: _flip_group.mean_over(a.reshape(a.shape[0], size, n2), size, 1)
                for k, a in out.items()}

    def _plain_pairs_fn(self, x1, v1, x2, v2, i, j):
        if self._flat_input:
            return self._net.flat.pairs(x1, v1, x2, v2, i, j)

        # accelerator engine: runs of repeated layers read their variances from stacks,
        # made once per call (the cpu engine branches per layer: PairVariances)
        stacks = ({first: stack_run(v1, v2, first, m) for first, m in self._runs}
                  if self._net.engine.batched else None)

        def chunk(a, b):
            return self._net.run(x1[a], x2[b], PairVariances(v1, v2, a, b, stacks, (x1, x2)))

        return self._chunked(chunk, i, j)
