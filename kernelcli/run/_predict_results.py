"""What ``predict`` returns: frozen value objects, each with the ``to_dict()`` that
``--json`` prints (its keys are a contract, as :mod:`._results`' are)."""

from __future__ import annotations

import dataclasses
from typing import Optional


def _time(t: float):
    """A time as JSON can carry it: ``inf`` is the string ``"inf"`` (JSON has no infinity)."""
    return "inf" if t == float("inf") else t


@dataclasses.dataclass(frozen=True)
class PredictRow:
    """One kind and ridge of ``predict``'s sweep. ``accuracy``/``mse``: on the test set
    (``None`` without test labels or where the ridge failed); ``loo_accuracy``/``loo_mse``:
    held out on the training set (leave-one-out, or k-fold with CG); ``error``: why the
    ridge failed (not positive definite, CG did not converge), else ``None``."""

    kind: str
    ridge: float
    accuracy: Optional[float] = None
    mse: Optional[float] = None
    error: Optional[str] = None
    loo_accuracy: Optional[float] = None
    loo_mse: Optional[float] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PredictChoice:
    """The ridge ``predict`` chose for ``kind`` by its held-out score on the training
    set, with that score and the test numbers at that ridge (all ``None`` when no
    ridge of the kind could be solved)."""

    kind: str
    selected_ridge: Optional[float]
    loo_accuracy: Optional[float] = None
    loo_mse: Optional[float] = None
    test_accuracy: Optional[float] = None
    test_mse: Optional[float] = None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        del out["kind"]
        return out


@dataclasses.dataclass(frozen=True)
class FlowRow:
    """Gradient-flow prediction of ``kind`` at ``ridge`` after training ``time``
    (neural-tangents' units; ``inf``: the ridge solution): test ``accuracy``/``mse``
    and ``mean_variance``, the ensemble variance averaged over the test set (``None``
    when the run lacks what it needs)."""

    kind: str
    ridge: float
    time: float
    accuracy: Optional[float] = None
    mse: Optional[float] = None
    mean_variance: Optional[float] = None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["time"] = _time(self.time)
        return out


@dataclasses.dataclass(frozen=True)
class PredictResult:
    """``predict``: sizes, the solver and its memory, how the ridge was chosen
    (``selection``: ``leave-one-out`` or ``k-fold cross-validation``), the choice per
    kind (``selected``), every kind and ridge (``results``, test-set numbers: not for
    choosing) and, with times, the gradient-flow rows (``flow``); ``predictions``: the
    path of ``predictions.h5``."""

    run_dir: str
    n_train: int
    n_test: int
    classes: int
    solver: str
    solve_bytes: int
    ridge_convention: str
    predictions: str
    selection: str
    results: tuple = ()
    selected: tuple = ()
    times: tuple = ()
    flow: tuple = ()

    def choice(self, kind: str) -> PredictChoice:
        return next(c for c in self.selected if c.kind == kind)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("run_dir", "n_train", "n_test", "classes",
                                             "solver", "solve_bytes", "ridge_convention",
                                             "predictions", "selection")}
        out["results"] = [r.to_dict() for r in self.results]
        out["selected"] = {c.kind: c.to_dict() for c in self.selected}
        if self.times:
            out["times"] = [_time(t) for t in self.times]
            out["flow"] = [r.to_dict() for r in self.flow]
        return out
