"""The solver's own failures: properties of the user's kernel and ridge, not bugs."""

from __future__ import annotations

from ..errors import KernelcliError


class NotPositiveDefiniteError(KernelcliError):
    """The regularised kernel ``K + reg I`` is not positive definite (exit status 1).

    Raised instead of returning NaNs; the message names the kernel, the ridge,
    the matrix size and a larger ``ridges`` to try.
    """

    exit_code = 1


class NotConvergedError(KernelcliError):
    """Conjugate gradients did not reach the tolerance within the iteration limit (exit 1)."""

    exit_code = 1


def suggest_ridge(ridge: float) -> str:
    """A ridge 100x larger (1e-6 from zero), written the way a user would type it."""
    return f"{ridge * 100:g}" if ridge > 0 else "1e-06"


def not_pd_message(kind: str, ridge: float, trace_scaled: bool, reg: float, n: int,
                   where: str) -> str:
    scale = " x trace/n" if trace_scaled else " (absolute)"
    return (f"the {kind} kernel plus ridge {ridge:g}{scale} (= {reg:.3g} on the diagonal) "
            f"is not positive definite ({where} at n={n:,}); "
            f"use a larger <<ridges>> (e.g. {suggest_ridge(ridge)})")
