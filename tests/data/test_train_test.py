"""A run with a training set, its labels and a test set: one ``compute`` makes the
training triangle, ``K(test, x1)`` and the test diagonal, with the labels and the
fitted preprocessing kept in the run directory; killed and resumed it gives the same
bits. Everything through the real CLI (CliRunner in-process, real subprocesses for the
kills)."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import yaml

from helpers_cli import (
    GAP_NET,
    assert_bit_identical,
    cli_env,
    finish,
    images,
    invoke,
    read_kernels,
    run_cli,
    snapshot,
    start_held,
    tile_names,
    wait_held,
)
from kernelcli.config import load_config
from kernelcli.data import fit_preprocess
from kernelcli.kernels import build_kernel_fn
from kernelcli.plan import make_plan
from kernelcli.run import kernel_matrix
from kernelcli.solvers import cholesky_memory_bytes

N_TRAIN, N_TEST, BLOCK = 20, 13, 8


pytestmark = pytest.mark.usefixtures("keep_process_state")




def write_data(folder, n_train=N_TRAIN, n_test=N_TEST, seed=0):
    x = images(n_train + n_test, 6, 6, 2, seed=seed)
    y = np.random.default_rng(seed).integers(0, 3, n_train + n_test)
    np.savez(folder / "d.npz", x_train=x[:n_train], y_train=y[:n_train],
             x_test=x[n_train:], y_test=y[n_train:])
    return x[:n_train], x[n_train:], y[:n_train], y[n_train:]


def write_cfg(folder, name="tt", data=None, kernel=None, layers=GAP_NET, block=BLOCK,
              keep_tiles=None):
    d = {"x1": "d.npz", "key": "x_train", "labels_key": "y_train", "test": "d.npz",
         "test_key": "x_test", "test_labels_key": "y_test"}
    d.update(data or {})
    d = {k: v for k, v in d.items() if v is not None}
    doc = {"name": name, "data": d, "architecture": {"layers": layers},
           "kernel": {"kinds": ["nngp", "ntk"], "dtype": "float32", "test_diagonal": True,
                      **(kernel or {})},
           "compute": {"block": block}, "output": {"run_dir": f"run_{name}"}}
    if keep_tiles is not None:
        doc["output"]["keep_tiles"] = keep_tiles
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def engine(cfg_path, shape):
    cfg = load_config(cfg_path)
    return build_kernel_fn(cfg.architecture, shape, cfg.kernel.kinds, cfg.kernel.dtype)


@pytest.fixture(scope="module")
def tt_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tt")
    xtr, xte, ytr, yte = write_data(folder)
    cfg = write_cfg(folder)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return folder, cfg, (xtr, xte, ytr, yte)


def test_plan_with_test_rows_covers_the_triangle_and_the_test_rectangle_once():
    plan = make_plan(20, 20, symmetric=True, bytes_per_pair=1, fixed_bytes=0,
                     budget_bytes=1 << 20, kinds=("nngp",), itemsize=4, block=8, n_test=13)
    train = [b for b in plan.blocks if not plan.is_test(b)]
    test = [b for b in plan.blocks if plan.is_test(b)]
    assert len(train) == 6 and len(test) == 2 * 3
    assert all(b.row >= b.col for b in train)
    assert all(not b.diagonal and 20 <= b.r0 < b.r1 <= 33 and b.c1 <= 20 for b in test)
    covered = np.zeros((13, 20), int)
    for b in test:
        covered[b.r0 - 20:b.r1 - 20, b.c0:b.c1] += 1
    assert (covered == 1).all()
    assert plan.pairs_total == 20 * 21 // 2 + 13 * 20
    assert len({b.key for b in plan.blocks}) == len(plan.blocks)
    assert plan.output_bytes == (20 * 20 + 13 * 21) * 4


def test_one_compute_gives_the_training_kernel_the_test_rectangle_and_diagonal(tt_run):
    folder, cfg, (xtr, xte, ytr, yte) = tt_run
    arrays, attrs = read_kernels(folder / "run_tt" / "kernels.h5")
    assert sorted(arrays) == ["labels", "nngp", "nngp_test", "nngp_test_diag", "ntk",
                              "ntk_test", "ntk_test_diag", "test_labels"]
    kfn = engine(cfg, xtr.shape[1:])
    train = kernel_matrix(kfn, xtr)
    test = kernel_matrix(kfn, xte, xtr)
    diag = kernel_matrix(kfn, xte)
    for k in ("nngp", "ntk"):
        assert arrays[k].shape == (N_TRAIN, N_TRAIN) and arrays[k].dtype == np.float32
        assert np.array_equal(arrays[k], arrays[k].T)
        np.testing.assert_allclose(arrays[k], train[k], rtol=2e-6)
        assert arrays[f"{k}_test"].shape == (N_TEST, N_TRAIN)
        np.testing.assert_allclose(arrays[f"{k}_test"], test[k], rtol=2e-6)
        np.testing.assert_allclose(arrays[f"{k}_test_diag"], np.diagonal(diag[k]), rtol=2e-6)
    assert np.array_equal(arrays["labels"], ytr) and np.array_equal(arrays["test_labels"], yte)
    assert set(json.loads(attrs["data_fingerprints"])) == {"x1", "test", "labels"}


def test_status_and_estimate_count_the_test_rows(tt_run):
    folder, cfg, _ = tt_run
    out = json.loads(invoke("status", folder / "run_tt", "--json").stdout)
    assert out["pairs_total"] == N_TRAIN * (N_TRAIN + 1) // 2 + N_TEST * N_TRAIN
    assert out["finished"]
    est = json.loads(invoke("estimate", cfg, "--memory", "--json").stdout)
    assert est["n1"] == N_TRAIN and est["n_test"] == N_TEST
    assert est["pairs_total"] == out["pairs_total"]
    # predict's whole Cholesky route at its default ridges, for one-hot targets of 3 classes
    assert est["classes"] == 3 and est["solver"] == "cholesky"
    assert est["solve_bytes"] == cholesky_memory_bytes(N_TRAIN, N_TEST, 3, 5, len(est["kinds"]))
    text = invoke("estimate", cfg, "--memory").stdout
    assert "test rows (K(test, x1))" in text and "predict: Cholesky solve needs" in text


def test_without_test_diagonal_there_is_none(tmp_path):
    write_data(tmp_path)
    cfg = write_cfg(tmp_path, kernel={"test_diagonal": False, "kinds": ["ntk"]})
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    arrays, _ = read_kernels(tmp_path / "run_tt" / "kernels.h5")
    assert sorted(arrays) == ["labels", "ntk", "ntk_test", "test_labels"]


def test_preprocessing_is_fitted_on_the_training_set_and_kept_in_the_run(tmp_path):
    xtr, xte, _, _ = write_data(tmp_path)
    cfg = write_cfg(tmp_path, data={"preprocess": {"kind": "zca", "zca_reg": 0.1}})
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    run = tmp_path / "run_tt"
    pp = fit_preprocess(xtr.astype(np.float64), "zca", zca_reg=0.1)
    stored = list(run.glob("preprocess-*.npz"))
    assert [p.name for p in stored] == [f"preprocess-{pp.fingerprint()[:16]}.npz"]
    kfn = engine(cfg, xtr.shape[1:])
    want = kernel_matrix(kfn, pp.apply(xte, np.float32), pp.apply(xtr, np.float32))
    arrays, attrs = read_kernels(run / "kernels.h5")
    np.testing.assert_allclose(arrays["nngp_test"], want["nngp"], rtol=1e-5)
    assert json.loads(attrs["data_fingerprints"])["preprocess"] == pp.fingerprint()


def test_resume_uses_the_stored_preprocessing_not_a_new_fit(tmp_path):
    write_data(tmp_path)
    cfg = write_cfg(tmp_path, data={"preprocess": "standardize"})
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    run = tmp_path / "run_tt"
    (run / "kernels.h5").unlink()
    (stored,) = run.glob("preprocess-*.npz")
    stored.write_bytes(b"not an npz")  # a resume that refits would not notice
    result = invoke("resume", run, "--quiet")
    assert result.exit_code == 2
    assert stored.name in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("data, message", [
    ({"x2": "d.npz"}, "data.test: 'd.npz' is given together with data.x2"),
    ({"test": None}, "data.test_key: 'x_test' is given but data.test is null"),
    ({"labels_key": "nope"}, "data.labels_key: 'nope' not found in"),
    ({"test_labels_key": "y_train"}, "data.test_labels_key: 20 labels in"),
    ({"preprocess": "whiten"}, "data.preprocess.kind: 'whiten' is not a preprocessing"),
    ({"preprocess": {"kind": "zca"}}, "data.preprocess.zca_reg: missing"),
    ({"preprocess": {"kind": "zca", "zca_reg": 0}}, "data.preprocess.zca_reg: 0 is not "
                                                    "accepted; expected a number > 0"),
    ({"preprocess": {"kind": "standardize", "zca_reg": 0.1}},
     "data.preprocess.zca_reg: 0.1 is only used with kind: zca"),
])
def test_a_mistake_in_the_train_test_keys_names_the_key_and_writes_nothing(tmp_path, data,
                                                                          message):
    write_data(tmp_path)
    if data.get("test", 1) is None:
        data = {"test": None, "test_labels_key": None}
    cfg = write_cfg(tmp_path, data=data)
    before = snapshot(tmp_path)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(tmp_path) == before


def test_test_diagonal_must_be_a_boolean(tmp_path):
    write_data(tmp_path)
    cfg = write_cfg(tmp_path, kernel={"test_diagonal": "yes"})
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert "kernel.test_diagonal: 'yes' is not a boolean; expected true or false" in result.stderr


@pytest.mark.slow
@pytest.mark.slow
def test_sigkill_mid_run_then_resume_gives_the_same_bits(tmp_path, tt_run):
    ref_folder, _, _ = tt_run
    reference, _ = read_kernels(ref_folder / "run_tt" / "kernels.h5")
    write_data(tmp_path)
    cfg = write_cfg(tmp_path, block=8)
    run = tmp_path / "run_tt"
    env = cli_env()
    total = 6 + 2 * 3
    for target in (1, 7):  # one kill among the training tiles, one among the test tiles
        args = ("resume", run, "--quiet") if (run / "manifest.json").exists() else \
            ("compute", cfg, "--quiet")
        proc = start_held(*args, after=target - len(tile_names(run)),
                          log_dir=tmp_path / "logs", env=env)
        wait_held(proc)  # held right after its tile number `target`: killed mid-run
        proc.send_signal(signal.SIGKILL)
        rc, _, err = finish(proc)
        assert "Traceback" not in err
        assert rc == -signal.SIGKILL and len(tile_names(run)) == target < total, (rc, err)
    r = run_cli("resume", run, "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    got, _ = read_kernels(run / "kernels.h5")
    assert_bit_identical(got, reference)
