"""Falkon: Nystrom kernel ridge regression by preconditioned conjugate gradients.

The same estimator as :mod:`._nystrom` (its docstring gives the ridge and the folds):
per ridge and fold ``f`` (its training rows ``K_f``, the rows of ``K(X, Z)`` outside
fold ``f``; the last "fold" is every row)

    (K_f^T K_f + reg K_mm) a = K_f^T Y_f,    predictions k_xm a,

but solved in the ``M x M`` coefficient space by conjugate gradients with the
preconditioner of Falkon (Rudi, Carratino & Rosasco 2017, Algorithm 1; Meanti et al.
2020): ``T`` upper with ``T^T T = K_mm`` (a small jitter where ``K_mm`` is singular),
``A`` upper with ``A^T A = T T^T / M + (reg / n) I`` -- two ``M x M`` Cholesky
factorisations -- and ``P = T^{-1} A^{-1}``. CG runs on ``P^T H P b = P^T K_f^T Y_f /
n`` (``H`` the matrix above, over ``n``), whose matrix is the identity where
``K_f^T K_f`` is its Nystrom estimate ``(n / M) K_mm^2``, so a few tens of
iterations reach float64 accuracy whatever the ridge; then ``a = P b``.

Memory is ``O(M^2)`` per ridge whatever ``N``: ``K(X, Z)`` is streamed in row bands
(``bands()``: an iterable of ``(first row, rows)``, called once per pass), each CG
iteration is one pass that computes ``K_f^T (K_f v)`` for every column at once -- each
ridge, fold and class a column, a fold a row mask of the band -- and nothing
``N``-long is held beyond the targets. The factors are held as explicit inverses
(numpy has no triangular solve; ``T^{-1}`` and ``A^{-1}`` are upper triangular and
inverted from their transposes without pivoting), so every step is a matrix product.
float64 throughout.

Where ``K_mm`` is singular (duplicate landmarks, a kernel of low rank) its null
directions are scaled by ``1 / sqrt(jitter)`` in ``P``, and rounding in the products
along them puts a floor under the attainable residual: a small ridge may then stop
at ``maxiter`` with its message, where the direct solve, which drops those
directions, still answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from .._system import available_ram_bytes
from ..errors import UsageError
from ..plan import auto_budget
from ._memory import falkon_memory_bytes, memory_refusal, results_bytes
from ._messages import not_pd_message
from ._nystrom import nystrom_memory_bytes

# predict --solver on a landmark run: cholesky the direct solve, cg Falkon
LANDMARK_SOLVERS = ("auto", "cholesky", "cg")

DEFAULT_TOL = 1e-8  # relative residual of the preconditioned system, every column (predictions
# then agree with the direct solve to about 1e-7: bench/history/BENCHMARKS-2026.md, "Falkon")
DEFAULT_MAXITER = 500  # passes over K(X, Z)
_JITTER_MAX = 1e-6  # of K_mm's largest diagonal: past it the landmarks' kernel is refused


def landmark_memory_bytes(route: str, n: int, t: int, m: int, classes: int = 1,
                          ridges: int = 1, folds: int = 5, kinds: int = 1,
                          band_bytes: int = 64 * 2**20) -> int:
    """Peak bytes of ``predict``'s landmark ``route`` (``direct`` or ``falkon``) for
    ``n`` training rows, ``t`` test rows and ``m`` landmarks: the solve
    (:func:`nystrom_memory_bytes` or :func:`falkon_memory_bytes`; the direct solve
    holds every ridge's weights twice, before and after their projection on the
    landmarks) and :func:`results_bytes`."""
    if route == "direct":
        solve = (nystrom_memory_bytes(m, classes, folds, band_bytes)
                 + 16 * ridges * (folds + 1) * m * classes)
    else:
        solve = falkon_memory_bytes(m, classes, ridges, folds, band_bytes)
    return solve + results_bytes(n, t, classes, ridges, kinds)


def landmark_operations(route: str, n: int, t: int, m: int, classes: int = 1,
                        ridges: int = 1, folds: int = 5, kinds: int = 1) -> int:
    """Multiply-adds of ``predict``'s landmark ``route`` for ``n`` training rows, ``t``
    test rows and ``m`` landmarks, counted as :func:`~._memory.cholesky_operations`.
    Per kind, ``direct``: the eigendecomposition of ``K_mm`` (``9 m^3 / 2``), the
    features and the folds' Gram matrices (``2 n m^2``) and right-hand sides
    (``n m C``), per ridge and system (``folds + 1``) a Cholesky check and a solve
    (``m^3 / 2``) and the weights' projection and solve (``2 m^2 C``).
    ``falkon``, an upper bound (its cap of :data:`DEFAULT_MAXITER` passes over every
    column): ``T``'s factor, inverse and ``T T^T`` (``13 m^3 / 6``) and per ridge
    ``A``'s (``7 m^3 / 6``), the right-hand side's pass (``(folds + 1) n m C``), per
    pass ``2 n m + 4 m^2`` a column of the ``ridges x (folds + 1) x classes``, and
    ``4 m^2`` a column beside the passes. Both then predict every training and test
    row (``(n + t) m C`` per ridge)."""
    systems = folds + 1
    predictions = ridges * (n + t) * m * classes
    if route == "direct":
        per_kind = (9 * m ** 3 // 2 + 2 * n * m * m + n * m * classes
                    + ridges * systems * (m ** 3 // 2 + 2 * m * m * classes))
    else:
        cols = ridges * systems * classes
        per_kind = ((13 + 7 * ridges) * m ** 3 // 6 + systems * n * m * classes
                    + (DEFAULT_MAXITER * (2 * n * m + 4 * m * m) + 4 * m * m) * cols)
    return kinds * (per_kind + predictions)


def choose_landmark_solver(n: int, m: int, solver: str = "auto",
                           available_bytes: Optional[int] = None, classes: int = 1,
                           ridges: int = 1, folds: int = 5,
                           band_bytes: int = 64 * 2**20, t: int = 0,
                           kinds: int = 1) -> str:
    """``'direct'`` (:mod:`._nystrom`'s feature-form solve) or ``'falkon'`` for ``n``
    training rows and ``m`` landmarks. ``solver`` takes ``predict``'s values:
    ``cholesky`` the direct solve (a Cholesky per fold and ridge of the ``r x r``
    system), ``cg`` Falkon, ``auto`` the direct solve while ``K(X, Z)`` in float64
    (``8 n m`` bytes) fits in ``available_bytes`` (default: as ``choose_solver``), else
    Falkon, whose cost grows as ``n m`` per pass where the direct solve's feature
    products grow as ``n m^2``. A route whose memory (:func:`landmark_memory_bytes`
    of ``t`` test rows, ``classes``, ``ridges``, ``folds``, ``kinds``, bands of
    ``band_bytes``) does not fit raises ``BudgetError`` before any work."""
    if solver not in LANDMARK_SOLVERS:
        raise UsageError.naming(f"<<solver>>: {solver!r} is not a solver of a landmark run; "
                                f"accepted: {', '.join(LANDMARK_SOLVERS)} (the direct "
                                f"solve or Falkon: its system is m x m, no eigen sweep)")
    if available_bytes is None:
        available_bytes = auto_budget(available_ram_bytes())
    def at(route: str):
        return lambda c, r: landmark_memory_bytes(route, n, t, m, c, r, folds, kinds,
                                                  band_bytes)

    need_at = {"direct": at("direct"), "falkon": at("falkon")}
    need = {k: at(classes, ridges) for k, at in need_at.items()}
    if solver != "auto":
        route = "direct" if solver == "cholesky" else "falkon"
    else:
        route = "direct" if 8 * n * m <= available_bytes else "falkon"
    if need[route] <= available_bytes:
        return route
    other = "falkon" if route == "direct" else "direct"
    lever = ("" if solver == "auto" or need[other] > available_bytes else
             f"use <<solver>> {'cg' if other == 'falkon' else 'cholesky'}")
    if solver == "auto" and need[other] <= available_bytes:
        return other
    shown = "Falkon" if route == "falkon" else "the direct Nystrom solve"
    raise memory_refusal(f"{shown} on {m:,} landmarks", need_at[route], available_bytes,
                         classes, ridges, lever)


@dataclass(frozen=True, eq=False)
class FalkonSolution:
    """``weights``: per ridge ``(k + 1, M, C)`` coefficients (fold ``f`` trained
    without fold ``f``, the last on every row; predictions ``k_xm @ a``) or the message
    of why that ridge has none; ``passes``: passes over ``K(X, Z)`` (one per CG
    iteration, the right-hand side's and the final residual checks included)."""

    weights: dict
    passes: int
    scale: float


def _upper_inverse(upper: np.ndarray) -> np.ndarray:
    # LU of an upper-triangular matrix pivots nothing: the inverse is the triangle's,
    # its rounding below the diagonal cleared in place (no second M x M copy)
    inv = np.linalg.inv(upper)
    for i in range(1, inv.shape[0]):
        inv[i, :i] = 0.0
    return inv


def landmark_factor(k_mm: np.ndarray) -> tuple:
    """``(T^{-1}, T T^T, scale)``: ``T`` upper with ``T^T T = K_mm + jitter I``, the
    jitter the smallest of ``M eps max(diag)`` times 100^i that factors; ``scale``
    ``trace(K_mm) / M``. ``ValueError`` where ``K_mm`` is zero or far from positive."""
    k = np.asarray(k_mm, dtype=np.float64)
    k = (k + k.T) / 2
    m = k.shape[0]
    top = float(np.max(np.diag(k))) if m else 0.0
    if not top > 0:
        raise ValueError("K(Z, Z) has no positive diagonal: the landmarks' kernel is zero")
    jitter = m * np.finfo(np.float64).eps * top
    while True:
        try:
            lower = np.linalg.cholesky(k + jitter * np.eye(m))
            break
        except np.linalg.LinAlgError:
            jitter *= 100
            if jitter > _JITTER_MAX * top:
                raise ValueError("K(Z, Z) is not positive semi-definite: no Cholesky factor "
                                 "with a jitter of 1e-6 of its diagonal") from None
    scale = float(np.trace(k)) / m
    del k
    upper = lower.T  # T
    return _upper_inverse(upper), upper @ lower, scale


def falkon_weights(k_mm: np.ndarray, bands: Callable[[], Iterable], y: np.ndarray, ridges,
                   kind: str, folds: int, tol: float = DEFAULT_TOL,
                   maxiter: int = DEFAULT_MAXITER,
                   on_pass: Optional[Callable[[int, float], None]] = None) -> FalkonSolution:
    """Falkon's coefficients for every ridge and fold at once (see the module).

    ``bands()``: ``(first row, rows of K(X, Z))`` over the ``n`` training rows (row
    ``i`` in fold ``i mod folds``); ``y`` ``(n, C)`` targets. A ridge whose system
    has no positive curvature, or whose columns do not reach ``tol`` in ``maxiter``
    passes, gets its message instead of coefficients. ``on_pass(passes, worst
    relative residual)`` after each iteration."""
    y = np.asarray(y, dtype=np.float64)
    n, c = y.shape
    t_inv, tt, scale = landmark_factor(k_mm)
    m = t_inv.shape[0]
    ridges = list(ridges)
    regs = [r * scale for r in ridges]
    a_inv = []
    for reg in regs:  # A^T A = T T^T / M + (reg / n) I
        a = tt / m
        a.flat[::m + 1] += reg / n
        a = np.linalg.cholesky(a)
        a_inv.append(_upper_inverse(a.T))
        del a
    del tt
    groups = folds + 1
    cols = len(ridges) * groups * c
    col_ridge = np.arange(cols) // (groups * c)
    col_fold = (np.arange(cols) // c) % groups  # == folds: every row

    def by_ridge(u, sel, fn):
        out = np.empty_like(u)
        for r in np.unique(col_ridge[sel]):
            at = col_ridge[sel] == r
            out[:, at] = fn(int(r), u[:, at])
        return out

    def normal(v, sel):
        """``K_f^T K_f v`` per column (its fold's rows), one pass over the bands."""
        acc = np.zeros_like(v)
        fold = col_fold[sel]
        for start, rows in bands():
            own = (start + np.arange(rows.shape[0])) % folds
            kv = rows @ v
            kv *= own[:, None] != fold[None, :]
            acc += rows.T @ kv
        return acc

    def operator(u, sel):
        au = by_ridge(u, sel, lambda r, x: a_inv[r] @ x)
        w = normal(t_inv @ au, sel) / n
        return by_ridge(t_inv.T @ w + au * (np.asarray(regs)[col_ridge[sel]] / n),
                        sel, lambda r, x: a_inv[r].T @ x)

    # right-hand side P^T K_f^T Y_f / n: K_f^T Y_f per fold, from one pass
    kty = np.zeros((m, groups * c))
    for start, rows in bands():
        own = (start + np.arange(rows.shape[0])) % folds
        yb = y[start:start + rows.shape[0]]
        for f in range(groups):
            kty[:, f * c:(f + 1) * c] += rows.T @ (yb * (own != f)[:, None])
    every = np.arange(cols)
    b = by_ridge(t_inv.T @ np.tile(kty, len(ridges)) / n, every, lambda r, x: a_inv[r].T @ x)
    del kty
    errors: dict = {}
    x, passes = _cg(operator, b, tol, maxiter, col_ridge, ridges, regs, kind, n, errors,
                    on_pass)
    alpha = t_inv @ by_ridge(x, every, lambda r, v: a_inv[r] @ v)
    weights = {}
    for i, ridge in enumerate(ridges):
        block = alpha[:, i * groups * c:(i + 1) * groups * c]
        weights[ridge] = errors.get(i) or np.ascontiguousarray(
            block.reshape(m, groups, c).transpose(1, 0, 2))
    return FalkonSolution(weights, passes + 1, scale)


def _cg(operator, b, tol, maxiter, col_ridge, ridges, regs, kind, n, errors, on_pass):
    """CG per column of ``operator`` (columns of a failed ridge stop, its message in
    ``errors``); converged columns are checked on their true residual, restarted from
    it where the recurrence drifted. ``(x, passes)``."""
    target = tol * np.linalg.norm(b, axis=0)
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rs = np.einsum("ij,ij->j", r, r)
    passes = 0

    def fail(i, why):
        errors.setdefault(int(i), not_pd_message(kind, ridges[i], True, regs[i], n, why))

    while True:
        live = ~np.isin(col_ridge, list(errors))
        active = np.flatnonzero(live & (np.sqrt(rs) > target))
        if active.size == 0:
            done = np.flatnonzero(live)
            if done.size == 0:
                return x, passes
            true_r = b[:, done] - operator(x[:, done], done)
            passes += 1
            res = np.einsum("ij,ij->j", true_r, true_r)
            again = np.sqrt(res) > target[done]
            if not again.any():
                return x, passes
            r[:, done[again]] = p[:, done[again]] = true_r[:, again]
            rs[done[again]] = res[again]
            continue
        if passes >= maxiter:
            rel = np.sqrt(rs) / np.where(target > 0, target / tol, 1.0)
            for i in np.unique(col_ridge[active]):
                at = active[col_ridge[active] == i]
                errors[int(i)] = (f"Falkon on the {kind} kernel (ridge {ridges[i]:g}) "
                                  f"stopped after {passes:,} passes over K(X, Z) at relative "
                                  f"residual {rel[at].max():.2e} > {tol:g}; use a larger "
                                  f"<<ridges>> value, or <<solver>> cholesky (the direct "
                                  f"solve, which drops the null space of K(Z, Z))")
            continue
        pa = p[:, active]
        ap = operator(pa, active)
        passes += 1
        pap = np.einsum("ij,ij->j", pa, ap)
        bad = ~(np.isfinite(pap) & (pap > 0))
        for i in np.unique(col_ridge[active[bad]]):
            fail(i, "Falkon's conjugate gradients met p^T H p <= 0")
        step = np.where(bad, 0.0, rs[active] / np.where(bad, 1.0, pap))
        x[:, active] += step * pa
        ra = r[:, active] - step * ap
        rsa = np.einsum("ij,ij->j", ra, ra)
        r[:, active] = ra
        p[:, active] = ra + (rsa / np.where(rs[active] > 0, rs[active], 1.0)) * pa
        rs[active] = rsa
        if on_pass is not None:
            scale = np.where(target > 0, target / tol, 1.0)
            on_pass(passes, float(np.max(np.sqrt(rs[active]) / scale[active])))
