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

The names below are loaded on first use (as ``kernelcli``'s own): a library call of
``kernelcli.kernel_fn`` needs :func:`kernel_matrix` alone, and importing every command
(the store, h5py, prediction) cost it 0.14 s of a first call (BENCHMARKS.md, issue 26
point 4).
"""

from .._lazy import lazy_names

# name -> the module that defines it
_LAZY = {
    "Stop": ".._stop",
    "assemble": "._assemble", "clean": "._clean", "compute": "._compute",
    "estimate": "._estimate", "extend": "._extend",
    "RunSummary": "._finish", "run_summary": "._finish",
    "resume": "._resume", "status": "._status",
    "predict": "._predict", "serve_shard": "._predict_shards",
    "CV_FOLDS": "._predict_dense", "DEFAULT_RIDGES": "._predict_dense",
    "VerifyReport": "._verify", "verify": "._verify",
    # the pipeline's names the CLI needs (it imports this package alone)
    **{name: "..pipeline" for name in (
        "Progress", "check_output", "configure_host_devices", "is_out_of_memory",
        "kernel_matrix", "load_run_config", "out_of_memory_error", "parse_shard")},
    **{name: "._results" for name in (
        "CleanResult", "EstimateResult", "ExtendResult", "FlowRow", "PredictChoice",
        "PredictResult", "PredictRow", "RunResult", "ShardProgress", "StatusReport")},
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
