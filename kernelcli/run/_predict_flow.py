"""``predict --time``: the gradient-flow ensemble of one kind on a finished run.

One eigendecomposition of the kind's ``K(x1, x1)`` serves every ridge and time
(``kernelcli.solvers._gradient_flow``), the ridge sweep too on the eigen route. The variance is the diagonal of the ensemble's test
covariance, computed where the run has what it needs: the NNGP's needs its test
diagonal (``kernel.test_diagonal``); the NTK's, whose initial functions are NNGP
draws, needs the NNGP's training kernel, ``K_nngp(test, x1)`` and its test diagonal
as well. The kernel is read again here (not shared with the ridge solves), so the
peak stays that of one eigendecomposition (``flow_memory_bytes``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np

from ..config import base_kind
from ..solvers import (
    Eigen,
    H5KernelOperator,
    accuracy,
    eigen,
    flow_basis,
    flow_mean,
    flow_weights,
    load_kernel,
    mse,
    nngp_flow_variance,
    ntk_covariance,
    ntk_flow_variance,
)
from ..store import ResultFile
from ._predict_results import FlowRow


def _diag(result: Path, name: str) -> np.ndarray:
    return ResultFile(result).read(name, np.float64)


def flow_kind(result: Path, kind: str, y: np.ndarray, ridges, times, names: set,
              eig: Optional[Eigen] = None) -> dict:
    """``{"mean": (R, T, m, C), "variance": (R, T, m) or None}`` for ``kind``; ``eig``
    the eigendecomposition of its training kernel where the caller made it already."""
    if eig is None:
        eig = eigen(load_kernel(result, kind), kind)  # the float64 kernel is dropped after
    basis = flow_basis(eig, H5KernelOperator(result, f"{kind}_test"), y)
    cov = None
    nngp = "nngp" + kind[len(base_kind(kind)):]  # the NNGP of the same readout
    if base_kind(kind) == "ntk" and {nngp, f"{nngp}_test", f"{nngp}_test_diag"} <= names:
        cov = ntk_covariance(eig, load_kernel(result, nngp),
                             H5KernelOperator(result, f"{nngp}_test"),
                             _diag(result, f"{nngp}_test_diag"))
    diag = None
    if kind == nngp and f"{nngp}_test_diag" in names:
        diag = _diag(result, f"{nngp}_test_diag")
    means, variances = [], []
    for ridge in ridges:
        w = flow_weights(eig, ridge, times, basis.normalization)
        means.append(flow_mean(basis, w))
        if cov is not None:
            variances.append(ntk_flow_variance(basis, cov, w))
        elif diag is not None:
            variances.append(nngp_flow_variance(basis, diag, ridge, times))
    return {"mean": np.stack(means), "variance": np.stack(variances) if variances else None}


def flow_rows(flows: dict, ridges, times, test_labels, y_test) -> list:
    """One ``FlowRow`` per kind, ridge and time, with test metrics where there are labels."""
    rows = []
    for kind, res in flows.items():
        for i, ridge in enumerate(ridges):
            for j, t in enumerate(times):
                mean = res["mean"][i, j]
                var = None if res["variance"] is None else float(np.mean(res["variance"][i, j]))
                acc = err = None
                if test_labels is not None and np.isfinite(mean).all():
                    acc, err = accuracy(mean, test_labels), mse(mean, y_test)
                rows.append(FlowRow(kind, ridge, t, acc, err,
                                    var if var is None or math.isfinite(var) else None))
    return rows
