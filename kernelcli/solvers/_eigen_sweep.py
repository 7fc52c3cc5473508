"""Every ridge of a sweep, and its leave-one-out score, from one eigendecomposition
(numpy only).

With ``K = V diag(w) V^T``, ``K + reg I = V diag(w + reg) V^T`` for every ``reg``, so
one ``eigh`` of ``K`` serves the whole sweep, each ridge then costing ``O(n^2 C)``:

    alpha = V diag(1 / (w + reg)) V^T Y
    diag((K + reg I)^{-1}) = (V o V) (1 / (w + reg))       (leave-one-out, ``_selection``)
    k(t, t) - k_t^T (K + reg I)^{-1} k_t = k(t, t) - (A o A) (1 / (w + reg)),  A = K(t, x1) V

(``o`` the elementwise product). The Cholesky route pays a factorisation and an
inverse diagonal (``n^3 / 6`` multiply-adds each) per ridge instead; ``eigh`` costs
several times one of them (``_route_costs`` prices both), so this route wins for long
sweeps. A ridge at which ``w + reg`` is not > 0 somewhere is not positive definite,
the error of Cholesky's route.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._cholesky import _check_targets, check_ridges, regularizer
from ._gradient_flow import Eigen, flow_weights
from ._messages import not_pd_message

_ROWS = 1024  # rows of V (or A) squared at a time: the n x n square is never held


def _weights(eig: Eigen, ridges, trace_scaled: bool) -> np.ndarray:
    """``1 / (w + reg)`` (n, R), one column per ridge (0 where not > 0: not used): the
    gradient flow's weights at ``t = inf``."""
    return np.stack([flow_weights(eig, r, [math.inf], 1, trace_scaled=trace_scaled)[0]
                     for r in ridges], axis=1)


def squared_rows_times(a: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(a o a) @ weights`` (rows, R) for ``a`` (rows, n), ``_ROWS`` rows at a time."""
    out = np.empty((a.shape[0], weights.shape[1]))
    for s in range(0, a.shape[0], _ROWS):
        part = a[s:s + _ROWS]
        out[s:s + part.shape[0]] = (part * part) @ weights
    return out


def eigen_sweep(eig: Eigen, targets, ridges, *, trace_scaled: bool = True,
                kind: str = "kernel") -> dict[float, dict[str, Any]]:
    """``{ridge: {"alpha": (n, C), "held_out": (n, C)} or {"error": message}}``: the dual
    coefficients and leave-one-out predictions of every ridge from ``eig`` (of the
    training kernel, :func:`~._gradient_flow.eigen`); ``targets`` (n, C)."""
    ridges = check_ridges(ridges)
    y = _check_targets(targets, eig.n)
    regs = [regularizer(r, eig.trace, eig.n, trace_scaled) for r in ridges]
    weights = _weights(eig, ridges, trace_scaled)
    vy = eig.vectors.T @ y
    inverse_diag = squared_rows_times(eig.vectors, weights)  # (n, R)
    low = float(eig.values[0])
    out: dict[float, dict[str, Any]] = {}
    for i, (ridge, reg) in enumerate(zip(ridges, regs, strict=True)):
        if not low + reg > 0:
            out[ridge] = {"error": not_pd_message(
                kind, ridge, trace_scaled, reg, eig.n,
                f"its smallest eigenvalue plus the ridge is {low + reg:.3g}", smallest=low,
                unit=regularizer(1.0, eig.trace, eig.n, trace_scaled))}
            continue
        alpha = eig.vectors @ (weights[:, i:i + 1] * vy)
        out[ridge] = {"alpha": alpha, "held_out": y - alpha / inverse_diag[:, i:i + 1]}
    return out


def eigen_variances(eig: Eigen, k_test_rows, k_test_diag, ridges, *,
                    trace_scaled: bool = True) -> np.ndarray:
    """The posterior variance (R, m) of every ridge for test rows ``k_test_rows`` (m, n),
    an array (a block of ``K(test, x1)``) and their ``k(t, t)`` ``k_test_diag`` (m,)."""
    a = np.asarray(k_test_rows, dtype=np.float64) @ eig.vectors
    quad = squared_rows_times(a, _weights(eig, check_ridges(ridges), trace_scaled))  # (m, R)
    return np.asarray(k_test_diag, dtype=np.float64)[None, :] - quad.T
