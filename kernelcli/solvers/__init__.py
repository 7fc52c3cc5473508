"""From kernels to predictions: kernel ridge regression on stored kernels.

numpy (stored kernels are read through :class:`kernelcli.store.ResultFile`), and
jax only for CG's block products (``_operator.block_product``: XLA's dot, not
numpy's OpenBLAS, on this path); no click. The regulariser is ``ridge * trace(K)/n``
(``trace_scaled=True``, the reference codes' convention) or ``ridge``; all
solves are float64. ``solve_cholesky`` (one factorisation per ridge) or
``eigen_sweep`` (one eigendecomposition for every ridge) for kernels that fit in
memory, ``solve_cg_ridges`` on an ``H5KernelOperator`` for those that do not;
``choose_solver`` takes the quickest that fits (``route_costs``: this machine's rates). The ridge is chosen on the
training set alone (``_selection``: closed-form leave-one-out from the Cholesky
factor, k-fold cross-validation with CG), and ``_gradient_flow`` gives the finite-time
gradient-flow predictions of neural-tangents' ``gradient_descent_mse_ensemble``.
"""

# CG's products over row bands, for run/_predict_spread's executors
from ..errors import NotConvergedError as NotConvergedError
from ..errors import NotPositiveDefiniteError as NotPositiveDefiniteError
from ._bands import DEFAULT_BAND_CACHE_BYTES as DEFAULT_BAND_CACHE_BYTES
from ._bands import BandOperator as BandOperator
from ._bands import BandWorker as BandWorker
from ._bands import band_bounds as band_bounds
from ._bands import serve_band as serve_band
from ._cg import CGResult as CGResult
from ._cg import solve_cg as solve_cg
from ._cg import solve_cg_ridges as solve_cg_ridges
from ._cg_folds import solve_cg_folds as solve_cg_folds
from ._cholesky import check_kernel_rows as check_kernel_rows
from ._cholesky import check_ridges as check_ridges
from ._cholesky import cholesky_factor as cholesky_factor
from ._cholesky import predict as predict
from ._cholesky import predictive_variance as predictive_variance
from ._cholesky import regularizer as regularizer
from ._cholesky import solve_cholesky as solve_cholesky
from ._cholesky import solve_with_factor as solve_with_factor
from ._eigen_sweep import eigen_sweep as eigen_sweep
from ._eigen_sweep import eigen_variances as eigen_variances
from ._falkon import FalkonSolution as FalkonSolution
from ._falkon import choose_landmark_solver as choose_landmark_solver
from ._falkon import falkon_weights as falkon_weights
from ._falkon import landmark_memory_bytes as landmark_memory_bytes
from ._falkon import landmark_operations as landmark_operations
from ._gradient_flow import Eigen as Eigen
from ._gradient_flow import FlowBasis as FlowBasis
from ._gradient_flow import NTKCovariance as NTKCovariance
from ._gradient_flow import check_times as check_times
from ._gradient_flow import eigen as eigen
from ._gradient_flow import flow_basis as flow_basis
from ._gradient_flow import flow_mean as flow_mean
from ._gradient_flow import flow_weights as flow_weights
from ._gradient_flow import gradient_flow as gradient_flow
from ._gradient_flow import nngp_flow_covariance as nngp_flow_covariance
from ._gradient_flow import nngp_flow_variance as nngp_flow_variance
from ._gradient_flow import ntk_covariance as ntk_covariance
from ._gradient_flow import ntk_flow_covariance as ntk_flow_covariance
from ._gradient_flow import ntk_flow_variance as ntk_flow_variance
from ._memory import VARIANCE_ROWS as VARIANCE_ROWS
from ._memory import cg_memory_bytes as cg_memory_bytes
from ._memory import cg_operations as cg_operations
from ._memory import check_flow_memory as check_flow_memory
from ._memory import cholesky_memory_bytes as cholesky_memory_bytes
from ._memory import cholesky_operations as cholesky_operations
from ._memory import eigen_memory_bytes as eigen_memory_bytes
from ._memory import falkon_memory_bytes as falkon_memory_bytes
from ._memory import flow_memory_bytes as flow_memory_bytes
from ._memory import hold_fits as hold_fits
from ._memory import solve_memory_bytes as solve_memory_bytes
from ._nystrom import NystromMap as NystromMap
from ._nystrom import fold_sums as fold_sums
from ._nystrom import nystrom_map as nystrom_map
from ._nystrom import nystrom_memory_bytes as nystrom_memory_bytes
from ._nystrom import nystrom_weights as nystrom_weights
from ._operator import ArrayOperator as ArrayOperator
from ._operator import H5KernelOperator as H5KernelOperator
from ._operator import load_kernel as load_kernel
from ._route_costs import SOLVERS as SOLVERS
from ._route_costs import Rates as Rates
from ._route_costs import RouteCost as RouteCost
from ._route_costs import choose_solver as choose_solver
from ._route_costs import measured_rates as measured_rates
from ._route_costs import route_costs as route_costs
from ._selection import choose_ridge as choose_ridge
from ._selection import fold_masks as fold_masks
from ._selection import held_out_scores as held_out_scores
from ._selection import inverse_diagonal as inverse_diagonal
from ._selection import loo_predictions as loo_predictions
from ._targets import accuracy as accuracy
from ._targets import class_count as class_count
from ._targets import evaluate as evaluate
from ._targets import mse as mse
from ._targets import one_hot as one_hot

__all__ = [
    "ArrayOperator", "CGResult", "Eigen", "FalkonSolution", "FlowBasis", "H5KernelOperator",
    "NTKCovariance",
    "NotConvergedError", "NotPositiveDefiniteError", "NystromMap", "SOLVERS", "VARIANCE_ROWS",
    "accuracy", "cg_memory_bytes", "check_flow_memory", "check_kernel_rows", "class_count",
    "check_ridges", "check_times", "choose_ridge",
    "choose_solver", "cholesky_factor", "cholesky_memory_bytes", "eigen", "evaluate",
    "choose_landmark_solver", "falkon_memory_bytes", "falkon_weights", "hold_fits",
    "landmark_memory_bytes",
    "fold_sums", "flow_basis", "flow_mean", "flow_memory_bytes", "flow_weights", "fold_masks",
    "nystrom_map", "nystrom_memory_bytes", "nystrom_weights",
    "gradient_flow", "held_out_scores", "inverse_diagonal", "load_kernel", "loo_predictions",
    "mse", "nngp_flow_variance", "ntk_covariance", "ntk_flow_variance", "one_hot", "predict",
    "predictive_variance", "regularizer", "solve_cg", "solve_cg_folds", "solve_cg_ridges",
    "solve_cholesky", "solve_memory_bytes", "solve_with_factor",
    "cg_operations", "cholesky_operations", "landmark_operations",
    "eigen_memory_bytes", "eigen_sweep", "eigen_variances", "Rates", "RouteCost",
    "measured_rates", "route_costs",
]
