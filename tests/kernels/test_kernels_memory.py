"""The memory rule, at CIFAR size (32x32x3).

A network with a pooling layer must carry each pair's full spatial covariance,
``(H*W)**2`` numbers, up to its last pool; a network without one only the
spatial diagonal, ``H*W`` numbers. ``live_bytes_per_pair`` counts what must be
alive per pair (each kind's covariance into and out of a layer), and XLA's own
estimate, ``compiled_memory``, must agree with it for the pairs actually in
flight: the engine evaluates a pair batch in chunks of ``kfn.chunk`` pairs.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from kernelcli.config import check_architecture, parse_config
from kernelcli.kernels import build_kernel_fn

SHAPE = (32, 32, 3)
HW = 32 * 32
CONV = "conv: {filter: [3, 3], padding: SAME, W_std: 1.4142135623730951, b_std: 0.0}"
NETS = {
    "gap": (CONV, "relu", "global_avg_pool", "dense: {W_std: 1.0, b_std: 0.0}"),
    "flatten": (CONV, "relu", "flatten", "dense: {W_std: 1.0, b_std: 0.0}"),
}


def deep_gap(depth: int, head: str = "global_avg_pool"):
    return (CONV, "relu") * depth + (head, "dense: {W_std: 1.0, b_std: 0.0}")


def arch_of(*items: str):
    text = "data: {x1: a.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)
    return parse_config(text, base_dir=Path("/cfg")).architecture


@functools.cache
def kfn(net: str, dtype: str = "float32", kinds=("nngp", "ntk")):
    if net.startswith(("gap_depth", "flatten_depth")):
        head, depth = net.split("_depth")
        items = deep_gap(int(depth), "global_avg_pool" if head == "gap" else head)
    else:
        items = NETS[net]
    arch = arch_of(*items)
    check_architecture(arch, SHAPE)
    return build_kernel_fn(arch, SHAPE, kinds, dtype)


@functools.cache
def compiled(net: str, pair_batch: int, dtype: str = "float32") -> int:
    return kfn(net, dtype).compiled_memory(n_rows=4, n_cols=4, pair_batch=pair_batch)


def in_flight(k, pair_batch: int) -> int:
    """Pairs alive at once in one ``pairs`` call (a small batch is padded: ``call_batch``)."""
    return min(k.chunk, k.call_batch(pair_batch))


def test_pooling_network_holds_the_full_spatial_covariance():
    k = kfn("gap")
    assert k.full_cov
    assert k.cov_elements == HW ** 2


def test_flatten_network_holds_only_the_spatial_diagonal():
    k = kfn("flatten")
    assert not k.full_cov
    assert k.cov_elements == HW


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("net", sorted(NETS))
def test_live_bytes_per_pair_count_two_covariances_per_kind(net, dtype):
    itemsize = np.dtype(dtype).itemsize
    both = kfn(net, dtype)
    assert both.live_bytes_per_pair == 2 * 2 * both.cov_elements * itemsize
    nngp_only = kfn(net, dtype, ("nngp",))
    assert nngp_only.cov_elements == both.cov_elements
    assert nngp_only.live_bytes_per_pair == 2 * 1 * both.cov_elements * itemsize


@pytest.mark.parametrize("pair_batch", [1, 8])
def test_pooling_network_compiled_memory_matches_the_live_pairs_in_flight(pair_batch):
    k = kfn("gap")
    live = in_flight(k, pair_batch) * k.live_bytes_per_pair
    got = compiled("gap", pair_batch)
    ratio = got / live
    assert 1 / 2.5 <= ratio <= 2.5, (
        f"compiled_memory(4, 4, {pair_batch}) = {got} B vs live {live} B "
        f"(chunk {k.chunk} x {k.live_bytes_per_pair} B): ratio {ratio:.3f}")


def test_pooling_network_compiled_memory_does_not_grow_with_the_pair_batch():
    """Chunks bound the working set whatever the batch (that is what the planner sizes)."""
    small, large = compiled("gap", 8), compiled("gap", 64)
    assert large <= 1.1 * small, f"pair_batch 8: {small} B, 64: {large} B"


def test_flatten_network_needs_far_less_memory_per_pair_in_flight():
    gap, flat = kfn("gap"), kfn("flatten")
    per_gap = compiled("gap", 8) / in_flight(gap, 8)
    per_flat = compiled("flatten", 8) / in_flight(flat, 8)
    assert per_gap / per_flat >= 100, (
        f"per pair in flight: pooling {per_gap:.0f} B, flatten {per_flat:.0f} B "
        f"(ratio {per_gap / per_flat:.1f})")


@pytest.mark.parametrize("depth", [2, 7, 21])
@pytest.mark.slow
def test_deep_pooling_network_compiled_memory_stays_within_the_live_pairs(depth):
    """Depth does not add buffers: consecutive layers reuse the dead input of the
    layer before (XLA gave each layer's loop buffers of its own: 11x at depth 21)."""
    k = kfn(f"gap_depth{depth}")
    live = in_flight(k, 8) * k.live_bytes_per_pair
    pairs = k.compiled_memory(n_rows=4, n_cols=4, pair_batch=8)
    per_input = k.compiled_stats_memory(rows=1)
    for what, got in (("pairs", pairs), ("per-input pass", per_input)):
        assert got / live <= 2.5, f"{what}, depth {depth}: {got} B vs live {live} B"


def test_deep_flatten_network_memory_per_pair_batch_does_not_grow_with_depth():
    """Each layer gathers its own per-input variances when it runs; gathering every
    layer's up front made a pair batch of a 21-layer network need 3.6x a 3-layer one."""
    shallow, deep = kfn("flatten_depth3"), kfn("flatten_depth21")
    got = [k.compiled_memory(n_rows=16, n_cols=16, pair_batch=k.chunk, arguments=False)
           for k in (shallow, deep)]
    assert got[1] <= 1.1 * got[0], f"depth 3: {got[0]} B, depth 21: {got[1]} B"
    # 2.8 when a layer's nonlinearity ran slab by slab; 3.6 since a layer's convolution
    # and nonlinearity are one fused conditional over the chunk (``_diagonal.block``:
    # its padded temporaries are chunk-sized), the same at every depth
    assert got[1] / (deep.chunk * deep.live_bytes_per_pair) <= 4.0


@pytest.mark.parametrize("net", ["flatten", "gap"])
def test_memory_at_two_batches_of_whole_chunks_is_one_compilation_and_exact(net):
    """The planner asks at a batch and at half of it (``plan.memory_line``); batches of a
    chunk or more are whole chunks (``call_batch``), and the second answer comes from
    the first program, without a compilation, equal to what compiling it gives."""
    from jax import monitoring

    k = kfn.__wrapped__(net)  # a fresh kernel function: nothing compiled yet
    c = k.chunk
    assert (k.call_batch(c + 1), k.call_batch(4 * c)) == (2 * c, 4 * c)
    compiles = []

    def count(name, secs, **kw):
        if name == "/jax/core/compile/backend_compile_duration":
            compiles.append(secs)

    monitoring.register_event_duration_secs_listener(count)
    try:
        big = k.compiled_memory(n_rows=4, n_cols=4, pair_batch=4 * c)
        # rounded up to two chunks (a pooling network's chunk is one pair)
        half = k.compiled_memory(n_rows=4, n_cols=4, pair_batch=max(2, 2 * c - 1))
        assert len(compiles) == 1
    finally:
        monitoring.unregister_event_duration_listener(count)
    m = k.pairs_executable(4, 4, 2 * c).memory_analysis()  # compiled now, to compare
    assert half == m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    assert big - half == 2 * c * (len(k.kinds) * k.dtype.itemsize + 8)
