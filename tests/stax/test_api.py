"""The Python API: ``kernelcli.kernel_fn`` against neural-tangents' fixtures, the ``stax``
builders against their YAML, and ``open_run`` on a real run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import kernelcli
from conftest import FIXTURE_CASES, FIXTURES_DIR, load_case
from helpers_cli import GAP_NET, images, write_config
from kernelcli import stax
from kernelcli.errors import ConfigError, DataError, RunDirError
from kernelcli.kernels import native_unavailable

ROOT = Path(__file__).resolve().parents[2]
SQ2 = 2 ** 0.5


def _rel(got, want) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _off_diagonal(a: np.ndarray) -> np.ndarray:
    return a[~np.eye(*a.shape, dtype=bool)] if a.shape[0] == a.shape[1] else a.ravel()


# The API's route (a YAML path -> kernel_fn -> a call) on one fixture of each kind of
# input and network; tests/kernels/test_kernels_fixtures.py holds the kernels of all of them.
API_CASES = ("fc3", "rect", "cnn1_gap", "cnn1_flatten", "seq_ncl", "seq_rect", "vol_conv_gap",
             "standard_param", "residual", "parallel_rect", "spatial_local_diag",
             "elem_gaussian_rect")


def test_the_api_cases_are_fixtures_of_every_shape():
    assert set(API_CASES) <= set(FIXTURE_CASES)
    cases = [load_case(name) for name in API_CASES]
    assert {c.x1.ndim for c in cases} == {2, 3, 4, 5}  # rows, sequences, images, volumes
    assert {c.symmetric for c in cases} == {True, False}
    assert {c.config.data.layout.endswith("C") for c in cases} == {True, False}


@pytest.mark.parametrize("name", API_CASES)
def test_kernel_fn_of_a_config_matches_neural_tangents(name):
    """float64 1e-10 off the diagonal (neural-tangents' own diagonal is inexact for some
    nets; tests/kernels/test_kernels_fixtures.py holds the diagonals to a closed form)."""
    c = load_case(name)
    kfn = kernelcli.kernel_fn(FIXTURES_DIR / f"{name}.yaml")
    nngp, ntk = kfn(c.x1, c.x2, ("nngp", "ntk"), dtype="float64")
    for got, want in ((nngp, c.nngp), (ntk, c.ntk)):
        assert got.dtype == np.float64 and got.shape == want.shape
        assert _rel(_off_diagonal(got), _off_diagonal(want)) < 1e-10


def test_get_follows_neural_tangents_convention():
    kfn = kernelcli.kernel_fn(FIXTURES_DIR / "cnn1_gap.yaml")
    x = images(3, seed=1)
    ntk = kfn(x, None, "ntk")
    both = kfn(x, get=("ntk", "nngp"))
    assert isinstance(ntk, np.ndarray) and ntk.shape == (3, 3) and ntk.dtype == np.float32
    assert isinstance(both, tuple) and len(both) == 2
    assert np.array_equal(both[0], ntk)
    assert np.array_equal(ntk, ntk.T)  # the triangle, mirrored
    assert kfn(x, images(2, seed=2), "nngp").shape == (3, 2)


NETS = [
    (stax.serial(stax.Conv(16, (3, 3), padding="SAME", W_std=SQ2, b_std=0.1), stax.Relu(),
                 stax.GlobalAvgPool(), stax.Dense(1, W_std=1.0, b_std=0.0)),
     "layers: [{conv: {filter: [3, 3], padding: SAME, W_std: 1.4142135623730951, b_std: 0.1,"
     " width: 16}}, relu, global_avg_pool, {dense: {W_std: 1.0, b_std: 0.0}}]"),
    (stax.serial(stax.Conv(8, (3, 3), W_std=1.5), stax.Erf(), stax.AvgPool((2, 2)),
                 stax.Flatten(), stax.Dense(10)),
     "layers: [{conv: {filter: [3, 3], padding: VALID, W_std: 1.5, b_std: null, width: 8}},"
     " erf, {avg_pool: {window: [2, 2], strides: [1, 1]}}, flatten, "
     "{dense: {b_std: null, width: 10}}]"),
    (stax.serial(stax.Dense(4, parameterization="standard"), stax.LeakyRelu(0.1),
                 stax.residual(stax.Dense(4, parameterization="standard"), stax.Gelu(),
                               stax.Dense(4, parameterization="standard")),
                 stax.LayerNorm(), stax.repeat(stax.serial(stax.Dense(4, parameterization=
                                                                      "standard"),
                                                           stax.ABRelu(-0.5, 1.0)), 2),
                 stax.Identity(), stax.Dense(1, parameterization="standard")),
     "parameterization: standard\nlayers: [{dense: {b_std: null, width: 4}}, "
     "{leaky_relu: {alpha: 0.1}}, {residual: [{dense: {b_std: null, width: 4}}, gelu, "
     "{dense: {b_std: null, width: 4}}]}, layer_norm, {repeat: {times: 2, layers: "
     "[{dense: {b_std: null, width: 4}}, {abrelu: {a: -0.5, b: 1.0}}]}}, identity, "
     "{dense: {b_std: null, width: 1}}]"),
    (stax.serial(stax.Conv(4, (3, 3), padding="SAME"), stax.FanOut(3),
                 stax.parallel(stax.serial(stax.Relu(), stax.Conv(2, (3, 3), padding="SAME")),
                               stax.Identity(), stax.AvgPool((3, 3), (1, 1), "SAME")),
                 stax.FanInConcat(), stax.Conv(1, (1, 1)), stax.Relu(),
                 stax.FanOut(2), stax.parallel(stax.Dense(1),
                                               stax.serial(stax.Relu(), stax.Dense(1))),
                 stax.FanInSum(), stax.GlobalAvgPool(), stax.Dense(1)),
     "layers: [{conv: {filter: [3, 3], padding: SAME, b_std: null, width: 4}}, {parallel: "
     "{branches: [[relu, {conv: {filter: [3, 3], padding: SAME, b_std: null, width: 2}}], "
     "[identity], [{avg_pool: {window: [3, 3], strides: [1, 1], padding: SAME}}]], merge: "
     "concat}}, {conv: {filter: [1, 1], padding: VALID, b_std: null}}, relu, {parallel: "
     "{branches: [[{dense: {b_std: null}}], [relu, {dense: {b_std: null}}]], merge: sum}}, "
     "global_avg_pool, {dense: {b_std: null}}]"),
]


@pytest.mark.parametrize("net, text", NETS, ids=["gap", "flatten", "standard", "parallel"])
def test_stax_builders_are_the_same_spec_as_their_yaml(net, text):
    built = kernelcli.kernel_fn(net).architecture
    assert built == kernelcli.kernel_fn(text).architecture
    assert built == kernelcli.kernel_fn(net.to_yaml()).architecture  # notebook -> batch job
    assert built == kernelcli.kernel_fn(net.to_dict()).architecture


def test_a_stax_network_gives_the_kernels_of_its_yaml():
    net, text = NETS[0]
    x = images(4, seed=3)
    a = kernelcli.kernel_fn(net)(x, get="ntk", dtype="float64")
    b = kernelcli.kernel_fn(text)(x, get="ntk", dtype="float64")
    assert np.array_equal(a, b)


@pytest.mark.parametrize("call, message", [
    (lambda k, x: k(x, get="ntkk"), "get: 'ntkk' is not accepted; expected 'nngp', 'ntk' or a "
                                    "tuple of them, each at most once"),
    (lambda k, x: k(x, dtype="float16"), "dtype: 'float16' is not a dtype; expected one of "
                                         "float32, float64"),
    (lambda k, x: k(x, x[:, :3]), "x2: examples of shape (3, 6, 2) do not match x1's (6, 6, 2)"),
    (lambda k, x: k(x[None, None]), "x1: an array of shape (1, 1, 2, 6, 6, 2) and dtype "
                                    "float32 is not accepted; expected real numbers of shape "
                                    "(N, H, W, C), (N, L, C), (N, D, H, W, C) (channels last) "
                                    "or (N, D)"),
    (lambda k, x: k(x * np.nan), "x1: row 0 of x1 (an array of shape (2, 6, 6, 2)) contains "
                                 "NaN; every value must be finite"),
    # the CLI's input bounds (data.INPUT_BOUNDS): finite values that would overflow the
    # kernel's sums of squares in float32, measured before any cast
    (lambda k, x: k(x * 1e18), "x1: row 0 of x1 (an array of shape (2, 6, 6, 2)) holds a "
                               "value of magnitude"),
    (lambda k, x: k(np.full(x.shape, 2**62, np.int64)), "x1: row 0 of x1 (an array of shape "
                                                        "(2, 6, 6, 2)) holds a value of "
                                                        "magnitude 4.612e+18, too large for "
                                                        "kernel.dtype float32; accepted: "
                                                        "|x| <= 1e+15"),
    (lambda k, x: k(x, memory="lots"), "memory: 'lots' is not a size; expected"),
    (lambda k, x: k(x, engine="gpu"), "engine: 'gpu' is not an engine; expected one of auto, "
                                      "cpu, native, accelerator"),
])
def test_bad_calls_name_the_argument(call, message):
    kfn = kernelcli.kernel_fn(FIXTURES_DIR / "cnn1_gap.yaml")
    with pytest.raises((ConfigError, DataError)) as exc:
        call(kfn, images(2, seed=4))
    assert str(exc.value).startswith(message)


def test_engine_picks_the_engine_and_all_give_the_same_kernels():
    """``engine`` as ``compute.engine``: auto is the native engine here (a CPU with a
    compiler, a convolution and relu), and the cpu and accelerator engines give the same
    kernels to float32 rounding."""
    kfn = kernelcli.kernel_fn(FIXTURES_DIR / "cnn1_gap.yaml")
    x = images(5, seed=3)
    auto = kfn(x, engine="auto")
    resolved = kfn(x, engine="cpu" if native_unavailable() else "native")
    assert all(np.array_equal(a, c) for a, c in zip(auto, resolved))
    for other in ("cpu", "accelerator"):
        for a, c in zip(kfn(x, engine=other), auto):
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-7)


def test_stax_refuses_what_kernelcli_cannot_compute():
    with pytest.raises(ConfigError, match=r"^stax.Gelu: approximate=True is not supported"):
        stax.Gelu(approximate=True)
    with pytest.raises(ConfigError, match=r"^stax.serial: layers ask for both 'ntk' and "):
        stax.serial(stax.Dense(1), stax.Dense(1, parameterization="standard"))
    with pytest.raises(ConfigError, match=r"^architecture: int is not accepted"):
        kernelcli.kernel_fn(3)


def test_stax_fan_out_parallel_and_fan_in_join_across_serials():
    whole = stax.serial(stax.Dense(2), stax.FanOut(2),
                        stax.parallel(stax.Dense(3), stax.serial(stax.Relu(), stax.Dense(1))),
                        stax.FanInConcat(), stax.Dense(1))
    pieces = stax.serial(stax.serial(stax.Dense(2), stax.FanOut(2)),
                         stax.serial(stax.parallel(stax.Dense(3),
                                                   stax.serial(stax.Relu(), stax.Dense(1))),
                                     stax.FanInConcat()), stax.Dense(1))
    assert whole == pieces
    assert whole.layers[1] == {"parallel": {"branches": [
        [{"dense": {"W_std": 1.0, "b_std": None, "width": 3}}],
        ["relu", {"dense": {"W_std": 1.0, "b_std": None, "width": 1}}]], "merge": "concat"}}


@pytest.mark.parametrize("build, message", [
    (lambda: stax.serial(stax.FanOut(2), stax.Relu(), stax.FanInSum()),
     "stax.serial: FanOut, 'relu', FanInSum is not FanOut(k), parallel(... k branches), "
     "FanInSum() or FanInConcat(); expected the three consecutive, in that order"),
    (lambda: stax.serial(stax.Dense(1), stax.parallel(stax.Dense(1)), stax.FanInSum()),
     "stax.serial: parallel, FanInSum is not FanOut(k), parallel(... k branches), "
     "FanInSum() or FanInConcat(); expected the three consecutive, in that order"),
    (lambda: stax.serial(stax.FanOut(3), stax.parallel(stax.Dense(1), stax.Dense(2)),
                         stax.FanInSum()),
     "stax.serial: FanOut(3) feeds parallel of 2 branch(es); expected as many branches as "
     "the fan-out makes"),
    (lambda: kernelcli.kernel_fn(stax.serial(stax.Dense(1), stax.FanOut(2))),
     "stax: FanOut is not joined into a parallel layer; expected serial(FanOut(k), "
     "parallel(... k branches), FanInSum() or FanInConcat()), consecutive in one serial"),
    (lambda: stax.FanInConcat(axis=1),
     "stax.FanInConcat: axis=1 is not supported by kernelcli; accepted: -1 (the channel "
     "axis)"),
    (lambda: stax.FanOut(0),
     "stax.FanOut: num=0 is not supported by kernelcli; accepted: a positive integer, the "
     "number of branches"),
    (lambda: stax.parallel(stax.Dense(1, parameterization="standard"), stax.Dense(1)),
     "stax.parallel: layers ask for both 'standard' and 'ntk' parameterizations; kernelcli "
     "takes one per architecture"),
])
def test_stax_refuses_branches_out_of_place(build, message):
    with pytest.raises(ConfigError) as exc:
        build()
    assert str(exc.value) == message


def test_open_run_reads_bands_without_loading_the_matrix(tmp_path):
    x = images(11, seed=5)
    np.save(tmp_path / "x.npy", x)
    cfg = write_config(tmp_path, "c", layers=GAP_NET, compute={"block": 4})
    result = kernelcli.compute(cfg)
    assert result.assembled
    run = kernelcli.open_run(tmp_path / "run")
    assert run.finished and run.status().finished
    assert {"nngp", "ntk"} <= set(run.names)
    ntk = run["ntk"]
    assert isinstance(ntk, np.memmap) and ntk.shape == (11, 11)
    with h5py.File(tmp_path / "run" / "kernels.h5", "r") as f:
        assert np.array_equal(ntk[3:7], f["ntk"][3:7])
    assert run.config.name == "c" and run.labels == {}
    assert np.array_equal(run["nngp"], kernelcli.kernel_fn(cfg)(x, get="nngp"))


def test_open_run_of_an_unfinished_run_says_how_to_continue(tmp_path):
    np.save(tmp_path / "x.npy", images(9, seed=6))
    cfg = write_config(tmp_path, "c", layers=GAP_NET, compute={"block": 4})
    kernelcli.compute(cfg)
    (tmp_path / "run" / "kernels.h5").unlink()
    run = kernelcli.open_run(tmp_path / "run")
    assert not run.finished
    with pytest.raises(RunDirError, match=r"has no kernels.h5 yet \(the run is not finished\); "
                                          r"continue it with kernelcli.resume"):
        run["ntk"]


def test_importing_kernelcli_leaves_jax_unimported():
    code = "import kernelcli, kernelcli.stax, sys; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_notebook_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook.py")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "max |K_python - K_run|: 0" in out.stdout
