"""A prepared run: configuration, opened data, compiled kernel, plan and manifest.

``prepare`` does everything that can fail on a user's mistake (configuration,
data, memory budget) before a single file is written, so a bad run never
leaves a half-made run directory behind.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import __version__, _interrupt
from .._system import available_ram_bytes
from ..plan import EngineCosts, Plan, auto_budget, plan_run
from ..spec import RunConfig
from ._devices import local_devices
from ._inputs import Inputs, open_inputs
from ._manifest import FORMAT as MANIFEST_FORMAT



@dataclass
class Job:
    cfg: RunConfig
    inputs: Inputs
    kfn: object          # kernelcli.kernels.KernelFn (imported lazily: jax is heavy)
    plan: Plan
    devices: list
    fingerprints: dict

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
    what = {"data": data, "architecture": repr(cfg.architecture), "kernel": kernel}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def engine_costs(kfn, layers: int) -> EngineCosts:
    """What the planner needs of the compiled kernel ``kfn``; each memory measurement is
    a compilation, and a requested stop (:mod:`kernelcli._interrupt`) is honoured
    before and after each."""

    def compiled_memory(rows: int, cols: int, pairs: int) -> int:
        _interrupt.check()
        out = kfn.compiled_memory(rows, cols, pairs)
        _interrupt.check()
        return out

    return EngineCosts(chunk=kfn.chunk, flat_input=kfn.flat_input,
                       cov_elements=kfn.cov_elements, layers=layers, kinds=tuple(kfn.kinds),
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
        budget = cfg.compute.memory
        if budget is None:
            budget = auto_budget(available_ram_bytes()) // len(devices)
        stored = stored_plan or {}
        plan = plan_run(inputs.n1, inputs.n2, symmetric=inputs.symmetric,
                        costs=engine_costs(kfn, len(cfg.architecture.layers)),
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
    return Job(cfg, inputs, kfn, plan, devices, fingerprints)
