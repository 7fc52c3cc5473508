"""What one traced program evaluates: the layers on a batch of pairs, and the
per-input pass.

``LayerPass`` holds, for :class:`~kernelcli.kernels._engine.KernelFn` (which
provides ``arch``, ``group``, ``n_spatial``, ``base_kinds``, ``_want_ntk``,
``_standard``, ``_exact``, ``_batched``, ``_input_full``, ``_readout_full``,
``_chunked``, ``_variance_runs`` and the flat route's ``_flat_pairs_fn`` /
``_flat_grid_fn``):

* the layout of the input's covariance and of the state at each readout point
  (``_full_needs``, from ``_compose.full_needed``);
* the network on one chunk of pairs (``_run``, ``_forward``): with
  ``architecture.readouts`` one pass over the body up to the last readout, the
  head applied to the state after each readout's layers, one kernel per readout
  and kind (``nngp_d3``), each what the truncated network computes alone;
* with ``kernel.augment``, the average over the flip group (``_group.py``):
  each pair evaluated against the flipped copies of its second input, and the
  per-input pass averaging ``K(x, g x)``.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _group
from ._compose import forward, full_needed
from ._linear import input_state
from ._state import PairVariances, SelfVariances, stack_run


class LayerPass:
    """The traced functions of a ``KernelFn`` (a mixin, like ``FlatRoute``)."""

    def _full_needs(self, spatial: bool):
        """``(input, points)``: whether the input's covariance must be full, and, with
        readouts, the state at each readout point (``full_needed``): full where the
        head, or the body up to the next readout, needs it."""
        layers, ro = self.arch.layers, self.arch.readouts
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

    def _run(self, xa, xb, variances, seen=None):
        state = input_state(xa, xb, self._input_full, self._want_ntk)
        if seen is not None:
            seen(state)
        return self._forward(self.arch.layers, state, variances, seen=seen)

    def _forward(self, layers, state, variances, skipped: int = 0, seen=None):
        """The outputs of ``layers`` (the body, its first ``skipped`` layers already
        applied) from ``state``: with readouts, one pass over the body that applies the
        head after each readout's layers, the state kept full where the body ahead or
        the head needs it (``_full_needs``; the head's output is dropped once read).
        ``seen``: as for ``forward``."""
        ro = self.arch.readouts
        if ro is None:
            return self._outputs(forward(layers, state, variances, self._standard,
                                         self._exact, seen=seen, batched=self._batched))
        out, start = {}, 0
        for after, full in zip(ro.after, self._readout_full):
            stop = after - skipped
            state = forward(layers[start:stop], state, variances, self._standard,
                            self._exact, out=full, seen=seen, batched=self._batched)
            head = forward(ro.head, state, variances, self._standard, self._exact, seen=seen,
                           batched=self._batched)
            out.update(self._outputs(head, f"_d{after}"))
            start = stop
        return out

    def _self_fn(self, x, seen=None, rec=None):
        rec = SelfVariances() if rec is None else rec
        out = self._run(x, x, rec, seen)
        v = tuple(rec.recorded)
        if len(self.group) > 1:  # K_G(x, x) = mean over g of K(x, g x)
            values = [out] + [
                self._run(x, _group.flip_rows(x, g),
                          PairVariances(v, _group.flip_variances(v, g, self.n_spatial),
                                        stacks={} if self._batched else None))
                for g in self.group[1:]]
            out = {k: _group.mean_over(jnp.stack([o[k] for o in values]), len(self.group), 0)
                   for k in out}
        return v, out

    def _pairs_fn(self, x1, v1, x2, v2, i, j):
        if len(self.group) == 1:
            return self._plain_pairs_fn(x1, v1, x2, v2, i, j)
        size = len(self.group)
        xs, vs = _group.stacked(self.group, self.n_spatial, x2, v2)
        ii, jj = _group.expanded(size, x2.shape[0], i, j)
        out = self._plain_pairs_fn(x1, v1, xs, vs, ii, jj)
        return {k: _group.mean_over(a.reshape(-1, size), size, 1) for k, a in out.items()}

    def _grid_fn(self, x1, v1, x2, v2):
        if len(self.group) == 1:
            return self._flat_grid_fn(x1, v1, x2, v2)
        size, n2 = len(self.group), x2.shape[0]
        out = self._flat_grid_fn(x1, v1, *_group.stacked(self.group, self.n_spatial, x2, v2))
        return {k: _group.mean_over(a.reshape(a.shape[0], size, n2), size, 1)
                for k, a in out.items()}

    def _plain_pairs_fn(self, x1, v1, x2, v2, i, j):
        if self.flat_input:
            return self._flat_pairs_fn(x1, v1, x2, v2, i, j)

        # accelerator plan: runs of repeated layers read their variances from stacks,
        # made once per call (the CPU plan branches per layer: PairVariances)
        stacks = ({first: stack_run(v1, v2, first, m) for first, m in self._variance_runs()}
                  if self._batched else None)

        def chunk(a, b):
            return self._run(x1[a], x2[b], PairVariances(v1, v2, a, b, stacks))

        return self._chunked(chunk, i, j)

    def _outputs(self, state, suffix: str = ""):
        out = {"nngp": state.nngp}
        if self._want_ntk:
            out["ntk"] = jnp.broadcast_to(state.ntk, state.nngp.shape)
        return {k + suffix: out[k] for k in self.base_kinds}
