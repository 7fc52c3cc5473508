"""Finite-time predictions of gradient flow on the MSE loss (numpy only), as
neural-tangents' ``predict.gradient_descent_mse_ensemble`` gives them.

An infinitely wide network trained by gradient flow on the MSE loss for time ``t``
has the test mean ``K_td V diag(g_t) V^T Y`` with ``K = V diag(lam) V^T`` and
``g_t(lam) = (1 - exp(-lam t / N)) / lam``. The whole trajectory is a function of
K's eigenvalues, so one ``eigh`` of ``K(x1, x1)`` serves every time and every ridge
(``K + reg I`` has K's eigenvectors and eigenvalues ``lam + reg``); after it each
(ridge, time) costs ``O(m n C)`` for the mean.

Conventions, those of neural-tangents (checked against it in
``tests/solvers/test_predict_flow.py``):

* ``t`` is neural-tangents' ``t * learning_rate``; the loss is the mean squared
  error over all ``N = n C`` target entries (``N`` = ``y_train.size``), so
  ``df/dt = -(1/N) K (f - y)``: a time means less as the training set grows;
* the ridge ``reg`` (``ridge * trace(K)/n``: neural-tangents' ``diag_reg`` with
  ``diag_reg_absolute_scale=False``) is added to ``K(x1, x1)`` only, also for the
  flow: the flow of ``K + reg I``;
* an eigenvalue ``lam + reg <= 0`` (rounding in a positive semi-definite kernel)
  is a direction that is not learned (weight 0; neural-tangents clamps with
  ``max(lam, 0)``);
* ``t = inf`` is the ridge solution ``(K + reg I)^{-1}`` (neural-tangents' ``t=None``).

Variances are the diagonal of the ensemble's test covariance (the stored
``K(t, t)`` is a diagonal): for the NNGP ``k(t,t) - a_t^T g_{2t} a_t``; for the NTK
the covariance of an ensemble whose initial functions are NNGP draws, which needs
the NNGP kernels (train, test-train, test diagonal) beside the NTK's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from ..errors import DataError, UsageError
from ._cholesky import _as_work_kernel, _check_targets, regularizer
from ._memory import check_count


def check_times(times: Iterable[float]) -> tuple:
    """The times as floats, each >= 0 or ``inf``; ``UsageError`` naming ``times`` otherwise."""
    out = []
    for t in times:
        try:
            value = float(t)
        except (TypeError, ValueError):
            raise UsageError.naming(f"<<times>>: {t!r} is not a number; accepted: numbers "
                                    ">= 0 or inf (e.g. 1,10,inf)") from None
        if math.isnan(value) or value < 0:
            raise UsageError.naming(f"<<times>>: {t!r} is not accepted; give numbers >= 0 "
                                    "or inf (e.g. 1,10,inf)")
        out.append(value)
    if not out:
        raise UsageError.naming("<<times>>: no time given; give numbers >= 0 or inf")
    return check_count(tuple(out), "times")


@dataclass(frozen=True, eq=False)
class Eigen:
    """``K(x1, x1) = vectors diag(values) vectors^T``: ``values`` (n,) ascending,
    ``vectors`` (n, n), ``trace`` of K (for the trace-scaled ridge), all float64."""

    values: np.ndarray
    vectors: np.ndarray
    trace: float

    @property
    def n(self) -> int:
        return self.values.shape[0]


def eigen(k_train, kind: str = "kernel") -> Eigen:
    """The eigendecomposition of the symmetric ``k_train`` (n, n), lower triangle read,
    in float64 (a float32 kernel is converted; the caller's array is not changed)."""
    work = _as_work_kernel(k_train, f"the {kind} training kernel")
    values, vectors = np.linalg.eigh(work)
    return Eigen(values, vectors, float(np.trace(work)))


def flow_weights(eig: Eigen, ridge: float, times, normalization: int, *,
                 trace_scaled: bool = True) -> np.ndarray:
    """``g_t(lam + reg)`` (T, n) for ``times`` (T,): ``(1 - exp(-lam t / N)) / lam``,
    ``1 / lam`` at ``t = inf`` and 0 where ``lam + reg <= 0``; ``N = normalization``."""
    lam = eig.values + regularizer(ridge, eig.trace, eig.n, trace_scaled)
    pos = lam > 0
    safe = np.where(pos, lam, 1.0)
    out = np.zeros((len(times), eig.n))
    for i, t in enumerate(times):
        if math.isinf(t):
            out[i] = np.where(pos, 1.0 / safe, 0.0)
        else:  # a time past float64's range is the limit t = inf: exp(-inf) = 0
            with np.errstate(over="ignore"):
                decay = -np.expm1(-safe * t / normalization)
            out[i] = np.where(pos, decay / safe, 0.0)
    return out


@dataclass(frozen=True, eq=False)
class FlowBasis:
    """A kind's kernels in the eigenbasis of its training kernel: ``a = K(test, x1) V``
    (m, n), ``vy = V^T Y`` (n, C), and ``eig``. Built once, it serves every ridge and time."""

    eig: Eigen
    a: np.ndarray
    vy: np.ndarray

    @property
    def normalization(self) -> int:
        return self.vy.size  # neural-tangents' y_train.size: n C


def flow_basis(eig: Eigen, k_test_train, targets) -> FlowBasis:
    """``k_test_train`` (m, n) array or ``H5KernelOperator`` (streamed), ``targets`` (n, C)."""
    y = _check_targets(targets, eig.n)
    if hasattr(k_test_train, "matmul"):
        a = k_test_train.matmul(eig.vectors)
    else:
        k = np.asarray(k_test_train, dtype=np.float64)
        if k.ndim != 2 or k.shape[1] != eig.n:
            raise DataError(f"the test-train kernel must be (m, n) with n = {eig.n:,} "
                            f"training columns, got shape {k.shape}")
        a = k @ eig.vectors
    return FlowBasis(eig, a, eig.vectors.T @ y)


def flow_mean(basis: FlowBasis, weights: np.ndarray) -> np.ndarray:
    """Test means (T, m, C) for ``weights`` (T, n) of ``flow_weights``."""
    return np.stack([basis.a @ (g[:, None] * basis.vy) for g in weights])


def nngp_flow_variance(basis: FlowBasis, k_test_diag, ridge: float, times, *,
                       trace_scaled: bool = True) -> np.ndarray:
    """NNGP ensemble variance (T, m): ``k(t,t) - sum_i a_ti^2 g_{2t}(lam_i)``;
    ``k_test_diag`` (m,) is the NNGP's ``K(t, t)``."""
    kd = _test_diag(k_test_diag, basis.a.shape[0])
    g2 = flow_weights(basis.eig, ridge, [2 * t for t in times], basis.normalization,
                      trace_scaled=trace_scaled)
    sq = basis.a ** 2
    return kd[None, :] - g2 @ sq.T


@dataclass(frozen=True, eq=False)
class NTKCovariance:
    """What the NTK ensemble variance needs of the NNGP, in the NTK's eigenbasis:
    ``b = K_nngp(test, x1) V`` (m, n), ``q = V^T K_nngp(x1, x1) V`` (n, n) and the
    NNGP test diagonal ``k_test_diag`` (m,)."""

    b: np.ndarray
    q: np.ndarray
    k_test_diag: np.ndarray


def ntk_covariance(ntk_eig: Eigen, nngp_train, nngp_test_train,
                   nngp_test_diag) -> NTKCovariance:
    """``nngp_train`` (n, n) array, ``nngp_test_train`` (m, n) array or operator,
    ``nngp_test_diag`` (m,)."""
    v = ntk_eig.vectors
    k = _as_work_kernel(nngp_train, "the nngp training kernel")
    if k.shape[0] != ntk_eig.n:
        raise DataError(f"the nngp training kernel is {k.shape}, the ntk's {ntk_eig.n:,} "
                        "square; they must be of one training set")
    q = v.T @ (k @ v)
    b = flow_basis(ntk_eig, nngp_test_train, np.zeros((ntk_eig.n, 1))).a
    return NTKCovariance(b, q, _test_diag(nngp_test_diag, b.shape[0]))


def ntk_flow_variance(basis: FlowBasis, cov: NTKCovariance,
                      weights: np.ndarray) -> np.ndarray:
    """NTK ensemble variance (T, m) for ``weights`` (T, n) of ``flow_weights``:
    ``k_nngp(t,t) - 2 (g a_t) . b_t + (g a_t)^T q (g a_t)`` per test row."""
    out = np.empty((weights.shape[0], basis.a.shape[0]))
    for i, g in enumerate(weights):
        ga = basis.a * g[None, :]
        out[i] = (cov.k_test_diag - 2 * np.einsum("ij,ij->i", ga, cov.b)
                  + np.einsum("ij,ij->i", ga @ cov.q, ga))
    return out


def nngp_flow_covariance(basis: FlowBasis, k_test_test, ridge: float, times, *,
                         trace_scaled: bool = True) -> np.ndarray:
    """The whole NNGP ensemble covariance (T, m, m) whose diagonal is
    :func:`nngp_flow_variance`: ``K(t,t) - A diag(g_{2t}) A^T`` with ``A = basis.a``;
    ``k_test_test`` (m, m) is the NNGP's ``K(t, t)``."""
    m = basis.a.shape[0]
    kt = np.asarray(k_test_test, dtype=np.float64)
    if kt.shape != (m, m):
        raise DataError(f"the test-test kernel must be (m, m) with m = {m:,} test rows, "
                        f"got shape {kt.shape}")
    g2 = flow_weights(basis.eig, ridge, [2 * t for t in times], basis.normalization,
                      trace_scaled=trace_scaled)
    return np.stack([kt - (basis.a * g[None, :]) @ basis.a.T for g in g2])


def ntk_flow_covariance(basis: FlowBasis, cov: NTKCovariance, k_test_test,
                        weights: np.ndarray) -> np.ndarray:
    """The whole NTK ensemble covariance (T, m, m) whose diagonal is
    :func:`ntk_flow_variance`: ``K_nngp(t,t) - G B^T - B G^T + G q G^T`` with
    ``G = basis.a diag(g)``; ``k_test_test`` (m, m) is the NNGP's ``K(t, t)``."""
    kt = np.asarray(k_test_test, dtype=np.float64)
    if kt.shape != (cov.b.shape[0],) * 2:
        raise DataError(f"the test-test kernel must be (m, m) with m = {cov.b.shape[0]:,} "
                        f"test rows, got shape {kt.shape}")
    out = []
    for g in weights:
        ga = basis.a * g[None, :]
        cross = ga @ cov.b.T
        out.append(kt - cross - cross.T + ga @ cov.q @ ga.T)
    return np.stack(out)


def _test_diag(k_test_diag, m: int) -> np.ndarray:
    kd = np.asarray(k_test_diag, dtype=np.float64)
    if kd.shape != (m,):
        raise DataError(f"the test diagonal must be (m,) with m = {m:,} test rows, got "
                        f"shape {kd.shape}")
    return kd


def gradient_flow(k_train, k_test_train, targets, times, ridge: float = 0.0, *,
                  k_test_diag=None, trace_scaled: bool = True, kind: str = "kernel",
                  ntk_with: Optional[tuple] = None) -> tuple:
    """``(mean (T, m, C), variance (T, m) or None)`` of the ensemble at ``times``.

    One call, for arrays in memory: ``k_train`` (n, n), ``k_test_train`` (m, n),
    ``targets`` (n, C). The NNGP variance needs ``k_test_diag`` (m,); the NTK's
    (``kind="ntk"``) needs ``ntk_with = (nngp_train, nngp_test_train, nngp_test_diag)``.
    """
    times = check_times(times)
    eig = eigen(k_train, kind)
    basis = flow_basis(eig, k_test_train, targets)
    weights = flow_weights(eig, ridge, times, basis.normalization, trace_scaled=trace_scaled)
    mean = flow_mean(basis, weights)
    if kind == "ntk" and ntk_with is not None:
        return mean, ntk_flow_variance(basis, ntk_covariance(eig, *ntk_with), weights)
    if kind != "ntk" and k_test_diag is not None:
        return mean, nngp_flow_variance(basis, k_test_diag, ridge, times,
                                        trace_scaled=trace_scaled)
    return mean, None
