"""Helpers for the tests of predict's spread products (``--executor processes|ray|shards``).

Nothing here is a test."""

from __future__ import annotations

from typing import Optional

import numpy as np

from kernelcli.solvers import one_hot, solve_cg_folds


def assert_same_as_single_process(op, base, kind: Optional[str] = None) -> None:
    """Assert that ``op`` (K spread over bands) gives ``base``'s (the single-process
    ``H5KernelOperator``'s) products bit for bit: ``matmul``, ``matmul32`` and the product
    with a vector; with ``kind``, also its CG solve over 3 folds at two ridges."""
    n = base.shape[0]
    v = np.random.default_rng(2).standard_normal((n, 5))
    assert np.array_equal(op.matmul(v), base.matmul(v))
    assert np.array_equal(op.matmul32(v), base.matmul32(v))
    assert np.array_equal(op.matmul(v[:, 0]), base.matmul(v[:, 0]))
    if kind is None:
        return
    y = one_hot(np.arange(n) % 3)
    want = solve_cg_folds(base, y, [1e-3, 0.1], 3, kind=kind)
    got = solve_cg_folds(op, y, [1e-3, 0.1], 3, kind=kind)
    for r in (1e-3, 0.1):
        assert np.array_equal(got[0][r], want[0][r]) and np.array_equal(got[1][r], want[1][r])
