"""Networks that flatten the raw input first (fully connected ones), and vector
inputs: they depend on a pair only through the two inputs' dot product, so a
block of pairs is one matrix multiply (a Gram matrix) and the layers on its
entries, with no per-pair covariances at all.

``FlatRoute`` holds that route for a :class:`~kernelcli.kernels._layer_pass.LayerPass`,
which gives it the layers and its ``forward`` (the layers, and readouts' heads, to
the outputs). A pair batch computes the Gram matrix of its block's inputs
and the layers on the batch's entries of it; the per-input pass (each input with
itself, or with its flip) takes each row's dot product the same way. A batch that is a whole block
(what the planner gives a flat network when it fits) takes the grid program
instead: the layers on the whole Gram matrix, no index arrays, no gathers
(fc2: about 1.7x faster than the same pairs gathered; bench/history/BENCHMARKS-2026.md).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from ._maps import kernel_map
from ._state import PairVariances, State


def is_flat_input(layers: Sequence, input_shape: Sequence[int]) -> bool:
    """Whether the network depends on a pair only through the inputs' dot product:
    vector inputs, or a first layer that flattens (its kernel map's ``flattens``)."""
    return len(input_shape) == 1 or kernel_map(layers[0]).flattens


class FlatRoute:
    """The Gram-matrix route of a flat-input network.

    ``layers``: the architecture's layers; ``input_shape``: one example's shape;
    ``want_ntk``: whether the NTK is computed; ``forward(layers, state, variances,
    skipped)``: the network's pass from ``state`` (``LayerPass.forward``), the first
    ``skipped`` layers of the body already applied.
    """

    def __init__(self, layers: Sequence, input_shape: Sequence[int], want_ntk: bool,
                 forward: Callable):
        first_flattens = kernel_map(layers[0]).flattens
        self._layers = layers[1:] if first_flattens else layers
        self._skipped = len(layers) - len(self._layers)
        # images flattened by the first layer (vectors' input state is their dot already)
        self.flattens_images = first_flattens and len(input_shape) >= 2
        self._d = int(np.prod(input_shape))
        self._want_ntk = want_ntk
        self._forward = forward

    def _run(self, state, variances):
        return self._forward(self._layers, state, variances, self._skipped)

    def _state(self, nngp) -> State:
        return State(nngp=nngp, ntk=0.0 if self._want_ntk else None, full=False,
                     spatial=False, channels=self._d)

    def _gram(self, x1, x2):
        d = self._d
        return jnp.matmul(x1.reshape(x1.shape[0], d), x2.reshape(x2.shape[0], d).T,
                          precision="highest") / d

    def grid(self, x1, v1, x2, v2):
        """Every pair of ``x1`` and ``x2``, as ``(n1, n2)`` arrays: the layers on the
        whole Gram matrix, the variances broadcast along rows and columns (no index
        arrays and no gathers: on a whole block this is what a batch costs less).
        One piece, not row bands: bands ran no faster and compiled once per band."""
        return self._run(self._state(self._gram(x1, x2)),
                         PairVariances(tuple(v[:, None] for v in v1),
                                       tuple(v[None, :] for v in v2)))

    def rows(self, xa, xb, variances):
        """Each input of ``xa`` with the same row of ``xb``: their dot product over
        ``d`` in one reduction, then the layers. Not the input's per-pixel diagonal
        that the flatten layer averages: XLA:CPU copied each channel of it apart
        before summing, which cost fc2's per-input pass three times its time."""
        d = self._d
        dot = jnp.sum(xa.reshape(-1, d) * xb.reshape(-1, d), axis=1) / d
        return self._run(self._state(dot), variances)

    def pairs(self, x1, v1, x2, v2, i, j):
        """The pairs ``(x1[i], x2[j])`` from entries of the block's Gram matrix
        ``x1 @ x2.T / d`` (one matrix multiply) and the pairs' variances."""
        gram = self._gram(x1, x2)
        return self._run(self._state(gram[i, j]),
                         PairVariances(tuple(v[i] for v in v1), tuple(v[j] for v in v2)))
