"""``local_avg_pool`` (LAP, Li et al. 2019) held to its definition, float64, 1e-12 of the
kernel's scale, both kinds, on every engine:

(a) on a network that pads circularly at stride 1, LAP with window ``w`` is the mean
    over pairs of the window's ``w x w`` translations ``s, s'`` of
    ``K_flatten(roll(x, s), roll(x', s'))``, kernelcli's own ``flatten`` kernel of the
    two inputs shifted independently (``np.roll``): the kernel of the data augmented
    by those translations;
(b) a window of the whole image is ``global_avg_pool`` (whatever the padding);
(c) a window of 1 is ``flatten``;
(d) on any network, a stride-1 circular ``avg_pool`` of the window then ``flatten``
    (today's vocabulary, at the cost of the whole covariance): so it is a network's
    kernel, positive semi-definite;

and against finite-width networks (the Monte-Carlo oracle, both inputs shifted). The
default run takes the cpu engine (and the native engine's agreement with it on a
network whose convolutions its custom calls compute); ``--slow`` the rest of the
matrix.

Why relative to the kernel's largest entry: the two sides add the same numbers in
another order (a few units in the last place), and a ReLU network's NTK entries are
all of one scale here.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_montecarlo import DRAWS, FLAT_OUT, MC_TOL, SQ2, arch_of, empirical_nngp, images

from conftest import one_device
from kernelcli.config import check_architecture, parse_architecture
from kernelcli.kernels import (
    build_kernel_fn,
    cost_model,
    engine_reason,
    native_unavailable,
    resolve_engine,
)
from kernelcli.run import kernel_matrix

KINDS = ("nngp", "ntk")
EXACT = 1e-12
NATIVE = pytest.mark.skipif(native_unavailable() is not None,
                            reason=f"the native engine: {native_unavailable()}")


def _arch(head, padding: str):
    conv = {"conv": {"padding": padding, "W_std": SQ2, "b_std": 0.1, "width": 2}}
    return parse_architecture({"layers": [conv, "relu", *head,
                                          {"dense": {"W_std": 1.0, "b_std": 0.1}}]})


def _kernels(head, x, engine: str, padding: str = "CIRCULAR", x2=None):
    arch = _arch(head, padding)
    check_architecture(arch, x.shape[1:])
    kfn = build_kernel_fn(arch, x.shape[1:], KINDS, "float64", engine=engine)
    return kernel_matrix(kfn, x, x2, devices=one_device())


def _assert_close(got, want, what: str):
    for kind in KINDS:
        err = np.max(np.abs(got[kind] - want[kind])) / np.max(np.abs(want[kind]))
        assert err <= EXACT, f"{what}, {kind}: off by {err:.2e} of the kernel's scale"


def _x(shape=(4, 5, 2), n=3):
    return np.random.default_rng(7).standard_normal((n,) + shape)


def _shifts(window):
    """The window's translations, ``(dh, dw)``, each axis ``-(w-1)/2 .. (w-1)/2``."""
    return [(a, b) for a in range(-(window[0] // 2), window[0] // 2 + 1)
            for b in range(-(window[1] // 2), window[1] // 2 + 1)]


def _check_definition(engine: str):
    x, window = _x(), (3, 3)
    lap = _kernels([{"local_avg_pool": {"window": list(window)}}], x, engine)
    shifts = _shifts(window)
    # every translated copy of every input, one flatten kernel over them all
    copies = np.concatenate([np.roll(x, s, axis=(1, 2)) for s in shifts])
    every = _kernels(["flatten"], copies, engine)
    n = len(x)
    explicit = {kind: every[kind].reshape(len(shifts), n, len(shifts), n).mean(axis=(0, 2))
                for kind in KINDS}
    _assert_close(lap, explicit, f"{engine}: LAP {window} against its shifted flatten kernels")
    for kind in KINDS:  # the window is symmetric: so is the kernel, to rounding
        np.testing.assert_allclose(explicit[kind], explicit[kind].T, rtol=0, atol=1e-13)


def _check_limits(engine: str, padding: str):
    x = _x()
    whole = _kernels([{"local_avg_pool": {"window": [4, 5]}}], x, engine, padding)
    _assert_close(whole, _kernels(["global_avg_pool"], x, engine, padding),
                  f"{engine}, {padding}: the whole image's window against global_avg_pool")
    one = _kernels([{"local_avg_pool": {"window": 1}}], x, engine, padding)
    _assert_close(one, _kernels(["flatten"], x, engine, padding),
                  f"{engine}, {padding}: window 1 against flatten")


def test_lap_is_the_mean_of_the_flatten_kernels_of_the_shifted_inputs():
    _check_definition("cpu")


def test_the_whole_image_is_global_avg_pool_and_window_one_is_flatten():
    _check_limits("cpu", "CIRCULAR")


@NATIVE
def test_native_custom_calls_before_lap_agree_with_the_cpu_engine():
    """SAME convolutions and ReLU: the native engine's blocks compute the layers before
    the pool in C++, the pool itself in the cpu engine's code."""
    x = _x()
    head = [{"local_avg_pool": {"window": 3}}]
    _assert_close(_kernels(head, x, "native", "SAME"), _kernels(head, x, "cpu", "SAME"),
                  "native against cpu")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "accelerator"])
def test_lap_definition_on_the_other_engines(engine):
    if engine == "native" and native_unavailable() is not None:
        pytest.skip(f"the native engine: {native_unavailable()}")
    _check_definition(engine)


@pytest.mark.slow
@pytest.mark.parametrize("engine,padding", [("cpu", "SAME"), ("native", "SAME"),
                                            ("accelerator", "CIRCULAR")])
def test_lap_limits_on_the_other_engines(engine, padding):
    if engine == "native" and native_unavailable() is not None:
        pytest.skip(f"the native engine: {native_unavailable()}")
    _check_limits(engine, padding)


def test_lap_nngp_matches_finite_width_networks_of_shifted_inputs():
    """The flatten network's outputs averaged over the window's shifts of each input
    (circular padding, stride 1) have LAP's kernel."""
    conv = f"conv: {{filter: [3, 3], padding: CIRCULAR, W_std: {SQ2}, b_std: 0.1}}"
    lap = arch_of(conv, "relu", "local_avg_pool: {window: 3}", "dense: {W_std: 1.0}")
    flat = arch_of(conv, "relu", "flatten", "dense: {W_std: 1.0}")
    x = images()
    check_architecture(lap, x.shape[1:])
    ours = kernel_matrix(build_kernel_fn(lap, x.shape[1:], ("nngp",), "float64"),
                         np.float64(x), devices=one_device())["nngp"]
    emp = empirical_nngp(flat, x, DRAWS, out=FLAT_OUT, shifts=tuple(_shifts((3, 3))))
    err = np.max(np.abs(emp - ours)) / np.max(np.abs(ours))
    assert err <= MC_TOL, f"empirical NNGP off by {err:.3%} of max\nours:\n{ours}\nemp:\n{emp}"


def test_lap_reads_only_the_band_its_window_covers_in_the_cost_model():
    """estimate's per-layer cost: the pool reads ``H W w_h w_w`` entries of each array,
    not the ``(H W)^2`` of the full covariance its input is kept as."""
    arch = _arch([{"local_avg_pool": {"window": 3}}], "SAME")
    kfn = build_kernel_fn(arch, (8, 8, 1), KINDS, "float64")
    costs = cost_model(kfn, pair_batch=1).layers
    row = next(c for c in costs if c.name.endswith(":local_avg_pool"))
    assert row.read_bytes == 2 * 64 * 25 * 8  # offsets s' - s: 5 per axis
    conv = next(c for c in costs if c.name.startswith("0:conv"))
    assert conv.write_bytes == 2 * 64 * 64 * 8  # the full covariance up to the pool


def test_auto_says_which_engine_takes_a_lap_network():
    """The native engine's custom calls take stride-1 SAME or VALID convolutions: a
    circular network before the pool is the cpu engine's, and ``auto`` says why."""
    shape = (8, 8, 1)
    circular = _arch([{"local_avg_pool": {"window": 3}}], "CIRCULAR").layers
    same = _arch([{"local_avg_pool": {"window": 3}}], "SAME").layers
    assert resolve_engine("auto", "cpu", circular, shape) == "cpu"
    assert engine_reason("auto", "cpu", "cpu", circular, shape) == (
        "auto: the native engine has no custom call for this network")
    if native_unavailable() is None:
        assert resolve_engine("auto", "cpu", same, shape) == "native"


def test_lap_is_a_stride_one_circular_avg_pool_then_flatten():
    """(d): the same kernel as today's vocabulary (on SAME convolutions too: the pool's
    translations wrap whatever the layers before it did), so it is positive
    semi-definite; an input alternating from position to position after a linear
    network gets the window's triangle squared at that frequency, +1/9, not less."""
    x = _x()
    for window in (3, [3, 5]):
        lap = _kernels([{"local_avg_pool": {"window": window}}], x, "cpu", "SAME")
        pooled = _kernels([{"avg_pool": {"window": window, "strides": 1,
                                         "padding": "CIRCULAR"}}, "flatten"], x, "cpu", "SAME")
        _assert_close(lap, pooled, f"LAP {window} against avg_pool + flatten")
    alternating = np.array([[1.0, -1.0, 1.0, -1.0, 1.0, -1.0]])[..., None]
    arch = parse_architecture({"layers": ["dense", {"local_avg_pool": {"window": 3}},
                                          "dense"]})
    kfn = build_kernel_fn(arch, alternating.shape[1:], ("nngp",), "float64")
    value = kernel_matrix(kfn, alternating, devices=one_device())["nngp"][0, 0]
    assert abs(value - 1 / 9) < 1e-15
