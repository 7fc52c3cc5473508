"""The spatial family against finite-width networks (Monte Carlo), and its memory rule.

``conv_local``, ``conv_transpose``, ``sum_pool``, ``global_sum_pool`` and ``avg_pool``'s
``normalize_edges`` also have neural-tangents fixtures (``tests/fixtures/spatial_*``,
made by ``make_spatial.py``), except in one place where kernelcli follows the finite
networks instead of neural-tangents 0.6.5: ``conv_local`` with a non-square filter (or
unequal strides) after a shared ``conv`` on a full covariance, where neural-tangents
applies the filter to the swapped spatial axes (docs/config-reference.md). There the Monte-Carlo
estimate below is the oracle: on the 6x8 case of
``test_conv_local_after_conv_follows_finite_networks_not_neural_tangents`` our
``filter: [3, 1]`` kernel is neural-tangents' ``[1, 3]`` one and the other way round
(``K(x0, x0)``: neural-tangents 0.3028, kernelcli 0.2933, 96 networks of width 256
0.2925 +- 0.0026).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_montecarlo import (
    DRAWS,
    MC_TOL,
    SQ2,
    arch_of,
    assert_mc_close,
    empirical_nngp,
    empirical_ntk,
    images,
    our_kernels,
)

from kernelcli.kernels import build_kernel_fn


def test_conv_local_nngp_matches_finite_width_networks():
    """conv_local first (its output rebuilt as a full covariance for the pool), then a
    rectangular filter with unequal strides under CIRCULAR padding."""
    arch = arch_of("conv_local: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.2}",
                   "relu",
                   "conv_local: {filter: [3, 2], strides: [2, 1], padding: CIRCULAR, "
                   "W_std: 1.4, b_std: 0.1}", "relu",
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(6, 4, 2)), draws=DRAWS)


def test_conv_transpose_nngp_matches_finite_width_networks():
    arch = arch_of("conv_transpose: {filter: [3, 2], strides: [2, 1], padding: SAME, "
                   "W_std: 1.5, b_std: 0.1}", "relu",
                   "conv_transpose: {filter: [4, 3], strides: [2, 2], padding: CIRCULAR, "
                   "W_std: 1.4, b_std: 0.1}", "relu",
                   "conv_transpose: {filter: [2, 3], strides: [1, 2], padding: VALID, "
                   "W_std: 1.4, b_std: 0.0}",
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(2, 3, 2)), draws=DRAWS)


def test_sum_pools_and_normalized_avg_pool_match_finite_width_networks():
    arch = arch_of("conv: {filter: [3, 3], padding: SAME, W_std: 1.5, b_std: 0.1}",
                   "avg_pool: {window: [3, 2], strides: [1, 1], padding: SAME, "
                   "normalize_edges: true}", "relu",
                   "conv: {filter: [2, 2], padding: SAME, W_std: 1.4, b_std: 0.1}",
                   "sum_pool: {window: [2, 3], strides: [2, 1], padding: CIRCULAR}", "erf",
                   "dense: {W_std: 1.2, b_std: 0.0}",
                   "global_sum_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(5, 4, 2)), draws=DRAWS)


def test_spatial_layers_on_sequences_match_finite_width_networks():
    """1-D: a strided transposed conv, a strided CIRCULAR conv_local (its diagonal
    rebuilt as a full covariance, since a pool lies ahead) and a sum_pool. Measured 0.8%
    of max off; a conv in the conv_local's place would be 46% away."""
    arch = arch_of("conv_transpose: {filter: [3], strides: [2], padding: SAME, W_std: 1.5, "
                   "b_std: 0.1}", "relu",
                   "conv_local: {filter: 3, strides: 2, padding: CIRCULAR, W_std: 1.4, "
                   "b_std: 0.2}", "relu",
                   "sum_pool: {window: [2], strides: [1], padding: SAME}",
                   "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(5, 2)), draws=DRAWS)


def test_spatial_layers_on_volumes_match_finite_width_networks():
    """3-D: conv_transpose and conv_local with a different size along each axis (no
    shared conv before the conv_local: neural-tangents' axis swap does not arise).
    Measured 1.3% of max off; a conv in the conv_local's place would be 35% away."""
    arch = arch_of("conv_transpose: {filter: [2, 2, 3], strides: [1, 2, 1], padding: SAME, "
                   "W_std: 1.5, b_std: 0.1}", "relu",
                   "conv_local: {filter: [2, 1, 2], padding: SAME, W_std: 1.4, b_std: 0.1}",
                   "relu", "global_sum_pool", "dense: {W_std: 1.0, b_std: 0.0}")
    assert_mc_close(arch, images(shape=(2, 2, 2, 1)), draws=DRAWS)


@pytest.mark.slow
def test_conv_local_after_conv_follows_finite_networks_not_neural_tangents():
    """neural-tangents 0.6.5 applies ``[3, 1]`` here as ``[1, 3]``; the finite networks
    agree with kernelcli, and tell the two apart."""
    def net(f):
        return arch_of(f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.1}}",
                       "relu", f"conv_local: {{filter: {f}, padding: SAME, W_std: {SQ2}, "
                       "b_std: 0.1}", "relu", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}")

    x = images(n=3, shape=(6, 8, 2))
    ours = our_kernels(net("[3, 1]"), x, ("nngp",))["nngp"]
    swapped = our_kernels(net("[1, 3]"), x, ("nngp",))["nngp"]   # neural-tangents' value
    emp = empirical_nngp(net("[3, 1]"), x, DRAWS)
    scale = np.max(np.abs(ours))
    err, err_swapped = (np.max(np.abs(emp - k)) / scale for k in (ours, swapped))
    assert err <= MC_TOL, f"off by {err:.2%}"
    assert np.max(np.abs(ours - swapped)) / scale > 0.02
    assert err_swapped > 2 * err, (err, err_swapped)


@pytest.mark.parametrize("items, shape", [
    ((f"conv: {{filter: [3, 3], padding: SAME, W_std: {SQ2}, b_std: 0.1}}", "relu",
      f"conv_local: {{filter: [3, 1], padding: SAME, W_std: {SQ2}, b_std: 0.1}}", "relu",
      "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.1}"), (4, 6, 2)),
    (("conv_transpose: {filter: [3, 2], strides: [2, 1], padding: CIRCULAR, W_std: 1.5, "
      "b_std: 0.1}", "sum_pool: {window: [2, 2], strides: [1, 1], padding: SAME}", "erf",
      "conv_local: {filter: [2, 2], padding: VALID, W_std: 1.4, b_std: 0.2}", "relu",
      "flatten", "dense: {W_std: 1.0, b_std: 0.1}"), (3, 3, 2)),
], ids=["conv_local_after_conv", "transpose_sum_pool_local"])
def test_ntk_matches_empirical_ntk(items, shape):
    """The NTK (gradients of every weight and bias, the per-position ones of conv_local
    included) of networks of width 128, 32 draws: measured within 1.4% of max."""
    arch = arch_of(*items)
    x = images(n=3, shape=shape)
    ours = our_kernels(arch, x)["ntk"]
    emp = empirical_ntk(arch, x, draws=32, width=128)
    err = np.max(np.abs(emp - ours)) / np.max(np.abs(ours))
    assert err <= 0.05, f"empirical NTK off by {err:.2%} of max\nours:\n{ours}\nemp:\n{emp}"


def _cov_elements(*items, shape):
    return build_kernel_fn(arch_of(*items), shape, ("nngp",), "float64").cov_elements


def test_conv_local_before_pooling_keeps_only_the_diagonal_before_it():
    """A strided conv_local reads the diagonal: the 8x8 input holds 64 numbers per pair,
    the pooled 4x4 map after it the full (4*4)**2; a conv in its place needs (8*8)**2."""
    head = ("relu", "global_avg_pool", "dense")
    local = _cov_elements("conv_local: {filter: 3, strides: 2}", *head, shape=(8, 8, 2))
    conv = _cov_elements("conv: {filter: 3, strides: 2}", *head, shape=(8, 8, 2))
    assert (local, conv) == (16 ** 2, 64 ** 2)


def test_conv_transpose_counts_the_covariance_of_its_larger_output():
    diag = _cov_elements("conv_transpose: {filter: 3, strides: 2}", "relu", "flatten",
                         "dense", shape=(3, 4, 1))
    full = _cov_elements("conv_transpose: {filter: 3, strides: 2}", "relu",
                         "global_avg_pool", "dense", shape=(3, 4, 1))
    assert (diag, full) == (6 * 8, (6 * 8) ** 2)


def test_estimate_counts_the_diagonal_before_a_conv_local(tmp_path):
    """``kernelcli estimate`` prints the largest covariance a pair holds: after a
    strided conv_local the 6x6 input's diagonal (36) is below the pooled 3x3 map's
    full covariance (81); with a conv in its place the input's (36**2) would be held."""
    from helpers_cli import images as cli_images
    from helpers_cli import invoke, write_config

    np.save(tmp_path / "x.npy", cli_images(4))
    layers = [{"conv_local": {"strides": 2}}, "relu", "global_avg_pool", "dense"]
    result = invoke("estimate", write_config(tmp_path, layers=layers))
    assert result.exit_code == 0, result.output
    assert f"  {'covariance entries per pair':<30} 81\n" in result.stdout


def test_a_parallel_whose_branches_start_with_conv_local_holds_only_the_diagonal():
    """``full_needed`` walks the branches: only where every branch reads the diagonal
    first does the parallel's input hold the diagonal alone."""
    head = ("relu", "global_avg_pool", "dense")
    local = "{conv_local: {strides: 2}}"
    both = _cov_elements(f"parallel: {{branches: [[{local}], [{local}]], merge: concat}}",
                         *head, shape=(8, 8, 2))
    mixed = _cov_elements(f"parallel: {{branches: [[{local}], [{{conv: {{strides: 2}}}}]], "
                          "merge: concat}", *head, shape=(8, 8, 2))
    assert (both, mixed) == (16 ** 2, 64 ** 2)


@pytest.mark.slow
def test_a_concat_of_a_conv_local_and_a_conv_branch_is_the_mean_of_the_two_networks():
    """Concat of equal widths, then linear layers: the mean of the two single-branch
    networks' kernels. The conv_local branch drops the parallel's full input to its
    diagonal and rebuilds the full covariance for the pool; on sequences and volumes."""
    stem = f"conv: {{filter: 2, padding: SAME, W_std: {SQ2}, b_std: 0.1}}"
    local = "conv_local: {filter: 2, strides: 2, padding: SAME, W_std: 1.3, b_std: 0.2}"
    conv = "conv: {filter: 3, strides: 2, padding: CIRCULAR, W_std: 1.2, b_std: 0.1}"
    head = ("sum_pool: {window: 2, strides: 1, padding: SAME}", "global_avg_pool",
            "dense: {W_std: 1.0, b_std: 0.0}")
    for shape in ((6, 2), (3, 4, 2, 1)):
        x = images(n=3, shape=shape)
        par = our_kernels(arch_of(stem, "relu", f"parallel: {{branches: [[{local}, erf], "
                                  f"[{conv}, erf]], merge: concat}}", *head), x)
        one = our_kernels(arch_of(stem, "relu", local, "erf", *head), x)
        two = our_kernels(arch_of(stem, "relu", conv, "erf", *head), x)
        for kind in ("nngp", "ntk"):
            want = (one[kind] + two[kind]) / 2
            assert np.max(np.abs(par[kind] - want)) <= 1e-13 * np.max(np.abs(want)), kind


@pytest.mark.parametrize("shape", [(5, 2), (2, 3, 2, 1)], ids=["sequence", "volume"])
def test_diagonal_route_equals_full_route_on_sequences_and_volumes(shape):
    """Without a pool the spatial layers run on the diagonal alone; a 1x1 average pool
    before the readout forces the full covariance instead: the same kernels (the NTK
    diagonal aside, where ReLU's angle at a self pair rounds differently)."""
    body = ("conv_transpose: {filter: 3, strides: 2, padding: CIRCULAR, W_std: 1.5, "
            "b_std: 0.1}", "relu",
            "conv_local: {filter: 2, padding: VALID, W_std: 1.3, b_std: 0.2}", "relu",
            "conv_transpose: {filter: 2, strides: 1, padding: VALID, W_std: 1.2, b_std: 0.1}",
            "erf")
    head = ("flatten", "dense: {W_std: 1.0, b_std: 0.1}")
    x = images(n=3, shape=shape)
    diag = our_kernels(arch_of(*body, *head), x)
    full = our_kernels(arch_of(*body, "avg_pool: {window: 1, strides: 1}", *head), x)
    off = ~np.eye(3, dtype=bool)
    for kind in ("nngp", "ntk"):
        scale = np.max(np.abs(diag[kind]))
        assert np.max(np.abs(diag[kind] - full[kind])[off]) <= 1e-12 * scale, kind
    assert np.max(np.abs(diag["nngp"] - full["nngp"])) <= 1e-12 * np.max(diag["nngp"])
