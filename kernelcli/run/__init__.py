"""The executor: run configurations through the engine into a resumable store."""

from ._api import assemble, compute, load_run_config, resume, run_summary, status
from ._clean import clean
from ._devices import configure_host_devices, is_out_of_memory, out_of_memory_error
from ._estimate import estimate
from ._extend import extend
from ._executor import Progress
from ._matrix import kernel_matrix
from .regression import predict
from ._results import (CleanResult, EstimateResult, ExtendResult, FlowRow, PredictChoice,
                       PredictResult, PredictRow, RunResult, ShardProgress, StatusReport)
from ._shards import parse_shard
from ._verify import VerifyReport, verify

__all__ = ["assemble", "clean", "CleanResult", "compute", "configure_host_devices", "estimate",
           "EstimateResult", "extend", "ExtendResult", "FlowRow", "is_out_of_memory",
           "kernel_matrix", "load_run_config", "out_of_memory_error", "parse_shard",
           "predict", "PredictChoice", "PredictResult", "PredictRow", "Progress", "resume",
           "RunResult", "run_summary", "ShardProgress", "status", "StatusReport",
           "VerifyReport", "verify"]
