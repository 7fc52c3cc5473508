"""The executor: run configurations through the engine into a resumable store."""

from .._stop import Stop
from ._assemble import assemble
from ._clean import clean
from ._compute import compute, resume
from ._devices import configure_host_devices, is_out_of_memory, out_of_memory_error
from ._estimate import estimate
from ._extend import extend
from ._executor import Progress
from ._finish import RunSummary, run_summary
from ._matrix import kernel_matrix
from ._open import load_run_config
from ._predict import predict
from ._results import (CleanResult, EstimateResult, ExtendResult, FlowRow, PredictChoice,
                       PredictResult, PredictRow, RunResult, ShardProgress, StatusReport)
from ._shards import parse_shard
from ._status import status
from ._verify import VerifyReport, verify

__all__ = ["assemble", "clean", "CleanResult", "compute", "configure_host_devices", "estimate",
           "EstimateResult", "extend", "ExtendResult", "FlowRow", "is_out_of_memory",
           "kernel_matrix", "load_run_config", "out_of_memory_error", "parse_shard",
           "predict", "PredictChoice", "PredictResult", "PredictRow", "Progress", "resume",
           "RunResult", "RunSummary", "run_summary", "ShardProgress", "status", "StatusReport", "Stop",
           "VerifyReport", "verify"]
