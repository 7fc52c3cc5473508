"""``predict``: kernel regression on a finished run's kernels, per kind and ridge.

The run must have a training set with labels and a test set (``data.labels_key``,
``data.test``); its ``kernels.h5`` then holds ``K(x1, x1)`` (``<kind>``),
``K(test, x1)`` (``<kind>_test``), the labels, and with ``kernel.test_diagonal``
``K(t, t)`` (``<kind>_test_diag``). For every kind and ridge the dual
coefficients ``alpha = (K + ridge * trace(K)/n * I)^{-1} Y`` are solved in float64
(``Y``: one-hot targets of the training labels), the test predictions are
``K(test, x1) @ alpha``, and, for the NNGP with the test diagonal and a Cholesky
solve, the posterior variance ``k(t, t) - k_t^T (K + reg I)^{-1} k_t``.

The ridge of each kind is chosen on the training set alone, by leave-one-out
(closed form from the Cholesky factor) or, with CG, k-fold cross-validation
(``kernelcli.solvers._selection``): a ridge chosen by test accuracy would overstate
it. The whole sweep's test numbers are still reported, as such. With ``times`` the
gradient-flow ensemble of neural-tangents' ``gradient_descent_mse_ensemble`` is
evaluated too (:mod:`._predict_flow`). Results go to ``predictions.h5`` in the run
directory (written whole, then renamed).

For the NTK the ridge prediction is the infinite-time gradient-descent mean of an
infinitely wide network trained on MSE (Lee et al. 2019); for the NNGP the
Bayesian posterior mean. numpy only (the run's files are read through
:mod:`kernelcli.store`); no jax.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

from .._stop import Stop, check
from ..config import base_kind
from ..errors import UsageError
from ..solvers import (
    VARIANCE_ROWS,
    Eigen,
    H5KernelOperator,
    NotConvergedError,
    NotPositiveDefiniteError,
    check_flow_memory,
    check_ridges,
    check_times,
    cholesky_factor,
    choose_ridge,
    choose_solver,
    class_count,
    eigen,
    eigen_sweep,
    eigen_variances,
    hold_fits,
    load_kernel,
    loo_predictions,
    one_hot,
    predictive_variance,
    solve_cg_folds,
    solve_memory_bytes,
    solve_with_factor,
)
from ..solvers import predict as predict_mean
from ..store import PREDICTIONS, ResultFile, RunStore
from ._predict_checks import check_kernel
from ._predict_common import (
    CV_FOLDS,
    DEFAULT_RIDGES,
    check_run,
    choice,
    kinds_asked,
    raise_if_none_solved,
    score_rows,
)
from ._predict_file import RIDGE_CONVENTION, write_predictions
from ._predict_flow import flow_kind, flow_rows
from ._predict_results import PredictResult
from ._predict_spread import check_executor, coordinate, spread

_REPORT_S = 5.0  # seconds between two progress lines of a CG solve


def _cg_reporter(kind: str, progress: Optional[Callable[[str], None]]):
    """``(on_iteration, done)`` for ``solve_cg_folds``: a line to ``progress`` at most
    every ``_REPORT_S`` seconds (products with K, worst relative residual, time), and
    one when the solve ends."""
    if progress is None:
        return None, lambda: None
    start = time.monotonic()
    state = {"last": start, "products": 0, "residual": float("nan")}

    def line(head: str) -> str:
        return (f"predict {kind}: {head} {state['products']:,} products with K, worst "
                f"relative residual {state['residual']:.2e}, "
                f"{time.monotonic() - start:.0f} s")

    def on_iteration(products: int, residual: float) -> None:
        state.update(products=products, residual=residual)
        if time.monotonic() - state["last"] >= _REPORT_S:
            state["last"] = time.monotonic()
            progress(line("preconditioned CG,"))

    return on_iteration, lambda: progress(line("CG done after"))


def _variance(diag, test_op: H5KernelOperator, variance_of) -> np.ndarray:
    """``k(t, t) - k_t^T (K + reg I)^{-1} k_t`` per test row, float64, read by blocks of
    ``VARIANCE_ROWS`` rows: ``variance_of(k_tt, k_t)`` gives a block's, (rows,) or
    (R, rows) for R ridges; the blocks joined along the test rows."""
    blocks = []
    with ResultFile(test_op.path).kernel(test_op.dataset) as ds:
        for s in range(0, test_op.shape[0], VARIANCE_ROWS):
            kt = ds[s:s + VARIANCE_ROWS]
            blocks.append(variance_of(diag[s:s + kt.shape[0]], kt))
    return np.concatenate(blocks, axis=-1)


def _solve_kind(result: Path, kind: str, y: np.ndarray, ridges, solver: str,
                with_variance: bool, names: set,
                progress: Optional[Callable[[str], None]] = None,
                where: Optional[dict] = None, stop: Optional[Stop] = None,
                eig: Optional[Eigen] = None, hold: bool = False) -> dict:
    """``{ridge: {"mean": (m, C), "variance": (m,) or None, "held_out": (n, C) or None}
    or {"error": text}}``; ``held_out``: each training row predicted without itself
    (leave-one-out) or without its fold (CG). ``eig``: the training kernel's
    eigendecomposition where the caller has it (the eigen route then reuses it).
    ``hold``: CG multiplies a float32 copy of the training kernel in memory instead of
    streaming it from the file each pass (the same numbers)."""
    test_op = H5KernelOperator(result, f"{kind}_test", stop=stop)
    diag = None
    if with_variance and f"{kind}_test_diag" in names:
        diag = ResultFile(result).read(f"{kind}_test_diag", np.float64)
    out: dict[float, dict[str, Any]] = {}
    if solver == "cholesky":
        work = load_kernel(result, kind)  # float64, read only: each factor is a copy
        for ridge in ridges:
            check(stop)
            try:
                chol = cholesky_factor(work, ridge, kind=kind)
            except NotPositiveDefiniteError as exc:
                out[ridge] = {"error": exc.template or str(exc)}
                continue
            alpha = solve_with_factor(chol, y)
            var = None if diag is None else _variance(
                diag, test_op, lambda kd, kt: predictive_variance(kd, kt, chol))  # noqa: B023
            held_out = loo_predictions(chol, alpha, y, overwrite=True)  # chol's last use
            del chol
            out[ridge] = {"alpha": alpha, "variance": var, "held_out": held_out}
    elif solver == "eigen":
        check(stop)
        if eig is None:
            eig = eigen(load_kernel(result, kind), kind)  # the float64 kernel dropped after
        check(stop)
        out.update(eigen_sweep(eig, y, ridges, kind=kind))
        if diag is not None:
            variances = _variance(diag, test_op,
                                  lambda kd, kt: eigen_variances(eig, kt, kd, ridges))
            for i, ridge in enumerate(ridges):
                if "error" not in out[ridge]:
                    out[ridge]["variance"] = variances[i]
    else:
        # the products with K on this process, or on workers holding its row bands
        base = H5KernelOperator(result, kind, stop=stop)
        with base.held() if hold else contextlib.nullcontext(), \
                spread(base, **(where or {}), stop=stop) as op:
            alphas, held = _cg_kind(op, kind, y, ridges, progress, out)
        for ridge, alpha in alphas.items():
            out[ridge] = {"alpha": alpha, "held_out": held[ridge]}
    _means(out, test_op, y.shape[1], stop)
    return {r: out[r] for r in ridges}


def _means(out: dict, test_op: H5KernelOperator, classes: int, stop) -> None:
    """Every solved ridge's test means in one pass over ``K(test, x1)`` (its ``alpha``
    replaced by ``mean``; ``variance`` None where none was made)."""
    solved = [r for r, res in out.items() if "alpha" in res]
    if not solved:
        return
    check(stop)
    means = predict_mean(test_op, np.hstack([out[r].pop("alpha") for r in solved]))
    for i, ridge in enumerate(solved):
        out[ridge]["mean"] = means[:, i * classes:(i + 1) * classes]
        out[ridge].setdefault("variance", None)


def _cg_kind(op, kind: str, y, ridges, progress, out: dict) -> tuple:
    """``(alphas, held-out predictions)`` by ridge; a ridge that fails gets its error
    in ``out``."""
    folds = min(CV_FOLDS, op.shape[0])
    fails = (NotPositiveDefiniteError, NotConvergedError)
    on_iteration, done = _cg_reporter(kind, progress)
    try:
        alphas, held = solve_cg_folds(op, y, ridges, folds, kind=kind, on_iteration=on_iteration)
        done()
    except fails:
        alphas, held = {}, {}
        for ridge in ridges:  # find out which ridges fail, and solve the others
            try:
                a, h = solve_cg_folds(op, y, [ridge], folds, kind=kind,
                                      on_iteration=on_iteration)
                alphas.update(a)
                held.update(h)
            except fails as exc:
                out[ridge] = {"error": exc.template or str(exc)}
    return alphas, held


def _check_flow(times, n: int, m: int, solver: str, asked: str,
                available_bytes: Optional[int], classes: int, ridges: int) -> None:
    """Gradient flow needs an eigendecomposition in memory: refuse (exit 2) before any
    solve when it cannot have one, naming the times and what would work."""
    shown = ",".join(f"{t:g}" for t in times)
    if asked == "cg":
        raise UsageError.naming(f"<<times>> {shown}: gradient-flow predictions need the "
                                f"eigendecomposition of K(x1, x1) in memory; <<solver>> cg "
                                f"streams the kernel and has none. Use <<solver>> auto or "
                                f"cholesky, or drop <<times>>")
    check_flow_memory(n, m, available_bytes, shown, classes, ridges)


def predict(run_dir, ridges: Optional[Iterable[float]] = None,
            kinds: Optional[Iterable[str]] = None, solver: str = "auto",
            available_bytes: Optional[int] = None,
            times: Optional[Iterable[float]] = None,
            progress: Optional[Callable[[str], None]] = None, executor: str = "local",
            workers: Optional[int] = None, address: Optional[str] = None,
            stop: Optional[Stop] = None) -> PredictResult:
    """Kernel regression with every requested kind and ridge on the run in ``run_dir``.

    ``ridges``: the sweep (default ``DEFAULT_RIDGES``), ``ridge * trace(K)/n`` on the
    diagonal; each kind's ridge is chosen by its held-out score on the training set
    (``PredictResult.selected``). ``times``: also the gradient-flow ensemble at those
    training times (neural-tangents' ``t`` with learning rate 1; ``inf`` allowed),
    every ridge. ``progress(line)``: the CG solve's progress (products with K,
    residual, time). ``executor``: where CG's products with K run (``local``: here;
    ``processes``: ``workers`` local processes; ``ray``: Ray actors, on the cluster at
    ``address``), each worker a row band (:mod:`._predict_spread`); the same numbers
    bit for bit. Test accuracy and MSE are ``None`` without test labels. Raises
    ``NotPositiveDefiniteError`` when no ridge of any kind could be solved. ``stop``: a
    :class:`~kernelcli.run.Stop` another thread may request; the solve then raises
    ``Interrupted`` at its next pass over the kernel or ridge, before
    ``predictions.h5`` is written (nothing is).
    """
    ridges = check_ridges(DEFAULT_RIDGES if ridges is None else ridges)
    times = () if times is None else check_times(times)
    check_executor(executor, workers, address, solver)
    where = {"executor": executor, "workers": workers, "address": address}
    store = RunStore.open(run_dir)
    # one writer per run directory, from the first read of kernels.h5 to the rename of
    # predictions.h5: an extend, clean or resume meanwhile would change the kernels
    # these predictions are made of, or remove them while they are written
    # (opened first so that a folder that is no run gets no lock file; again once
    # locked, as a writer that just ended may have changed the manifest)
    with store.lock(), coordinate(run_dir, where) as where:  # --executor shards' folder
        return _predict(RunStore.open(run_dir), run_dir, ridges, solver, available_bytes,
                        times, kinds, progress, where, stop)


def _predict(store, run_dir, ridges, solver, available_bytes, times, kinds,
             progress, where=None, stop=None) -> PredictResult:
    names, have, labels, test_labels = check_run(store, run_dir)
    kinds = kinds_asked(kinds, have, run_dir)
    n = int(labels.shape[0])
    m = H5KernelOperator(store.result_path, f"{kinds[0]}_test").shape[0]
    asked = solver
    classes = class_count(labels, test_labels)
    # every allocation of the chosen route counted before any work (refused: exit 2)
    variance_kinds = sum(base_kind(k) == "nngp" and f"{k}_test_diag" in names for k in kinds)
    solver = choose_solver(n, solver, available_bytes, m, classes, len(ridges), len(kinds),
                           min(CV_FOLDS, n), variance_kinds)
    # CG's passes multiply a copy in memory where it is a small share of it
    hold = (solver == "cg" and (where or {}).get("executor", "local") == "local"
            and hold_fits(n, m, classes, len(ridges), len(kinds), min(CV_FOLDS, n),
                          available_bytes))
    if times:
        _check_flow(times, n, m, solver, asked, available_bytes, classes, len(ridges))
    for kind in kinds:  # every kernel sound before any solve
        check_kernel(store.result_path, kind, 0, stop)
        check_kernel(store.result_path, f"{kind}_test", None, stop)
    y = one_hot(labels, classes)
    y_test = None if test_labels is None else one_hot(test_labels, classes)
    rows: list = []
    choices, solved, flows = [], {}, {}
    for kind in kinds:
        check(stop)
        # one eigendecomposition serves the sweep and the gradient flow
        eig = eigen(load_kernel(store.result_path, kind), kind) if solver == "eigen" else None
        solved[kind] = _solve_kind(store.result_path, kind, y, ridges, solver,
                                   with_variance=base_kind(kind) == "nngp", names=names,
                                   progress=progress, where=where, stop=stop, eig=eig,
                                   hold=hold)
        scores = score_rows(kind, solved[kind], labels, y, test_labels, y_test, rows)
        choices.append(choice(kind, choose_ridge(scores, ridges), rows))
        if times:
            check(stop)
            flows[kind] = flow_kind(store.result_path, kind, y, ridges, times, names, eig)
        del eig
    check(stop)
    raise_if_none_solved(solved, rows)
    flow = flow_rows(flows, ridges, times, test_labels, y_test)
    selection = ("leave-one-out" if solver in ("cholesky", "eigen")
                 else f"{min(CV_FOLDS, n)}-fold cross-validation")
    path = write_predictions(store.run_dir / PREDICTIONS, solved, ridges, rows, choices,
                             solver, selection, times, flows)
    return PredictResult(
        run_dir=str(store.run_dir), n_train=n, n_test=m, classes=classes, solver=solver,
        solve_bytes=solve_memory_bytes(n), ridge_convention=RIDGE_CONVENTION,
        predictions=str(path), selection=selection, results=tuple(rows),
        selected=tuple(choices), times=times, flow=tuple(flow))
