"""How much memory a solve needs, and which solver a machine can afford (no numpy needed).

A Cholesky solve holds the training kernel in float64 and its factor, made in place
by LAPACK: two ``n x n`` float64 matrices, ``16 n^2`` bytes at the peak (the kernel
read with ``load_kernel`` straight into float64; a float32 copy held by the caller
comes on top).
``predict``'s Cholesky route holds more beside them (:func:`cholesky_memory_bytes`):
the targets and coefficients, a block of the test kernel streamed from
``kernels.h5``, and the results kept for every kind and ridge. Conjugate gradients on
an ``H5KernelOperator`` hold its two lanes' row blocks (``2 x block_rows x n x 8``
bytes, 128 MiB by default), the float32 ``n x rank`` preconditioner factor and about
seven to eight ``n x C`` float64 vectors per ridge and fold of the cross-validation that chooses
the ridge (three live throughout, the rest within an iteration; measured by stage at N
20,000: bench/history/). Gradient-flow predictions need an eigendecomposition in memory
(``flow_memory_bytes``).
"""

from __future__ import annotations

from typing import Optional

from .._system import available_ram_bytes
from ..config import format_size
from ..errors import BudgetError, UsageError
from ..plan import auto_budget
from ._precondition import DEFAULT_RANK, LANDMARK_BLOCK

# A sweep is a handful of values: each ridge is a solve, each (ridge, time) an (m, C)
# prediction kept per kind; 64 bounds the work before it starts.
MAX_VALUES = 64
# The ridge is relative to the mean diagonal: past 1e12 the float64 sum K + ridge I
# no longer holds K's bits, and every prediction is the zero function.
MAX_RIDGE = 1e12


# the most of a kernel streamed at once: Cholesky's test-kernel block; H5KernelOperator's
# two lanes hold half of it
STREAM_BLOCK_BYTES = 256 * 2**20
VARIANCE_ROWS = 1024  # test rows per block of predict's posterior variance
# what a predict holds beside its arrays: the HDF5 files' handles, the labels, the
# results' objects (0.2-0.5 MB traced at N = 600; a bound, not grown with N)
OBJECT_BYTES = 2**20


def solve_memory_bytes(n: int) -> int:
    """Peak bytes of a Cholesky factorisation of an (n, n) kernel: the float64 kernel
    and its copy that LAPACK factors in place."""
    return 2 * 8 * n * n


def cholesky_memory_bytes(n: int, m: int = 0, classes: int = 1, ridges: int = 1,
                          kinds: int = 1) -> int:
    """Peak bytes of ``predict``'s Cholesky route for (n, n) training and (m, n) test
    kernels, ``classes`` targets, ``ridges`` ridges and ``kinds`` kinds (solved one after
    the other): the factorisation (:func:`solve_memory_bytes`); the targets, the
    triangular solves' right-hand sides, the coefficients and held-out predictions of
    the ridge being solved (``4 n C``; the leave-one-out diagonal is made in the
    factor's memory, its last use); the larger
    of a block of K(test, x1) streamed for the means (read and converted) and one for the
    variance (read, converted, solved); and :func:`results_bytes`."""
    rows = min(m, VARIANCE_ROWS)
    stream = max(2 * min(8 * m * n, STREAM_BLOCK_BYTES), 3 * 8 * rows * n)
    return (solve_memory_bytes(n) + 8 * 4 * n * classes
            + stream + results_bytes(n, m, classes, ridges, kinds))


def results_bytes(n: int, m: int, classes: int, ridges: int, kinds: int) -> int:
    """What every route of ``predict`` keeps and works on beside its solve, for ``n``
    training and ``m`` test rows: the means, variances and held-out predictions of
    every kind and ridge, the test targets (and a copy), one kind's means stacked for
    ``predictions.h5``, the scores' two ``(n, C)`` temporaries, one kind's
    coefficients of every ridge, kept and stacked for one pass over ``K(test, x1)``,
    and ``OBJECT_BYTES`` of the rest (open files, labels, Python's objects)."""
    return 8 * (kinds * ridges * (m * classes + m + n * classes)
                + (ridges + 2) * m * classes + 2 * max(n, m) * classes
                + 2 * n * classes * ridges) + OBJECT_BYTES


def eigen_memory_bytes(n: int, m: int = 0, classes: int = 1, ridges: int = 1,
                       kinds: int = 1) -> int:
    """Peak bytes of ``predict``'s eigen route (one ``eigh`` per kind serving every
    ridge, :mod:`._eigen_sweep`): the float64 kernel, LAPACK's copy that becomes the
    eigenvectors and its ``2 n^2`` workspace; after it, blocks of squared rows of the
    eigenvectors and of ``K(test, x1) V`` (1,024 rows each), the coefficients and
    held-out predictions of every ridge (``2 n C R``), a streamed block of the test
    kernel, and :func:`results_bytes`."""
    rows = min(max(n, m), VARIANCE_ROWS)
    stream = max(2 * min(8 * m * n, STREAM_BLOCK_BYTES), 3 * 8 * rows * n)
    return (8 * 4 * n * n + 8 * 2 * n * classes * ridges + stream
            + results_bytes(n, m, classes, ridges, kinds))


def flow_memory_bytes(n: int, m: int, classes: int = 1, ridges: int = 1,
                      times: int = 1) -> int:
    """Peak bytes of the gradient-flow predictions (``--time``) for (n, n) training and
    (m, n) test kernels: the float64 kernel, its eigenvectors and LAPACK's ``2 n^2``
    workspace (or, for the NTK variance, the NNGP kernel and its projection), the
    two (m, n) test kernels in the eigenbasis, and the predictions kept for every
    ridge and time (an (m, C) mean and an (m,) variance each)."""
    return 8 * (4 * n * n + 2 * m * n + ridges * times * m * (classes + 1))


def cg_memory_bytes(n: int, m: int = 0, classes: int = 1, ridges: int = 1, kinds: int = 1,
                    folds: int = 5, rank: int = DEFAULT_RANK) -> int:
    """Peak bytes of ``predict``'s CG route for (n, n) training and (m, n) test kernels:
    the operator's two lanes of row blocks; each system's preconditioner basis (up to
    ``rank x rank`` float64, the folds and the whole set) and ``eigh``'s work; then the
    larger of building the factor (float64 ``n x rank``, its float32 copy and a step's
    landmark columns) and iterating (the float32 factor and eight ``n x C`` float64
    vectors per ridge and system); and :func:`results_bytes`."""
    r = min(rank, n)
    build = 12 * n * r + 16 * n * LANDMARK_BLOCK
    iterate = 4 * n * r + 8 * 8 * n * classes * ridges * (folds + 1)
    return (min(STREAM_BLOCK_BYTES, 16 * n * n) + 8 * (folds + 4) * r * r
            + max(build, iterate) + results_bytes(n, m, classes, ridges, kinds))


# The largest share of the available memory a held float32 kernel may take (the page
# cache keeps its own copy of the file: holding trades memory for the pass's copies)
HOLD_SHARE = 0.25


def hold_fits(n: int, m: int, classes: int, ridges: int, kinds: int, folds: int,
              available_bytes: Optional[int] = None) -> bool:
    """Whether CG holds the (n, n) kernel in memory as float32 (``4 n^2`` bytes) beside
    its streamed need (:func:`cg_memory_bytes`): only where that is a small share of
    ``available_bytes`` (default: the available RAM less kernelcli's usual headroom).
    At N = 20,000 that is 1.6 GB; at 50,000, 10 GB, streamed on most machines."""
    if available_bytes is None:
        available_bytes = auto_budget(available_ram_bytes())
    held = 4 * n * n
    need = cg_memory_bytes(n, m, classes, ridges, kinds, folds)
    return held <= HOLD_SHARE * available_bytes and need + held <= available_bytes


def cg_product_cap(n: int) -> int:
    """Conjugate gradients' default cap on products with K for ``n`` training rows."""
    return 2 * n + 10


# Work is counted in multiply-adds (two flops each) of the dense linear algebra, the
# leading terms of what each route runs; elementwise work, the small eigenproblems of the
# preconditioner's blocks and the diagonal blocks of the substitutions are left out.

def cholesky_operations(n: int, m: int = 0, classes: int = 1, ridges: int = 1,
                        kinds: int = 1, variance_kinds: int = 0) -> int:
    """Multiply-adds of ``predict``'s Cholesky route, per kind and ridge: the
    factorisation (``n^3 / 6``), the leave-one-out diagonal of the inverse (``n^3 / 6``,
    :func:`~._selection.inverse_diagonal`), the two triangular solves (``n^2 C``) and
    the means (``m n C``); for each of ``variance_kinds`` kinds (the NNGP with
    ``kernel.test_diagonal``) also the posterior variance's solve (``n^2 m / 2``)."""
    per_ridge = n ** 3 // 3 + n * n * classes + m * n * classes
    return ridges * (kinds * per_ridge + variance_kinds * (n * n * m // 2))


def preconditioner_operations(n: int, rank: int = DEFAULT_RANK) -> int:
    """Multiply-adds of building CG's preconditioner: ``5 n rank^2 / 2``, the pivoted
    Cholesky and the Gram matrices of the whole set and the folds."""
    rank = min(rank, n)
    return 5 * n * rank * rank // 2


def cg_operations(n: int, m: int = 0, classes: int = 1, ridges: int = 1, kinds: int = 1,
                  folds: int = 5, rank: int = DEFAULT_RANK) -> int:
    """An upper bound on the multiply-adds of ``predict``'s CG route: per kind one run
    of ``ridges x (folds + 1) x classes`` columns, each of :func:`cg_product_cap`
    products a product with K (``n^2`` per column) and the preconditioner's
    (``2 n rank``), beside it ``5 n rank^2 / 2`` to build the preconditioner (the
    pivoted Cholesky and the Gram matrices of the whole set and the folds), and the means
    (``m n C`` per ridge). Converged columns drop out, so a solve is usually far below;
    a ridge that fails makes ``predict`` solve each ridge again alone (as much again)."""
    rank = min(rank, n)
    cols = ridges * (folds + 1) * classes
    per_kind = (cg_product_cap(n) * (n * n + 2 * n * rank) * cols
                + preconditioner_operations(n, rank) + ridges * m * n * classes)
    return kinds * per_kind


def memory_refusal(route: str, need_at, available_bytes: int, classes: int, ridges: int,
                   other: str = "") -> BudgetError:
    """The error of a solve that cannot fit, before any work: ``route`` names the solve
    (``<<solver>> cg on ...``), ``need_at(classes, ridges)`` its bytes, ``other`` a
    lever beside fewer ridges and classes (never the solver in use)."""
    levers = []
    if ridges > 1 and need_at(classes, 1) <= available_bytes:
        levers.append("give fewer <<ridges>> values")
    if other:
        levers.append(other)
    if classes > 1 and need_at(1, 1) <= available_bytes:
        levers.append("number the classes 0 .. C-1 (a label L costs L + 1 target columns)")
    levers.append("predict on a machine with more memory")
    return BudgetError.naming(
        f"{route} needs {format_size(need_at(classes, ridges))} in memory (one-hot targets "
        f"of {classes:,} columns, the largest class label + 1, for each of {ridges} "
        f"ridge(s)), but {format_size(available_bytes)} is available; "
        f"{', or '.join(levers)}")


def check_flow_memory(n: int, m: int, available_bytes: Optional[int] = None,
                      times: str = "", classes: int = 1, ridges: int = 1) -> None:
    """``BudgetError`` naming ``times`` and ``ridges`` when ``flow_memory_bytes`` exceeds
    the available memory (default: the available RAM less kernelcli's usual headroom)."""
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


def falkon_memory_bytes(m: int, classes: int, ridges: int, folds: int,
                        band_bytes: int) -> int:
    """Peak bytes of Falkon on ``m`` landmarks (:mod:`._falkon`), whatever the number of
    training rows: ``T^{-1}`` and one ``A^{-1}`` per ridge, at the setup ``K_mm``, its
    factor, ``T T^T`` and the inversion's two work matrices; the CG's columns (every
    ridge, fold and class: ``x``, ``r``, ``p``, the product and its four temporaries,
    the solution) of ``m`` rows; a band of ``K(X, Z)`` as read and in float64, and its
    product with the columns (``band rows x columns``, twice)."""
    cols = ridges * (folds + 1) * classes
    band_rows = max(1, band_bytes // (8 * m))
    return 8 * ((ridges + 5) * m * m + 9 * m * cols + 2 * band_rows * cols) + 2 * band_bytes
