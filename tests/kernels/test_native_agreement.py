"""The native engine against the cpu engine on random networks of the native engine's
vocabulary, float64: every entry within 1e-12 of the kernel's scale, the self pairs
included, both where the per-input pass makes them (``K(x, x)``'s diagonal) and
where a pair pass does (``x2`` holding ``x1``'s rows).

Why relative to the kernel's largest entry, not entry by entry: the two engines differ
only in the order and fusion of their roundings (a few units in the last place per
layer, 1e-15 of the scale over four layers), while an entry of an ABReLU network with
a negative slope can cancel to far below the scale, where an entrywise tolerance would
measure the cancellation and not the engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelcli
from kernelcli.kernels import native_unavailable

KINDS = ("nngp", "ntk")
AGREE = 1e-12

pytestmark = pytest.mark.skipif(native_unavailable() is not None,
                                reason=f"the native engine: {native_unavailable()}")

_ACTS = ("relu", "abs", "leaky_relu", "abrelu")


def _act(draw):
    name = draw(st.sampled_from(_ACTS))
    if name == "leaky_relu":
        return {"leaky_relu": {"alpha": draw(st.sampled_from([0.1, 0.3]))}}
    if name == "abrelu":
        return {"abrelu": {"a": draw(st.sampled_from([-0.5, 0.2])), "b": 1.0}}
    return name


@st.composite
def networks(draw):
    """``(architecture, input shape)``: 1 to 4 convolutions (1 x 1, 3 x 3 or 5 x 5, SAME
    or VALID where the input is large enough, 1 to 4 channels, with or without a bias),
    each followed by a nonlinearity of ABReLU's family and at times a 2 x 2 average
    pool, then a flatten or global average pool head. 3 x 3 SAME blocks are drawn most,
    so chains of them (the chain and the diagonal chain) are common."""
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    shape = (h, w, draw(st.integers(1, 4)))
    layers = []
    for _ in range(draw(st.integers(1, 4))):
        k = draw(st.sampled_from([3, 3, 1, 5]))
        padding = draw(st.sampled_from(["SAME", "SAME", "VALID"])) if min(h, w) >= k else "SAME"
        if padding == "VALID":
            h, w = h - k + 1, w - k + 1
        layers += [{"conv": {"filter": [k, k], "padding": padding,
                             "width": draw(st.integers(1, 4)),
                             "W_std": draw(st.sampled_from([0.8, 1.5])),
                             "b_std": draw(st.sampled_from([None, 0.0, 0.2]))}},
                   _act(draw)]
        if min(h, w) >= 2 and draw(st.booleans()):
            layers.append({"avg_pool": {"window": [2, 2]}})
            h, w = h // 2, w // 2
    layers += [draw(st.sampled_from(["flatten", "global_avg_pool"])), "dense"]
    param = draw(st.sampled_from(["ntk", "standard"]))
    return {"layers": layers, "parameterization": param}, shape


def _agree(cpu, native, label):
    for kind, a, b in zip(KINDS, cpu, native):
        scale = np.max(np.abs(a))
        err = float(np.max(np.abs(a - b)) / scale)
        self_err = float(np.max(np.abs(np.diag(a) - np.diag(b))) / scale)
        assert max(err, self_err) <= AGREE, \
            f"{label} {kind}: rel diff {err:.2e}, self pairs {self_err:.2e}"


@settings(max_examples=14, deadline=None)
@given(networks(), st.integers(0, 2 ** 32 - 1))
def test_the_native_engine_gives_the_cpu_engines_kernels_on_random_networks(net, seed):
    """Three inputs; ``K(x, x)`` by both engines, and by the native engine ``K(x, x')``
    with ``x'`` the rows reversed: the middle row's pair with itself is a self pair in
    a pair pass, whose covariance the pair pass computes while its variances are the
    per-input pass's."""
    arch, shape = net
    x = np.random.default_rng(seed).standard_normal((3,) + shape)
    kfn = kernelcli.kernel_fn(arch)
    cpu = kfn(x, None, KINDS, dtype="float64", engine="cpu")
    native = kfn(x, None, KINDS, dtype="float64", engine="native")
    _agree(cpu, native, "K(x, x)")
    reversed_ = kfn(x, x[::-1].copy(), KINDS, dtype="float64", engine="native")
    _agree(cpu, [k[:, ::-1] for k in reversed_], "K(x, x reversed)")
