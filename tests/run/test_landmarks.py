"""Landmark (Nystrom) runs: ``data.landmarks`` computes ``K([X; T; Z], Z)`` only, and
``predict`` solves Nystrom kernel ridge regression from it. References: a numpy
Nystrom solve from the full run's kernel columns, and the full kernel's own
predictions when the landmarks are the whole training set."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import invoke
from kernelcli.config import load_config
from kernelcli.errors import ConfigError, DataError
from kernelcli.pipeline._landmark_rows import choose_landmarks  # which rows, on their own
from kernelcli.run import compute, predict
from kernelcli.solvers import fold_sums, nystrom_map, nystrom_weights

pytestmark = pytest.mark.usefixtures("keep_process_state")

N, T = 40, 13
DENSE = ["flatten", {"dense": {"W_std": 1.5, "b_std": 0.1}}, "relu",
         {"dense": {"W_std": 1.0, "b_std": 0.0}}]
RIDGES = [1e-3, 1e-1]


def _cfg(folder, name, landmarks=None, **data):
    return write_cfg(folder, name=name, layers=DENSE, block=16,
                     data={"landmarks": landmarks, **data},
                     kernel={"dtype": "float64", "test_diagonal": landmarks is None})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The full run and landmark runs of 12 and of all 40 training rows, predicted."""
    folder = tmp_path_factory.mktemp("landmarks")
    write_data(folder, n_train=N, n_test=T, seed=5)
    out = {}
    for name, m in (("full", None), ("m12", 12), ("m40", N)):
        compute(_cfg(folder, name, m))
        out[name] = folder / f"run_{name}"
        predict(out[name], ridges=RIDGES)
    return out


def _read(run, *names):
    with h5py.File(run / "kernels.h5") as f:
        return [f[n][...] for n in names]


def _mean(run, kind):
    with h5py.File(run / "predictions.h5") as f:
        return f[kind]["mean"][...], f.attrs["solver"]


def test_the_run_holds_the_rectangle_of_the_landmarks_only(runs):
    k, labels = _read(runs["m12"], "nngp", "labels")
    assert k.shape == (N + T + 12, 12) and labels.shape == (N,)
    full, test = _read(runs["full"], "nngp", "nngp_test")
    z = choose_landmarks(N, 12)
    np.testing.assert_allclose(k[:N], full[:, z], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k[N:N + T], test[:, z], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k[N + T:], full[np.ix_(z, z)], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["nngp", "ntk"])
def test_predictions_equal_a_numpy_nystrom_solve_of_the_full_kernels_columns(runs, kind):
    full, test, labels = _read(runs["full"], kind, f"{kind}_test", "labels")
    z = choose_landmarks(N, 12)
    k_nm, k_mm, k_tm = full[:, z], full[np.ix_(z, z)], test[:, z]
    y = np.eye(3)[labels]
    mean, solver = _mean(runs["m12"], kind)
    assert solver == "nystrom (12 landmarks; direct)"
    for i, ridge in enumerate(RIDGES):
        reg = ridge * np.trace(k_mm) / 12
        beta = np.linalg.solve(k_nm.T @ k_nm + reg * k_mm, k_nm.T @ y)
        ref = k_tm @ beta
        np.testing.assert_allclose(mean[i], ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("kind", ["nngp", "ntk"])
def test_all_training_rows_as_landmarks_give_the_full_kernels_predictions(runs, kind):
    mean, _ = _mean(runs["m40"], kind)
    full, solver = _mean(runs["full"], kind)
    assert solver == "cholesky"
    np.testing.assert_allclose(mean, full, rtol=1e-6, atol=1e-6 * np.abs(full).max())


def test_cross_validation_folds_are_solved_without_their_rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 8))
    k = x @ x.T / 8
    y = np.eye(2)[rng.integers(0, 2, 30)]
    z = np.arange(0, 30, 3)
    nmap = nystrom_map(k[np.ix_(z, z)])
    gram, rhs = fold_sums(nmap, [(0, k[:17, z]), (17, k[17:, z])], y, 5)
    w = nystrom_weights(nmap, gram, rhs, [0.1], "nngp", 30)[0.1]
    reg = 0.1 * np.trace(k[np.ix_(z, z)]) / len(z)
    for f in range(5):
        keep = np.arange(30) % 5 != f
        a = k[keep][:, z]
        beta = np.linalg.solve(a.T @ a + reg * k[np.ix_(z, z)], a.T @ y[keep])
        np.testing.assert_allclose(k[~keep][:, z] @ beta, nmap.features(k[~keep][:, z]) @ w[f],
                                   rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("value, message", [
    (0, "data.landmarks: 0 is not a number of landmark rows of data.x1; expected a positive "
        "integer"),
    ("many", "data.landmarks: 'many' is not a number of landmark rows of data.x1; expected a "
             "positive integer"),
    (2.5, "data.landmarks: 2.5 is not a number of landmark rows of data.x1; expected a "
          "positive integer"),
])
def test_bad_landmarks_are_refused_naming_the_key(tmp_path, value, message):
    write_data(tmp_path, n_train=N, n_test=T)
    cfg = _cfg(tmp_path, "bad", value)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == f"{cfg.name}: {message}"


def test_landmarks_with_x2_or_a_test_diagonal_are_refused(tmp_path):
    write_data(tmp_path, n_train=N, n_test=T)
    cfg = _cfg(tmp_path, "x2", 5, x2="d.npz", x2_key="x_test", test=None, test_key=None,
               test_labels_key=None)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == (f"{cfg.name}: data.landmarks: 5 is given together with data.x2; expected "
                               "one of them: landmarks make the rectangle K(x1, landmarks) "
                               "of a Nystrom regression run themselves")
    cfg = write_cfg(tmp_path, name="diag", layers=DENSE, data={"landmarks": 5})
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == (f"{cfg.name}: kernel.test_diagonal: true is given together with "
                               "data.landmarks; expected false: a Nystrom regression run "
                               "computes no test diagonal (no variance)")


def test_more_landmarks_than_rows_exit_2_and_write_nothing(tmp_path):
    write_data(tmp_path, n_train=N, n_test=T)
    cfg = _cfg(tmp_path, "many", N + 1)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: data.landmarks: {N + 1} is more than the {N} rows of data.x1; expected a "
        f"number of landmark rows from 1 to {N}")
    assert not (tmp_path / "run_many").exists()
    with pytest.raises(DataError):
        choose_landmarks(3, 4)


def test_estimate_prints_the_cost_of_both_routes(tmp_path):
    write_data(tmp_path, n_train=N, n_test=T)
    result = invoke("estimate", _cfg(tmp_path, "est", 12))
    assert result.exit_code == 0, result.stderr
    routes = [line.split(None, 3)[-1] for line in result.stdout.splitlines()
              if line.lstrip().startswith("route:")]
    full, rect = N * (N + 1) // 2 + T * N, (N + T + 12) * 12
    assert [r.split(" pairs")[0] for r in routes] == [f"{full:,}", f"{rect:,}"]
    assert "route: full kernel" in result.stdout and "route: 12 landmarks" in result.stdout


def test_what_a_landmark_run_cannot_do_is_refused_with_exit_2(runs):
    run = runs["m12"]
    before = (run / "predictions.h5").read_bytes()
    result = invoke("predict", run, "--time", "10")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: --time: {run} is a landmark run (data.landmarks); gradient-flow "
        f"predictions need the full kernel K(x1, x1): drop --time")
    assert (run / "predictions.h5").read_bytes() == before


def test_falkon_gives_the_direct_answers(runs):
    run = runs["m12"]
    with h5py.File(run / "predictions.h5") as f:
        direct = {k: f[k]["mean"][...] for k in ("nngp", "ntk")}
    out = predict(run, ridges=RIDGES, solver="cg")
    assert out.solver.startswith("falkon (12 landmarks; preconditioned CG, ")
    with h5py.File(run / "predictions.h5") as f:
        assert f.attrs["solver"] == out.solver
        for kind, ref in direct.items():
            np.testing.assert_allclose(f[kind]["mean"][...], ref, rtol=0,
                                       atol=1e-6 * np.abs(ref).max())
    again = predict(run, ridges=RIDGES)
    assert again.solver == "nystrom (12 landmarks; direct)"
    assert [c.selected_ridge for c in again.selected] == [c.selected_ridge for c in out.selected]
