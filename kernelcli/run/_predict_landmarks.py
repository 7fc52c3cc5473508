"""A landmark run's (``data.landmarks``) predictions: Nystrom kernel ridge regression.

A landmark run's ``kernels.h5`` holds per kind one rectangle ``K([X; T; Z], Z)``
(:mod:`kernelcli.pipeline._landmark_rows`): ``N`` training rows (as many as the labels),
``T`` test rows, then the ``M`` landmarks' own rows ``K(Z, Z)``. The solve is
:mod:`kernelcli.solvers._nystrom`'s direct feature-form solve or, for large ``N x
M``, :mod:`kernelcli.solvers._falkon`'s preconditioned CG (``choose_landmark_solver``;
``--solver cholesky`` / ``cg`` name them), both giving coefficients ``a`` on
``K(., Z)`` per ridge and fold: for the NNGP the posterior mean of the
Nystrom-approximated kernel, for the NTK the infinite-time gradient-descent
predictor with the Nystrom approximation of the NTK. The ridge is chosen by
k-fold cross-validation on the training rows, as with CG; the output is the
full-kernel route's (``predictions.h5``, the same typed result), without variance or
gradient flow.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np

from .._stop import Stop, check
from ..errors import DamagedFileError, UsageError
from ..pipeline import FINGERPRINT_KEY
from ..solvers import (
    NystromMap,
    check_ridges,
    choose_landmark_solver,
    choose_ridge,
    class_count,
    falkon_weights,
    fold_sums,
    landmark_memory_bytes,
    nystrom_map,
    nystrom_weights,
    one_hot,
)
from ..store import PREDICTIONS, ResultFile, RunStore
from . import _predict_common as common  # what both predict routes share
from ._predict_checks import check_kernel
from ._predict_file import write_predictions
from ._predict_results import PredictResult

RIDGE_CONVENTION = ("ridge * trace(K_mm) / m (the landmarks' estimate of trace(K) / n) "
                    "on the diagonal of the Nystrom kernel")
_BAND_BYTES = 64 * 2**20  # row_bands' bands of K([X; T; Z], Z)
_REPORT_S = 5.0  # seconds between two progress lines of Falkon


def is_landmark_run(run_dir) -> bool:
    """Whether the run in ``run_dir`` was computed with ``data.landmarks``."""
    fps = RunStore.open(run_dir).manifest.get("data_fingerprints")
    return isinstance(fps, dict) and FINGERPRINT_KEY in fps


def _bands(result, kind: str, lo: int, hi: int, stop: Optional[Stop] = None):
    """``(first row - lo, rows)`` of rows ``[lo, hi)`` of ``kind``, in bounded bands;
    ``stop`` is checked before each band."""
    with ResultFile(result).kernel(kind) as ds:
        step = max(1, _BAND_BYTES // (8 * max(1, ds.shape[1])))
        for s in range(lo, hi, step):
            check(stop)
            yield s - lo, np.asarray(ds[s:min(s + step, hi)], dtype=np.float64)


def _weights(result, kind: str, y: np.ndarray, ridges, n: int, t: int, m: int,
             route: str, progress, stop: Optional[Stop] = None) -> tuple:
    """``({ridge: (k + 1, M, C) coefficients on K(., Z), or a message}, passes)``: the
    direct feature-form solve (``passes`` 2) or Falkon."""
    with ResultFile(result).kernel(kind) as ds:
        k_mm = np.asarray(ds[n + t:n + t + m], dtype=np.float64)
    folds = min(common.CV_FOLDS, n)
    if route == "falkon":
        on_pass = None if progress is None else _reporter(kind, progress)
        sol = falkon_weights(k_mm, lambda: _bands(result, kind, 0, n, stop), y, ridges, kind,
                             folds, on_pass=on_pass)
        return sol.weights, sol.passes
    nmap: NystromMap = nystrom_map(k_mm)
    del k_mm
    gram, rhs = fold_sums(nmap, _bands(result, kind, 0, n, stop), y, folds)
    weights = nystrom_weights(nmap, gram, rhs, ridges, kind, n)
    return {r: w if isinstance(w, str) else np.einsum("mr,frc->fmc", nmap.projection, w)
            for r, w in weights.items()}, 1


def _reporter(kind: str, progress: Callable[[str], None]):
    start = time.monotonic()
    last = [start]

    def on_pass(passes: int, residual: float) -> None:
        if time.monotonic() - last[0] >= _REPORT_S:
            last[0] = time.monotonic()
            plural = "es" if passes > 1 else ""
            progress(f"predict {kind}: Falkon, {passes:,} pass{plural} over K(X, Z), "
                     f"worst relative residual {residual:.2e}, {last[0] - start:.0f} s")
    return on_pass


def _solve_kind(result, kind: str, y: np.ndarray, ridges, n: int, t: int, m: int,
                route: str, progress=None, stop: Optional[Stop] = None) -> tuple:
    """``({ridge: {"mean", "variance": None, "held_out"} or {"error"}}, passes)``."""
    weights, passes = _weights(result, kind, y, ridges, n, t, m, route, progress, stop)
    folds = min(common.CV_FOLDS, n)
    solved = {r: w for r, w in weights.items() if not isinstance(w, str)}
    held = {r: np.empty((n, y.shape[1])) for r in solved}
    mean = {r: np.empty((t, y.shape[1])) for r in solved}
    for start, rows in _bands(result, kind, 0, n, stop):
        fold = (start + np.arange(rows.shape[0])) % folds
        for r, w in solved.items():
            for f in range(folds):
                at = np.flatnonzero(fold == f)
                held[r][start + at] = rows[at] @ w[f]
    for start, rows in _bands(result, kind, n, n + t, stop):
        for r, w in solved.items():
            mean[r][start:start + rows.shape[0]] = rows @ w[-1]
    return {r: ({"error": weights[r]} if r not in solved else
                {"mean": mean[r], "variance": None, "held_out": held[r]})
            for r in ridges}, passes + 1


def predict_landmarks(run_dir, ridges=None, kinds=None, solver: str = "auto",
                      available_bytes: Optional[int] = None, times=None,
                      progress: Optional[Callable[[str], None]] = None,
                      stop: Optional[Stop] = None) -> PredictResult:
    """:func:`kernelcli.run.predict` for a landmark run (same arguments and result)."""
    if times:
        raise UsageError.naming(f"<<times>>: {run_dir} is a landmark run (data.landmarks); "
                                f"gradient-flow predictions need the full kernel K(x1, x1): "
                                f"drop <<times>>")
    ridges = check_ridges(common.DEFAULT_RIDGES if ridges is None else ridges)
    store = RunStore.open(run_dir)
    # one writer per run directory, as the full kernel's predict (opened again once
    # locked: a writer that just ended may have changed the manifest)
    with store.lock():
        return _predict_landmarks(RunStore.open(run_dir), run_dir, ridges, kinds, solver,
                                  available_bytes, progress, stop)


def _predict_landmarks(store, run_dir, ridges, kinds, solver, available_bytes, progress,
                       stop) -> PredictResult:
    names, have, labels, test_labels = common.check_run(store, run_dir, landmarks=True)
    kinds = common.kinds_asked(kinds, have, run_dir)
    with ResultFile(store.result_path).kernel(kinds[0]) as ds:  # verified above
        rows, m = (int(v) for v in ds.shape)
    n = int(labels.shape[0])
    t = rows - n - m
    if t < 0 or (test_labels is not None and t != len(test_labels)):
        raise DamagedFileError(f"{store.result_path}: its {rows:,} rows are not the {n:,} "
                               f"training rows, the test rows and the {m:,} landmarks of a "
                               f"landmark run; `kernelcli verify {run_dir}` checks the run")
    if t == 0:
        raise UsageError(f"{run_dir} holds no test rows: predict needs a run whose "
                         f"configuration names a test set (data.test, data.test_key)")
    classes = class_count(labels, test_labels)
    folds = min(common.CV_FOLDS, n)
    band = min(_BAND_BYTES, 8 * rows * m)
    route = choose_landmark_solver(n, m, solver, available_bytes, classes, len(ridges),
                                   folds, band, t, len(kinds))
    for kind in kinds:  # every kernel sound before any solve; K(Z, Z)'s diagonal last
        check_kernel(store.result_path, kind, n + t, stop)
    y = one_hot(labels, classes)
    y_test = None if test_labels is None else one_hot(test_labels, classes)
    rows_out: list = []
    choices, solved, passes = [], {}, []
    for kind in kinds:
        solved[kind], p = _solve_kind(store.result_path, kind, y, ridges, n, t, m, route,
                                      progress, stop)
        passes.append(p)
        scores = common.score_rows(kind, solved[kind], labels, y, test_labels, y_test, rows_out)
        choices.append(common.choice(kind, choose_ridge(scores, ridges), rows_out))
    common.raise_if_none_solved(solved, rows_out)
    check(stop)
    if route == "falkon":
        solver = (f"falkon ({m:,} landmarks; preconditioned CG, "
                  f"{'/'.join(f'{p:,}' for p in passes)} passes over K(X, Z))")
    else:
        solver = f"nystrom ({m:,} landmarks; direct)"
    need = landmark_memory_bytes(route, n, t, m, classes, len(ridges), folds, len(kinds),
                                 band)
    selection = f"{min(common.CV_FOLDS, n)}-fold cross-validation"
    path = write_predictions(store.run_dir / PREDICTIONS, solved, ridges, rows_out, choices,
                             solver, selection, ridge_convention=RIDGE_CONVENTION)
    return PredictResult(
        run_dir=str(store.run_dir), n_train=n, n_test=t, classes=classes, solver=solver,
        solve_bytes=need,
        ridge_convention=RIDGE_CONVENTION, predictions=str(path), selection=selection,
        results=tuple(rows_out), selected=tuple(choices))
