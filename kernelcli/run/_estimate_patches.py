"""``estimate`` of a run with ``data.preprocess: {kind: random_patches}``: what fitting
the patches and mapping every row read cost, and the fitted file's size.

``estimate`` fits nothing: its rows are mapped by a stand-in of the fit's shapes
(:meth:`kernelcli.data.Preprocess.stand_in`), which costs what the fitted mapping does.

* memory: the fit's (one batch of training rows, the sampled positions, the filters and
  the (d, d) moments), and the mapping's per read (the rows' float64 copy and one batch
  of patches and responses), once per device that reads at the same time;
* time (``--time``): the mapping's per row, timed on the first rows, times the rows a
  run reads (the per-input pass reads every row once, each block its rows and its
  columns: a run maps every row many times, it does not keep the maps); the fit's, a fit on the first rows timed (its sampled patches, whitening and
  filters cost the same whatever the rows) plus reading the rest of ``x1`` once;
* disk: the fitted file (``preprocess-<fp>.npz``) the run directory keeps.
"""

from __future__ import annotations

import time
from typing import Optional

from .._stop import Stop, check
from ..pipeline import Job, patch_settings
from ._results import PatchCost

_SAMPLE_ROWS = 8  # rows the mapping and the fit are timed on


def patch_cost(job: Job, run_time: bool, stop: Optional[Stop] = None) -> Optional[PatchCost]:
    """The cost of ``job``'s random patches (None for a run without them)."""
    from ..data import SliceableRows, fit_preprocess, patches_file_bytes

    settings = patch_settings(job.cfg)
    pp = job.inputs.preprocess
    if settings is None or pp is None:
        return None
    plan, shape = job.plan, job.inputs.x1.example_shape
    n = job.inputs.x1.n
    readers = max(1, len(job.devices))
    apply_bytes = readers * pp.apply_bytes(plan.block)
    fit_bytes = pp.fit_bytes(n)
    fit_seconds = apply_seconds = None
    if run_time:
        rows = job.inputs.rows
        m = min(_SAMPLE_ROWS, rows.n)
        check(stop)
        t = time.perf_counter()
        rows.read(0, m, dtype="float64")
        per_row = (time.perf_counter() - t) / m
        apply_seconds = per_row * _rows_read(job)
        sample = SliceableRows(job.inputs.x1)
        check(stop)
        t = time.perf_counter()
        sample[0:m]
        read = (time.perf_counter() - t) / m
        t = time.perf_counter()
        fit_preprocess(_Head(sample, m), "random_patches", zca_reg=pp.zca_reg, patches=settings)
        fit_seconds = time.perf_counter() - t + read * (n - m)
        check(stop)
    return PatchCost(patches_channels=settings.channels,
                     patches_output_shape=list(pp.output_shape),
                     patches_fit_bytes=fit_bytes, patches_apply_bytes=apply_bytes,
                     patches_file_bytes=patches_file_bytes(shape, settings),
                     patches_fit_seconds=fit_seconds, patches_apply_seconds=apply_seconds)


def _rows_read(job: Job) -> int:
    """Rows a run maps: once each in the per-input pass, then each block's rows and its
    columns (``pipeline.block_input`` reads both, a diagonal block's too)."""
    inputs, plan = job.inputs, job.plan
    total = inputs.n1 + inputs.n_test + (0 if inputs.symmetric else inputs.n2)
    return total + sum((b.r1 - b.r0) + (b.c1 - b.c0) for b in plan.blocks)


class _Head:
    """The first ``m`` rows of ``rows`` (a :class:`~kernelcli.data.SliceableRows`)."""

    def __init__(self, rows, m: int):
        self.rows = rows
        self.shape = (m,) + tuple(rows.shape[1:])

    def __getitem__(self, item):
        start, stop, _ = item.indices(self.shape[0])
        return self.rows[start:stop]
