"""What both predict routes share (the full kernel's, :mod:`._predict_full`, and a
landmark run's, :mod:`._predict_landmarks`): the default ridges and folds, the checks of
the run and of the kinds asked, and the scores and choice of each ridge. numpy only."""

from __future__ import annotations

from typing import Iterable, Optional

from ..config import KINDS, base_kind, is_kernel_name
from ..errors import DamagedFileError, RunDirError, UsageError, resume_command, spelled
from ..solvers import NotPositiveDefiniteError, accuracy, held_out_scores, mse
from ..store import RunStore
from ._predict_results import PredictChoice, PredictRow

DEFAULT_RIDGES = (1e-6, 1e-4, 1e-2, 1e-1, 1.0)
CV_FOLDS = 5  # folds of the cross-validation that chooses the ridge with CG


def check_run(store: RunStore, run_dir, landmarks: bool = False) -> tuple:
    """``(names, kinds, labels, test_labels)`` of a finished run that verifies and holds
    what predict needs: training labels, and a test kernel unless ``landmarks``."""
    if not store.finished:
        raise RunDirError(f"{run_dir} has no kernels.h5 yet: the run is not finished; "
                          f"complete it with `{resume_command(run_dir)}`, then predict")
    problem = store.result_problem()
    if problem is not None:
        raise DamagedFileError(f"{store.result_path} does not verify: {problem}; "
                               f"`{resume_command(run_dir)}` rebuilds it, then predict")
    result = store.result()
    names = set(result.names())
    stored = result.labels()
    labels, test_labels = stored.get("labels"), stored.get("test_labels")
    # the kinds, or a run with readouts' datasets in readout order (nngp_d3, ntk_d3, ...)
    kinds = sorted((k for k in names if is_kernel_name(k)),
                   key=lambda k: (int(k.partition("_d")[2] or 0), KINDS.index(base_kind(k))))
    if not landmarks and not any(f"{k}_test" in names for k in kinds):
        raise UsageError(f"{run_dir} holds no test kernel K(test, x1): predict needs a run "
                         f"whose configuration names a test set (data.test, data.test_key) "
                         f"and the training labels (data.labels_key)")
    if labels is None:
        raise UsageError(f"{run_dir} holds no training labels: give data.labels_key (and "
                         f"data.labels for a separate file) in the configuration, then "
                         f"compute the run again")
    return names, kinds, labels, test_labels


def kinds_asked(asked: Optional[Iterable[str]], have: list, run_dir) -> list:
    """The datasets of ``have`` that ``asked`` names (all of them for none), in order; a
    plain kind names its readouts' too."""
    if not asked:
        return have
    out = []
    # a plain kind asks for every readout of it too
    asked = [n for k in asked for n in ([k] if k in have else
                                        [h for h in have if base_kind(h) == k] or [k])]
    for k in asked:
        if k not in have:
            raise UsageError.naming(f"<<kinds>>: {k!r} is not in {run_dir}/kernels.h5; it holds "
                             f"{', '.join(have)}")
        if k not in out:
            out.append(k)
    return out


def raise_if_none_solved(solved: dict, rows: list) -> None:
    """``NotPositiveDefiniteError`` with the last ridge's message when no ridge of any
    kind could be solved (``solved``: kind -> ridge -> result, as ``rows``)."""
    if all(r.error for r in rows):
        last = [res["error"] for per in solved.values() for res in per.values()][-1]
        raise NotPositiveDefiniteError.naming(last)


def score_rows(kind: str, solved: dict, labels, y, test_labels, y_test, rows: list) -> dict:
    """Append a :class:`PredictRow` per ridge of ``kind``'s ``solved`` results to
    ``rows``; the held-out scores of the ridges that solved (for the choice). A ridge's
    error (a message with ``<<argument>>`` marks) is spelled as the library's."""
    scores = {}
    for ridge, res in solved.items():
        error = res.get("error")
        row = {"kind": kind, "ridge": ridge, "error": None if error is None else spelled(error)}
        if "mean" in res:
            scores[ridge] = held_out_scores(res["held_out"], labels, y)
            row.update(loo_accuracy=scores[ridge]["accuracy"], loo_mse=scores[ridge]["mse"])
            if test_labels is not None:
                row.update(accuracy=accuracy(res["mean"], test_labels),
                           mse=mse(res["mean"], y_test))
        rows.append(PredictRow(**row))
    return scores


def choice(kind: str, ridge: Optional[float], rows: list) -> PredictChoice:
    """The chosen ``ridge`` of ``kind`` with its scores from ``rows`` (``None``: none
    chosen)."""
    if ridge is None:
        return PredictChoice(kind, None)
    row = next(r for r in rows if r.kind == kind and r.ridge == ridge)
    return PredictChoice(kind, ridge, row.loo_accuracy, row.loo_mse, row.accuracy, row.mse)
