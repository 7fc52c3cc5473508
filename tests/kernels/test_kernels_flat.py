"""Networks whose first layer flattens the input (and vector inputs) depend on a
pair only through the inputs' dot product: a pair batch computes its block's
Gram matrix and the layers on the batch's entries, and a batch of a whole block
the layers on the whole Gram matrix (the grid program). Through the route ``compute``
takes (:func:`kernelcli.run.kernel_matrix`: blocks, pair batches, mirrored
triangle) the matrix must equal single pair evaluations, whatever the blocks and
batches."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_properties import KINDS, arch_of, inputs, kernel_fn, rel

from kernelcli.run import kernel_matrix

FC = ("flatten", "dense: {W_std: 1.5, b_std: 0.1}", "relu", "dense: {W_std: 1.3, b_std: 0.2}",
      "erf", "dense: {W_std: 1.0}")
SHAPE = (3, 2, 2)


# pair batches, and whole-block batches (block * block pairs: the grid program)
@pytest.mark.parametrize("n, block, pair_batch", [(7, None, None), (40, 16, 5), (41, 8, 63),
                                                  (41, 16, 256), (41, 8, 64)])
def test_symmetric_flat_matrix_equals_pair_evaluations(n, block, pair_batch):
    kfn = kernel_fn(arch_of(*FC), SHAPE)
    x = inputs(n, SHAPE, seed=3)
    sym = kernel_matrix(kfn, x, block=block, pair_batch=pair_batch)
    s = kfn.stats(x)
    i, j = np.tril_indices(n, -1)
    pairs = kfn.pair_values(x, s, x, s, i, j, pair_batch=4096)
    for k in KINDS:
        assert np.array_equal(sym[k], sym[k].T), k
        assert rel(sym[k][i, j], pairs[k]) < 1e-12, k
        assert np.array_equal(np.diag(sym[k]), s.diag[k]), k  # the per-input pass's own


@pytest.mark.parametrize("block, pair_batch", [(None, None), (8, 3), (8, 64)])
def test_rectangular_flat_matrix_equals_pair_evaluations(block, pair_batch):
    kfn = kernel_fn(arch_of(*FC), SHAPE)
    x1, x2 = inputs(19, SHAPE, seed=4), inputs(11, SHAPE, seed=5)
    got = kernel_matrix(kfn, x1, x2, block=block, pair_batch=pair_batch)
    s1, s2 = kfn.stats(x1), kfn.stats(x2)
    i, j = (a.ravel() for a in np.meshgrid(np.arange(19), np.arange(11), indexing="ij"))
    want = kfn.pair_values(x1, s1, x2, s2, i, j, pair_batch=64)
    for k in KINDS:
        assert got[k].shape == (19, 11)
        assert rel(got[k][i, j], want[k]) < 1e-12, k
