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

from typing import TYPE_CHECKING

from .._lazy import lazy_names

# name -> the module that defines it
_LAZY = {
    "APPEND_KEYS": "._job",
    "FINGERPRINT_KEY": "._landmark_rows",
    "Job": "._job",
    "LocalBackend": "._local",
    "Progress": "._progress_value",
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
    "patch_settings": "._inputs",
    "out_of_memory_error": "._devices",
    "prepare": "._job",
    "prepare_run": "._job",
    "require_ray": "._ray",
    "route_costs": "._landmark_rows",
    "Shard": "._shards",
    "shard_blocks": "._shards",
    "shard_label": "._shards",
    "side_files": "._job",
    "stats_slices": "._block_tile",
    "stored_preprocess": "._side_files",
    "stored_labels": "._side_files",
    "side_file_problems": "._side_files",
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

if TYPE_CHECKING:  # the names as type checkers see them (_LAZY's, loaded on first use)
    from ._block_tile import STATS_ROWS as STATS_ROWS
    from ._block_tile import block_input as block_input
    from ._block_tile import block_tile as block_tile
    from ._block_tile import stats_slices as stats_slices
    from ._devices import compute_streams as compute_streams
    from ._devices import configure_host_devices as configure_host_devices
    from ._devices import is_out_of_memory as is_out_of_memory
    from ._devices import out_of_memory_error as out_of_memory_error
    from ._executor import execute as execute
    from ._inputs import input_paths as input_paths
    from ._inputs import open_inputs as open_inputs
    from ._inputs import patch_settings as patch_settings
    from ._job import APPEND_KEYS as APPEND_KEYS
    from ._job import TEST_KEYS as TEST_KEYS
    from ._job import Job as Job
    from ._job import adopts as adopts
    from ._job import check_same_data as check_same_data
    from ._job import closed_on_error as closed_on_error
    from ._job import config_fingerprint as config_fingerprint
    from ._job import extended_config as extended_config
    from ._job import prepare as prepare
    from ._job import prepare_run as prepare_run
    from ._job import side_files as side_files
    from ._landmark_rows import FINGERPRINT_KEY as FINGERPRINT_KEY
    from ._landmark_rows import route_costs as route_costs
    from ._local import LocalBackend as LocalBackend
    from ._matrix import check_output as check_output
    from ._matrix import kernel_matrix as kernel_matrix
    from ._open_run import check_present_files as check_present_files
    from ._open_run import check_recorded_config as check_recorded_config
    from ._open_run import load_run_config as load_run_config
    from ._open_run import missing_tiles_problem as missing_tiles_problem
    from ._open_run import verified_result as verified_result
    from ._open_run import with_run_dir as with_run_dir
    from ._progress_value import Progress as Progress
    from ._ray import connect_ray as connect_ray
    from ._ray import describe_ray_error as describe_ray_error
    from ._ray import require_ray as require_ray
    from ._run_lock import writes_run as writes_run
    from ._shards import Shard as Shard
    from ._shards import check_shard_count as check_shard_count
    from ._shards import parse_shard as parse_shard
    from ._shards import shard_blocks as shard_blocks
    from ._shards import shard_label as shard_label
    from ._shards import worker_loads as worker_loads
    from ._side_files import side_file_problems as side_file_problems
    from ._side_files import stored_labels as stored_labels
    from ._side_files import stored_preprocess as stored_preprocess
