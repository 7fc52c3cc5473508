"""How much memory a solve needs, and which solver a machine can afford (no numpy needed).

A Cholesky solve holds the training kernel in float64 and its factor, two
``n x n`` float64 matrices: ``16 n^2`` bytes at the peak (the kernel read with
``load_kernel`` straight into float64; a float32 copy held by the caller comes
on top). Conjugate gradients on an ``H5KernelOperator`` hold one row block
(``block_rows x n x 8`` bytes) and a few ``n x C`` vectors per ridge (and per
fold of the cross-validation that chooses the ridge). Gradient-flow predictions
need an eigendecomposition in memory (``flow_memory_bytes``).
"""

from __future__ import annotations

from typing import Optional

from ..errors import BudgetError, UsageError
from .._system import available_ram_bytes
from ..plan import auto_budget
from ..spec import format_size

SOLVERS = ("auto", "cholesky", "cg")
# A sweep is a handful of values: each ridge is a solve, each (ridge, time) an (m, C)
# prediction kept per kind; 64 bounds the work before it starts.
MAX_VALUES = 64
# The ridge is relative to the mean diagonal: past 1e12 the float64 sum K + ridge I
# no longer holds K's bits, and every prediction is the zero function.
MAX_RIDGE = 1e12


def solve_memory_bytes(n: int) -> int:
    """Peak bytes of a Cholesky solve of an (n, n) kernel: float64 kernel + factor."""
    return 2 * 8 * n * n


def flow_memory_bytes(n: int, m: int, classes: int = 1, ridges: int = 1,
                      times: int = 1) -> int:
    """Peak bytes of the gradient-flow predictions (``--time``) for (n, n) training and
    (m, n) test kernels: the float64 kernel, its eigenvectors and LAPACK's ``2 n^2``
    workspace (or, for the NTK variance, the NNGP kernel and its projection), the
    two (m, n) test kernels in the eigenbasis, and the predictions kept for every
    ridge and time (an (m, C) mean and an (m,) variance each)."""
    return 8 * (4 * n * n + 2 * m * n + ridges * times * m * (classes + 1))


def choose_solver(n: int, solver: str = "auto", available_bytes: Optional[int] = None) -> str:
    """``'cholesky'`` or ``'cg'`` for an (n, n) training kernel.

    ``solver``: ``auto`` (Cholesky when it fits, else CG), ``cholesky`` or ``cg``.
    ``available_bytes`` defaults to the available RAM less kernelcli's usual
    headroom (as ``memory: auto``). Asking for Cholesky when it does not fit
    raises ``BudgetError`` naming ``solver`` cg.
    """
    if solver not in SOLVERS:
        raise UsageError.naming(f"<<solver>>: {solver!r} is not a solver; accepted: "
                                f"{', '.join(SOLVERS)}")
    if solver == "cg":
        return "cg"
    if available_bytes is None:
        available_bytes = auto_budget(available_ram_bytes())
    need = solve_memory_bytes(n)
    if need <= available_bytes:
        return "cholesky"
    if solver == "auto":
        return "cg"
    raise BudgetError.naming(
        f"<<solver>> cholesky: a {n:,} x {n:,} Cholesky solve needs {format_size(need)} "
        f"(the float64 kernel and its factor, {format_size(need // 2)} each), but "
        f"{format_size(available_bytes)} is available; use <<solver>> cg, which streams the "
        "kernel from kernels.h5 by row blocks (memory: one block)")


def check_flow_memory(n: int, m: int, available_bytes: Optional[int] = None,
                      times: str = "", classes: int = 1, ridges: int = 1) -> None:
    """``BudgetError`` naming ``times`` and ``ridges`` when ``flow_memory_bytes`` exceeds
    the available memory (default: as ``choose_solver``)."""
    if available_bytes is None:
        available_bytes = auto_budget(available_ram_bytes())
    n_times = len(times.split(",")) if times else 1
    need = flow_memory_bytes(n, m, classes, ridges, n_times)
    if need > available_bytes:
        raise BudgetError.naming(
            f"<<times>> {times}: gradient-flow predictions for {n:,} training and {m:,} "
            f"test rows at {ridges} ridge(s) and {n_times} time(s) need "
            f"{format_size(need)} in memory (an eigendecomposition of K(x1, x1) and the "
            f"predictions), but {format_size(available_bytes)} is available; give fewer "
            "<<ridges>> or <<times>> values, drop <<times>>, or predict on a machine with "
            "more memory")


def check_count(values: tuple, name: str) -> tuple:
    """``values`` when there are at most ``MAX_VALUES``; ``UsageError`` naming ``name``."""
    if len(values) > MAX_VALUES:
        raise UsageError.naming(f"<<{name}>>: {len(values):,} values given; accepted: at most "
                                f"{MAX_VALUES} (a sweep is a handful of values)")
    return values
