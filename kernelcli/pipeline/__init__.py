"""The pipeline every command runs on: a prepared run to published tiles.

Bottom to top (each module imports only those above it in this list, or beside it):

* opening a run: ``_open_run`` (its store, recorded configuration, verified result);
  ``_inputs`` (the input arrays), ``_shards`` (a job array's share of the blocks),
  ``_landmark_rows`` (a Nystrom run's landmark rows), ``_run_lock`` (the one-writer
  rule of every command that writes a run directory);
* what a tile must satisfy (``_tile_checks``) and its one background writer
  (``_tile_writer``); the host's devices (``_devices``); the memory budget and the
  planner's engine costs (``_budget``);
* the pure per-block computation: ``_block_tile`` (a block and a kernel function to a
  tile);
* backends: the ``Backend`` protocol and the choice of one (``_backend``), the local
  (``_local``) and the Ray implementation (``_ray``, ``_ray_pool``: its actors under
  faults, ``_ray_worker``) side by side;
* the prepared run (``_job``: a ``Job`` on the backend it was given), the driver
  (``_executor``), and whole matrices in memory (``_matrix``, the library's route).

The commands that drive it are :mod:`kernelcli.run`'s. The names below load on first
use, so a library call that needs :func:`kernel_matrix` alone imports no command.
"""

from .._lazy import lazy_names

# name -> the module that defines it
_LAZY = {
    "APPEND_KEYS": "._job",
    "FINGERPRINT_KEY": "._landmark_rows",
    "Job": "._job",
    "LocalBackend": "._local",
    "Progress": "._executor",
    "STATS_ROWS": "._block_tile",
    "TEST_KEYS": "._job",
    "adopts": "._job",
    "block_input": "._block_tile",
    "block_tile": "._block_tile",
    "check_present_files": "._open_run",
    "check_recorded_config": "._open_run",
    "check_same_data": "._job",
    "check_shard_count": "._shards",
    "closed_on_error": "._job",
    "compute_streams": "._devices",
    "config_fingerprint": "._job",
    "connect_ray": "._ray",
    "describe_ray_error": "._ray",
    "execute": "._executor",
    "extended_config": "._job",
    "input_paths": "._inputs",
    "is_out_of_memory": "._devices",
    "kernel_matrix": "._matrix",
    "load_run_config": "._open_run",
    "missing_tiles_problem": "._open_run",
    "open_inputs": "._inputs",
    "out_of_memory_error": "._devices",
    "prepare": "._job",
    "prepare_run": "._job",
    "require_ray": "._ray",
    "route_costs": "._landmark_rows",
    "shard_blocks": "._shards",
    "shard_label": "._shards",
    "side_files": "._job",
    "stats_slices": "._block_tile",
    "stored_preprocess": "._job",
    "verified_result": "._open_run",
    "with_run_dir": "._open_run",
    "worker_loads": "._shards",
    "writes_run": "._run_lock",
    "check_output": "._matrix",
    "configure_host_devices": "._devices",
    "parse_shard": "._shards",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
