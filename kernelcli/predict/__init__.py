"""From kernels to predictions: kernel ridge regression on stored kernels.

numpy and h5py only; no jax, no click. The regulariser is ``ridge * trace(K)/n``
(``trace_scaled=True``, the reference codes' convention) or ``ridge``; all
solves are float64. ``solve_cholesky`` for kernels that fit in memory,
``solve_cg_ridges`` on an ``H5KernelOperator`` for those that do not;
``choose_solver`` decides from the available RAM.
"""

from ._cg import CGResult as CGResult
from ._cg import solve_cg as solve_cg
from ._cg import solve_cg_ridges as solve_cg_ridges
from ._cholesky import check_ridges as check_ridges
from ._cholesky import cholesky_factor as cholesky_factor
from ._cholesky import predict as predict
from ._cholesky import predictive_variance as predictive_variance
from ._cholesky import regularizer as regularizer
from ._cholesky import solve_cholesky as solve_cholesky
from ._cholesky import solve_with_factor as solve_with_factor
from ._errors import NotConvergedError as NotConvergedError
from ._errors import NotPositiveDefiniteError as NotPositiveDefiniteError
from ._memory import SOLVERS as SOLVERS
from ._memory import choose_solver as choose_solver
from ._memory import solve_memory_bytes as solve_memory_bytes
from ._operator import ArrayOperator as ArrayOperator
from ._operator import H5KernelOperator as H5KernelOperator
from ._operator import load_kernel as load_kernel
from ._targets import accuracy as accuracy
from ._targets import evaluate as evaluate
from ._targets import mse as mse
from ._targets import one_hot as one_hot

__all__ = [
    "ArrayOperator", "CGResult", "H5KernelOperator", "NotConvergedError",
    "NotPositiveDefiniteError", "SOLVERS", "accuracy", "check_ridges", "choose_solver",
    "cholesky_factor", "evaluate", "load_kernel", "mse", "one_hot", "predict",
    "predictive_variance", "regularizer", "solve_cg", "solve_cg_ridges", "solve_cholesky",
    "solve_memory_bytes", "solve_with_factor",
]
