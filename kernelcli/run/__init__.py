"""The executor: run configurations through the engine into a resumable store."""

from ._api import assemble, compute, load_run_config, resume, status
from ._estimate import estimate
from ._devices import configure_host_devices
from ._executor import Progress
from ._predict import predict
from ._verify import VerifyReport, verify

__all__ = ["assemble", "compute", "estimate", "load_run_config", "predict", "resume", "status",
           "configure_host_devices", "Progress", "VerifyReport", "verify"]
