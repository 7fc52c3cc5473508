"""What each route of ``predict`` on a full kernel costs on this machine, in seconds and
bytes, and the one ``--solver auto`` takes (numpy; jax only to time CG's product).

For ``n`` training and ``m`` test rows, ``C`` classes, ``R`` ridges, ``F`` folds, per kind:

* ``cholesky``: per ridge a factorisation and the leave-one-out diagonal of the
  inverse, ``n^3 / 6`` multiply-adds each, at the measured rate of BLAS's float64
  matrix product (what both are made of) times ``DENSE_SHARE``;
* ``eigen``: one ``eigh`` (``EIGEN_COST n^3`` at the product's rate) and then
  ``O(n^2 C)`` per ridge (:mod:`._eigen_sweep`);
* ``cg``: ``CG_PASSES`` passes over the stored kernel, each a float32 product with the
  sweep's columns (the folds' ``FOLD_SHARE`` of the passes: they stop early, see
  ``_cg_folds.FOLD_TOL``), at the measured rate of that product, and the preconditioner's
  float32 products beside it at the same rate; and building the preconditioner (a
  factor of ``n x rank``, an ``eigh`` of ``rank x rank`` per fold and the whole set).

The rates are timed once per process on small problems (:func:`measured_rates`, about
0.2 s); the shares and counts are this machine's measurements at N = 4,000-20,000
(bench/scale.py, BENCHMARKS.md). CG's passes depend on the kernel's spectrum: a kernel
whose spectrum decays slowly takes more, so its price is an estimate, said as such.
Memory is the ``*_memory_bytes`` of :mod:`._memory`.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .._system import available_ram_bytes
from ..config import format_size
from ..errors import BudgetError, UsageError
from ..plan import auto_budget
from ._memory import (
    cg_memory_bytes,
    cholesky_memory_bytes,
    eigen_memory_bytes,
    memory_refusal,
    preconditioner_operations,
    solve_memory_bytes,
)
from ._precondition import DEFAULT_RANK

# measured quiet at n = 6,000 and 12,000 (bench/dense_rates.py, BENCHMARKS.md): dpotrf
# at 0.45-0.68 of the product's rate, dtrtri at 0.72-0.87; eigh 21.3 s at n = 6,000,
# 4.6 n^3 at the product's rate
DENSE_SHARE = 0.6  # the factorisation's and inverse's rate, of the matrix product's
EIGEN_COST = 4.5  # eigh's multiply-adds, in n^3, at the product's rate
CG_PASSES = 80  # passes over the kernel per kind at the default tolerances (53-94 seen)
FOLD_SHARE = 0.25  # of those passes, the share the folds' columns take part in (0.24 and
# 0.31 at N = 20,000: they stop at 1e-3, and most ridges' long before)
# a float32 product with a kernel block runs at most this many times the float64
# product's rate (2.1x measured): CG's price with it bounds CG from below
STREAM_CEILING = 4.0
VECTOR_OPS = 30  # elementwise float64 operations per row and column of a CG pass
ROUTES = ("cholesky", "eigen", "cg")
SOLVERS = ("auto", *ROUTES)


@dataclass(frozen=True)
class Rates:
    """Multiply-adds per second here: ``dense`` numpy's float64 matrix product,
    ``stream`` a float32 product of a kernel block with a few hundred columns (CG's)."""

    dense: float
    stream: float


def _best(call, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return max(best, 1e-9)


@functools.lru_cache(maxsize=1)
def dense_rate() -> float:
    """numpy's float64 matrix product here, multiply-adds per second (best of three)."""
    a = np.random.default_rng(0).standard_normal((768, 768))
    return 768 ** 3 / _best(lambda: a @ a)


@functools.lru_cache(maxsize=1)
def measured_rates() -> Rates:
    """The machine's :class:`Rates`, timed once per process (best of three); the
    streamed product's through jax, as CG runs it."""
    from ._operator import aligned_empty, block_product, transposed

    rng = np.random.default_rng(0)
    dense = dense_rate()
    block = aligned_empty((1024, 4096), np.float32)
    block[...] = rng.standard_normal(block.shape)
    vt = transposed(rng.standard_normal((4096, 128)), np.float32)
    block_product(block, vt)  # compiled once, not timed
    stream = 1024 * 4096 * 128 / _best(lambda: block_product(block, vt))
    return Rates(dense=dense, stream=stream)


@dataclass(frozen=True)
class RouteCost:
    """One route's price: ``seconds`` (an estimate), peak ``bytes``, and whether it
    ``fits`` in the memory available."""

    route: str
    seconds: float
    bytes: int
    fits: bool


def route_seconds(route: str, n: int, m: int, classes: int, ridges: int, kinds: int,
                  folds: int, variance_kinds: int, rates: Rates) -> float:
    """Estimated seconds of ``route`` (see the module) for the whole sweep."""
    means = kinds * ridges * m * n * classes / rates.stream
    if route == "cholesky":
        per_ridge = (n ** 3 / 3) / (rates.dense * DENSE_SHARE) + 2 * n * n * classes / rates.dense
        variance = variance_kinds * ridges * n * n * m / 2 / rates.dense
        return kinds * ridges * per_ridge + variance + means
    if route == "eigen":
        once = EIGEN_COST * n ** 3 / rates.dense + 2 * n * n * classes / rates.dense
        per_ridge = (n * n + 2 * n * n * classes) / rates.dense
        variance = variance_kinds * n * n * m / rates.dense
        return kinds * (once + ridges * per_ridge) + variance + means
    columns = ridges * classes * (1 + folds * FOLD_SHARE)
    rank = min(n, DEFAULT_RANK)
    per_pass = (n * n * columns / rates.stream
                + 2 * n * rank * columns / rates.stream + VECTOR_OPS * n * columns / rates.dense)
    # the preconditioner: the pivoted Cholesky factor, then a basis (an eigh) per system
    build = (preconditioner_operations(n, rank)
             + (folds + 1) * EIGEN_COST * rank ** 3) / rates.dense
    return kinds * (CG_PASSES * per_pass + build) + means


def route_costs(n: int, m: int = 0, classes: int = 1, ridges: int = 1, kinds: int = 1,
                folds: int = 5, variance_kinds: int = 0, available_bytes: int = 0,
                rates: Rates | None = None) -> tuple[RouteCost, ...]:
    """Every route's :class:`RouteCost` for the sweep, in ``ROUTES`` order."""
    rates = measured_rates() if rates is None else rates
    need = {r: route_bytes(r, n, m, classes, ridges, kinds, folds) for r in ROUTES}
    return tuple(RouteCost(r, route_seconds(r, n, m, classes, ridges, kinds, folds,
                                            variance_kinds, rates),
                           need[r], need[r] <= available_bytes) for r in ROUTES)


def route_bytes(route: str, n: int, m: int, classes: int, ridges: int, kinds: int,
                folds: int) -> int:
    """Peak bytes of ``route`` (the ``*_memory_bytes`` of :mod:`._memory`)."""
    if route == "cg":
        return cg_memory_bytes(n, m, classes, ridges, kinds, folds)
    memory = cholesky_memory_bytes if route == "cholesky" else eigen_memory_bytes
    return memory(n, m, classes, ridges, kinds)


def cheapest(costs: tuple[RouteCost, ...]) -> RouteCost | None:
    """The quickest route that fits, or None when none does."""
    fitting = [c for c in costs if c.fits]
    return min(fitting, key=lambda c: c.seconds) if fitting else None


def choose_solver(n: int, solver: str = "auto", available_bytes: Optional[int] = None,
                  m: int = 0, classes: int = 1, ridges: int = 1, kinds: int = 1,
                  folds: int = 5, variance_kinds: int = 0,
                  rates: Optional[Rates] = None) -> str:
    """The route (``cholesky``, ``eigen`` or ``cg``) for an (n, n) training kernel.

    ``solver``: ``auto`` (the quickest route that fits, :func:`route_costs`) or a route.
    ``available_bytes`` defaults to the available RAM less kernelcli's usual headroom
    (as ``memory: auto``). A route is priced for ``m`` test rows, ``classes``,
    ``ridges``, ``kinds``, ``folds`` and ``variance_kinds`` (the defaults: the
    factorisation alone). ``auto`` times CG's product only where CG could be the
    quicker (priced first at ``STREAM_CEILING``: no jax for a small dense solve). A
    route that does not fit raises ``BudgetError`` naming what to change: another
    route where one fits, fewer ``ridges`` or ``kinds`` where they are what does not
    fit, fewer classes.
    """
    if solver not in SOLVERS:
        raise UsageError.naming(f"<<solver>>: {solver!r} is not a solver; accepted: "
                                f"{', '.join(SOLVERS)}")
    if available_bytes is None:
        available_bytes = auto_budget(available_ram_bytes())
    def need_of(route: str):
        return lambda c, r: route_bytes(route, n, m, c, r, kinds, folds)

    needs = {route: need_of(route) for route in ROUTES}
    fits = {route: need(classes, ridges) <= available_bytes for route, need in needs.items()}
    if solver != "auto":
        if fits[solver]:
            return solver
        raise _refusal(solver, n, m, classes, ridges, kinds, available_bytes, needs, fits)
    if not any(fits.values()):  # no route fits: the solver is no lever
        least = min(ROUTES, key=lambda r: needs[r](classes, ridges))
        raise memory_refusal(f"<<solver>> {least} on {n:,} training rows", needs[least],
                             available_bytes, classes, ridges)
    if sum(fits.values()) == 1:
        return next(r for r in ROUTES if fits[r])
    if rates is None:
        dense = dense_rate()
        bound = route_costs(n, m, classes, ridges, kinds, folds, variance_kinds,
                            available_bytes, Rates(dense, STREAM_CEILING * dense))
        best = cheapest(bound)
        if best is not None and best.route != "cg":
            return best.route  # quicker than CG at its best: CG's product is not timed
        rates = measured_rates()
    best = cheapest(route_costs(n, m, classes, ridges, kinds, folds, variance_kinds,
                                available_bytes, rates))
    assert best is not None  # a route fits
    return best.route


def _refusal(solver: str, n: int, m: int, classes: int, ridges: int, kinds: int,
             available_bytes: int, needs: dict, fits: dict) -> BudgetError:
    """The error of a route asked for that does not fit: the routes that do fit named
    as the lever where there is one."""
    other = [r for r in ROUTES if fits[r]]
    if not other:
        return memory_refusal(f"<<solver>> {solver} on {n:,} training rows", needs[solver],
                              available_bytes, classes, ridges)
    need = needs[solver](classes, ridges)
    alone = route_bytes(solver, n, m, classes, 1, 1, 1)  # one ridge of one kind
    fewer = ("" if alone > available_bytes
             else "give fewer <<ridges>> or <<kinds>> values, or ")
    use = " or ".join(f"<<solver>> {r}" for r in other)
    if solver == "cholesky":
        rest = (f"; beside them {format_size(need - solve_memory_bytes(n))}: the targets, "
                f"a streamed block of the test kernel, and the predictions of {ridges} "
                f"ridge(s) and {kinds} kind(s) for {m:,} test rows")
        what = (f"a {n:,} x {n:,} Cholesky solve needs {format_size(need)} (the float64 "
                f"kernel and its factor, {format_size(8 * n * n)} each{rest})")
    else:
        what = (f"an eigendecomposition of the {n:,} x {n:,} kernel needs "
                f"{format_size(need)} (the float64 kernel, its eigenvectors and LAPACK's "
                f"workspace of two more, {format_size(8 * n * n)} each, and the "
                f"predictions)")
    why = ""
    if "cg" in other:
        why = (", which" if other == ["cg"] else "; cg") + (
            " streams the kernel from kernels.h5 by row blocks (memory: one block)")
    return BudgetError.naming(f"<<solver>> {solver}: {what}, but "
                              f"{format_size(available_bytes)} is available; {fewer}use "
                              f"{use}{why}")
