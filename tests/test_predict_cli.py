"""``kernelcli predict`` on real finished runs: numbers equal a direct float64
``numpy.linalg.solve``, CG equals Cholesky, a kernel that is not positive definite
says so, and every misuse is a one-line error (exit 2) that writes nothing."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest

from kernelcli.errors import BudgetError
from kernelcli.run import predict

from helpers_cli import invoke, FLATTEN_NET, snapshot, write_config
from test_train_test import write_cfg, write_data



pytestmark = pytest.mark.usefixtures("keep_process_state")




@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predict")
    write_data(folder, n_train=40, n_test=17, seed=3)
    cfg = write_cfg(folder, layers=FLATTEN_NET, block=16)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    return folder / "run_tt"


def fresh_copy(finished, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "predictions.h5").unlink(missing_ok=True)
    return run


def direct(run, kind, ridge):
    with h5py.File(run / "kernels.h5") as f:
        k = f[kind][...].astype(np.float64)
        kt = f[f"{kind}_test"][...].astype(np.float64)
        kd = f[f"{kind}_test_diag"][...].astype(np.float64)
        y = f["labels"][...]
    c = 3
    targets = np.eye(c)[y]
    reg = ridge * np.trace(k) / len(k)
    a = k + reg * np.eye(len(k))
    mean = kt @ np.linalg.solve(a, targets)
    var = kd - np.einsum("ij,ji->i", kt, np.linalg.solve(a, kt.T))
    return mean, var


def test_predictions_equal_a_direct_float64_solve(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    result = invoke("predict", run, "--ridge", "1e-4,0.1", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["n_train"], out["n_test"], out["classes"]) == (40, 17, 3)
    assert out["solver"] == "cholesky"
    with h5py.File(run / "kernels.h5") as f:
        y_test = f["test_labels"][...]
    with h5py.File(run / "predictions.h5") as f:
        assert list(f.attrs["ridges"]) == [1e-4, 0.1]
        for kind in ("nngp", "ntk"):
            mean = f[kind]["mean"][...]
            assert mean.shape == (2, 17, 3)
            for i, ridge in enumerate((1e-4, 0.1)):
                want, var = direct(run, kind, ridge)
                np.testing.assert_allclose(mean[i], want, rtol=1e-8, atol=1e-10)
                row = next(r for r in out["results"] if r["kind"] == kind and r["ridge"] == ridge)
                assert row["accuracy"] == np.mean(np.argmax(want, 1) == y_test)
                assert row["mse"] == pytest.approx(np.mean((want - np.eye(3)[y_test]) ** 2))
                assert f[kind]["accuracy"][i] == row["accuracy"]
                if kind == "nngp":
                    np.testing.assert_allclose(f[kind]["variance"][i], var, rtol=1e-6,
                                               atol=1e-9)
            assert ("variance" in f[kind]) == (kind == "nngp")


def test_the_text_table_has_a_row_per_kind_and_ridge(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    result = invoke("predict", run, "--ridge", "0.01", "--kind", "ntk")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "40 training and 17 test examples, 3 classes; solver cholesky; " \
                       "ridge x trace(K)/n"
    assert len([ln for ln in lines if ln.strip().startswith("ntk ")]) == 1
    assert "%" in lines[2] and lines[-1] == f"wrote {run / 'predictions.h5'}"


def test_cg_equals_cholesky(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    chol = predict(run, ridges=[1e-2, 1.0], solver="cholesky")
    with h5py.File(run / "predictions.h5") as f:
        want = {k: f[k]["mean"][...] for k in ("nngp", "ntk")}
    cg = predict(run, ridges=[1e-2, 1.0], solver="cg")
    assert cg["solver"] == "cg"
    with h5py.File(run / "predictions.h5") as f:
        for k in ("nngp", "ntk"):
            np.testing.assert_allclose(f[k]["mean"][...], want[k], rtol=1e-6, atol=1e-8)
    assert [r["accuracy"] for r in cg["results"]] == [r["accuracy"] for r in chol["results"]]


def test_cholesky_that_does_not_fit_names_cg(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    with pytest.raises(BudgetError, match="use solver= cg"):
        predict(run, solver="cholesky", available_bytes=1000)
    assert predict(run, ridges=[0.1], available_bytes=1000)["solver"] == "cg"


def test_a_kernel_that_is_not_positive_definite_says_so(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    k = np.eye(40, dtype=np.float32)
    k[-1, -1] = -0.05  # indefinite; the ridge 0.1 x trace/n = 0.097 makes it definite
    with h5py.File(run / "kernels.h5", "r+") as f:
        f["nngp"][...] = k
    edited = invoke("predict", run, "--ridge", "0,0.1", "--kind", "nngp")
    assert edited.exit_code == 2 and "does not match its checksum" in edited.stderr
    with h5py.File(run / "kernels.h5", "r+") as f:  # a deliberate edit, checksum renewed
        f["nngp"].attrs["sha256"] = hashlib.sha256(k.tobytes()).hexdigest()
    result = invoke("predict", run, "--ridge", "0,0.1", "--kind", "nngp")
    assert result.exit_code == 0, result.stderr
    rows = [ln.split(None, 2) for ln in result.stdout.splitlines()[2:4]]
    assert rows[0] == ["nngp", "0", "not positive definite at this ridge: use a larger one"]
    assert rows[1][:2] == ["nngp", "0.1"] and rows[1][2].split()[0].endswith("%")
    assert "nan" not in result.stdout.lower()
    result = invoke("predict", run, "--ridge", "0", "--kind", "nngp")
    assert result.exit_code == 1
    assert "Error: the nngp kernel plus ridge 0 x trace/n" in result.stderr
    assert "is not positive definite" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (("--ridge", "-1"), "--ridge: -1.0 is not accepted"),
    (("--ridge", "abc"), "Invalid value for '--ridge': 'abc' is not a number"),
    (("--kind", "gp"), "Invalid value for '--kind'"),
    (("--solver", "lu"), "Invalid value for '--solver'"),
])
def test_bad_options_are_usage_errors_that_write_nothing(finished, tmp_path, args, message):
    run = fresh_copy(finished, tmp_path)
    before = snapshot(run)
    result = invoke("predict", run, *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert snapshot(run) == before


def test_a_run_without_a_test_set_or_unfinished_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((10, 4, 4, 1))
            .astype(np.float32))
    cfg = write_config(tmp_path, "plain")
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    result = invoke("predict", tmp_path / "run")
    assert result.exit_code == 2
    assert "holds no test kernel K(test, x1): predict needs a run whose configuration " \
           "names a test set (data.test" in result.stderr
    (tmp_path / "run" / "kernels.h5").unlink()
    result = invoke("predict", tmp_path / "run")
    assert result.exit_code == 2
    assert "the run is not finished; complete it with `kernelcli resume" in result.stderr
