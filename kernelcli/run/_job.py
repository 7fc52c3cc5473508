"""A prepared run: configuration, opened data, compiled kernel, plan and manifest.

:func:`prepare_run` is the one place a run is prepared (inputs, fingerprints, plan,
the checks against an existing run); :func:`side_files` is what a new run directory
holds beside its manifest.

``prepare`` does everything that can fail on a user's mistake (configuration,
data, memory budget) before a single file is written, so a bad run never
leaves a half-made run directory behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import __version__, _interrupt
from .._system import memory_available
from ..plan import EngineCosts, Plan, auto_budget, plan_run
from ..errors import RunDirError
from ..spec import RunConfig, as_pairs
from ..store import LABELS, preprocess_name
from ._devices import local_devices
from ._inputs import Inputs, check_preprocess_file, open_inputs
from ._manifest import FORMAT as MANIFEST_FORMAT
from ._manifest import check_manifest
from ._shards import check_shard_count


@dataclass
class Job:
    cfg: RunConfig
    inputs: Inputs
    kfn: object          # kernelcli.kernels.KernelFn (imported lazily: jax is heavy)
    plan: Plan
    devices: list
    fingerprints: dict
    # what bound the memory budget: "compute.memory" (given), else what
    # kernelcli._system.memory_available says ("MemAvailable" or "cgroup <folder>")
    memory_source: str = "compute.memory"

    def close(self) -> None:
        """Close the inputs' files (idempotent)."""
        self.inputs.close()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats_bytes(self) -> int:
        """Host memory of the per-input variances of every example."""
        per_input = sum(_prod(s) for s in self.kfn.variance_shapes) + len(self.plan.kinds)
        n = self.inputs.n1 + self.inputs.n_test + (0 if self.inputs.symmetric
                                                    else self.inputs.n2)
        return n * per_input * self.kfn.dtype.itemsize

    @property
    def _config_dir(self) -> Path:
        return self.cfg.source.parent if self.cfg.source else Path.cwd()

    def manifest(self) -> dict:
        return {
            "format": MANIFEST_FORMAT,
            "kernelcli_version": __version__,
            "name": self.cfg.name,
            "config_text": self.cfg.text,
            "config_dir": str(self._config_dir),
            # A config, its data and its run moved together are found again from here.
            "config_dir_from_run": os.path.relpath(self._config_dir, self.cfg.output.run_dir),
            "config_fingerprint": config_fingerprint(self.cfg),
            "data_fingerprints": self.fingerprints,
            "plan": {**self.plan.geometry.to_manifest(),
                     "test_diagonal": self.cfg.kernel.test_diagonal,
                     "dtype": self.cfg.kernel.dtype},
        }


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def config_fingerprint(cfg: RunConfig) -> str:
    """sha256 of what decides the numbers: data selection, architecture, kinds, dtype.

    Comments, ``name``, ``compute`` and ``output`` do not change a result, so a
    run can be moved or given another memory budget and still be resumed. Data
    paths count relative to the config's folder, so a config moved together with
    its data is the same configuration (the data's content is fingerprinted apart).
    """
    d = cfg.data
    base = cfg.source.parent if cfg.source is not None else Path.cwd()

    def rel(p):
        return None if p is None else os.path.relpath(p, base)

    data = {"x1": rel(d.x1), "key": d.key, "x2": rel(d.x2),
            "x2_key": d.x2_key, "layout": d.layout, "limit": d.limit}
    # Keys added later count only when set, so older runs keep their fingerprint.
    for key in ("labels", "test", "test_labels"):
        if getattr(d, key) is not None:
            data[key] = rel(getattr(d, key))
    for key in ("labels_key", "test_key", "test_labels_key", "test_limit"):
        if getattr(d, key) is not None:
            data[key] = getattr(d, key)
    if d.preprocess is not None:
        data["preprocess"] = dataclasses.asdict(d.preprocess)
    kernel = dataclasses.asdict(cfg.kernel)
    if not kernel["test_diagonal"]:
        del kernel["test_diagonal"]
    # as_pairs: a one-int filter is recorded as the pair it meant before inputs of other
    # ranks were accepted, so runs made then keep their fingerprint
    what = {"data": data, "architecture": repr(as_pairs(cfg.architecture)), "kernel": kernel}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def engine_costs(kfn) -> EngineCosts:
    """What the planner needs of the compiled kernel ``kfn``; each memory measurement is
    a compilation, and a requested stop (:mod:`kernelcli._interrupt`) is honoured
    before and after each."""

    def compiled_memory(rows: int, cols: int, pairs: int) -> int:
        _interrupt.check()
        out = kfn.compiled_memory(rows, cols, pairs)
        _interrupt.check()
        return out

    return EngineCosts(chunk=kfn.chunk, flat_input=kfn.flat_input,
                       cov_elements=1 if kfn.flat_input else kfn.cov_elements,
                       layers=kfn.n_layers, kinds=tuple(kfn.kinds),
                       itemsize=kfn.dtype.itemsize, compiled_memory=compiled_memory)


def prepare(cfg: RunConfig, *, stored_plan: Optional[dict] = None,
            fingerprints: Optional[dict] = None, preprocess=None,
            fit_preprocess: bool = True) -> Job:
    """Open and check the data, compile the kernel, plan within the memory budget.

    ``stored_plan`` (from a manifest) fixes block edge and pair batch on resume, so
    a resumed run evaluates exactly the batches an uninterrupted one would.
    ``preprocess``: the fitted preprocessing of an existing run (never refitted);
    else it is fitted on ``x1`` unless ``fit_preprocess`` is false (``estimate``).

    A stop requested by a signal is honoured between the steps (loading, compiling,
    fingerprinting): :class:`~kernelcli.errors.Interrupted`, naming the run directory
    when the run exists already (``stored_plan``).
    """
    with _interrupt.where(cfg.output.run_dir if stored_plan is not None else None):
        return _prepare(cfg, stored_plan, fingerprints, preprocess, fit_preprocess)


def _prepare(cfg, stored_plan, fingerprints, preprocess, fit_preprocess) -> Job:
    _interrupt.check()
    from ..kernels import build_kernel_fn  # jax is only imported once the config is sound

    _interrupt.check()
    inputs = open_inputs(cfg, preprocess=preprocess, fit=fit_preprocess)
    try:
        _interrupt.check()
        devices = local_devices(cfg.compute.devices)
        kfn = build_kernel_fn(cfg.architecture, inputs.x1.example_shape,
                              cfg.kernel.kinds, cfg.kernel.dtype)
        _interrupt.check()
        budget, source = cfg.compute.memory, "compute.memory"
        if budget is None:
            available, source = memory_available()
            budget = auto_budget(available) // len(devices)
        stored = stored_plan or {}
        plan = plan_run(inputs.n1, inputs.n2, symmetric=inputs.symmetric,
                        costs=engine_costs(kfn),
                        budget_bytes=budget, devices=len(devices), n_test=inputs.n_test,
                        block=stored.get("block", cfg.compute.block),
                        pair_batch=stored.get("pair_batch"))
        _interrupt.check()
        if fingerprints is None:
            fingerprints = inputs.fingerprints()
        _interrupt.check()
    except BaseException:
        inputs.close()
        raise
    return Job(cfg, inputs, kfn, plan, devices, fingerprints, source)


def prepare_run(cfg: RunConfig, store=None, shard=None,
                fingerprints: Optional[dict] = None) -> Job:
    """The job of a run: against ``store``'s plan and fitted preprocessing when the run
    exists (checking that its data did not change), else planned afresh; a ``shard``
    count the plan cannot serve is refused. The one place a run is prepared: a new run,
    a continued one and a job array's process that joins one all come here.

    ``fingerprints``: the data's, known already (a process that joined a run).
    """
    if store is None:
        job = prepare(cfg, fingerprints=fingerprints)
    else:
        job = prepare(cfg, stored_plan=store.manifest["plan"], fingerprints=fingerprints,
                      preprocess=stored_preprocess(store))
    with _closed_on_error(job):
        if store is not None:
            check_same_data(job, store.manifest, store.run_dir)
        check_shard_count(shard, job.plan)
    return job


def adopts(job: Job, store) -> bool:
    """Whether ``job`` can run in ``store``, a run directory another process (of a job
    array) created at the same moment: same configuration and data (else RunDirError),
    and the same plan and preprocessing fit. When it cannot, a job prepared against
    the store (:func:`prepare_run`, given ``job.fingerprints``) can."""
    manifest, run_dir = store.manifest, store.run_dir
    stored_fp = manifest.get("data_fingerprints", {}).get("preprocess")
    refit = stored_fp is not None and stored_fp != job.fingerprints.get("preprocess")
    if refit:  # a fit that rounded differently: the run's own fit wins
        job.fingerprints = dict(job.fingerprints, preprocess=stored_fp)
    if manifest.get("config_fingerprint") != config_fingerprint(job.cfg):
        raise RunDirError(
            f"{run_dir} holds a run of a different configuration ({manifest.get('name')!r}), "
            f"just created by another process; every process of a job array must be given "
            f"the same configuration and data")
    check_manifest(manifest, run_dir)
    check_same_data(job, manifest, run_dir)
    stored = manifest["plan"]
    return not refit and all(stored.get(k) == v for k, v in job.manifest()["plan"].items())


_WHAT = {"labels": "the labels (data.labels_key, data.test_labels_key)",
         "preprocess": "the fitted data.preprocess"}


def check_same_data(job: Job, manifest: dict, run_dir) -> None:
    """RunDirError unless ``job``'s data has the fingerprints the run started with."""
    stored = manifest.get("data_fingerprints", {})
    for key in sorted(set(stored) | set(job.fingerprints)):
        value = job.fingerprints.get(key)
        if stored.get(key) != value:
            what = _WHAT.get(key) or f"data.{key} ({getattr(job.inputs, key).path})"
            raise RunDirError(
                f"{what} is not the data the run in "
                f"{run_dir} started with (its content fingerprint changed); restore the "
                f"original file, or start afresh with `kernelcli compute CONFIG "
                f"--run-dir {run_dir} --overwrite` or another --run-dir")


def side_files(job: Job) -> dict:
    """What a new run directory holds beside its manifest (see :mod:`kernelcli.store`)."""
    import io

    import numpy as np

    out = {}
    inputs = job.inputs
    if inputs.labels is not None or inputs.test_labels is not None:
        arrays = {k: v for k, v in (("labels", inputs.labels),
                                    ("test_labels", inputs.test_labels)) if v is not None}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        out[LABELS] = buf.getvalue()
    if inputs.preprocess is not None:
        out[preprocess_name(job.fingerprints["preprocess"])] = inputs.preprocess.to_bytes()
    return out


def stored_preprocess(store):
    """The fitted preprocessing a run directory holds (``None`` when the run has none)."""
    fp = store.manifest.get("data_fingerprints", {}).get("preprocess")
    if fp is None:
        return None
    return check_preprocess_file(store.side_path(preprocess_name(fp)), fp)


@contextlib.contextmanager
def _closed_on_error(job: Job):
    try:
        yield
    except BaseException:
        job.close()
        raise
