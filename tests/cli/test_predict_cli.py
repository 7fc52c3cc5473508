"""``kernelcli predict`` on real finished runs: numbers equal a direct float64
``numpy.linalg.solve``, CG equals Cholesky, a kernel that is not positive definite
says so, and every misuse is a one-line error (exit 2) that writes nothing."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, invoke, snapshot, write_config
from kernelcli.errors import BudgetError
from kernelcli.run import predict
from kernelcli.solvers import cholesky_memory_bytes

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


def test_the_text_shows_the_chosen_ridge_then_the_sweep_as_test_numbers(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    result = invoke("predict", run, "--ridge", "0.01,1", "--kind", "ntk")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "40 training and 17 test examples, 3 classes; solver cholesky; " \
                       "ridge x trace(K)/n"
    assert lines[1] == "ridge chosen by leave-one-out on the training set:"
    assert lines[2].split() == ["kind", "ridge", "LOO", "accuracy", "LOO", "MSE", "test",
                                "accuracy", "test", "MSE"]
    assert lines[3].split()[0] == "ntk" and lines[3].count("%") == 2
    assert lines[4] == ("ridge sweep (test-set numbers: for reference, not for choosing "
                        "the ridge):")
    assert [ln.split()[:2] for ln in lines[6:8]] == [["ntk", "0.01"], ["ntk", "1"]]
    assert len(lines) == 9 and lines[-1] == f"wrote {run / 'predictions.h5'}"


def test_cg_equals_cholesky(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    chol = predict(run, ridges=[1e-2, 1.0], solver="cholesky")
    assert chol.selection == "leave-one-out"
    with h5py.File(run / "predictions.h5") as f:
        want = {k: f[k]["mean"][...] for k in ("nngp", "ntk")}
    cg = predict(run, ridges=[1e-2, 1.0], solver="cg")
    assert (cg.solver, cg.selection) == ("cg", "5-fold cross-validation")
    with h5py.File(run / "predictions.h5") as f:
        for k in ("nngp", "ntk"):
            np.testing.assert_allclose(f[k]["mean"][...], want[k], rtol=1e-6, atol=1e-8)
    assert [r.accuracy for r in cg.results] == [r.accuracy for r in chol.results]


def test_eigen_equals_cholesky_from_the_cli_with_the_gradient_flow(finished, tmp_path):
    """``--solver eigen``: one eigendecomposition per kind gives the sweep, its
    leave-one-out choice and the gradient flow at once; the same numbers as a
    factorisation per ridge and the flow's own eigendecomposition."""
    run = fresh_copy(finished, tmp_path)
    out = {}
    for solver in ("cholesky", "eigen"):
        r = invoke("predict", run, "--solver", solver, "--ridge", "1e-4,1e-2,1",
                   "--time", "1,inf", "--json")
        assert r.exit_code == 0, r.output
        with h5py.File(run / "predictions.h5") as f:
            means = {k: f[k]["mean"][...] for k in ("nngp", "ntk")}
        out[solver] = (json.loads(r.stdout), means)
    got, want = out["eigen"], out["cholesky"]
    assert (got[0]["solver"], got[0]["selection"]) == ("eigen", "leave-one-out")
    for k, choice in want[0]["selected"].items():
        assert got[0]["selected"][k] == pytest.approx(choice, rel=1e-9)  # MSEs: rounding
    for k in ("nngp", "ntk"):
        np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-8, atol=1e-10)
    for a, b in zip(got[0]["flow"], want[0]["flow"], strict=True):
        assert a["accuracy"] == b["accuracy"] and a["mse"] == pytest.approx(b["mse"], 1e-9)


def test_cholesky_that_does_not_fit_is_refused_naming_what_would(finished, tmp_path):
    """(Where CG fits and Cholesky does not, the refusal names CG: N = 60,000 in
    tests/run/test_predict.py; at this N CG's two blocks are the larger.)"""
    run = fresh_copy(finished, tmp_path)
    budget = cholesky_memory_bytes(40, 17, 3, 1, 2) - 1  # one ridge, both kinds
    with pytest.raises(BudgetError, match="solver= cholesky on 40 training rows needs .* "
                                          "number the classes 0 .. C-1"):
        predict(run, ridges=[0.1], solver="cholesky", available_bytes=budget)
    assert predict(run, ridges=[0.1], kinds=["nngp"], available_bytes=budget).solver == \
        "cholesky"


def test_a_kernel_that_is_not_positive_definite_says_so(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    k = np.eye(40, dtype=np.float32)
    # indefinite (eigenvalue -0.05), diagonal sound; the ridge 0.1 x trace/n makes it definite
    k[0, 1] = k[1, 0] = 1.05
    with h5py.File(run / "kernels.h5", "r+") as f:
        f["nngp"][...] = k
    edited = invoke("predict", run, "--ridge", "0,0.1", "--kind", "nngp")
    assert edited.exit_code == 2 and "does not match its checksum" in edited.stderr
    with h5py.File(run / "kernels.h5", "r+") as f:  # a deliberate edit, checksum renewed
        f["nngp"].attrs["sha256"] = hashlib.sha256(k.tobytes()).hexdigest()
    result = invoke("predict", run, "--ridge", "0,0.1", "--kind", "nngp")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[3].split()[:2] == ["nngp", "0.1"]  # the only ridge that works is chosen
    rows = [ln.split(None, 2) for ln in lines[6:8]]
    assert rows[0] == ["nngp", "0", "not positive definite at this ridge: use a larger one"]
    assert rows[1][:2] == ["nngp", "0.1"] and rows[1][2].split()[1].endswith("%")
    assert "nan" not in result.stdout.lower()
    result = invoke("predict", run, "--ridge", "0", "--kind", "nngp")
    assert result.exit_code == 1
    assert "Error: the nngp kernel plus ridge 0 x trace/n" in result.stderr
    assert "is not positive definite" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (("--ridge", "-1"), "--ridge: -1.0 is not accepted"),
    (("--ridge", "abc"), "Invalid value for '--ridge': 'abc' is not a number"),
    (("--ridge", "1e308"), "Error: --ridge: 1e+308 is not accepted; give numbers from 0 to "
                           "1e+12 (e.g. 1e-4)\n"),
    (("--ridge", ",".join(["0.1"] * 65)), "Error: --ridge: 65 values given; accepted: at "
                                          "most 64 (a sweep is a handful of values)\n"),
    (("--time", ",".join(["1"] * 65)), "Error: --time: 65 values given; accepted: at most 64 "
                                       "(a sweep is a handful of values)\n"),
    (("--kind", "gp"), "Invalid value for '--kind'"),
    (("--solver", "lu"), "Invalid value for '--solver'"),
    (("--time", "-1"), "Error: --time: -1.0 is not accepted; give numbers >= 0 or inf "
                       "(e.g. 1,10,inf)\n"),
    (("--time", "soon"), "Invalid value for '--time': 'soon' is not a number; give numbers "
                         ">= 0 or inf, e.g. --time 1,10,inf"),
    (("--time", "1,inf", "--solver", "cg"),
     "Error: --time 1,inf: gradient-flow predictions need the eigendecomposition of "
     "K(x1, x1) in memory; --solver cg streams the kernel and has none. Use --solver auto "
     "or cholesky, or drop --time\n"),
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


def loo_by_refits(run, kind, ridge):
    """Leave-one-out predictions of every training row by n refits (fixed regulariser)."""
    with h5py.File(run / "kernels.h5") as f:
        k = f[kind][...].astype(np.float64)
        y = np.eye(3)[f["labels"][...]]
    n = len(k)
    reg = ridge * np.trace(k) / n
    out = np.empty_like(y)
    for i in range(n):
        keep = np.arange(n) != i
        a = np.linalg.solve(k[np.ix_(keep, keep)] + reg * np.eye(n - 1), y[keep])
        out[i] = k[i, keep] @ a
    return out, y


def test_the_ridge_is_chosen_by_leave_one_out_on_the_training_set(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    ridges = (1e-4, 1e-2, 1.0, 30.0)
    result = invoke("predict", run, "--ridge", ",".join(map(str, ridges)), "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["selection"] == "leave-one-out" and set(out["selected"]) == {"nngp", "ntk"}
    with h5py.File(run / "kernels.h5") as f:
        labels = f["labels"][...]
    for kind in ("nngp", "ntk"):
        scores = {}
        for ridge in ridges:
            pred, y = loo_by_refits(run, kind, ridge)
            row = next(r for r in out["results"] if r["kind"] == kind and r["ridge"] == ridge)
            assert row["loo_accuracy"] == np.mean(np.argmax(pred, 1) == labels)
            assert row["loo_mse"] == pytest.approx(np.mean((pred - y) ** 2), rel=1e-6)
            scores[ridge] = (row["loo_accuracy"], -row["loo_mse"], ridge)
        chosen = max(ridges, key=scores.get)
        sel = out["selected"][kind]
        row = next(r for r in out["results"] if r["kind"] == kind and r["ridge"] == chosen)
        assert sel == {"selected_ridge": chosen, "loo_accuracy": row["loo_accuracy"],
                       "loo_mse": row["loo_mse"], "test_accuracy": row["accuracy"],
                       "test_mse": row["mse"]}
        with h5py.File(run / "predictions.h5") as f:
            assert f[kind].attrs["selected_ridge"] == chosen
            assert list(f[kind]["loo_accuracy"][...]) == [
                r["loo_accuracy"] for r in out["results"] if r["kind"] == kind]
    cg = invoke("predict", run, "--ridge", "1e-2,1", "--solver", "cg")
    assert cg.exit_code == 0, cg.stderr
    lines = cg.stdout.splitlines()
    assert lines[1] == "ridge chosen by 5-fold cross-validation on the training set:"
    assert lines[2].split()[2:4] == ["CV", "accuracy"]


def flow_direct(run, kind, ridge, t):
    """The gradient-flow mean (m, C) at time t from an eigendecomposition of K + reg I."""
    with h5py.File(run / "kernels.h5") as f:
        k = f[kind][...].astype(np.float64)
        kt = f[f"{kind}_test"][...].astype(np.float64)
        y = np.eye(3)[f["labels"][...]]
    lam, v = np.linalg.eigh(k + ridge * np.trace(k) / len(k) * np.eye(len(k)))
    g = 1 / lam if np.isinf(t) else -np.expm1(-lam * t / y.size) / lam
    return kt @ v @ (g[:, None] * (v.T @ y))


def test_time_gives_the_gradient_flow_ensemble_mean_and_variance(finished, tmp_path):
    run = fresh_copy(finished, tmp_path)
    result = invoke("predict", run, "--ridge", "1e-2", "--time", "0,25,inf", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["times"] == [0.0, 25.0, "inf"]
    assert [(r["kind"], r["time"]) for r in out["flow"]] == [
        (k, t) for k in ("nngp", "ntk") for t in (0.0, 25.0, "inf")]
    with h5py.File(run / "kernels.h5") as f:
        prior = f["nngp_test_diag"][...].astype(np.float64)
    with h5py.File(run / "predictions.h5") as f:
        assert list(f.attrs["times"]) == [0.0, 25.0, np.inf]
        for kind in ("nngp", "ntk"):
            mean, var = f[kind]["flow_mean"][...], f[kind]["flow_variance"][...]
            assert mean.shape == (1, 3, 17, 3) and var.shape == (1, 3, 17)
            assert np.array_equal(mean[0, 0], np.zeros((17, 3)))
            np.testing.assert_allclose(var[0, 0], prior, rtol=1e-12)  # t = 0: the prior
            np.testing.assert_allclose(mean[0, 1], flow_direct(run, kind, 1e-2, 25.0),
                                       rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(mean[0, 2], f[kind]["mean"][0], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(f["nngp"]["flow_variance"][0, 2], f["nngp"]["variance"][0],
                                   rtol=1e-6, atol=1e-9)
    inf_row = next(r for r in out["flow"] if r["kind"] == "ntk" and r["time"] == "inf")
    ridge_row = next(r for r in out["results"] if r["kind"] == "ntk")
    assert inf_row["accuracy"] == ridge_row["accuracy"]
    text = invoke("predict", run, "--ridge", "1e-2", "--time", "0,25,inf").stdout
    lines = text.splitlines()
    start = lines.index("gradient flow at the chosen ridge (time t x learning rate, "
                        "neural-tangents' units; inf: the ridge solution):")
    assert [ln.split()[:3] for ln in lines[start + 2:start + 8]] == [
        [k, "0.01", t] for k in ("nngp", "ntk") for t in ("0", "25", "inf")]


def test_without_test_labels_or_the_nngp_the_choice_stands_and_variances_are_absent(tmp_path):
    write_data(tmp_path, n_train=30, n_test=9, seed=5)
    cfg = write_cfg(tmp_path, data={"test_labels_key": None}, kernel={"kinds": ["ntk"]},
                    layers=FLATTEN_NET, block=16)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    run = tmp_path / "run_tt"
    result = invoke("predict", run, "--ridge", "1e-3,1", "--time", "10,inf", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    sel = out["selected"]["ntk"]
    assert sel["selected_ridge"] in (1e-3, 1.0) and 0 <= sel["loo_accuracy"] <= 1
    assert sel["test_accuracy"] is None and sel["test_mse"] is None
    assert all(r["accuracy"] is None and r["mean_variance"] is None for r in out["flow"])
    with h5py.File(run / "predictions.h5") as f:
        assert list(f) == ["ntk"] and "flow_variance" not in f["ntk"]
        assert f["ntk"]["flow_mean"].shape == (2, 2, 9, 3) and "accuracy" not in f["ntk"]
    text = invoke("predict", run, "--ridge", "1e-3,1", "--time", "10,inf").stdout
    assert "(no test labels)" in text and "nan" not in text.lower()
