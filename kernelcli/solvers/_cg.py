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
always on a float64 residual, so ``tol`` means the same with or without ``fast``. ``solve_cg_folds`` adds k-fold cross-validation to the
same run (CG has no factor for the closed-form leave-one-out of ``_selection``):
each fold is a masked column, so the folds cost no extra pass over K per iteration.
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
from ._precondition import DEFAULT_RANK, NystromPreconditioner
from ._selection import fold_masks


@dataclass(frozen=True, eq=False)
class CGResult:
    """``x`` (n, k) the solution; ``iterations`` products with K used; ``residual`` (k,)
    the final true relative residuals."""

    x: np.ndarray
    iterations: int
    residual: np.ndarray
    exact_products: int = 0  # of ``iterations``, the float64 ones (mixed precision)
    kx: Optional[np.ndarray] = None  # K @ (mask * x), the last (float64) product


# The folds' relative residual: a held-out prediction then moves by about this much of
# its size (7e-6 at most at N = 20,000, against the folds solved to 1e-7), below what
# changes the mean squared error's printed digits or an arg-max but for an exact tie;
# each decade costs about a tenth of the folds' passes (bench/scale.py compares the
# choices against tol for every fold).
FOLD_TOL = 1e-5
_RELIABLE = 1e-3  # a column's residual is recomputed in float64 when it fell this much
_BATCH = 1e-1  # ... and with it every column that fell this much (one pass for them all)


def _as_matvec(k) -> Callable[[np.ndarray], np.ndarray]:
    return k.matmul if hasattr(k, "matmul") else k


class _FoldTargets:
    """The (n, k) right-hand sides of the folds' systems, ``mask[:, group] * y`` tiled
    over the ridges and fold groups, made column by column where CG needs them (its
    start and its float64 residuals) instead of held beside ``x``, ``r`` and ``p``: one
    ``n x k`` float64 array fewer (0.11 GiB at n = 50,000 and 300 columns). The same
    products, so the same values as the array."""

    def __init__(self, mask: np.ndarray, group: np.ndarray, y: np.ndarray):
        self.mask, self.group, self.y = mask, group, y
        self.shape = (mask.shape[0], group.size)

    def columns(self, cols: np.ndarray) -> np.ndarray:
        return self.mask[:, self.group[cols]] * self.y[:, cols % self.y.shape[1]]


def _cg(matvec, b, ridge, tol, maxiter, on_iteration, not_pd, not_converged,
        mask=None, precond=None, fast=None, group=None) -> CGResult:
    """``mask`` (n, G) of 0/1 and ``group`` (k,): column j solves only on the rows where
    ``mask[:, group[j]]`` is 1 (``(M K M + reg I) x = M b``, the system of a training
    subset, in place), so the folds of a cross-validation share each product with K
    (``group`` None: ``mask`` is (n, k), one column each). ``precond(r, cols)``:
    ``P^{-1} r`` for those columns (preconditioned CG), or None. ``fast``: the
    iteration's product (mixed precision, see the module), or None for ``matvec``.

    ``b``: an (n, k) array, or :class:`_FoldTargets` (its columns made where they are
    needed). ``tol``: one relative residual for every column, or one per column (k,).
    Memory: ``x``, ``r`` and ``p`` (n, k) live throughout, and ``b`` when it is
    an array; an iteration adds a handful more (the direction's columns, its product,
    the new residual and direction), and its sums are formed in place where that
    rounds the same."""
    n = b.shape[0]

    def rhs(cols):
        return b.columns(cols) if isinstance(b, _FoldTargets) else b[:, cols]

    def prec(v, cols):
        return v.copy() if precond is None else precond(v, cols)

    def apply(v, cols, mv=matvec, keep=None):
        if mask is None:
            kv = mv(v)
            out = v * ridge[cols]
            out += kv  # kv + v ridge: a sum of two rounds the same either way
        else:  # one n x k buffer: the masked v, then the mask again, then the result
            which = cols if group is None else group[cols]
            out = mask[:, which]  # a copy: indexed
            out *= v
            kv = mv(out)
            np.take(mask, which, axis=1, out=out)
            out *= kv
            out += v * ridge[cols]
        if keep is not None:
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
    while True:
        active = np.flatnonzero(np.sqrt(rs) > target)
        if active.size == 0:
            kept: list = []
            true_r = rhs(every)
            true_r -= apply(x, every, keep=kept)
            products += 1
            exact += 1
            true_res = np.linalg.norm(true_r, axis=0)
            restart = np.flatnonzero(true_res > target)
            if restart.size == 0:
                return CGResult(x, products, true_res / scale, exact, kept[0])
            checked[restart] = true_res[restart] ** 2
            r[:, restart] = true_r[:, restart]
            zr = prec(true_r[:, restart], restart)
            p[:, restart] = zr
            rs[restart] = true_res[restart] ** 2
            rz[restart] = np.einsum("ij,ij->j", true_r[:, restart], zr)
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
            ra[:, sel] = rhs(cols) - apply(x[:, cols], cols)
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
        raise UsageError.naming(f"<<cg_tol>>: {tol!r} is not accepted; give a number > 0 "
                                f"(e.g. 1e-10)")
    if maxiter is None:
        return cg_product_cap(n)
    if int(maxiter) != maxiter or maxiter < 1:
        raise UsageError.naming(f"<<cg_maxiter>>: {maxiter!r} is not accepted; give an "
                                f"integer >= 1")
    return int(maxiter)


def _check_rank(rank) -> int:
    if isinstance(rank, bool) or int(rank) != rank or rank < 0:
        raise UsageError.naming(f"<<rank>>: {rank!r} is not accepted; give an integer "
                                f">= 0 (0: no preconditioner)")
    return int(rank)


def solve_cg(matvec, b, *, ridge_term=0.0, tol: float = 1e-10, maxiter: Optional[int] = None,
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
                f"> <<cg_tol>> {tol:g}; use a larger <<ridges>>, <<cg_maxiter>> or <<cg_tol>>")

    out = _cg(_as_matvec(matvec), b2.copy(), ridge, tol, maxiter, on_iteration, not_pd,
              not_converged)
    return CGResult(out.x[:, 0], out.iterations, out.residual) if vector else out


def solve_cg_ridges(k_train, targets, ridges: Iterable[float], *, trace_scaled: bool = True,
                    tol: float = 1e-10, maxiter: Optional[int] = None, kind: str = "kernel",
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
    ridges = check_ridges(ridges)
    op = k_train if hasattr(k_train, "matmul") else ArrayOperator(k_train)
    n = op.shape[0]
    if op.shape != (n, n):
        raise DataError(f"the {kind} training kernel must be square (n, n), got shape {op.shape}")
    y = _check_targets(targets, n)
    c = y.shape[1]
    trace = op.trace()
    regs = [regularizer(r, trace, n, trace_scaled) for r in ridges]
    b = np.tile(y, (1, len(ridges)))
    ridge_cols = np.repeat(np.asarray(regs, dtype=np.float64), c)
    maxiter = _check_tol(tol, maxiter, n)

    not_pd, not_converged = _failures(kind, ridges, regs, trace_scaled, tol, c)
    pre = None
    if _check_rank(rank):
        pre = NystromPreconditioner(op.matmul, n, ridge_cols, rank,
                                    columns=getattr(op, "columns", None),
                                    diagonal=_diagonal(op)).apply
    out = _cg(op.matmul, b, ridge_cols, tol, maxiter, on_iteration, not_pd, not_converged,
              precond=pre, fast=_fast(op, mixed))
    return {r: out.x[:, i * c:(i + 1) * c].copy() for i, r in enumerate(ridges)}


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
                f"> <<cg_tol>> {float(tols if tols.ndim == 0 else tols[col]):g}; use a "
                f"larger <<ridges>>, <<cg_maxiter>> or <<cg_tol>>")

    return not_pd, not_converged


def solve_cg_folds(k_train, targets, ridges: Iterable[float], folds: int = 5, *,
                   trace_scaled: bool = True, tol: float = 1e-10,
                   fold_tol: float = FOLD_TOL,
                   maxiter: Optional[int] = None, kind: str = "kernel",
                   on_iteration: Optional[Callable[[int, float], None]] = None,
                   rank: int = DEFAULT_RANK, mixed: bool = True
                   ) -> tuple[dict[float, np.ndarray], dict[float, np.ndarray]]:
    """``({ridge: alpha (n, C)}, {ridge: held-out predictions (n, C)})``: the fit of
    ``solve_cg_ridges`` and k-fold cross-validation, in one CG run.

    Row ``i`` is held out in fold ``i mod folds``; each fold is solved on the other
    rows with the whole set's regulariser (``ridge * trace(K)/n``) and predicts its
    own rows. The ``(folds + 1) x C x len(ridges)`` columns share every product
    with K; the held-out predictions come from the last (float64) one. ``rank``,
    ``mixed``: as in ``solve_cg_ridges``; each fold is preconditioned on its own rows.
    ``fold_tol``: the folds' relative residual (at least ``tol``): their solutions only
    score the ridges, so they stop where the held-out predictions are settled far
    below the scores' own resolution (see ``FOLD_TOL``), and the whole set's columns,
    which make the published coefficients, go on to ``tol``.
    """
    ridges = check_ridges(ridges)
    op = k_train if hasattr(k_train, "matmul") else ArrayOperator(k_train)
    n = op.shape[0]
    if op.shape != (n, n):
        raise DataError(f"the {kind} training kernel must be square (n, n), got shape {op.shape}")
    y = _check_targets(targets, n)
    c = y.shape[1]
    held = fold_masks(n, folds)
    keep = np.vstack([np.ones((1, n), bool), ~held]).astype(np.float64)  # (F+1, n)
    per_ridge = keep.shape[0] * c
    trace = op.trace()
    regs = [regularizer(r, trace, n, trace_scaled) for r in ridges]
    # column j of the (n, R (F+1) C) system solves on the rows of fold group[j]: the
    # (n, F+1) mask, not one column of it per CG column (n x 300 float64 at 5 ridges)
    group = np.tile(np.repeat(np.arange(keep.shape[0]), c), len(ridges))
    mask = np.ascontiguousarray(keep.T)
    b = _FoldTargets(mask, group, y)
    ridge_cols = np.repeat(np.asarray(regs, dtype=np.float64), per_ridge)
    maxiter = _check_tol(tol, maxiter, n)
    _check_tol(fold_tol, maxiter, n)
    col_tol = np.where(group == 0, tol, max(tol, fold_tol))

    not_pd, not_converged = _failures(kind, ridges, regs, trace_scaled, col_tol, per_ridge)
    pre = None
    if _check_rank(rank):
        pre = NystromPreconditioner(op.matmul, n, ridge_cols, rank, masks=keep > 0,
                                    group=group, columns=getattr(op, "columns", None),
                                    diagonal=_diagonal(op)).apply
    out = _cg(op.matmul, b, ridge_cols, col_tol, maxiter, on_iteration, not_pd, not_converged,
              mask=mask, precond=pre, fast=_fast(op, mixed), group=group)
    fold_cols = np.concatenate([np.arange(i * per_ridge + c, (i + 1) * per_ridge)
                                for i in range(len(ridges))])
    # every fold's alpha times K: the final float64 residual's product had it (the
    # folds' x are zero outside their rows)
    assert out.kx is not None  # _cg returns its last product
    fold_pred = out.kx[:, fold_cols]
    alphas, held_out = {}, {}
    for i, r in enumerate(ridges):
        alphas[r] = out.x[:, i * per_ridge:i * per_ridge + c].copy()
        pred = np.empty((n, c))
        for f in range(held.shape[0]):
            s = (i * held.shape[0] + f) * c
            pred[held[f]] = fold_pred[held[f], s:s + c]
        held_out[r] = pred
    return alphas, held_out
