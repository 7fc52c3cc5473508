"""The commands as library calls, one module each, on :mod:`kernelcli.pipeline`.

* ``_compute`` and ``_resume`` (both end in ``_finish``), ``_assemble``, ``_clean``,
  ``_verify``, ``_status``;
* ``_estimate`` (with ``_estimate_time``: ``--time``'s measured sample);
* ``_extend`` (the request checked in ``_extend_request``; the test tiles kept in
  ``_extend_carry``; the tiles of a run without them written again in
  ``_extend_restore``; the store grown by :mod:`kernelcli.store`);
* ``_predict`` (the route a run takes) with its parts ``_predict_checks``,
  ``_predict_full``, ``_predict_landmarks``, ``_predict_flow``, ``_predict_spread``,
  ``_predict_shards`` and ``_predict_file``; the solvers are :mod:`kernelcli.solvers`;
* what they return: ``_results`` and ``_predict_results`` (typed, each with the
  ``to_dict()`` that ``--json`` prints).

Cancellation is a :class:`Stop` given to the call (``stop=``), threaded down the way
``progress`` is; nothing here holds run state at module level.

The names below are loaded on first use (as ``kernelcli``'s own): a library call of
``kernelcli.kernel_fn`` needs :func:`kernel_matrix` alone, and importing every command
(the store, h5py, prediction) would cost a first call on 8 images 0.14 s.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

# name -> the module that defines it
_LAZY = {
    "Stop": ".._stop",
    "assemble": "._assemble", "clean": "._clean", "compute": "._compute",
    "estimate": "._estimate", "extend": "._extend",
    "RunSummary": "._finish", "run_summary": "._finish",
    "resume": "._resume", "status": "._status",
    "predict": "._predict", "serve_shard": "._predict_shards",
    "CV_FOLDS": "._predict_common", "DEFAULT_RIDGES": "._predict_common",
    "VerifyReport": "._verify", "verify": "._verify",
    # the pipeline's names the CLI needs (it imports this package alone)
    **{name: "..pipeline" for name in (
        "Progress", "check_output", "configure_host_devices", "is_out_of_memory",
        "kernel_matrix", "load_run_config", "out_of_memory_error", "parse_shard")},
    **{name: "._results" for name in (
        "CleanResult", "EstimateResult", "ExtendResult", "RunResult", "ShardProgress",
        "StatusReport")},
    **{name: "._predict_results" for name in (
        "FlowRow", "PredictChoice", "PredictResult", "PredictRow")},
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

if TYPE_CHECKING:  # the names as type checkers see them (_LAZY's, loaded on first use)
    from .._stop import Stop as Stop
    from ..pipeline import Progress as Progress
    from ..pipeline import check_output as check_output
    from ..pipeline import configure_host_devices as configure_host_devices
    from ..pipeline import is_out_of_memory as is_out_of_memory
    from ..pipeline import kernel_matrix as kernel_matrix
    from ..pipeline import load_run_config as load_run_config
    from ..pipeline import out_of_memory_error as out_of_memory_error
    from ..pipeline import parse_shard as parse_shard
    from ._assemble import assemble as assemble
    from ._clean import clean as clean
    from ._compute import compute as compute
    from ._estimate import estimate as estimate
    from ._extend import extend as extend
    from ._finish import RunSummary as RunSummary
    from ._finish import run_summary as run_summary
    from ._predict import predict as predict
    from ._predict_common import CV_FOLDS as CV_FOLDS
    from ._predict_common import DEFAULT_RIDGES as DEFAULT_RIDGES
    from ._predict_results import FlowRow as FlowRow
    from ._predict_results import PredictChoice as PredictChoice
    from ._predict_results import PredictResult as PredictResult
    from ._predict_results import PredictRow as PredictRow
    from ._predict_shards import serve_shard as serve_shard
    from ._results import CleanResult as CleanResult
    from ._results import EstimateResult as EstimateResult
    from ._results import ExtendResult as ExtendResult
    from ._results import RunResult as RunResult
    from ._results import ShardProgress as ShardProgress
    from ._results import StatusReport as StatusReport
    from ._resume import resume as resume
    from ._status import status as status
    from ._verify import VerifyReport as VerifyReport
    from ._verify import verify as verify
