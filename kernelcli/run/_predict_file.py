"""``predictions.h5``: what ``predict`` computed, written whole and then renamed.

Layout (R ridges, T times, m test rows, C classes; NaN where a ridge failed):

* root attributes ``ridges`` (R,), ``solver``, ``ridge_convention``, ``selection``
  (how the ridge was chosen) and, with ``--time``, ``times`` (T,);
* per kind a group with ``mean`` (R, m, C), ``variance`` (R, m) when computed,
  ``accuracy`` and ``mse`` (R,) on the test set when it has labels,
  ``loo_accuracy`` and ``loo_mse`` (R,) held out on the training set, the
  attribute ``selected_ridge`` (NaN when no ridge worked) and, with ``--time``,
  ``flow_mean`` (R, T, m, C) and ``flow_variance`` (R, T, m) when computed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..store import h5_written_whole

RIDGE_CONVENTION = "ridge * trace(K) / n added to the diagonal"


def _column(rows, kind: str, field: str):
    vals = [getattr(r, field) for r in rows if r.kind == kind]
    if all(v is None for v in vals):
        return None
    return np.asarray([math.nan if v is None else v for v in vals], dtype=np.float64)


def write_predictions(path: Path, solved: dict, ridges, rows, choices, solver: str,
                      selection: str, times=(), flows=None,
                      ridge_convention: str = RIDGE_CONVENTION) -> Path:
    """Write the file; ``solved``: per kind ``{ridge: {"mean", "variance"} or {"error"}}``,
    ``rows``/``choices``: ``PredictRow``/``PredictChoice``, ``flows``: per kind the
    arrays of ``flow_kind``."""
    flows = flows or {}
    with h5_written_whole(path) as f:
        f.attrs["ridges"] = np.asarray(ridges, dtype=np.float64)
        f.attrs["solver"] = solver
        f.attrs["ridge_convention"] = ridge_convention
        f.attrs["selection"] = selection
        if times:
            f.attrs["times"] = np.asarray(times, dtype=np.float64)
        for kind, per_ridge in solved.items():
            g = f.create_group(kind)
            chosen = next(c.selected_ridge for c in choices if c.kind == kind)
            g.attrs["selected_ridge"] = math.nan if chosen is None else chosen
            if kind in flows:
                g.create_dataset("flow_mean", data=flows[kind]["mean"])
                if flows[kind]["variance"] is not None:
                    g.create_dataset("flow_variance", data=flows[kind]["variance"])
            shape = next((r["mean"].shape for r in per_ridge.values() if "mean" in r),
                         None)
            if shape is None:  # every ridge failed for this kind
                continue
            mean = np.full((len(ridges),) + shape, np.nan)
            var = np.full((len(ridges), shape[0]), np.nan)
            has_var = False
            for i, ridge in enumerate(ridges):
                res = per_ridge[ridge]
                if "mean" in res:
                    mean[i] = res["mean"]
                    if res["variance"] is not None:
                        var[i], has_var = res["variance"], True
            g.create_dataset("mean", data=mean)
            if has_var:
                g.create_dataset("variance", data=var)
            for metric in ("accuracy", "mse", "loo_accuracy", "loo_mse"):
                col = _column(rows, kind, metric)
                if col is not None:
                    g.create_dataset(metric, data=col)
    return path
