"""Conjugate gradients for ``(K + reg I) X = B`` with only products ``K @ V`` (numpy only).

Each column of ``B`` is its own CG run (its own step sizes), but all
unconverged columns share one product with ``K`` per iteration, so with an
``H5KernelOperator`` one pass over the stored kernel serves every class and,
in ``solve_cg_ridges``, every ridge at once. Converged columns stop moving.

Convergence: the relative residual ``||b - (K + reg I) x|| / ||b||`` of every
column is at most ``tol``. When the recurrence claims it, the true residual is
computed with one more product and a column that is not really there restarts
from it; that product counts towards ``maxiter`` (products with ``K``).
Failures raise (``NotPositiveDefiniteError``, ``NotConvergedError``), never
return a half-solved ``x``.

Mixed precision (``fast``, e.g. ``H5KernelOperator.matmul32``): the products inside
the iteration are float32 (the stored float32 kernel, the direction rounded), the
vectors and steps float64. Their error (about 1e-7 of ``|K| |p|``) makes the
recurrence residual drift from the true one, so a column's residual is recomputed
with the float64 product (``matvec``) whenever it has fallen by ``_RELIABLE`` since
it was last computed, keeping the search direction ("reliable updates", Sleijpen &
van der Vorst 1996; mixed-precision CG, Clark et al. 2010); the stopping test is
always on a float64 residual, so ``tol`` means the same with or without ``fast``.
``_cg_folds`` adds k-fold cross-validation to the same run, each fold a masked column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from ..errors import DataError, NotConvergedError, NotPositiveDefiniteError, UsageError
from ._cholesky import _check_targets, check_ridges, regularizer
from ._memory import cg_product_cap
from ._messages import not_pd_message
from ._operator import ArrayOperator
from ._precondition import DEFAULT_RANK, NystromPreconditioner, _row_chunks


@dataclass(frozen=True, eq=False)
class CGResult:
    """``x`` (n, k) the solution; ``iterations`` products with K used; ``residual`` (k,)
    the final true relative residuals."""

    x: np.ndarray
    iterations: int
    residual: np.ndarray
    exact_products: int = 0  # of ``iterations``, the float64 ones (mixed precision)
    kx: Optional[np.ndarray] = None  # K @ (mask * x), the last (float64) product


# The whole set's relative residual: a test mean then differs from the factorisation's
# by less than it, as a share of the largest mean (3e-8 to 8e-8 at N = 4,000 for
# the ridges of the default sweep; 5e-9 at 1e-8, 6e-11 at 1e-10): 12-fold inside the
# 1e-6 that predictions promise, where each decade more costs about a tenth of a large
# solve's passes (bench/scale.py compares the routes' predictions).
TOL = 1e-7
_RELIABLE = 1e-3  # a column's residual is recomputed in float64 when it fell this much
_BATCH = 1e-1  # ... and with it every column that fell this much (one pass for them all)


def _by_rows(op, out: np.ndarray, v: np.ndarray, of=None, scale=None) -> None:
    """``out = op(out, v[:, of] * scale)`` in place (``of`` None: all of ``v``; ``scale``
    None: 1, else one per column), by the preconditioner's chunks of rows: the same
    values as the whole expression, without its ``n x k`` temporaries (0.12 GB each at
    n = 50,000 and 300 columns)."""
    for chunk in _row_chunks(out.shape[0]):
        rows = v[chunk] if of is None else v[chunk][:, of]
        if scale is not None:
            rows = rows * scale
        op(out[chunk], rows, out=out[chunk])


def _as_matvec(k) -> Callable[[np.ndarray], np.ndarray]:
    return k.matmul if hasattr(k, "matmul") else k


def _cg(matvec, b, ridge, tol, maxiter, on_iteration, not_pd, not_converged,
        mask=None, precond=None, fast=None, group=None) -> CGResult:
    """``mask`` (n, G) of 0/1 and ``group`` (k,): column j solves only on the rows where
    ``mask[:, group[j]]`` is 1 (``(M K M + reg I) x = M b``, the system of a training
    subset, in place), so the folds of a cross-validation share each product with K
    (``group`` None: ``mask`` is (n, k), one column each). ``precond(r, cols)``:
    ``P^{-1} r`` for those columns (preconditioned CG), or None. ``fast``: the
    iteration's product (mixed precision, see the module), or None for ``matvec``.

    ``b``: an (n, k) array, or an object with ``shape`` and ``columns(cols)`` whose
    columns are made where they are needed (the folds' targets, ``_cg_folds``).
    ``tol``: one relative residual for every column, or one per column (k,).
    Memory: ``x``, ``r`` and ``p`` (n, k) live throughout, and ``b`` when it is
    an array; an iteration adds a handful more (the direction's columns, its product,
    the new residual and direction), and its sums are formed in place where that
    rounds the same."""
    n = b.shape[0]

    def rhs(cols):
        return b[:, cols] if isinstance(b, np.ndarray) else b.columns(cols)

    def prec(v, cols):
        return v.copy() if precond is None else precond(v, cols)

    def apply(v, cols, mv=matvec, keep=None, of=None):
        """``(M K M + reg) v`` for the columns ``cols``; ``of``: ``v`` is the whole
        (n, k) array and its columns ``of`` are meant (read by rows, not copied)."""
        if mask is None:
            if of is not None:
                v, of = v[:, of], None
            kv = mv(v)  # the caller's array, perhaps: summed into a new one
            out = np.array(kv, dtype=np.float64)
        else:  # one n x k buffer: the masked v, then the mask again, then the result
            which = cols if group is None else group[cols]
            out = mask[:, which]  # a copy: indexed
            _by_rows(np.multiply, out, v, of)
            kv = mv(out)
            np.take(mask, which, axis=1, out=out)
            out *= kv
        _by_rows(np.add, out, v, of, ridge[cols])  # K v + v ridge: the sum rounds the same
        if keep is not None:                      # either way, with no n x k temporary
            keep.append(kv)
        return out

    every = np.arange(b.shape[1])
    r = rhs(every)  # a copy
    bnorm = np.linalg.norm(r, axis=0)
    target = np.broadcast_to(np.asarray(tol, dtype=np.float64), bnorm.shape) * bnorm
    scale = np.where(bnorm > 0, bnorm, 1.0)  # a zero column is solved by x = 0 at once
    x = np.zeros(b.shape)
    p = prec(r, every)  # z = P^{-1} r, the first direction
    rs = np.einsum("ij,ij->j", r, r)  # ||r||^2: convergence
    rz = np.einsum("ij,ij->j", r, p)  # r^T P^{-1} r: the step sizes
    products = exact = 0
    checked = rs.copy()  # ||r||^2 when each column's r was last computed in float64
    # the final check: every column's float64 residual once, then only the columns it
    # restarted (the others' x, so their residual and product, have not moved since)
    unchecked = every
    true_res = np.zeros(b.shape[1])
    kx: Optional[np.ndarray] = None
    while True:
        active = np.flatnonzero(np.sqrt(rs) > target)
        if active.size == 0:
            # r and p are not read again but for the columns the check sends back, which
            # start over from their float64 residual: dropped during the check's product
            del r, p
            kept: list = []
            true_r = apply(x, unchecked, keep=kept,
                           of=None if unchecked.size == x.shape[1] else unchecked)
            true_r = np.subtract(rhs(unchecked), true_r, out=true_r)
            products += 1
            exact += 1
            if kx is None:
                kx = kept[0]
            else:
                kx[:, unchecked] = kept[0]
            true_res[unchecked] = np.linalg.norm(true_r, axis=0)
            bad = true_res[unchecked] > target[unchecked]
            if not bad.any():
                return CGResult(x, products, true_res / scale, exact, kx)
            restart, true_r = unchecked[bad], true_r[:, bad]
            unchecked = restart
            checked[restart] = true_res[restart] ** 2
            r, p = np.zeros(b.shape), np.zeros(b.shape)
            r[:, restart] = true_r
            zr = prec(true_r, restart)
            p[:, restart] = zr
            rs[restart] = true_res[restart] ** 2
            rz[restart] = np.einsum("ij,ij->j", true_r, zr)
            continue
        if products >= maxiter:
            rel = np.sqrt(rs) / scale
            worst = int(active[np.argmax(rel[active])])
            raise NotConvergedError.naming(not_converged(worst, products, float(rel[worst])))
        whole = active.size == b.shape[1]  # every column: p and r themselves, no copies
        pa = p if whole else p[:, active]
        ap = apply(pa, active, matvec if fast is None else fast)
        products += 1
        pap = np.einsum("ij,ij->j", pa, ap)
        if fast is not None and not (pap > 0).all():  # float32 rounding is no proof
            ap = apply(pa, active)
            products += 1
            exact += 1
            pap = np.einsum("ij,ij->j", pa, ap)
        if (pap <= 0).any() or not np.isfinite(pap).all():
            raise NotPositiveDefiniteError.naming(not_pd(int(active[np.argmin(pap)]), n))
        step = rz[active] / pap
        if whole:
            x += step * pa
        else:
            x[:, active] += step * pa
        ap *= step
        ra = np.subtract(r if whole else r[:, active], ap, out=ap)  # r - step A p
        del ap, pa  # p's columns are taken again below: not held through the next product
        rsa = np.einsum("ij,ij->j", ra, ra)
        if fast is not None and (rsa < _RELIABLE ** 2 * checked[active]).any():
            # before the next direction is made from it: p then follows the true residual
            sel = np.flatnonzero(rsa < _BATCH ** 2 * checked[active])
            cols = active[sel]
            fresh = apply(x, cols, of=cols)
            ra[:, sel] = np.subtract(rhs(cols), fresh, out=fresh)
            del fresh
            products += 1
            exact += 1
            rsa[sel] = checked[cols] = np.einsum("ij,ij->j", ra[:, sel], ra[:, sel])
        if whole:
            r = ra
        else:
            r[:, active] = ra
        za = prec(ra, active)
        rz_new = np.einsum("ij,ij->j", ra, za)
        del ra
        beta = rz_new / rz[active]
        if whole:  # p = z + beta p, in place
            np.multiply(p, beta, out=p)
            p += za
        else:
            za += beta * p[:, active]
            p[:, active] = za
        del za
        rs[active] = rsa
        rz[active] = rz_new
        if on_iteration is not None:  # the columns this step moved: converged ones wait
            on_iteration(products, float(np.max(np.sqrt(rs[active]) / scale[active])))


def _check_tol(tol: float, maxiter: Optional[int], n: int) -> int:
    if not (np.isfinite(tol) and tol > 0):
        raise UsageError.naming(f"<<tol>>: {tol!r} is not accepted; give a number > 0 "
                                f"(e.g. {TOL:g})")
    if maxiter is None:
        return cg_product_cap(n)
    if int(maxiter) != maxiter or maxiter < 1:
        raise UsageError.naming(f"<<maxiter>>: {maxiter!r} is not accepted; give an "
                                f"integer >= 1")
    return int(maxiter)


def _check_rank(rank) -> int:
    if isinstance(rank, bool) or int(rank) != rank or rank < 0:
        raise UsageError.naming(f"<<rank>>: {rank!r} is not accepted; give an integer "
                                f">= 0 (0: no preconditioner)")
    return int(rank)


def solve_cg(matvec, b, *, ridge_term=0.0, tol: float = TOL, maxiter: Optional[int] = None,
             kind: str = "kernel",
             on_iteration: Optional[Callable[[int, float], None]] = None) -> CGResult:
    """Solve ``(K + diag(ridge_term)) X = b`` by conjugate gradients.

    ``matvec``: ``V (n, k) -> K @ V (n, k)``, or any object with ``matmul``
    (``H5KernelOperator``, ``ArrayOperator``). ``b`` (n, k) or (n,).
    ``ridge_term``: the absolute value added to the diagonal, a float or one per
    column (k,). ``maxiter``: products with K (default ``2 n + 10``).
    ``on_iteration(products, worst_relative_residual)`` is called after each step (the
    worst of the columns it moved: converged columns wait).
    """
    b = np.asarray(b, dtype=np.float64)
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    if b2.ndim != 2 or b2.shape[0] == 0:
        raise DataError(f"solve_cg: b must be (n,) or (n, k), got shape {b.shape}")
    ridge = np.broadcast_to(np.asarray(ridge_term, dtype=np.float64), (b2.shape[1],))
    maxiter = _check_tol(tol, maxiter, b2.shape[0])

    def not_pd(col, n):
        return not_pd_message(kind, float(ridge[col]), False, float(ridge[col]), n,
                              "conjugate gradients met p^T (K + reg I) p <= 0")

    def not_converged(col, products, res):
        return (f"conjugate gradients on the {kind} kernel (diagonal + {ridge[col]:.3g}) "
                f"stopped after {products:,} products with K at relative residual {res:.2e} "
                f"> the tolerance {tol:g}; use a larger <<ridges>>")

    out = _cg(_as_matvec(matvec), b2.copy(), ridge, tol, maxiter, on_iteration, not_pd,
              not_converged)
    return CGResult(out.x[:, 0], out.iterations, out.residual) if vector else out


def solve_cg_ridges(k_train, targets, ridges: Iterable[float], *, trace_scaled: bool = True,
                    tol: float = TOL, maxiter: Optional[int] = None, kind: str = "kernel",
                    on_iteration: Optional[Callable[[int, float], None]] = None,
                    rank: int = DEFAULT_RANK, mixed: bool = True) -> dict[float, np.ndarray]:
    """``{ridge: alpha (n, C)}`` like ``solve_cholesky``, by conjugate gradients.

    ``k_train``: an (n, n) array or a square ``H5KernelOperator``; ``targets`` (n, C).
    The ridges are solved together (``C x len(ridges)`` columns, one product with
    K per iteration); the regulariser follows ``solve_cholesky``'s convention.
    ``rank``: landmarks of the Nystrom preconditioner (one more pass over K to build
    it); 0 for plain CG. ``mixed``: float32 products inside the iteration with float64
    residuals (the module's mixed precision), where the operator has ``matmul32``.
    """
    sweep, op, y = _system(k_train, targets, ridges, kind)
    n, c = y.shape
    regs = _regularisers(op, sweep, trace_scaled)
    b = np.tile(y, (1, len(sweep)))
    ridge_cols = np.repeat(np.asarray(regs, dtype=np.float64), c)
    maxiter = _check_tol(tol, maxiter, n)

    not_pd, not_converged = _failures(kind, sweep, regs, trace_scaled, tol, c)
    pre = None
    if _check_rank(rank):
        pre = NystromPreconditioner(op.matmul, n, ridge_cols, rank,
                                    columns=getattr(op, "columns", None),
                                    diagonal=_diagonal(op)).apply
    out = _cg(op.matmul, b, ridge_cols, tol, maxiter, on_iteration, not_pd, not_converged,
              precond=pre, fast=_fast(op, mixed))
    return {r: out.x[:, i * c:(i + 1) * c].copy() for i, r in enumerate(sweep)}


def _system(k_train, targets, ridges, kind: str) -> tuple:
    """``(ridges, operator, targets (n, C))`` of a ridge sweep on the square training
    kernel ``k_train`` (an array or an operator), each checked; nothing read yet."""
    ridges = check_ridges(ridges)
    op = k_train if hasattr(k_train, "matmul") else ArrayOperator(k_train)
    n = op.shape[0]
    if op.shape != (n, n):
        raise DataError(f"the {kind} training kernel must be square (n, n), got shape {op.shape}")
    return ridges, op, _check_targets(targets, n)


def _regularisers(op, ridges, trace_scaled: bool) -> list:
    """Each ridge's absolute regulariser (``solve_cholesky``'s convention), reading the
    kernel's diagonal: after the caller's checks of what it was given."""
    trace = op.trace()
    return [regularizer(r, trace, op.shape[0], trace_scaled) for r in ridges]


def _diagonal(op) -> Optional[np.ndarray]:
    """K's diagonal where the operator gives it (the preconditioner's pivoting)."""
    return op.diagonal() if hasattr(op, "diagonal") else None


def _fast(op, mixed: bool):
    """The iteration's float32 product of ``op`` (``matmul32``), or None: float64 only."""
    if not isinstance(mixed, bool):
        raise UsageError.naming(f"<<mixed>>: {mixed!r} is not accepted; give true or false")
    return getattr(op, "matmul32", None) if mixed else None


def _failures(kind, ridges, regs, trace_scaled, tol, per_ridge):
    """``(not_pd, not_converged)`` messages for CG columns, ``per_ridge`` columns a ridge;
    ``tol`` one tolerance, or one per column."""
    tols = np.asarray(tol, dtype=np.float64)

    def not_pd(col, n):
        i = col // per_ridge
        return not_pd_message(kind, ridges[i], trace_scaled, regs[i], n,
                              "conjugate gradients met p^T (K + reg I) p <= 0")

    def not_converged(col, products, res):
        i = col // per_ridge
        scale = " x trace/n" if trace_scaled else ""
        return (f"conjugate gradients on the {kind} kernel with ridge {ridges[i]:g}{scale} "
                f"stopped after {products:,} products with K at relative residual {res:.2e} "
                f"> the tolerance {float(tols if tols.ndim == 0 else tols[col]):g}; use a "
                f"larger <<ridges>>")

    return not_pd, not_converged
