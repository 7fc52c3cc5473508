"""The one pass over a run's kernels before any solve: every route refuses a kernel
with a non-finite entry or a diagonal entry that is not > 0 (a damaged or edited
``kernels.h5`` whose checksum was renewed), rather than solving it into NaNs or a
"not positive definite" that advises a larger ridge."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._stop import Stop, check
from ..solvers import check_kernel_rows
from ..store import ResultFile

_BAND_BYTES = 64 * 2**20  # a band of rows read at once


def check_kernel(result, dataset: str, diagonal_from: Optional[int] = None,
                 stop: Optional[Stop] = None) -> None:
    """Read ``dataset`` of ``result`` in bands and :func:`check_kernel_rows` each
    (``diagonal_from``: as there; ``None`` for a kernel without a diagonal, K(test, x1))."""
    with ResultFile(result).kernel(dataset) as ds:
        rows, cols = (int(v) for v in ds.shape)
        step = max(1, _BAND_BYTES // (8 * max(1, cols)))
        for s in range(0, rows, step):
            check(stop)
            band = np.asarray(ds[s:min(s + step, rows)])
            check_kernel_rows(band, s, f"{dataset} in {result}", diagonal_from)
