"""The message of a kernel that its ridge does not make positive definite, shared by
the solvers, with a ridge that would make it so: from the smallest eigenvalue the solver
measured where it has one (the eigen route's, the Cholesky route's, Nystrom's), never a
fixed multiple of the ridge given (100 x 1e-300 is still no ridge at all)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ._memory import MAX_RIDGE

# The suggestion is this many times the ridge at which the smallest eigenvalue of
# K + reg I reaches 0: a ridge that only just reaches it leaves the solve as badly
# conditioned as the kernel's rounding, and the measured eigenvalue has its own error.
MARGIN = 10.0


def smallest_eigenvalue(k: np.ndarray) -> Optional[float]:
    """The smallest eigenvalue of the symmetric ``k`` (in memory), or ``None`` where it
    cannot be had: all of them for up to 4,000 rows, else Lanczos for the one."""
    try:
        if k.shape[0] <= 4000:
            return float(np.linalg.eigvalsh(k)[0])
        from scipy.sparse.linalg import eigsh  # type: ignore[import-untyped]  # no stubs

        return float(eigsh(k, k=1, which="SA", tol=1e-6, maxiter=2000,
                           return_eigenvectors=False)[0])
    except (np.linalg.LinAlgError, ArithmeticError, ValueError, RuntimeError):
        return None


def _round_up(x: float) -> float:
    """``x`` rounded up to one significant digit, the way a user would type it."""
    e = math.floor(math.log10(x))
    return math.ceil(x / 10**e - 1e-9) * 10**e


def suggest_ridge(ridge: float, unit: Optional[float] = None,
                  smallest: Optional[float] = None) -> str:
    """A larger ridge written the way a user would type it, empty where no accepted ridge
    helps. ``unit``: the regularizer of ridge 1 (``trace / n``, or 1 for an absolute
    ridge); ``smallest``: the kernel's smallest eigenvalue (without the ridge) where
    measured, negative: then :data:`MARGIN` times the ridge that brings it to 0 (and at
    least 10 x the ridge given, which the measurement's own error may have hidden).
    Otherwise 100 x the ridge (1e-6 from zero)."""
    if ridge >= MAX_RIDGE:
        return ""
    if smallest is not None and smallest < 0 and unit is not None:
        if unit <= 0:  # a trace-scaled ridge of a kernel whose trace is not positive
            return ""
        need = max(MARGIN * (-smallest) / unit, 10 * ridge)
        return f"{_round_up(need):g}" if need <= MAX_RIDGE else ""
    return "1e-06" if ridge <= 0 else f"{min(ridge * 100, MAX_RIDGE):g}"


def not_pd_message(kind: str, ridge: float, trace_scaled: bool, reg: float, n: int,
                   where: str, smallest: Optional[float] = None,
                   unit: Optional[float] = None) -> str:
    """``smallest``: the kernel's smallest eigenvalue where the solver measured it;
    ``unit``: the regularizer of ridge 1 (default: ``reg / ridge``, or 1 for an
    absolute ridge)."""
    scale = " x trace/n" if trace_scaled else " (absolute)"
    head = (f"the {kind} kernel plus ridge {ridge:g}{scale} (= {reg:.3g} on the diagonal) "
            f"is not positive definite ({where} at n={n:,}); ")
    if unit is None:
        unit = reg / ridge if ridge > 0 else (None if trace_scaled else 1.0)
    measured = (f"its smallest eigenvalue is {smallest:.3g}"
                if smallest is not None and smallest < 0 else "")
    larger = suggest_ridge(ridge, unit, smallest)
    if larger:
        return head + (f"{measured}, so " if measured else "") + (
            f"use a larger <<ridges>> (e.g. {larger})")
    if measured:
        return head + (f"{measured}: no accepted ridge (at most {MAX_RIDGE:g}) makes it "
                       f"positive definite, so the kernel itself is not a valid one: check it "
                       f"with `kernelcli verify RUN_DIR`")
    return head + ("no larger ridge is accepted, so the kernel itself is not a valid one: "
                   "check it with `kernelcli verify RUN_DIR`")
