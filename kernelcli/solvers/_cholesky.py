"""Kernel ridge regression by one Cholesky factorisation per ridge (numpy only).

Conventions (those of the Myrtle / CNTK reference codes and of neural-tangents'
``predict`` with ``diag_reg_absolute_scale=False``):

* the regulariser added to the diagonal is ``ridge * trace(K) / n`` when
  ``trace_scaled`` (the default), so a ridge means the same for kernels of any
  scale; ``ridge`` itself when not;
* everything is float64, whatever the stored kernel's dtype;
* numpy has no triangular solver, so the two triangular systems are solved by
  blocked substitution: each diagonal block (``_BLOCK`` rows) with
  ``np.linalg.solve`` and the rest by matrix products. That is exact up to
  rounding, costs ``2 n^2 C`` flops beyond the ``n^3 / 3`` of the factorisation,
  and needs no second ``n x n`` matrix.

Memory: a C-ordered float64 ``k_train`` is read as it is (never changed); anything
else is copied to float64 first. The factor is made in place in one more ``n x n``
array by LAPACK (:func:`factor_in_place`), so the peak is the float64 kernel and its factor,
``16 n^2`` bytes (see ``solve_memory_bytes``). Only the lower triangle of ``k_train``
is read: it must be symmetric.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import numpy as np

from ..errors import DataError, NotPositiveDefiniteError, UsageError
from ._memory import MAX_RIDGE, check_count
from ._messages import not_pd_message, smallest_eigenvalue

_BLOCK = 256  # rows per diagonal block of the triangular solves
_CHECK_ROWS = 1024  # rows per chunk of the finiteness check (bounds its temporary)


def check_ridges(ridges: Iterable[float]) -> tuple:
    """The ridges as floats, each finite and >= 0; ``UsageError`` naming ``ridges`` otherwise."""
    out = []
    for r in ridges:
        try:
            value = float(r)
        except (TypeError, ValueError):
            raise UsageError.naming(f"<<ridges>>: {r!r} is not a number; "
                                    "accepted: finite numbers >= 0") from None
        if not math.isfinite(value) or not 0 <= value <= MAX_RIDGE:
            raise UsageError.naming(f"<<ridges>>: {r!r} is not accepted; give numbers from 0 "
                                    f"to {MAX_RIDGE:g} (e.g. 1e-4)")
        out.append(value)
    if not out:
        raise UsageError.naming("<<ridges>>: no ridge given; give at least one finite number >= 0")
    return check_count(tuple(out), "ridges")


def regularizer(ridge: float, trace: float, n: int, trace_scaled: bool = True) -> float:
    """The diagonal shift: ``ridge * trace / n`` when ``trace_scaled``, else ``ridge``."""
    return ridge * trace / n if trace_scaled else ridge


def check_kernel_rows(rows: np.ndarray, start: int, what: str,
                      diagonal_from: Optional[int] = None) -> None:
    """Refuse rows ``start ..`` of a kernel (``rows`` (r, n)) that hold a non-finite
    value or, with ``diagonal_from``, whose diagonal entry (row ``i``'s at column
    ``i - diagonal_from``) is not > 0: an input's variance, so the kernel is not one
    (damaged, or edited); ``DataError`` naming ``what``, the row and the value. The
    one check of every route's kernels, before any solve."""
    for s in range(0, rows.shape[0], _CHECK_ROWS):
        part = rows[s:s + _CHECK_ROWS]
        bad = ~np.isfinite(part)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise DataError(f"{what} holds a non-finite value ({part[i, j].item()}) at row "
                            f"{start + s + i}, column {j}; the kernel must be finite: "
                            f"`kernelcli verify RUN_DIR` checks it")
    if diagonal_from is None:
        return
    at = np.arange(rows.shape[0])
    cols = start + at - diagonal_from
    inside = (cols >= 0) & (cols < rows.shape[1])
    diag = rows[at[inside], cols[inside]]
    bad = np.flatnonzero(~(diag > 0))
    if bad.size:
        i = int(at[inside][bad[0]])
        raise DataError(f"{what} holds {rows[i, cols[i]].item():g} on its diagonal at row "
                        f"{start + i}; accepted: a diagonal > 0 (an input's variance), so "
                        f"the kernel is damaged or edited: `kernelcli verify RUN_DIR` "
                        f"checks it")


def _as_work_kernel(k_train, what: str) -> np.ndarray:
    k = np.asarray(k_train)
    if k.ndim != 2 or k.shape[0] != k.shape[1] or k.shape[0] == 0:
        raise DataError(f"{what} must be a non-empty square (n, n) matrix, got shape {k.shape}")
    usable = k.dtype == np.float64 and k.flags.c_contiguous
    work = k if usable else np.array(k, dtype=np.float64, order="C")
    check_kernel_rows(work, 0, what)
    return work


def _check_targets(targets, n: int, what: str = "targets") -> np.ndarray:
    y = np.asarray(targets, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] != n:
        raise DataError(f"{what} must be (n, C) with n = {n:,} rows (one per training "
                        f"example), got shape {y.shape}")
    if not np.isfinite(y).all():
        raise DataError(f"{what} holds non-finite values")
    return y


def _factor(work: np.ndarray, reg: float, fail_message) -> np.ndarray:
    """The lower factor of ``work + reg I``, in a new array; ``work`` is only read."""
    chol = np.array(work, dtype=np.float64, order="C")  # the one copy: factored in place
    np.einsum("ii->i", chol)[...] += reg
    try:
        factor_in_place(chol)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError.naming(fail_message()) from None
    if not np.isfinite(np.einsum("ii->i", chol)).all():
        raise NotPositiveDefiniteError.naming(fail_message())
    return chol


def factor_in_place(a: np.ndarray) -> None:
    """Overwrite the C-ordered float64 ``a`` (n, n) with the lower Cholesky factor of
    its lower triangle (the strict upper triangle is zeroed); ``LinAlgError`` when it
    is not positive definite.

    LAPACK's ``dpotrf`` (scipy's) on ``a``'s transpose, the Fortran-ordered upper
    triangle it takes, so in ``a``'s own memory, where numpy's ``cholesky`` copies the
    matrix into Fortran order first and holds a third ``n x n`` array; about as fast
    (34 against 27 G multiply-adds/s at n = 12,000, 21 against 27 at 6,000, the
    product 47-50: bench/dense_rates.py).
    """
    from scipy.linalg import lapack  # type: ignore[import-untyped]  # no stubs

    _, info = lapack.dpotrf(a.T, lower=0, overwrite_a=1, clean=1)
    if info > 0:
        raise np.linalg.LinAlgError(f"not positive definite at row {info - 1}")
    if info < 0:
        raise ValueError(f"dpotrf: argument {-info} is not valid")


def forward_substitution(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``L^{-1} b`` for lower-triangular ``chol`` (n, n) and ``b`` (n, k); returns (n, k)."""
    x = np.empty_like(b, dtype=np.float64)
    for i0 in range(0, chol.shape[0], _BLOCK):
        i1 = min(i0 + _BLOCK, chol.shape[0])
        rhs = b[i0:i1] - chol[i0:i1, :i0] @ x[:i0]
        x[i0:i1] = np.linalg.solve(chol[i0:i1, i0:i1], rhs)
    return x


def back_substitution(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``L^{-T} b`` for lower-triangular ``chol`` (n, n) and ``b`` (n, k); returns (n, k)."""
    n = chol.shape[0]
    x = np.empty_like(b, dtype=np.float64)
    for i1 in range(n, 0, -_BLOCK):
        i0 = max(0, i1 - _BLOCK)
        rhs = b[i0:i1] - chol[i1:, i0:i1].T @ x[i1:]
        x[i0:i1] = np.linalg.solve(chol[i0:i1, i0:i1].T, rhs)
    return x


def cholesky_factor(k_train, ridge: float, *, trace_scaled: bool = True,
                    kind: str = "kernel") -> np.ndarray:
    """Lower Cholesky factor ``L`` (n, n) float64 of ``k_train + reg I`` (``k_train`` (n, n)).

    ``reg`` follows the module's convention; ``kind`` (``nngp``/``ntk``) only
    names the kernel in errors. Raises ``NotPositiveDefiniteError``, never NaNs.
    """
    (ridge,) = check_ridges([ridge])
    work = _as_work_kernel(k_train, f"the {kind} training kernel")
    n = work.shape[0]
    reg = regularizer(ridge, float(np.trace(work)), n, trace_scaled)
    unit = regularizer(1.0, float(np.trace(work)), n, trace_scaled)
    return _factor(work, reg, lambda: not_pd_message(kind, ridge, trace_scaled, reg, n,
                                                     "Cholesky failed",
                                                     smallest_eigenvalue(work), unit))


def solve_cholesky(k_train, targets, ridges: Iterable[float], *, trace_scaled: bool = True,
                   kind: str = "kernel") -> dict[float, np.ndarray]:
    """Dual coefficients ``alpha = (K + reg I)^{-1} Y`` for every ridge.

    ``k_train`` (n, n) symmetric, ``targets`` (n, C). Returns ``{ridge: alpha (n, C)}``
    in float64, one Cholesky factorisation per ridge. A ridge at which the
    kernel is not positive definite raises ``NotPositiveDefiniteError``.
    """
    ridges = check_ridges(ridges)
    work = _as_work_kernel(k_train, f"the {kind} training kernel")
    n = work.shape[0]
    y = _check_targets(targets, n)
    trace = float(np.trace(work))
    alphas = {}
    for ridge in ridges:
        reg = regularizer(ridge, trace, n, trace_scaled)
        # the message is built, if at all, within this iteration
        chol = _factor(work, reg, lambda: not_pd_message(  # noqa: B023
            kind, ridge, trace_scaled, reg, n, "Cholesky failed",  # noqa: B023
            smallest_eigenvalue(work), regularizer(1.0, trace, n, trace_scaled)))
        alphas[ridge] = solve_with_factor(chol, y)
        del chol
    return alphas


def solve_with_factor(chol: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``alpha = (L L^T)^{-1} Y`` from the factor ``chol`` (n, n) of ``cholesky_factor``
    and ``targets`` (n, C); returns (n, C) float64."""
    return back_substitution(chol, forward_substitution(chol, targets))


def predict(k_test_train, alpha) -> np.ndarray:
    """Mean predictions ``K(test, train) @ alpha``: (m, n) x (n, C) -> (m, C) float64.

    ``k_test_train`` may be an array or an ``H5KernelOperator`` (streamed by row blocks).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if hasattr(k_test_train, "matmul"):
        return k_test_train.matmul(alpha)
    k = np.asarray(k_test_train)
    if k.ndim != 2 or k.shape[1] != alpha.shape[0]:
        raise DataError(f"the test-train kernel must be (m, n) with n = {alpha.shape[0]:,} "
                        f"training columns, got shape {k.shape}")
    return k.astype(np.float64, copy=False) @ alpha


def predictive_variance(k_test_diag, k_test_train, chol) -> np.ndarray:
    """NNGP posterior variance ``k(x, x) - k_x^T (K + reg I)^{-1} k_x`` per test point.

    ``k_test_diag`` (m,), ``k_test_train`` (m, n), ``chol`` (n, n) from
    ``cholesky_factor`` (same kernel and ridge). Returns (m,) float64; values
    within rounding of zero may come out slightly negative and are not clipped.
    """
    kd = np.asarray(k_test_diag, dtype=np.float64)
    kt = np.asarray(k_test_train, dtype=np.float64)
    if kt.ndim != 2 or kt.shape[1] != chol.shape[0] or kd.shape != (kt.shape[0],):
        raise DataError(f"predictive_variance: k_test_diag (m,) = {kd.shape}, k_test_train "
                        f"(m, n) = {kt.shape} and chol (n, n) = {chol.shape} do not agree")
    v = forward_substitution(chol, kt.T)
    return kd - np.einsum("ij,ij->j", v, v)
