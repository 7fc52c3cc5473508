"""``predict``: kernel regression on a finished run's ``kernels.h5``, by the run's route.

The command's parts, one module each: ``_predict_checks`` (the one pass over the
kernels before any solve), ``_predict_full`` (the full kernel: every kind and ridge
solved with :mod:`kernelcli.solvers` and the ridge chosen), ``_predict_spread`` and
``_predict_shards`` (where CG's products run: this process, worker processes, Ray
actors, a job array's shards), ``_predict_flow`` (the gradient-flow ensemble,
``--time``), ``_predict_landmarks`` (a landmark run, by Nystrom regression) and
``_predict_file`` (``predictions.h5``). The solvers themselves are
:mod:`kernelcli.solvers`.
"""

from __future__ import annotations

import functools

from ._predict_full import predict as full_predict
from ._predict_landmarks import is_landmark_run, predict_landmarks
from ._predict_results import PredictResult
from ._predict_spread import without_spread


@functools.wraps(full_predict)
def predict(run_dir, *args, **kwargs) -> PredictResult:
    """The full kernel's solve, or on a landmark run (``data.landmarks``) Nystrom
    regression (:func:`predict_landmarks`): the route follows the run."""
    if is_landmark_run(run_dir):
        return predict_landmarks(run_dir, *args, **without_spread(run_dir, kwargs))
    return full_predict(run_dir, *args, **kwargs)
