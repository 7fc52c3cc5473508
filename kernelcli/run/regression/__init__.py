"""``predict``'s orchestration: kernel regression on a finished run's ``kernels.h5``.

``_solve`` reads the run (through :mod:`kernelcli.store`), solves every kind and
ridge with :mod:`kernelcli.predict`'s solvers and chooses the ridge; ``_flow`` adds the
gradient-flow ensemble (``--time``); ``_file`` writes ``predictions.h5``;
``_landmarks`` solves a landmark run (``data.landmarks``) by Nystrom regression, and
its ``predict`` picks the route. Named so as
not to collide with :mod:`kernelcli.predict`, the solvers themselves.
"""

from ._landmarks import predict as predict
from ._jobs import serve as serve_shard
from ._solve import CV_FOLDS as CV_FOLDS
from ._solve import DEFAULT_RIDGES as DEFAULT_RIDGES

__all__ = ["CV_FOLDS", "DEFAULT_RIDGES", "predict", "serve_shard"]
