"""The executor: run configurations through the engine into a resumable store.

Bottom to top (each module imports only those above it in this list, or beside it):

* opening a run: ``_open`` (its store, recorded configuration, verified result);
  ``_inputs``, ``_shards``, ``_checks``, ``_writer``, ``_devices``;
* the memory budget and the planner's engine costs: ``_budget``;
* the pure per-block computation: ``_block`` (a block and a kernel function to a tile);
* backends: the ``Backend`` protocol and the choice of one (``_backend``), the local
  (``_local``) and the Ray implementation (``_ray``, ``_ray_worker``) side by side;
* the prepared run (``_job``: a ``Job`` on the backend it was given), the executor
  driver (``_executor``), the in-memory route (``_matrix``);
* the commands, one module each: ``_compute``, ``_resume`` (both end in
  ``_finish``), ``_assemble``, ``_extend`` (with ``_carry``), ``_estimate`` (with
  ``_timing``), ``_clean``, ``_verify``, ``_status``; prediction's orchestration is
  the sub-package ``regression``.

Cancellation is a :class:`Stop` given to the call (``stop=``), threaded down the way
``progress`` is; nothing here holds run state at module level.
"""

from .._stop import Stop
from ._assemble import assemble
from ._clean import clean
from ._compute import compute
from ._devices import configure_host_devices, is_out_of_memory, out_of_memory_error
from ._estimate import estimate
from ._extend import extend
from ._executor import Progress
from ._finish import RunSummary, run_summary
from ._resume import resume
from ._matrix import kernel_matrix
from ._open import load_run_config
from .regression import predict
from ._results import (CleanResult, EstimateResult, ExtendResult, FlowRow, PredictChoice,
                       PredictResult, PredictRow, RunResult, ShardProgress, StatusReport)
from ._shards import parse_shard
from ._status import status
from ._verify import VerifyReport, verify

__all__ = ["assemble", "clean", "CleanResult", "compute", "configure_host_devices", "estimate",
           "EstimateResult", "extend", "ExtendResult", "FlowRow", "is_out_of_memory",
           "kernel_matrix", "load_run_config", "out_of_memory_error", "parse_shard",
           "predict", "PredictChoice", "PredictResult", "PredictRow", "Progress", "resume",
           "RunResult", "RunSummary", "run_summary", "ShardProgress", "status", "StatusReport",
           "Stop",
           "VerifyReport", "verify"]
