"""``architecture.readouts``: one pass over the body, a head after chosen layers.

Each readout must equal the kernel of the truncated network (``after`` body layers,
then the head) run on its own: in-process (``kernel_matrix``, float64, at most 1e-12
relative; the one-pass program happens to give the same bits on these nets) and
through the CLI (``kernels.h5`` datasets against separate runs). Invalid readouts
fail with one exact line and exit 2; predict reports one result per readout and
kind; a killed run with readouts resumes to the uninterrupted result.
"""

from __future__ import annotations

import random

import h5py
import numpy as np
import pytest

import kernelcli
from conftest import one_device
from helpers_cli import SQRT2, error_line, invoke, read_kernels, run_cli, write_config
from kernelcli.config import check_architecture, parse_architecture
from kernelcli.errors import ConfigError
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

pytestmark = pytest.mark.usefixtures("keep_process_state")

CONV = {"conv": {"filter": 3, "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}}
POOLED_BODY = [CONV, "relu", CONV, "relu", {"avg_pool": {"window": 2}}, CONV, "erf"]
GAP_HEAD = ["global_avg_pool", {"dense": {"W_std": 1.0, "b_std": 0.05}}]
FLATTEN_HEAD = ["flatten", {"dense": {"W_std": 1.0}}]


def architecture(layers, head, after, **extra):
    return parse_architecture({"layers": layers, "readouts": {"head": head, "after": after},
                               **extra})


def rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def assert_readouts_match(arch, x1, x2=None, augment=()):
    """Every readout of ``arch`` against ``kernel_matrix`` of its truncated network
    (both averaged over the flip group of ``augment``, when given), on one device: each
    program compiles once (conftest.one_device)."""
    shape = x1.shape[1:]
    check_architecture(arch, shape)
    got = kernel_matrix(build_kernel_fn(arch, shape, ("nngp", "ntk"), "float64", augment),
                        x1, x2, devices=one_device())
    assert sorted(got) == sorted(f"{k}_d{a}" for a in arch.readouts.after
                                 for k in ("nngp", "ntk"))
    for a in arch.readouts.after:
        alone = arch.truncated(a)
        check_architecture(alone, shape)
        want = kernel_matrix(build_kernel_fn(alone, shape, ("nngp", "ntk"), "float64",
                                             augment), x1, x2, devices=one_device())
        for kind in ("nngp", "ntk"):
            assert rel(got[f"{kind}_d{a}"], want[kind]) <= 1e-12, (a, kind)


@pytest.mark.parametrize("head, after", [(GAP_HEAD, [2, 4, 5, 7]), (FLATTEN_HEAD, [1, 4, 7])],
                         ids=["gap_head", "flatten_head"])
def test_each_readout_equals_its_truncated_network(head, after):
    x = np.random.default_rng(0).standard_normal((5, 6, 6, 2))
    assert_readouts_match(architecture(POOLED_BODY, head, after), x)


@pytest.mark.slow
def test_readouts_of_a_flip_averaged_kernel_are_the_truncated_networks_averaged():
    """kernel.augment and readouts together: the per-input pass and the pairs average
    every readout's kernel over the group, as each truncated network's own run does."""
    x = np.random.default_rng(5).standard_normal((4, 6, 6, 2))
    assert_readouts_match(architecture(POOLED_BODY, GAP_HEAD, [2, 4, 7]), x,
                          augment=("hflip", "vflip"))


@pytest.mark.slow
def test_readouts_of_a_rectangular_kernel_and_a_residual_body():
    body = [CONV, "relu", CONV, {"residual": {"layers": ["relu", CONV]}}, "relu",
            {"avg_pool": {"window": 2}}]
    rng = np.random.default_rng(1)
    assert_readouts_match(architecture(body, GAP_HEAD, [2, 4, 6]),
                          rng.standard_normal((4, 4, 4, 1)), rng.standard_normal((3, 4, 4, 1)))


def test_readouts_of_a_fully_connected_network_take_the_gram_route():
    body = ["flatten", {"dense": {"W_std": SQRT2, "b_std": 0.1}}, "relu",
            {"dense": {"W_std": SQRT2}}, "erf"]
    arch = architecture(body, [{"dense": {"W_std": 1.0}}], [1, 3, 5],
                        parameterization="standard")
    assert build_kernel_fn(arch, (4, 4, 2), ("nngp",), "float64").flat_input
    assert_readouts_match(arch, np.random.default_rng(2).standard_normal((6, 4, 4, 2)))


def test_after_counts_repeat_expanded_and_a_head_that_pools_keeps_the_full_covariance():
    body = [{"repeat": {"times": 3, "layers": [CONV, "relu"]}}]
    arch = architecture(body, GAP_HEAD, [2, 6])
    assert len(arch.layers) == 6
    kfn = build_kernel_fn(arch, (4, 4, 1), ("nngp",), "float64")
    assert kfn.full_cov and kfn.kinds == ("nngp_d2", "nngp_d6")
    no_pool = build_kernel_fn(architecture(body, FLATTEN_HEAD, [2, 6]), (4, 4, 1), ("nngp",),
                              "float64")
    assert not no_pool.full_cov  # nothing pools: the diagonal is enough
    assert_readouts_match(arch, np.random.default_rng(3).standard_normal((3, 4, 4, 1)))


def test_the_python_api_returns_a_dict_by_readout():
    arch = {"layers": POOLED_BODY[:4], "readouts": {"head": GAP_HEAD, "after": [2, 4]}}
    x = np.random.default_rng(4).standard_normal((3, 4, 4, 2))
    one = one_device()
    got = kernelcli.kernel_fn(arch)(x, get="nngp", dtype="float64", devices=one)
    assert sorted(got) == [2, 4]
    alone = kernelcli.kernel_fn({"layers": POOLED_BODY[:2] + GAP_HEAD})
    assert rel(got[2], alone(x, get="nngp", dtype="float64", devices=one)) <= 1e-12
    both = kernelcli.kernel_fn(arch)(x, dtype="float64", devices=one)
    assert isinstance(both[4], tuple) and len(both[4]) == 2


# -- invalid readouts: one exact line, exit 2 -------------------------------------------

GAP_BODY = [CONV, "relu", "global_avg_pool", {"dense": {"W_std": 1.0}}]
NOT_GAUSSIAN = "not Gaussian (the output of relu at architecture.layers[1].relu)"
MESSAGES = [
    ({"head": GAP_HEAD, "after": [2, 3]},
     f"architecture.readouts.after[1]: 3 reads out shape (1,), {NOT_GAUSSIAN}, which the head "
     "cannot take: architecture.readouts.head[0].global_avg_pool: global_avg_pool needs "
     "spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) but gets "
     "a vector of shape (1,) made by architecture.layers[2].global_avg_pool; spatial layers "
     "cannot follow flatten, global_avg_pool, global_sum_pool or local_avg_pool"),
    ({"head": ["relu", "flatten", "dense"], "after": [1, 2]},
     f"architecture.readouts.after[1]: 2 reads out shape (6, 6, 1), {NOT_GAUSSIAN}, which the "
     "head cannot take: architecture.readouts.head[0].relu: relu acts on the output of relu "
     "at architecture.layers[1].relu, which is not Gaussian; it must follow dense, conv, "
     "conv_local or conv_transpose (possibly through avg_pool, global_avg_pool, "
     "global_sum_pool, identity, layer_norm, sum_pool, residual or a parallel with merge "
     "sum)"),
    ({"head": ["dense"], "after": [2]},
     f"architecture.readouts.after[0]: 2 reads out shape (6, 6, 1), {NOT_GAUSSIAN}, which the "
     "head cannot take: architecture.readouts.head: outputs shape (6, 6, 1) there; expected "
     "a vector: add flatten or global_avg_pool before the last dense"),
    ({"head": FLATTEN_HEAD, "after": [2, 2]},
     "architecture.readouts.after[1]: 2 does not follow 2; expected increasing counts"),
    ({"head": FLATTEN_HEAD, "after": [0]},
     "architecture.readouts.after[0]: 0 is not a body layer count; expected an integer in "
     "1..4 (the body's layers, repeat expanded)"),
    ({"head": FLATTEN_HEAD, "after": [5]},
     "architecture.readouts.after[0]: 5 is not a body layer count; expected an integer in "
     "1..4 (the body's layers, repeat expanded)"),
    ({"head": FLATTEN_HEAD, "after": 3},
     "architecture.readouts.after: 3 is not a list of layer counts; expected a non-empty "
     "list of increasing body layer counts in 1..4"),
    ({"head": FLATTEN_HEAD},
     "architecture.readouts.after: missing; expected a list of increasing body layer counts "
     "in 1..4"),
    ({"head": [], "after": [1]},
     "architecture.readouts.head: empty; expected a list of at least one layer"),
    ({"head": FLATTEN_HEAD, "after": [1], "at": 2},
     "architecture.readouts: unknown key 'at'; expected head, after"),
]


@pytest.mark.parametrize("readouts, message", MESSAGES)
def test_an_invalid_readout_is_one_exact_line(readouts, message):
    with pytest.raises(ConfigError) as e:
        arch = parse_architecture({"layers": GAP_BODY, "readouts": readouts})
        check_architecture(arch, (6, 6, 2))
    assert str(e.value) == message


def test_readouts_are_bounded_like_a_network():
    body = [{"repeat": {"times": 500, "layers": ["dense", "relu"]}}]
    head = [{"repeat": {"times": 10, "layers": ["dense"]}}]
    with pytest.raises(ConfigError) as e:
        parse_architecture({"layers": body, "readouts": {"head": head,
                                                         "after": list(range(10, 1001, 10))}})
    assert str(e.value) == ("architecture.readouts.after: 100 readouts of a 10-layer head "
                            "evaluate 2000 layers in all; expected at most 1000 (the body to "
                            "the last readout and a head per readout)")


def test_the_cli_refuses_an_invalid_readout_with_exit_2(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 6, 6, 2), np.float32))
    readouts, message = MESSAGES[0]
    cfg = write_config(tmp_path, layers=GAP_BODY, readouts=readouts)
    r = invoke("compute", cfg)
    assert r.exit_code == 2
    assert error_line(r) == f"Error: {message}"


# -- through the CLI ----------------------------------------------------------------------

BODY = [CONV, "relu", CONV, "relu"]


def write_data(folder):
    rng = np.random.default_rng(5)
    np.savez(folder / "d.npz", x=rng.standard_normal((10, 6, 6, 2)).astype(np.float32),
             y=rng.integers(0, 3, 10), xt=rng.standard_normal((4, 6, 6, 2)).astype(np.float32),
             yt=rng.integers(0, 3, 4))


def config(folder, name, layers, readouts=None):
    import yaml

    arch = {"layers": layers}
    if readouts is not None:
        arch["readouts"] = readouts
    doc = {"name": name, "data": {"x1": "d.npz", "key": "x", "labels_key": "y", "test": "d.npz",
                                  "test_key": "xt", "test_labels_key": "yt"},
           "architecture": arch, "kernel": {"dtype": "float64", "test_diagonal": True},
           "compute": {"block": 4}, "output": {"run_dir": name}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def readout_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readouts")
    write_data(folder)
    cfg = config(folder, "ro", BODY, {"head": GAP_HEAD, "after": [2, 4]})
    r = invoke("compute", cfg, "--quiet")
    assert r.exit_code == 0, r.stderr
    return folder


def test_kernels_h5_holds_each_readout_equal_to_a_separate_run(readout_run):
    got, _ = read_kernels(readout_run / "ro" / "kernels.h5")
    for a in (2, 4):
        cfg = config(readout_run, f"alone{a}", BODY[:a] + GAP_HEAD)
        r = invoke("compute", cfg, "--quiet")
        assert r.exit_code == 0, r.stderr
        want, _ = read_kernels(readout_run / f"alone{a}" / "kernels.h5")
        for name in ("nngp", "ntk", "nngp_test", "ntk_test", "nngp_test_diag",
                     "ntk_test_diag"):
            kind, _, rest = name.partition("_")
            mine = got[f"{kind}_d{a}" + (f"_{rest}" if rest else "")]
            assert rel(mine, want[name]) <= 1e-12, (a, name)
    assert "nngp" not in got and "labels" in got


def test_verify_status_estimate_and_open_run_know_the_readouts(readout_run):
    run = readout_run / "ro"
    assert invoke("verify", run).exit_code == 0
    status = invoke("status", run)
    assert "readouts: nngp_d2, ntk_d2, nngp_d4, ntk_d4" in status.stdout
    est = invoke("estimate", readout_run / "ro.yaml")
    assert "layers per pair, one pass      8 " in est.stdout
    assert "layers per pair, separately    10 " in est.stdout
    opened = kernelcli.open_run(run)
    assert opened.readouts == (2, 4)
    assert sorted(opened.readout(4)) == ["nngp", "nngp_test", "nngp_test_diag", "ntk",
                                         "ntk_test", "ntk_test_diag"]
    assert np.array_equal(opened.readout(4)["ntk"], opened["ntk_d4"])
    with pytest.raises(ConfigError, match=r"readout: 3 is not one of this run's readouts; "
                                          r"expected one of \[2, 4\]"):
        opened.readout(3)


def test_predict_reports_each_readout_and_kind(readout_run):
    r = invoke("predict", readout_run / "ro", "--kind", "nngp", "--json")
    assert r.exit_code == 0, r.stderr
    import json

    out = json.loads(r.stdout)
    assert list(out["selected"]) == ["nngp_d2", "nngp_d4"]
    assert {row["kind"] for row in out["results"]} == {"nngp_d2", "nngp_d4"}
    with h5py.File(readout_run / "ro" / "predictions.h5", "r") as f:
        assert {"nngp_d2", "nngp_d4"} <= set(f.keys())
    everything = invoke("predict", readout_run / "ro")
    assert everything.exit_code == 0, everything.stderr
    assert {row.split()[0] for row in everything.stdout.splitlines()[3:7]} == {
        "nngp_d2", "ntk_d2", "nngp_d4", "ntk_d4"}


@pytest.mark.slow
def test_a_killed_run_with_readouts_resumes_to_the_uninterrupted_result(tmp_path):
    import test_resume_kill as kill

    from helpers_cli import cli_env, images

    def make(folder):
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "x.npy", images(kill.SIZES[0].n, 8, 8, 2, seed=42))
        return write_config(folder, "kill", layers=kill.GAP2_NET[:4],
                            compute={"block": kill.SIZES[0].block}, run_dir="run", run_name="kill",
                            readouts={"head": GAP_HEAD, "after": [2, 4]}, keep_tiles=True)

    env = cli_env()
    ref = make(tmp_path / "ref")
    assert run_cli("compute", ref, "--quiet", env=env).returncode == 0
    want, _ = read_kernels(tmp_path / "ref" / "run" / "kernels.h5")
    cfg = make(tmp_path / "job")
    killed = kill.drive(cfg, tmp_path / "job" / "run",
                        kill.KILL_PLANS[2](random.Random(2)), env, tmp_path / "logs",
                        kill.SIZES[0].tiles)
    assert killed >= 1
    got, _ = read_kernels(tmp_path / "job" / "run" / "kernels.h5")
    assert sorted(got) == ["nngp_d2", "nngp_d4", "ntk_d2", "ntk_d4"]
    for k in want:
        assert np.array_equal(got[k], want[k]), k
