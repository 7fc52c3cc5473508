"""Networks whose first layer flattens the input (and vector inputs) depend on a
pair only through the inputs' dot product: ``matrix`` computes them from Gram
matrices in one program, the per-input variances from squared norms in the same
program, and a symmetric matrix as row bands of its lower triangle. The result
must equal the general route (per-input pass + pair evaluations)."""

from __future__ import annotations

import numpy as np
import pytest

from test_kernels_properties import KINDS, arch_of, inputs, kernel_fn, rel

FC = ("flatten", "dense: {W_std: 1.5, b_std: 0.1}", "relu", "dense: {W_std: 1.3, b_std: 0.2}",
      "erf", "dense: {W_std: 1.0}")


@pytest.mark.parametrize("n", [7, 600])  # one band, and two
def test_symmetric_flat_matrix_in_bands_equals_pair_evaluations(n):
    arch = arch_of(*FC)
    shape = (3, 2, 2)
    kfn = kernel_fn(arch, shape)
    x = inputs(n, shape, seed=3)
    sym = kfn.matrix(x)
    s = kfn.stats(x)
    i, j = np.tril_indices(n, -1)
    pairs = kfn.pair_values(x, s, x, s, i, j, pair_batch=4096)
    for k in KINDS:
        assert np.array_equal(sym[k], sym[k].T), k
        assert rel(sym[k][i, j], pairs[k]) < 1e-12, k
        assert rel(np.diag(sym[k]), s.diag[k]) < 1e-12, k


def test_rectangular_flat_matrix_equals_pair_evaluations():
    arch = arch_of(*FC)
    shape = (3, 2, 2)
    kfn = kernel_fn(arch, shape)
    x1, x2 = inputs(9, shape, seed=4), inputs(5, shape, seed=5)
    got = kfn.matrix(x1, x2)
    s1, s2 = kfn.stats(x1), kfn.stats(x2)
    i, j = (a.ravel() for a in np.meshgrid(np.arange(9), np.arange(5), indexing="ij"))
    want = kfn.pair_values(x1, s1, x2, s2, i, j, pair_batch=64)
    for k in KINDS:
        assert rel(got[k][i, j], want[k]) < 1e-12, k
