"""Networks that flatten the raw input first (fully connected ones), and vector
inputs: they depend on a pair only through the two inputs' dot product, so a
block of pairs is one matrix multiply (a Gram matrix) and the layers on its
entries, with no per-pair covariances at all.

``FlatRoute`` holds that route for :class:`~kernelcli.kernels._engine.KernelFn`,
which provides ``arch``, ``input_shape``, ``kinds``, ``dtype``, ``_want_ntk``,
``_standard``, ``_exact``, ``_outputs``, ``_cast`` and the compiled
``_block_jit`` / ``_tri_jit`` of ``_flat_block_fn`` / ``_flat_tri_fn``.
"""

from __future__ import annotations

from typing import Dict

import jax.numpy as jnp
import numpy as np

from ..spec._layers import Flatten
from ._compose import forward
from ._state import PairVariances, SelfVariances, State


class FlatRoute:
    """The Gram-matrix route of a flat-input network (a mixin of ``KernelFn``)."""

    def _flat_layers(self):
        layers = self.arch.layers
        return layers[1:] if isinstance(layers[0], Flatten) else layers

    def _flat_state(self, nngp) -> State:
        d = int(np.prod(self.input_shape))
        return State(nngp=nngp, ntk=0.0 if self._want_ntk else None, full=False,
                     spatial=False, channels=d)

    def _flat_forward(self, x1, x2, pick, va, vb):
        """A flat-input network on entries ``pick(gram)`` of the block's Gram matrix
        ``x1 @ x2.T / d`` (one matrix multiply), with the variances ``va``, ``vb``
        already laid out like those entries."""
        d = int(np.prod(self.input_shape))
        gram = jnp.matmul(x1.reshape(x1.shape[0], d), x2.reshape(x2.shape[0], d).T,
                          precision="highest") / d
        state = forward(self._flat_layers(), self._flat_state(pick(gram)),
                        PairVariances(va, vb), self._standard, self._exact)
        return self._outputs(state)

    def _flat_self(self, x):
        """A flat-input network on each input with itself, from its squared norm:
        the per-layer variances (each ``(n,)``) and ``K(x, x)`` per kind."""
        d = int(np.prod(self.input_shape))
        xf = x.reshape(x.shape[0], d)
        rec = SelfVariances()
        state = forward(self._flat_layers(), self._flat_state(jnp.sum(xf * xf, axis=1) / d),
                        rec, self._standard, self._exact)
        return tuple(rec.recorded), self._outputs(state)

    def _flat_bands(self, x1, x2, lower: bool):
        """A flat-input network on every pair of ``x1`` (``(n1, ...)``) and ``x2``, in
        row bands (``p`` of them, up to 8 of at least 256 rows): band ``r`` holds rows
        ``[r*b, (r+1)*b)`` against all columns, or with ``lower`` (``x2 is x1``) against
        columns ``[0, (r+1)*b)``, so the matrix multiplies and the layers cost
        ``(p+1)/(2p)`` of the square. A band's intermediates are ``1/p`` of the
        block's. Returns ``(bands: list of {kind: (rows, cols)}, K(x1, x1) (n1,))``;
        the per-input variances come from squared norms, in the same program."""
        n = x1.shape[0]
        parts = max(1, min(8, n // 256))
        b = -(-n // parts)
        v1, diag1 = self._flat_self(x1)
        v2 = v1 if lower else self._flat_self(x2)[0]
        bands = []
        for r0 in range(0, n, b):
            r1 = min(r0 + b, n)
            c1 = r1 if lower else x2.shape[0]
            bands.append(self._flat_forward(x1[r0:r1], x2[:c1], lambda g: g,
                                            tuple(a[r0:r1, None] for a in v1),
                                            tuple(a[None, :c1] for a in v2)))
        return bands, diag1

    def _flat_block_fn(self, x1, x2):
        return self._flat_bands(x1, x2, lower=False)

    def _flat_tri_fn(self, x):
        return self._flat_bands(x, x, lower=True)

    def _flat_pairs_fn(self, x1, v1, x2, v2, i, j):
        """The pairs ``(i, j)`` of a flat-input network (a network whose first layer
        flattens the input depends on a pair only through its dot product)."""
        return self._flat_forward(x1, x2, lambda g: g[i, j], tuple(v[i] for v in v1),
                                  tuple(v[j] for v in v2))

    def _flat_matrix(self, x1: np.ndarray, x2: np.ndarray, sym: bool) -> Dict[str, np.ndarray]:
        """``matrix(x1, x2)`` of a flat-input network: ``(n1, n2)`` per kind; with
        ``sym`` (``x2 is x1``) the lower triangle's bands, mirrored."""
        n = x1.shape[0]
        if sym:
            bands, diag = self._tri_jit(self._cast(x1))
        else:
            bands, diag = self._block_jit(self._cast(x1), self._cast(x2))
        out = {k: np.empty((n, x2.shape[0]), self.dtype) for k in self.kinds}
        r0 = 0
        for band in bands:  # each band's device arrays freed once copied
            r1 = r0 + band[self.kinds[0]].shape[0]
            for k in self.kinds:
                part = band.pop(k)
                out[k][r0:r1, :part.shape[1]] = np.asarray(part)
            r0 = r1
        if sym:  # exactly symmetric, diagonal from the inputs' own pass
            for k in self.kinds:
                _mirror_lower(out[k])
                out[k][np.diag_indices(n)] = np.asarray(diag[k])
        return out


def _mirror_lower(a: np.ndarray, rows: int = 512) -> None:
    """Make the square ``a`` symmetric in place from its lower triangle, a band of
    ``rows`` rows at a time (no ``(n, n)`` temporaries)."""
    n = a.shape[0]
    for r in range(0, n, rows):
        e = min(r + rows, n)
        a[r:e, e:] = a[e:, r:e].T
        block = a[r:e, r:e]
        low = np.tril(block, -1)
        block[...] = low + low.T + np.diag(np.diagonal(block))
