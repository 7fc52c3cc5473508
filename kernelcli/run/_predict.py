"""``predict``: kernel regression on a finished run's kernels, per kind and ridge.

The run must have a training set with labels and a test set (``data.labels_key``,
``data.test``); its ``kernels.h5`` then holds ``K(x1, x1)`` (``<kind>``),
``K(test, x1)`` (``<kind>_test``), the labels, and with ``kernel.test_diagonal``
``K(t, t)`` (``<kind>_test_diag``). For every kind and ridge the dual
coefficients ``alpha = (K + ridge * trace(K)/n * I)^{-1} Y`` are solved in float64
(``Y``: one-hot targets of the training labels), the test predictions are
``K(test, x1) @ alpha``, and, for the NNGP with the test diagonal and a Cholesky
solve, the posterior variance ``k(t, t) - k_t^T (K + reg I)^{-1} k_t``. Results
go to ``predictions.h5`` in the run directory (written whole, then renamed) and
are returned as plain data.

For the NTK the prediction is the infinite-time gradient-descent mean of an
infinitely wide network trained on MSE (Lee et al. 2019); for the NNGP the
Bayesian posterior mean. numpy and h5py only; no jax.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional

import h5py
import numpy as np

from ..errors import DamagedFileError, RunDirError, UsageError
from ..predict import (H5KernelOperator, NotConvergedError, NotPositiveDefiniteError,
                       accuracy, check_ridges, choose_solver, cholesky_factor, load_kernel,
                       mse, one_hot, predictive_variance, solve_cg_ridges,
                       solve_memory_bytes, solve_with_factor)
from ..predict import predict as predict_mean
from ..store import PREDICTIONS, RunStore, h5_written_whole

DEFAULT_RIDGES = (1e-6, 1e-4, 1e-2, 1e-1, 1.0)
_VAR_ROWS = 1024  # test rows per block of the variance computation


def _check_run(store: RunStore, run_dir) -> tuple:
    if not store.finished:
        raise RunDirError(f"{run_dir} has no kernels.h5 yet: the run is not finished; "
                          f"complete it with `kernelcli resume {run_dir}`, then predict")
    problem = store.result_problem()
    if problem is not None:
        raise DamagedFileError(f"{store.result_path} does not verify: {problem}; "
                               f"`kernelcli resume {run_dir}` rebuilds it, then predict")
    with h5py.File(store.result_path, "r") as f:
        names = set(f.keys())
        labels = f["labels"][...] if "labels" in f else None
        test_labels = f["test_labels"][...] if "test_labels" in f else None
    kinds = [k for k in ("nngp", "ntk") if k in names]
    if not any(f"{k}_test" in names for k in kinds):
        raise UsageError(f"{run_dir} holds no test kernel K(test, x1): predict needs a run "
                         f"whose configuration names a test set (data.test, data.test_key) "
                         f"and the training labels (data.labels_key)")
    if labels is None:
        raise UsageError(f"{run_dir} holds no training labels: give data.labels_key (and "
                         f"data.labels for a separate file) in the configuration, then "
                         f"compute the run again")
    return names, kinds, labels, test_labels


def _kinds(asked: Optional[Iterable[str]], have: list, run_dir) -> list:
    if not asked:
        return have
    out = []
    for k in asked:
        if k not in have:
            raise UsageError.naming(f"<<kinds>>: {k!r} is not in {run_dir}/kernels.h5; it holds "
                             f"{', '.join(have)}")
        if k not in out:
            out.append(k)
    return out


def _variance(diag, test_op: H5KernelOperator, chol) -> np.ndarray:
    """``k(t, t) - k_t^T (K + reg I)^{-1} k_t`` per test row, (m,) float64, by row blocks."""
    m = test_op.shape[0]
    out = np.empty(m)
    with h5py.File(test_op.path, "r") as f:
        ds = f[test_op.dataset]
        for s in range(0, m, _VAR_ROWS):
            kt = ds[s:s + _VAR_ROWS]
            out[s:s + kt.shape[0]] = predictive_variance(diag[s:s + kt.shape[0]], kt, chol)
    return out


def _solve_kind(result: Path, kind: str, y: np.ndarray, ridges, solver: str,
                with_variance: bool, names: set) -> dict:
    """``{ridge: {"mean": (m, C), "variance": (m,) or None} or {"error": text}}``."""
    test_op = H5KernelOperator(result, f"{kind}_test")
    diag = None
    if with_variance and f"{kind}_test_diag" in names:
        with h5py.File(result, "r") as f:
            diag = f[f"{kind}_test_diag"][...].astype(np.float64)
    out = {}
    if solver == "cholesky":
        work = load_kernel(result, kind)  # float64, factored in place, restored after
        for ridge in ridges:
            try:
                chol = cholesky_factor(work, ridge, kind=kind)
            except NotPositiveDefiniteError as exc:
                out[ridge] = {"error": str(exc)}
                continue
            alpha = solve_with_factor(chol, y)
            var = None if diag is None else _variance(diag, test_op, chol)
            del chol
            out[ridge] = {"mean": predict_mean(test_op, alpha), "variance": var}
        return out
    op = H5KernelOperator(result, kind)
    try:
        alphas = solve_cg_ridges(op, y, ridges, kind=kind)
    except (NotPositiveDefiniteError, NotConvergedError):
        alphas = {}
        for ridge in ridges:  # find out which ridges fail, and solve the others
            try:
                alphas.update(solve_cg_ridges(op, y, [ridge], kind=kind))
            except (NotPositiveDefiniteError, NotConvergedError) as exc:
                out[ridge] = {"error": str(exc)}
    for ridge, alpha in alphas.items():
        out[ridge] = {"mean": predict_mean(test_op, alpha), "variance": None}
    return {r: out[r] for r in ridges}


def predict(run_dir, ridges: Optional[Iterable[float]] = None,
            kinds: Optional[Iterable[str]] = None, solver: str = "auto",
            available_bytes: Optional[int] = None) -> dict:
    """Kernel regression with every requested kind and ridge on the run in ``run_dir``.

    Returns ``{"run_dir", "n_train", "n_test", "classes", "solver", "ridge_convention",
    "predictions", "results": [{"kind", "ridge", "accuracy", "mse", "error"}, ...]}``
    (accuracy and MSE on the test set when it has labels, else None; ``error``
    names a ridge at which the kernel is not positive definite). Raises
    ``NotPositiveDefiniteError`` when no ridge of any kind could be solved.
    """
    ridges = check_ridges(DEFAULT_RIDGES if ridges is None else ridges)
    store = RunStore.open(run_dir)
    names, have, labels, test_labels = _check_run(store, run_dir)
    kinds = _kinds(kinds, have, run_dir)
    n = int(labels.shape[0])
    solver = choose_solver(n, solver, available_bytes)
    classes = int(max(labels.max(), -1 if test_labels is None else test_labels.max())) + 1
    y = one_hot(labels, classes)
    y_test = None if test_labels is None else one_hot(test_labels, classes)
    rows, solved = [], {}
    for kind in kinds:
        solved[kind] = _solve_kind(store.result_path, kind, y, ridges, solver,
                                   with_variance=kind == "nngp", names=names)
        for ridge, res in solved[kind].items():
            row = {"kind": kind, "ridge": ridge, "accuracy": None, "mse": None,
                   "error": res.get("error")}
            if "mean" in res and test_labels is not None:
                row["accuracy"] = accuracy(res["mean"], test_labels)
                row["mse"] = mse(res["mean"], y_test)
            rows.append(row)
    if all(r["error"] for r in rows):
        raise NotPositiveDefiniteError(rows[-1]["error"])
    path = _write(store.run_dir / PREDICTIONS, solved, ridges, rows, solver)
    m = H5KernelOperator(store.result_path, f"{kinds[0]}_test").shape[0]
    return {"run_dir": str(store.run_dir), "n_train": n, "n_test": m, "classes": classes,
            "solver": solver, "solve_bytes": solve_memory_bytes(n),
            "ridge_convention": "ridge * trace(K) / n added to the diagonal",
            "predictions": str(path), "results": rows}


def _write(path: Path, solved: dict, ridges, rows, solver: str) -> Path:
    """``predictions.h5``: per kind ``<kind>/mean`` (R, m, C), ``<kind>/variance``
    (R, m) when computed, ``<kind>/accuracy`` and ``<kind>/mse`` (R,); NaN where a
    ridge failed. Attributes: ``ridges``, ``solver``, ``ridge_convention``."""
    with h5_written_whole(path) as f:
        f.attrs["ridges"] = np.asarray(ridges, dtype=np.float64)
        f.attrs["solver"] = solver
        f.attrs["ridge_convention"] = "ridge * trace(K) / n added to the diagonal"
        for kind, per_ridge in solved.items():
            shape = next((r["mean"].shape for r in per_ridge.values() if "mean" in r),
                         None)
            g = f.create_group(kind)
            if shape is None:  # every ridge failed for this kind
                continue
            mean = np.full((len(ridges),) + shape, np.nan)
            var = np.full((len(ridges), shape[0]), np.nan)
            has_var = False
            for i, ridge in enumerate(ridges):
                res = per_ridge[ridge]
                if "mean" in res:
                    mean[i] = res["mean"]
                    if res["variance"] is not None:
                        var[i], has_var = res["variance"], True
            g.create_dataset("mean", data=mean)
            if has_var:
                g.create_dataset("variance", data=var)
            for metric in ("accuracy", "mse"):
                vals = [r[metric] for r in rows if r["kind"] == kind]
                if any(v is not None for v in vals):
                    g.create_dataset(metric, data=np.asarray(
                        [math.nan if v is None else v for v in vals]))
    return path
