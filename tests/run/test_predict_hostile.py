"""``predict`` against hostile runs: labels whose one-hot targets cannot fit, kernels
edited with their checksums renewed (a NaN, a negative diagonal), ridges that fail
beside ones that work. Each is refused before any work, or reported per ridge, on
every route (Cholesky, CG, the landmarks' direct solve and Falkon)."""

from __future__ import annotations

import functools
import hashlib
import json

import h5py
import numpy as np
import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, invoke
from kernelcli.errors import BudgetError
from kernelcli.run import predict
from kernelcli.solvers import (
    cholesky_operations,
    choose_landmark_solver,
    choose_solver,
    falkon_weights,
    landmark_operations,
)

pytestmark = pytest.mark.usefixtures("keep_process_state")

N, T, M = 40, 17, 12
HUGE = 2**31 - 1  # the largest label compute accepts


def _runs(folder, label=None):
    write_data(folder, n_train=N, n_test=T, seed=3)
    if label is not None:
        data = dict(np.load(folder / "d.npz"))
        data["y_train"][5] = label
        np.savez(folder / "d.npz", **data)
    out = {}
    for name, extra in (("full", {}), ("lm", {"landmarks": M})):
        cfg = write_cfg(folder, name=name, layers=FLATTEN_NET, block=16, data=extra,
                        kernel={"test_diagonal": not extra})
        assert invoke("compute", cfg, "--quiet").exit_code == 0
        out[name] = folder / f"run_{name}"
        out[name + "_cfg"] = cfg
    return out


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    return _runs(tmp_path_factory.mktemp("huge"), HUGE)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _runs(tmp_path_factory.mktemp("plain"))


def _copy(run, tmp_path):
    import shutil

    out = tmp_path / run.name
    shutil.copytree(run, out)
    (out / "predictions.h5").unlink(missing_ok=True)
    return out


def _edit(run, dataset, change):
    """``change(array)`` in place on ``dataset`` of kernels.h5, its checksum renewed."""
    with h5py.File(run / "kernels.h5", "r+") as f:
        k = f[dataset][...]
        change(k)
        f[dataset][...] = k
        f[dataset].attrs["sha256"] = hashlib.sha256(k.tobytes()).hexdigest()


def _error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


@pytest.mark.parametrize("route", ["full", "lm"])
@pytest.mark.parametrize("solver", ["auto", "cholesky", "cg"])
def test_a_huge_label_is_refused_before_any_work_naming_the_classes(huge, route, solver):
    run = huge[route]
    result = invoke("predict", run, "--solver", solver)
    assert result.exit_code == 2, result.output
    line = _error(result)
    assert f"one-hot targets of {HUGE + 1:,} columns, the largest class label + 1" in line
    assert "number the classes 0 .. C-1" in line and "<<" not in line
    assert f"--solver {solver}" not in line.split("; ", 1)[1]  # never the solver in use
    assert not (run / "predictions.h5").exists()


def test_cg_and_falkon_are_costed_from_the_classes():
    with pytest.raises(BudgetError, match=r"solver= cg on 96 training rows .* of 1,048,577 "):
        choose_solver(96, "cg", 2**30, m=10, classes=2**20 + 1, ridges=5, kinds=2)
    assert choose_solver(96, "cg", 2**30, m=10, classes=10, ridges=5, kinds=2) == "cg"
    with pytest.raises(BudgetError, match=r"^Falkon on 12 landmarks .* 1,048,577 columns"):
        choose_landmark_solver(96, 12, "cg", 2**30, classes=2**20 + 1, ridges=5)
    # the direct solve's 14 M^2 floats do not fit where Falkon's do: the other solver named
    with pytest.raises(BudgetError) as err:
        choose_landmark_solver(20_000, 4_000, "cholesky", 2**30)
    assert str(err.value).startswith("the direct Nystrom solve on 4,000 landmarks needs ")
    assert str(err.value).endswith("is available; use solver= cg, or predict on a machine "
                                   "with more memory")


def test_estimate_says_predict_will_refuse_a_huge_label(huge):
    est = json.loads(invoke("estimate", huge["full_cfg"], "--memory", "--json").stdout)
    assert est["classes"] == HUGE + 1 and est["solver"] == "none"
    text = invoke("estimate", huge["full_cfg"], "--memory").stdout
    assert f"{HUGE + 1:,} one-hot target columns" in text and "predict will refuse" in text


def test_estimate_counts_the_work_of_the_solve_from_the_classes(huge):
    est = json.loads(invoke("estimate", huge["full_cfg"], "--memory", "--json").stdout)
    nngp = sum(k.startswith("nngp") for k in est["kinds"])  # kernel.test_diagonal: true
    work = cholesky_operations(N, T, HUGE + 1, 5, len(est["kinds"]), nngp)
    assert est["solve_operations"] == work
    text = invoke("estimate", huge["full_cfg"], "--memory").stdout
    assert f"predict: work of the solve     {work:,} multiply-adds" in text
    lm = json.loads(invoke("estimate", huge["lm_cfg"], "--memory", "--json").stdout)
    assert lm["routes_landmark_solve_operations"] == landmark_operations(
        "direct", N, T, M, HUGE + 1, 5, 5, len(lm["kinds"]))
    text = invoke("estimate", huge["lm_cfg"], "--memory").stdout
    assert f"and {lm['routes_full_solve_operations']:,} multiply-adds" in text


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_a_non_finite_kernel_is_named_as_such_on_every_route(plain, tmp_path, solver):
    for route, dataset in (("full", "nngp"), ("full", "ntk_test"), ("lm", "nngp")):
        run = _copy(plain[route], tmp_path / solver / dataset)
        _edit(run, dataset, lambda k: k.__setitem__((3, 5), np.nan))
        result = invoke("predict", run, "--solver", solver)
        assert result.exit_code == 2, result.output
        assert _error(result) == (
            f"Error: {dataset} in {run}/kernels.h5 holds a non-finite value (nan) at row 3, "
            f"column 5; the kernel must be finite: `kernelcli verify RUN_DIR` checks it")
        assert not (run / "predictions.h5").exists()


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_a_negative_diagonal_is_refused_on_every_route(plain, tmp_path, solver):
    # the landmark run's diagonal is K(Z, Z)'s, in its last M rows
    for route, row, col in (("full", 7, 7), ("lm", N + T + 2, 2)):
        run = _copy(plain[route], tmp_path / solver / route)
        _edit(run, "ntk", lambda k: k.__setitem__((row, col), -1.0))
        result = invoke("predict", run, "--solver", solver)
        assert result.exit_code == 2, result.output
        assert _error(result) == (
            f"Error: ntk in {run}/kernels.h5 holds -1 on its diagonal at row {row}; "
            f"accepted: a diagonal > 0 (an input's variance), so the kernel is damaged or "
            f"edited: `kernelcli verify RUN_DIR` checks it")
        assert not (run / "predictions.h5").exists()


def _sweep(stdout: str) -> list:
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ridge sweep")) + 2
    return [ln.split(None, 2) for ln in lines[start:] if ln.startswith("  ")]


def test_a_cg_ridge_that_fails_beside_one_that_works_is_in_the_table(plain, tmp_path):
    run = _copy(plain["full"], tmp_path)
    k = np.eye(N, dtype=np.float32)
    k[0, 1] = k[1, 0] = 1.05  # indefinite (eigenvalue -0.05); ridge 0.1 makes it definite
    _edit(run, "nngp", lambda a: a.__setitem__(..., k))
    result = invoke("predict", run, "--solver", "cg", "--kind", "nngp", "--ridge", "0,0.1")
    assert result.exit_code == 0, result.output
    rows = _sweep(result.stdout)
    assert [r[:2] for r in rows] == [["nngp", "0"], ["nngp", "0.1"]]
    assert rows[0][2] == "not positive definite at this ridge: use a larger one"


def test_falkon_errors_are_spelled_and_every_ridge_is_in_the_table(plain, tmp_path,
                                                                  monkeypatch):
    from kernelcli.run import _predict_landmarks as _landmarks  # a Falkon cut short

    run = _copy(plain["lm"], tmp_path)
    # five passes: the small ridge cannot converge, the large one does
    monkeypatch.setattr(_landmarks, "falkon_weights",
                        functools.partial(falkon_weights, maxiter=5))
    result = invoke("predict", run, "--solver", "cg", "--ridge", "1e-6,1e3", "--json")
    assert result.exit_code == 0, result.output
    errors = {(r["kind"], r["ridge"]): r["error"] for r in json.loads(result.stdout)["results"]}
    for kind in ("nngp", "ntk"):
        assert errors[kind, 1e3] is None
        assert "; use a larger ridges= value, or solver= cholesky (" in errors[kind, 1e-6]
    rows = _sweep(invoke("predict", run, "--solver", "cg", "--ridge", "1e-6,1e3").stdout)
    assert [r[:2] for r in rows] == [[k, r] for k in ("nngp", "ntk") for r in ("1e-06", "1000")]
    assert rows[0][2].startswith("not solved: Falkon on the nngp kernel (ridge 1e-06) stopped")
    # two passes: no ridge converges, and the error is the CLI's, with its flags
    monkeypatch.setattr(_landmarks, "falkon_weights",
                        functools.partial(falkon_weights, maxiter=2))
    result = invoke("predict", run, "--solver", "cg", "--ridge", "1e-6,1e3")
    assert result.exit_code == 1 and "<<" not in result.output
    assert "; use a larger --ridge value, or --solver cholesky (" in _error(result)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    return _runs(tmp_path_factory.mktemp("many"), 2**12)  # 4,097 one-hot columns


@pytest.mark.parametrize("route, solver", [("full", "cholesky"), ("full", "cg"),
                                           ("lm", "cholesky"), ("lm", "cg")])
def test_the_count_holds_what_a_route_of_many_classes_allocates(many, route, solver):
    import tracemalloc

    from kernelcli.solvers import cg_memory_bytes, cholesky_memory_bytes

    run = many[route]
    predict(run, kinds=["nngp"], solver=solver)  # first-call set-up: these shapes compiled
    tracemalloc.start()
    try:
        out = predict(run, solver=solver)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    c = 2**12 + 1
    assert out.classes == c
    need = {("full", "cholesky"): cholesky_memory_bytes(N, T, c, 5, 2),
            ("full", "cg"): cg_memory_bytes(N, T, c, 5, 2, 5)}.get((route, solver),
                                                                   out.solve_bytes)
    assert peak <= need, (peak, need)
