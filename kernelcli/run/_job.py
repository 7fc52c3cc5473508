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
from ..plan import Plan, auto_budget, available_ram_bytes, make_plan
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
            "plan": {"n1": self.plan.n1, "n2": self.plan.n2, "n_test": self.plan.n_test,
                     "test_diagonal": self.cfg.kernel.test_diagonal,
                     "symmetric": self.plan.symmetric,
                     "block": self.plan.block, "pair_batch": self.plan.pair_batch,
                     "kinds": list(self.plan.kinds), "dtype": self.cfg.kernel.dtype,
                     "pairs_total": self.plan.pairs_total,
                     "blocks_total": self.plan.blocks_total},
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


def memory_model(kfn, rows: int, cols: int, batch: int) -> tuple[int, int]:
    """``(bytes_per_pair, fixed_bytes)`` of one kernel call, from XLA's analysis of
    the compiled program at ``batch`` pairs and at half of it: exact at ``batch``
    (the plan's peak) and a conservative line below it (memory is flat above a
    chunk, so a smaller batch that a tight budget forces needs at most that).

    Each is a compilation: a requested stop (:mod:`kernelcli._interrupt`) is honoured
    before and after each."""
    p2 = max(2, batch)
    p1 = p2 // 2
    _interrupt.check()
    m1 = kfn.compiled_memory(rows, cols, p1)
    _interrupt.check()
    m2 = kfn.compiled_memory(rows, cols, p2)
    _interrupt.check()
    per_pair = max(1, -(-(m2 - m1) // (p2 - p1)))
    return per_pair, max(0, m1 - p1 * per_pair)


# Work of one block, in elementwise operations: about half a minute here. Fewer
# makes per-block costs (a tile file, an fsync) show; more loses more to a kill.
_BLOCK_WORK = 2e11
_OPS_PER_ENTRY = 30  # elementwise operations per covariance entry per layer (measured HLO)


def auto_block(kfn, cfg: RunConfig, n_max: int) -> int:
    """Block edge (multiple of 8, 64..1024) from the cost of a pair, not from memory:
    the engine's memory does not grow with the pair batch, time per block does."""
    work = kfn.cov_elements * max(1, len(cfg.architecture.layers)) * _OPS_PER_ENTRY
    target = min(max(_BLOCK_WORK / work, 64 * 64), 1024 * 1024)
    edge = int(round(target ** 0.5 / 8)) * 8
    return max(8, min(max(edge, 64), 1024, -(-n_max // 8) * 8))


def auto_pair_batch(kfn, block: int, n_devices: int, fit: int) -> Optional[int]:
    """Pairs per call: enough chunks to amortise a call, few enough that every device
    gets several batches of a block; never more than the budget fits (``fit``;
    ``None`` lets the planner report a budget that cannot hold one pair)."""
    if fit < 1:
        return None
    if kfn.flat_input:  # one Gram matrix per call: one call per block
        return int(min(fit, block * block))
    # Several batches per device in a block's (at least) block^2/2 pairs; a batch
    # smaller than a chunk is fine (the engine shrinks the chunk), one larger than
    # the block would only evaluate padding.
    per_device = max(1, block * block // (2 * 4 * n_devices))
    want = min(64 * kfn.chunk, per_device)
    return int(max(1, min(fit, want)))


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
        symmetric = inputs.symmetric
        if stored_plan is None:
            block = cfg.compute.block or auto_block(kfn, cfg, max(inputs.n1, inputs.n2))
            pair_batch = None
        else:
            block, pair_batch = stored_plan["block"], stored_plan["pair_batch"]
        want = pair_batch or auto_pair_batch(kfn, block, len(devices), 1 << 62)
        bpp, fixed = memory_model(kfn, block, block, want)
        budget = cfg.compute.memory
        if budget is None:
            budget = auto_budget(available_ram_bytes()) // len(devices)
        if pair_batch is None:
            fit = (budget - fixed) // bpp
            pair_batch = None if fit < 1 else min(want, fit)
        plan = make_plan(inputs.n1, inputs.n2, symmetric=symmetric, bytes_per_pair=bpp,
                         fixed_bytes=fixed, budget_bytes=budget, kinds=kfn.kinds,
                         itemsize=kfn.dtype.itemsize, block=block, pair_batch=pair_batch,
                         devices=len(devices),
                         untiled_bytes_per_pair=kfn.cov_elements * kfn.dtype.itemsize,
                         n_test=inputs.n_test)
        _interrupt.check()
        if fingerprints is None:
            fingerprints = inputs.fingerprints()
        _interrupt.check()
    except BaseException:
        inputs.close()
        raise
    return Job(cfg, inputs, kfn, plan, devices, fingerprints)
