"""Pair batches: the values of any list of pairs, in any batch size (the engine's pair
chunk forced to its minimum too), are the full rectangle's; a symmetric matrix is the
rectangular one of the same inputs; the NNGP alone is the NNGP of both kinds.

The networks and their full rectangles are computed once per process (``pair_net``),
shared by every test here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels_properties import FEW, KINDS, arch_of, inputs, kernel_fn, rel

from kernelcli.config import parse_config
from kernelcli.run import kernel_matrix

# --- pair batches ---------------------------------------------------------------------------

PAIR_NETS = {
    # a pool ahead: full spatial covariance
    "gap": ((5, 5, 2), ("conv: {filter: [3, 3], padding: SAME, W_std: 1.4, b_std: 0.1}", "relu",
                        "avg_pool", "dense: {W_std: 1.4, b_std: 0.0}", "gelu",
                        "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.1}")),
    # no pool: spatial diagonal only
    "flatten": ((5, 4, 3), ("conv: {filter: [3, 3], strides: [2, 1], W_std: 1.4, b_std: 0.1}",
                            "relu", "conv: {W_std: 1.4, b_std: 0.0}", "erf", "flatten",
                            "dense: {W_std: 1.0, b_std: 0.1}")),
    # flatten first: the engine's Gram-matrix path
    "flat_input": ((4, 3, 2), ("flatten", "dense: {W_std: 1.5, b_std: 0.1}", "relu",
                               "dense: {W_std: 1.2, b_std: 0.0}", "erf",
                               "dense: {W_std: 1.0, b_std: 0.1}")),
}


# a pooling net with the engine's pair chunk forced to its minimum (8x8 images: 4096
# float64 covariance entries per pair), so that the pair batches and the per-input
# pass split into several chunks, with a remainder
PAIR_NETS["gap_chunked"] = ((8, 8, 1), PAIR_NETS["gap"][1])
CHUNK_BYTES = {"gap_chunked": 1}


@functools.cache
def pair_net(name):
    shape, items = PAIR_NETS[name]
    if name in CHUNK_BYTES:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KERNELCLI_CHUNK_BYTES", str(CHUNK_BYTES[name]))
            kfn = kernel_fn(arch_of(*items), shape)
        assert kfn.chunk <= 4, f"chunk {kfn.chunk}: too large to split these batches"
    else:
        kfn = kernel_fn(arch_of(*items), shape)
    x1, x2 = inputs(6, shape, seed=2), inputs(5, shape, seed=3)
    return kfn, x1, x2, kernel_matrix(kfn, x1, x2), kfn.stats(x1), kfn.stats(x2)


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
@settings(FEW, max_examples=3)
@given(pairs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), min_size=1, max_size=12),
       pair_batch=st.integers(1, 7))
@pytest.mark.slow
def test_pair_batches_equal_full_rectangle(name, pairs, pair_batch):
    kfn, x1, x2, full, s1, s2 = pair_net(name)
    i = np.array([p[0] for p in pairs], np.int32)
    j = np.array([p[1] for p in pairs], np.int32)
    got = kfn.pair_values(x1, s1, x2, s2, i, j, pair_batch)
    for kind in KINDS:
        assert got[kind].shape == (len(pairs),)
        assert rel(got[kind], full[kind][i, j]) <= 1e-12, kind


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
def test_pairs_call_returns_one_value_per_pair(name):
    kfn, x1, x2, full, s1, s2 = pair_net(name)
    i = np.array([5, 0, 3, 3], np.int32)
    j = np.array([4, 0, 1, 1], np.int32)
    got = kfn.pairs(x1, s1, x2, s2, i, j)
    for kind in KINDS:
        assert got[kind].shape == (4,) and got[kind].dtype == np.float64
        assert rel(np.asarray(got[kind]), full[kind][i, j]) <= 1e-12, kind


@pytest.mark.parametrize("name", sorted(PAIR_NETS))
@pytest.mark.slow
def test_symmetric_matrix_equals_rectangular_matrix_of_the_same_inputs(name):
    """The diagonal comes from ``stats`` (self pass), the rest from ``pairs``.

    Off the diagonal the two agree to 1e-12. On it, ``matrix(x1, copy of x1)``
    pairs each input with an identical copy through ``pairs``, whose covariance
    and the ``stats`` variances are the same number rounded by two different
    programs: the ReLU angle there is ~sqrt(eps) ~ 1e-8 instead of 0, and the NTK
    (not the NNGP) moves by ~1e-10..1e-8 -- the same effect the fixtures see in
    neural-tangents' diagonal, so it gets the same 3e-8 (inherent to computing an
    angle near 0 from rounded inputs, not an engine bug).
    """
    kfn, x1, _, _, _, _ = pair_net(name)
    sym = kernel_matrix(kfn, x1)
    rect = kernel_matrix(kfn, x1, x1.copy())
    off = ~np.eye(len(x1), dtype=bool)
    for kind in KINDS:
        scale = np.max(np.abs(sym[kind]))
        assert np.max(np.abs(sym[kind] - rect[kind])[off]) / scale <= 1e-12, kind
        tol = 1e-12 if kind == "nngp" else 3e-8
        assert np.max(np.abs(np.diag(sym[kind]) - np.diag(rect[kind]))) / scale <= tol, kind


@pytest.mark.parametrize("name", sorted(set(PAIR_NETS) - set(CHUNK_BYTES)))
def test_nngp_alone_equals_nngp_of_both_kinds(name):
    both_fn, x1, x2, both, _, _ = pair_net(name)
    shape, items = PAIR_NETS[name]
    text = ("data: {x1: a.npy}\nkernel: {kinds: [nngp], dtype: float64}\n"
            "architecture:\n  layers:\n" + "".join(f"    - {i}\n" for i in items))
    cfg = parse_config(text, base_dir=Path("/cfg"))
    assert cfg.kernel.kinds == ("nngp",)
    alone_fn = kernel_fn(cfg.architecture, shape, cfg.kernel.kinds, cfg.kernel.dtype)
    alone = kernel_matrix(alone_fn, x1, x2)
    assert set(alone) == {"nngp"}
    assert rel(alone["nngp"], both["nngp"]) <= 1e-13
