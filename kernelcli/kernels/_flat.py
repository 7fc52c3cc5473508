"""Networks that flatten the raw input first (fully connected ones), and vector
inputs: they depend on a pair only through the two inputs' dot product, so a
block of pairs is one matrix multiply (a Gram matrix) and the layers on its
entries, with no per-pair covariances at all.

``FlatRoute`` holds that route for :class:`~kernelcli.kernels._engine.KernelFn`,
which provides ``arch``, ``input_shape``, ``_want_ntk``, ``_standard``, ``_exact``
and ``_forward`` (the layers, and readouts' heads, to the outputs). A pair batch computes the Gram matrix of its block's inputs
and the layers on the batch's entries of it; the per-input variances come from
the same per-input pass as every other network. A batch that is a whole block
(what the planner gives a flat network when it fits) takes the grid program
instead: the layers on the whole Gram matrix, no index arrays, no gathers
(fc2: about 1.7x faster than the same pairs gathered; BENCHMARKS.md).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..spec import Flatten
from ._state import PairVariances, State


class FlatRoute:
    """The Gram-matrix route of a flat-input network (a mixin of ``KernelFn``)."""

    def _flat_layers(self):
        layers = self.arch.layers
        return layers[1:] if isinstance(layers[0], Flatten) else layers

    def _flat_forward(self, state, variances):
        layers = self._flat_layers()
        return self._forward(layers, state, variances, len(self.arch.layers) - len(layers))

    def _flat_state(self, nngp) -> State:
        d = int(np.prod(self.input_shape))
        return State(nngp=nngp, ntk=0.0 if self._want_ntk else None, full=False,
                     spatial=False, channels=d)

    def _flat_grid_fn(self, x1, v1, x2, v2):
        """Every pair of ``x1`` and ``x2``, as ``(n1, n2)`` arrays: the layers on the
        whole Gram matrix, the variances broadcast along rows and columns (no index
        arrays and no gathers: on a whole block this is what a batch costs less).
        One piece, not row bands: bands ran no faster and compiled once per band."""
        d = int(np.prod(self.input_shape))
        gram = jnp.matmul(x1.reshape(x1.shape[0], d), x2.reshape(x2.shape[0], d).T,
                          precision="highest") / d
        return self._flat_forward(self._flat_state(gram),
                                  PairVariances(tuple(v[:, None] for v in v1),
                                                tuple(v[None, :] for v in v2)))

    def _flat_pairs_fn(self, x1, v1, x2, v2, i, j):
        """The pairs ``(x1[i], x2[j])`` from entries of the block's Gram matrix
        ``x1 @ x2.T / d`` (one matrix multiply) and the pairs' variances."""
        d = int(np.prod(self.input_shape))
        gram = jnp.matmul(x1.reshape(x1.shape[0], d), x2.reshape(x2.shape[0], d).T,
                          precision="highest") / d
        return self._flat_forward(self._flat_state(gram[i, j]),
                                  PairVariances(tuple(v[i] for v in v1), tuple(v[j] for v in v2)))
