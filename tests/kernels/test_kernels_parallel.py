"""``parallel``: branches joined by ``merge: sum`` or ``merge: concat``.

Against finite-width networks (``tests/finite_nets.py``: a hidden layer of ``width``
w has ``w * WIDTH`` units, so the channel counts a concat weighs its branches by
carry over), and against the engine itself: a ``residual`` is a sum with the
identity, bit for bit; routes that must agree do. The neural-tangents fixtures
(``tests/fixtures/parallel_*.yaml``, ``make_parallel.py``) hold the rest.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_montecarlo import (
    DRAWS,
    SQ2,
    arch_of,
    assert_mc_close,
    empirical_ntk,
    images,
    our_kernels,
)

from kernelcli.config import Parallel, check_architecture
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

CONV = f"conv: {{W_std: {SQ2}, b_std: 0.1}}"
READOUT = "dense: {W_std: 1.0, b_std: 0.0}"


def kernels(arch, x, dtype="float64"):
    check_architecture(arch, x.shape[1:])
    return kernel_matrix(build_kernel_fn(arch, x.shape[1:], ("nngp", "ntk"), dtype),
                         np.asarray(x, dtype))


def rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# --- Monte Carlo ------------------------------------------------------------------------

def test_sum_of_a_pooling_branch_a_dense_branch_and_the_identity_matches_finite_networks():
    arch = arch_of(CONV,
                   "parallel: {branches: [[relu, {conv: {W_std: 1.4, b_std: 0.0}}, "
                   "{avg_pool: {strides: 1, padding: SAME}}], [erf, {dense: {W_std: 1.3}}], "
                   "[]], merge: sum}",
                   "relu", "global_avg_pool", READOUT)
    assert_mc_close(arch, images(), draws=DRAWS)


def test_concat_weighs_branches_by_their_widths_like_finite_networks():
    """Branches of 1, 2 (the identity of a width-2 conv) and 3 channels: the weights
    1:2:3 move the kernel by more than the tolerance from a plain mean."""
    items = ("conv: {W_std: 1.4, b_std: 0.1, width: 2}",
             "parallel: {branches: [[relu, {dense: {W_std: 1.4}}], [], "
             "[erf, {dense: {W_std: 1.5, b_std: 0.2, width: 3}}, avg_pool: {strides: 1, "
             "padding: SAME}]], merge: concat}",
             "dense: {W_std: 1.2, b_std: 0.1}", "relu", "global_avg_pool", READOUT)
    x = images()
    weighted = our_kernels(arch_of(*items), x, ("nngp",))["nngp"]
    plain = our_kernels(arch_of(*[i.replace("width: 2", "width: 1")
                                  .replace("width: 3", "width: 1") for i in items]),
                        x, ("nngp",))["nngp"]
    assert rel(plain, weighted) > 0.1
    assert_mc_close(arch_of(*items), x, draws=DRAWS)


def test_parallel_ntk_on_vectors_matches_the_empirical_ntk():
    """The NTK through a sum with the identity and a concat of widths 1 and 3."""
    arch = arch_of(f"dense: {{W_std: {SQ2}, b_std: 0.1}}",
                   f"parallel: {{branches: [[relu, {{dense: {{W_std: {SQ2}}}}}], []], "
                   "merge: sum}",
                   f"parallel: {{branches: [[relu, {{dense: {{W_std: {SQ2}}}}}], "
                   "[erf, {dense: {W_std: 1.5, b_std: 0.1, width: 3}}]], merge: concat}",
                   "dense: {W_std: 1.0, b_std: 0.2}")
    x = images(n=4, shape=(10,), seed=3)
    ours = our_kernels(arch, x)["ntk"]
    emp = empirical_ntk(arch, x, draws=32, width=256)
    err = rel(emp, ours)
    assert err <= 0.10, f"empirical NTK off by {err:.2%} of max\nours:\n{ours}\nemp:\n{emp}"


# --- the engine against itself ----------------------------------------------------------

def test_a_residual_is_a_sum_with_the_identity_bit_for_bit():
    x = images(n=3, shape=(4, 4, 2))
    branch = "[relu, conv, {avg_pool: {strides: 1, padding: SAME}}, relu, dense]"
    a = kernels(arch_of(CONV, f"residual: {branch}", "relu", "flatten", READOUT), x,
                "float32")
    b = kernels(arch_of(CONV, f"parallel: {{branches: [[], {branch}], merge: sum}}",
                        "relu", "flatten", READOUT), x, "float32")
    for kind in a:
        assert np.array_equal(a[kind], b[kind]), kind


def test_branches_cut_to_the_diagonal_after_their_last_pool_agree_with_the_full_route():
    """The parallel holding the last pools: each branch drops to the spatial diagonal
    after its own last pool (at once without one); a trailing 1x1 pool keeps the full
    covariance everywhere instead, with the same kernels."""
    par = ("parallel: {branches: [[relu, conv, avg_pool], [relu, {conv: {strides: 2}}], "
           "[avg_pool]], merge: concat}")
    x = images(n=3, shape=(4, 4, 2))
    cut = kernels(arch_of(CONV, par, "conv", "relu", "flatten", READOUT), x)
    full = kernels(arch_of(CONV, par, "conv", "relu", "avg_pool: {window: 1}", "flatten",
                           READOUT), x)
    for kind in cut:
        assert rel(cut[kind], full[kind]) < 1e-14, kind


def test_concat_of_equal_widths_is_the_mean_and_a_sum_adds():
    x = images(n=3, shape=(4, 4, 2))
    one = kernels(arch_of(CONV, "relu", "conv", "dense", "relu", "global_avg_pool", READOUT),
                  x)
    concat = kernels(arch_of(CONV, "parallel: {branches: [[relu, conv], [relu, conv]], "
                                   "merge: concat}", "dense", "relu", "global_avg_pool",
                             READOUT), x)
    for kind in one:
        assert rel(concat[kind], one[kind]) < 1e-14, kind
    # two independent dense layers on one Gaussian input: twice one layer's kernel
    one = kernels(arch_of(CONV, "relu", "dense", "flatten"), x)
    two = kernels(arch_of(CONV, "relu", "parallel: {branches: [[dense], [dense]], merge: sum}",
                          "flatten"), x)
    for kind in one:
        assert rel(two[kind], 2 * one[kind]) < 1e-14, kind


def test_vector_inputs_take_the_flat_route_through_branches():
    """(D,) vectors (the Gram-matrix route) and the same numbers as 1x1xD images."""
    arch = arch_of("dense: {W_std: 1.5, b_std: 0.1, width: 2}",
                   "parallel: {branches: [[relu, dense], [], [erf, {dense: {width: 3}}]], "
                   "merge: concat}", "dense", "relu", READOUT)
    x = images(n=5, shape=(7,), seed=4).astype(np.float64)
    flat = kernels(arch, x)
    assert build_kernel_fn(arch, (7,), ("nngp",), "float64").flat_input
    image = kernels(arch_of("dense: {W_std: 1.5, b_std: 0.1, width: 2}",
                            "parallel: {branches: [[relu, dense], [], [erf, {dense: "
                            "{width: 3}}]], merge: concat}", "dense", "relu", "flatten",
                            READOUT), x.reshape(5, 1, 1, 7))
    for kind in flat:
        assert rel(flat[kind], image[kind]) < 1e-14, kind


def test_per_input_variances_are_read_in_the_order_they_were_recorded():
    """Branches at different resolutions: the variances of each nonlinearity, walked
    branch by branch, in both passes (a mix-up would pair a 3x3 variance with a 6x6
    covariance, or the wrong layer's)."""
    arch = arch_of(CONV, "parallel: {branches: [[avg_pool, relu, conv, relu, conv], "
                         "[relu, {conv: {strides: 2}}], [erf, {conv: {strides: 2}}, "
                         "{parallel: {branches: [[relu, dense], [gelu, dense]], merge: "
                         "sum}}]], merge: sum}", "relu", "global_avg_pool", READOUT)
    kfn = build_kernel_fn(arch, (6, 6, 2), ("nngp", "ntk"), "float64")
    assert kfn.variance_shapes == ((3, 3), (3, 3), (6, 6), (6, 6), (3, 3), (3, 3), (3, 3))
    x = images()
    got = kernels(arch, x)
    # A rectangular matrix against the reversed inputs evaluates every entry by the pair
    # pass, an input with itself too: read with the variances the per-input pass
    # recorded, it must give the per-input pass's own K(x, x) (a mix-up is O(1) off;
    # the pair's covariance is not bit for bit the variance, which a ReLU's angle turns
    # into ~sqrt(eps)). The other entries are the same pairs in other batches.
    same = np.eye(len(x), dtype=bool)
    for kind in got:
        pairs = kernel_matrix(kfn, x, x[::-1].copy())[kind][:, ::-1]
        assert rel(pairs[same], got[kind][same]) < 1e-8, kind
        assert rel(pairs[~same], got[kind][~same]) < 1e-14, kind


def test_repeat_works_inside_branches_and_parallel_inside_repeat_and_residual():
    nested = arch_of(CONV, "repeat: {times: 2, layers: [{parallel: {branches: [[repeat: "
                           "{times: 2, layers: [relu, conv]}], []], merge: sum}}]}",
                     "residual: [relu, {parallel: {branches: [[conv], [dense]], merge: "
                     "concat}}, conv]", "relu", "global_avg_pool", READOUT)
    block = Parallel(branches=(arch_of("relu", "conv", "relu", "conv").layers, ()),
                     merge="sum")
    assert nested.layers[1] == nested.layers[2] == block
    assert isinstance(nested.layers[3].layers[1], Parallel)
    assert (nested.layers[1].branches[0][3].where
            == "architecture.layers[1].repeat.layers[0].parallel.branches[0][0].repeat"
               ".layers[1].conv")
    x = images()
    assert np.all(np.isfinite(kernels(nested, x)["ntk"]))


def test_live_states_and_layer_counts_include_the_branches():
    plain = build_kernel_fn(arch_of(CONV, "relu", "global_avg_pool", READOUT), (6, 6, 2))
    wide = build_kernel_fn(arch_of(CONV, "parallel: {branches: [[relu, conv], [], "
                                         "[{residual: [relu, conv]}]], merge: sum}",
                                   "relu", "global_avg_pool", READOUT), (6, 6, 2))
    assert plain.n_layers == 4 and wide.n_layers == 10
    # while branch 2 runs: the input, two outputs, and the residual's own (its input,
    # the identity's output, its branch's two)
    assert wide.live_bytes_per_pair == 7 / 2 * plain.live_bytes_per_pair


@pytest.mark.parametrize("items", [
    ("parallel: {branches: [[relu, conv], [relu, dense], []], merge: sum}", "relu"),
    ("parallel: {branches: [[relu, conv], [relu, dense], []], merge: concat}",),
    ("residual: [relu, conv]", "relu"),
], ids=["sum", "concat", "residual"])
def test_compiled_memory_of_branches_stays_within_the_live_states(items):
    """XLA's estimate for the pairs in flight at CIFAR size against ``live_bytes_per_pair``
    (the planner's figure where a backend has no memory analysis), within the 2.5x that
    tests/kernels/test_kernels_memory.py holds networks without branches to."""
    arch = arch_of(CONV, *items, "global_avg_pool", READOUT)
    kfn = build_kernel_fn(arch, (32, 32, 3), ("nngp", "ntk"), "float32")
    live = min(kfn.chunk, 8) * kfn.live_bytes_per_pair
    ratio = kfn.compiled_memory(n_rows=4, n_cols=4, pair_batch=8) / live
    assert 1 / 2.5 <= ratio <= 2.5, ratio


@pytest.mark.parametrize("merge", ["sum", "concat"])
def test_parallel_kernels_are_finite_symmetric_and_float32_close(merge):
    arch = arch_of(CONV, f"parallel: {{branches: [[relu, conv], [gelu, dense]], "
                         f"merge: {merge}}}", "dense", "erf", "global_avg_pool", READOUT)
    x = images()
    k64, k32 = kernels(arch, x), kernels(arch, x, "float32")
    for kind in k64:
        assert np.array_equal(k32[kind], k32[kind].T)
        assert rel(k32[kind], k64[kind]) < 1e-4, kind
