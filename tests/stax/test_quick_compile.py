"""A library call whose work is small against compiling its programs compiles them
quick (XLA's lowest optimisation level, ``KernelFn.quick``): the same kernels to
rounding as the default programs, on every engine; a large call, and every run, keeps
the default programs."""

from __future__ import annotations

import numpy as np
import pytest

import kernelcli
from kernelcli.kernels import QUICK_WORK, build_kernel_fn, native_unavailable
from kernelcli.run import kernel_matrix

NET = {"layers": [{"conv": {"filter": [3, 3], "padding": "SAME", "W_std": 1.5,
                            "b_std": 0.1}}, "relu",
                  {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": 1.5}}, "erf",
                  "flatten", {"dense": {"W_std": 1.0}}]}
SHAPE = (6, 6, 2)
ENGINES = ["cpu", "accelerator"] + ([] if native_unavailable() else ["native"])


def _inputs(n: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *SHAPE))


@pytest.mark.parametrize("engine", ENGINES)
def test_quick_programs_give_the_default_programs_kernels_to_rounding(engine):
    kfn = build_kernel_fn(kernelcli.kernel_fn(NET).architecture, SHAPE, ("nngp", "ntk"),
                          "float64", (), engine)
    x = _inputs(5)
    want, got = kernel_matrix(kfn, x), kernel_matrix(kfn.quick(), x)
    assert kfn.quick().engine == kfn.engine  # the same record: only the compilation differs
    for kind in ("nngp", "ntk"):
        np.testing.assert_allclose(got[kind], want[kind], rtol=1e-13, atol=0)


# A network whose quick programs' last bits differ from the default programs' here (a
# pooling net: both take XLA's classic emitter, and the optimisation level differs), so
# the call's values tell which ones it ran
POOL_NET = {"layers": NET["layers"][:4] + ["global_avg_pool", {"dense": {"W_std": 1.0}}]}


def test_a_small_call_computes_with_quick_programs_and_a_large_one_with_the_default():
    net = kernelcli.kernel_fn(POOL_NET)
    kfn = build_kernel_fn(net.architecture, SHAPE, ("nngp",), "float64", (), "cpu")
    small, large = 4, 2048
    assert kfn.work(small * (small + 1) // 2) <= QUICK_WORK < kfn.work(large * (large + 1) // 2)
    x = _inputs(small)
    got = net(x, None, "nngp", dtype="float64", engine="cpu")
    quick = kernel_matrix(kfn.quick(), x)["nngp"]
    assert np.array_equal(got, quick)  # the call's own programs: the quick ones, bit for bit
    default = kernel_matrix(kfn, x)["nngp"]
    assert not np.array_equal(got, default)  # (their last bits differ: the test can tell)
    np.testing.assert_allclose(got, default, rtol=1e-13, atol=0)
