"""Regression targets from class labels, and the metrics of predictions (numpy only).

Targets are plain one-hot by default (neural-tangents' examples); ``center=True``
subtracts ``1/C`` from every entry (``0.9 / -0.1`` for 10 classes, the centred
targets of the Myrtle / CNTK reference codes). Accuracy takes the arg-max, so
centring does not change it; MSE is measured against the targets used to fit.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import DataError, UsageError


def _check_labels(labels, what: str = "labels") -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise DataError(f"{what} must be a non-empty (n,) vector of class indices, "
                        f"got shape {y.shape}")
    if y.dtype.kind not in "iub":
        if y.dtype.kind != "f" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DataError(f"{what} must be integer class indices, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.min() < 0:
        raise DataError(f"{what} holds a negative class index ({y.min()}) at row "
                        f"{int(np.argmin(y))}; classes are 0 .. C-1")
    return y


def class_count(labels, test_labels=None) -> int:
    """The columns of the one-hot targets: the largest class index of ``labels`` (n,)
    and ``test_labels`` (m,) or None, plus one (a column per index, so that the
    predictions' arg-max is the user's class label)."""
    y = _check_labels(labels)
    top = int(y.max())
    if test_labels is not None:
        top = max(top, int(_check_labels(test_labels, "test labels").max()))
    return top + 1


def one_hot(labels, num_classes: Optional[int] = None, *, center: bool = False) -> np.ndarray:
    """``labels`` (n,) integers in ``[0, C)`` -> targets (n, C) float64.

    ``num_classes`` defaults to ``max(labels) + 1``; give it when a set may lack
    the last class. ``center=True`` subtracts ``1/C`` (rows then sum to zero).
    """
    y = _check_labels(labels)
    c = int(y.max()) + 1 if num_classes is None else num_classes
    if int(c) != c or c < 1:
        raise UsageError(f"num_classes: {num_classes!r} is not accepted; give an integer >= 1")
    if y.max() >= c:
        raise DataError(f"labels hold class {int(y.max())} at row {int(np.argmax(y))}, "
                        f"but num_classes is {c}; classes are 0 .. {c - 1}")
    out = np.zeros((y.size, int(c)), dtype=np.float64)
    out[np.arange(y.size), y] = 1.0
    if center:
        out -= 1.0 / c
    return out


def accuracy(predictions, labels) -> float:
    """Fraction of rows of ``predictions`` (m, C) whose arg-max is ``labels`` (m,)."""
    pred = np.asarray(predictions)
    y = _check_labels(labels)
    if pred.ndim != 2 or pred.shape[0] != y.size:
        raise DataError(f"predictions (m, C) = {pred.shape} and labels (m,) = {y.shape} "
                        "do not agree")
    return float(np.mean(np.argmax(pred, axis=1) == y))


def mse(predictions, targets) -> float:
    """Mean over all ``m * C`` entries of ``(predictions - targets)^2``, both (m, C)."""
    pred = np.asarray(predictions, dtype=np.float64)
    t = np.asarray(targets, dtype=np.float64)
    if pred.shape != t.shape or pred.ndim != 2:
        raise DataError(f"predictions {pred.shape} and targets {t.shape} must both be (m, C)")
    return float(np.mean((pred - t) ** 2))


def evaluate(predictions: Mapping[float, np.ndarray], labels,
             targets) -> dict[float, dict[str, float]]:
    """``{ridge: {"accuracy": a, "mse": e}}`` for ``{ridge: predictions (m, C)}``."""
    return {r: {"accuracy": accuracy(p, labels), "mse": mse(p, targets)}
            for r, p in predictions.items()}
