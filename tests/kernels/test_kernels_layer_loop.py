"""Runs of identical (convolution, nonlinearity) layers run as one loop over layers
(``kernels/_repeat.py``): an optimisation only, so the kernels must equal those of
the same layers traced one by one, for full covariances (pooling) and spatial
diagonals (flatten), even and odd run lengths, both parameterizations, with and
without the NTK, and the per-input diagonal as well as the pairs."""

from __future__ import annotations

import pytest
from test_kernels_properties import KINDS, SQ2, arch_of, inputs, kernel_fn, rel

from conftest import one_device
from kernelcli.config import bind_architecture
from kernelcli.kernels import _compose  # the layer loop itself: what it compiles
from kernelcli.run import kernel_matrix

REPEATED = {
    # name: (input shape, layers); runs of identical (conv, nonlinearity) pairs
    "gap_even_run": ((5, 4, 2), [f"conv: {{filter: [3, 3], W_std: {SQ2}, b_std: 0.1}}", "relu"] * 5
                     + ["global_avg_pool", "dense: {W_std: 1.0}"]),
    "gap_odd_run_erf": ((4, 4, 1), ["conv: {filter: [3, 3], W_std: 1.3}", "erf"] * 4
                        + ["global_avg_pool", "dense: {W_std: 1.0}"]),
    "pool_between_runs": ((6, 6, 2), [f"conv: {{filter: [3, 3], W_std: {SQ2}}}", "relu"] * 3
                          + ["avg_pool: {window: [2, 2], strides: [2, 2]}"]
                          + [f"conv: {{filter: [3, 3], W_std: {SQ2}}}", "relu"] * 3
                          + ["global_avg_pool", "dense: {W_std: 1.0}"]),
    "flatten_run": ((5, 4, 2), [f"conv: {{filter: [3, 3], W_std: {SQ2}, b_std: 0.1}}", "relu"] * 4
                    + ["flatten", "dense: {W_std: 1.0}"]),
    "flatten_odd_run_gelu": ((4, 4, 1), ["conv: {filter: [3, 3], W_std: 1.1}", "gelu"] * 6
                             + ["flatten", "dense: {W_std: 1.0}"]),
    "circular_run": ((4, 5, 2), ["conv: {filter: [3, 3], padding: CIRCULAR, W_std: 1.2, b_std: 0.2}",
                                 "relu"] * 4 + ["global_avg_pool", "dense: {W_std: 1.0}"]),
}


@pytest.mark.parametrize("name, kinds, parameterization", [
    ("gap_even_run", KINDS, "ntk"), ("gap_odd_run_erf", KINDS, "standard"),
    ("pool_between_runs", KINDS, "ntk"), ("circular_run", ("nngp",), "ntk"),
    ("flatten_run", KINDS, "ntk"), ("flatten_odd_run_gelu", KINDS, "standard"),
])
@pytest.mark.slow
def test_runs_of_identical_layers_as_one_loop_equal_the_layers_one_by_one(
        name, kinds, parameterization, monkeypatch):
    """The loop over identical (conv, nonlinearity) layers is an optimisation only:
    the same kernels (pairs and per-input diagonal) as the layers one by one."""
    shape, items = REPEATED[name]
    if parameterization == "standard":
        items = [i.replace("conv: {", "conv: {width: 4, ") for i in items]
    # bound to the input (one strides entry per axis), as the engine binds it
    arch = bind_architecture(arch_of(*items, parameterization=parameterization), shape)
    # as many rows in x2 as in x1 and one device: each side compiles its per-input
    # program once and its pair program once (not per row count and per device); the
    # loop's bits do not depend on either
    x1, x2 = inputs(3, shape, seed=1), inputs(3, shape, seed=2)
    assert _compose.repeats(arch.layers, 2, _first_full_state(arch, shape)) >= 2

    def both():
        k = kernel_fn(arch, shape, kinds)
        return kernel_matrix(k, x1, x2, devices=one_device()), k.stats(x1).diag

    looped, looped_diag = both()
    monkeypatch.setattr(_compose, "repeats", lambda layers, k, state: 0)
    unrolled, unrolled_diag = both()
    for k in kinds:
        assert rel(looped[k], unrolled[k]) < 1e-13, k
        assert rel(looped_diag[k], unrolled_diag[k]) < 1e-13, k


def _first_full_state(arch, shape):
    """The state after the first (conv, nonlinearity) pair, for ``_repeats``."""
    import jax.numpy as jnp

    from kernelcli.kernels._state import State  # a state made here, fed to the loop

    h, w = shape[:2]
    width = getattr(arch.layers[0], "width", 1)
    full = any(type(layer).__name__.endswith("Pool") for layer in arch.layers)
    a = jnp.zeros((1, h, h, w, w) if full else (1, h, w))
    return State(nngp=a, ntk=a, full=full, spatial=True, channels=width)
