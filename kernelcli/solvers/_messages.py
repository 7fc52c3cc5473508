"""The message of a kernel that its ridge does not make positive definite, shared by
the two solvers."""

from __future__ import annotations

from ._memory import MAX_RIDGE


def suggest_ridge(ridge: float) -> str:
    """A ridge 100x larger (1e-6 from zero; at most the largest accepted), written the
    way a user would type it; empty when ``ridge`` is the largest accepted already."""
    if ridge <= 0:
        return "1e-06"
    return f"{min(ridge * 100, MAX_RIDGE):g}" if ridge < MAX_RIDGE else ""


def not_pd_message(kind: str, ridge: float, trace_scaled: bool, reg: float, n: int,
                   where: str) -> str:
    scale = " x trace/n" if trace_scaled else " (absolute)"
    head = (f"the {kind} kernel plus ridge {ridge:g}{scale} (= {reg:.3g} on the diagonal) "
            f"is not positive definite ({where} at n={n:,}); ")
    larger = suggest_ridge(ridge)
    if larger:
        return head + f"use a larger <<ridges>> (e.g. {larger})"
    return head + ("no larger ridge is accepted, so the kernel itself is not a valid one: "
                   "check it with `kernelcli verify RUN_DIR`")
