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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from .._stop import Stop, check, or_new
from ..config import PATCH_KEYS, Engine, RunConfig, as_pairs
from ..errors import RunDirError
from ..plan import Plan, plan_run
from ..store import LABELS, Manifest, StoredCompute, labels_name, new_manifest, preprocess_name
from ._backend import Backend, open_backend
from ._block_tile import KernelFnSpec
from ._inputs import Inputs, open_inputs
from ._progress_value import Progress
from ._shards import check_shard_count
from ._side_files import stored_preprocess

if TYPE_CHECKING:  # jax is imported lazily
    from ..kernels import KernelFn


@dataclass
class Job:
    cfg: RunConfig
    inputs: Inputs
    kfn: KernelFn
    plan: Plan
    devices: list
    fingerprints: dict
    # what bound the memory budget: "compute.memory" (given), else "device memory_stats"
    # (an accelerator's, pipeline/_devices.py) or what kernelcli._system.memory_available
    # says ("MemAvailable" or "cgroup <folder>")
    memory_source: str = "compute.memory"
    # a run grown by `kernelcli extend`: what was added (the manifest's "extend") and
    # the earlier runs whose tiles it keeps (its "lineage", see kernelcli.store)
    extension: Optional[dict] = None
    lineage: Optional[list] = None
    # where the tiles are computed (kernelcli.pipeline._backend): the backend that made the
    # plan computes its tiles; closed with the job
    backend: Optional[Backend] = None
    # the engine asked for: compute.engine, or for an existing run the one it records
    requested_engine: str = "auto"

    def close(self) -> None:
        """Close the inputs' files and the backend (idempotent)."""
        self.inputs.close()
        if self.backend is not None:
            self.backend.close()

    def __enter__(self) -> Job:
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
    def engine_reason(self) -> str:
        """Why ``kfn.engine`` computes this run (what estimate and -v say)."""
        from ..kernels import engine_reason

        assert self.backend is not None  # prepare() opened it
        return engine_reason(self.requested_engine, self.kfn.engine.name, self.backend.platform,
                             self.cfg.architecture.layers, self.inputs.example_shape)

    @property
    def _config_dir(self) -> Path:
        return self.cfg.source.parent if self.cfg.source else Path.cwd()

    def manifest(self) -> dict:
        labels = self.fingerprints.get("labels") if self.extension is not None else None
        return new_manifest(
            name=self.cfg.name, config_text=self.cfg.text, config_dir=str(self._config_dir),
            config_dir_from_run=os.path.relpath(self._config_dir, self.cfg.output.run_dir),
            config_fingerprint=config_fingerprint(self.cfg, self.extension),
            data_fingerprints=self.fingerprints, geometry=self.plan.geometry,
            test_diagonal=self.cfg.kernel.test_diagonal, dtype=self.cfg.kernel.dtype,
            engine=self.kfn.engine, chunk=self.kfn.chunk, extend=self.extension,
            lineage=self.lineage,
            labels_file=None if labels is None else labels_name(labels))


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def config_fingerprint(cfg: RunConfig, extension: Optional[dict] = None) -> str:
    """sha256 of what decides the numbers: data selection, architecture, kinds, dtype.

    Comments, ``name``, ``compute`` and ``output`` do not change a result, so a
    run can be moved or given another memory budget and still be resumed. Data
    paths count relative to the config's folder, so a config moved together with
    its data is the same configuration (the data's content is fingerprinted apart).

    ``extension`` (a run grown by ``kernelcli extend``; its test set is in ``cfg``
    already): the appended files count too, so the original configuration is not
    taken for the grown run.
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
    for key in ("labels_key", "test_key", "test_labels_key", "test_limit", "landmarks"):
        if getattr(d, key) is not None:
            data[key] = getattr(d, key)
    if d.preprocess is not None:  # random_patches' keys only when set: see PATCH_KEYS
        data["preprocess"] = {k: v for k, v in dataclasses.asdict(d.preprocess).items()
                              if v is not None or k not in PATCH_KEYS}
    kernel = dataclasses.asdict(cfg.kernel)
    if not kernel["test_diagonal"]:
        del kernel["test_diagonal"]
    if not kernel["augment"]:  # added later: runs without it keep their fingerprint
        del kernel["augment"]
    else:
        kernel["augment"] = list(kernel["augment"])
    # as_pairs: a one-int filter is recorded as the pair it meant before inputs of other
    # ranks were accepted, so runs made then keep their fingerprint
    arch = as_pairs(cfg.architecture)
    what: dict[str, Any] = {"data": data, "architecture": repr(arch), "kernel": kernel}
    if arch.readouts is not None:  # only when set: runs without readouts keep theirs
        what["readouts"] = repr(arch.readouts)
    if extension and extension.get("append"):
        what["append"] = [{k: rec.get(k) for k in APPEND_KEYS} for rec in extension["append"]]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


# What the manifest records of each appended file (kernelcli extend --append), and of
# the test set that `kernelcli extend --test` gave the run (the data.test* keys).
APPEND_KEYS = ("x", "key", "labels", "labels_key")
TEST_KEYS = ("test", "test_key", "test_labels", "test_labels_key")


def extended_config(cfg: RunConfig, extension: Optional[dict]) -> RunConfig:
    """``cfg`` (a run's configuration as written) with the test set that ``kernelcli
    extend --test`` gave the run in place of ``data.test*``; the appended training rows
    are not part of a configuration (:func:`open_inputs` reads them from the
    manifest's record)."""
    test = (extension or {}).get("test")
    if not test:
        return cfg
    paths = {k: None if test.get(k) is None else Path(test[k]) for k in ("test", "test_labels")}
    data = dataclasses.replace(cfg.data, test=paths["test"], test_key=test.get("test_key"),
                               test_labels=paths["test_labels"],
                               test_labels_key=test.get("test_labels_key"), test_limit=None)
    return dataclasses.replace(cfg, data=data)


def prepare(cfg: RunConfig, *, stored: Optional[StoredCompute] = None,
            fingerprints: Optional[dict] = None, preprocess=None,
            fit_preprocess: bool = True, extension: Optional[dict] = None,
            backend: Optional[Backend] = None, stop: Optional[Stop] = None,
            check_values: bool = True, progress: Optional[Callable] = None) -> Job:
    """Open and check the data, compile the kernel, plan within the memory budget.

    ``stored`` (an existing run's, :attr:`Manifest.compute`) fixes the block edge, the
    pair batch, the chunk and the engine, so a resumed run evaluates exactly the
    batches an uninterrupted one would, with the same engine.
    ``preprocess``: the fitted preprocessing of an existing run (never refitted);
    else it is fitted on ``x1`` unless ``fit_preprocess`` is false (``estimate``).
    ``check_values``: every input value is checked (finite, within the input bound),
    honouring ``stop`` between batches.
    ``extension``: what ``kernelcli extend`` added (the manifest's ``extend``).
    ``backend``: where the plan is made and the tiles computed (default: the one
    ``compute.executor`` names, :func:`~._backend.open_backend`); the job owns it.
    ``progress``: the run's progress callback, told while the backend waits for its
    workers before the plan exists (a Ray cluster placing the first actor).

    A requested ``stop`` is honoured between the steps (loading, compiling,
    fingerprinting): :class:`~kernelcli.errors.Interrupted`, naming the run directory
    when the run exists already (``stored``).
    """
    stop = or_new(stop)
    with stop.where(cfg.output.run_dir if stored is not None else None):
        return _prepare(cfg, stored, fingerprints, preprocess, fit_preprocess, extension,
                        backend, stop, check_values, progress)


def _native_here(run_dir, engine: Engine) -> None:
    """A run that computes with the native engine continues only where that engine, at
    the run's revision and with the run's library, can run (its tiles' last bits are
    that library's; another's would not be the uninterrupted run's)."""
    from ..kernels import NATIVE_REVISION, native_identity_problem

    revision = engine.native_revision or 1
    if revision > NATIVE_REVISION:
        raise RunDirError(f"{run_dir}: the run computes with revision {revision} of the "
                          f"native engine (as its manifest.json records), newer than this "
                          f"kernelcli's ({NATIVE_REVISION}); continue it with the kernelcli "
                          f"that started it")
    why = native_identity_problem(engine.native_library)
    if why is not None:
        raise RunDirError(f"{run_dir}: {why}")


def _level_here(cfg, engine: Engine) -> None:
    """A run continues at the CPU level it recorded: pinned here while jax's backend has
    not started (the CLI's resume, extend and shards), and refused where this process
    computes at another (its tiles' last bits would differ). On Ray each actor checks
    its own (``KernelFn``): the driver computes no tile."""
    from ..kernels import cpu_level_problem, pin_cpu_level

    pin_cpu_level(engine.cpu_level)
    if cfg.compute.executor == "local":
        why = cpu_level_problem(engine.cpu_level)
        if why is not None:
            raise RunDirError(f"{cfg.output.run_dir}: {why}")


def _prepare(cfg, stored, fingerprints, preprocess, fit_preprocess, extension,
             backend, stop, check_values, progress) -> Job:
    check(stop)
    if stored is not None:
        _level_here(cfg, stored.engine)
    inputs = open_inputs(cfg, check_values=check_values, preprocess=preprocess,
                         fit=fit_preprocess, appends=(extension or {}).get("append", ()),
                         stop=stop)
    try:
        check(stop)
        # an existing run keeps the engine it started with
        kept = stored.engine if stored is not None else None
        engine = kept.name if kept is not None else cfg.compute.engine
        if kept is not None and kept.native:
            _native_here(cfg.output.run_dir, kept)
        spec = KernelFnSpec.of(cfg, inputs.example_shape,
                               stored.chunk if stored is not None else None, kept)
        if backend is None:
            backend = open_backend(cfg.compute, stop)
        if progress is not None:
            backend.watch(_before_the_plan(progress))
        # a Ray backend plans on a worker, for its platform
        kfn, costs, budget, source, memory, n_devices, devices = backend.plan_inputs(spec,
                                                                                    engine)
        plan = plan_run(inputs.n1, inputs.n2, symmetric=inputs.symmetric,
                        costs=costs,
                        budget_bytes=budget, devices=n_devices, n_test=inputs.n_test,
                        block=stored.block if stored is not None else cfg.compute.block,
                        pair_batch=stored.pair_batch if stored is not None else None,
                        memory=memory)
        check(stop)
        if fingerprints is None:
            fingerprints = inputs.fingerprints(stop)
        check(stop)
    except BaseException:
        inputs.close()
        if backend is not None:
            backend.close()
        raise
    return Job(cfg, inputs, kfn, plan, devices, fingerprints, source, extension,
               backend=backend, requested_engine=engine)


def _before_the_plan(progress: Callable) -> Callable:
    """A backend's word on its workers before the plan exists, as a
    :class:`~._progress_value.Progress` with nothing counted yet (``blocks_total`` 0)."""
    t0 = time.monotonic()

    def say(state) -> None:
        if state.note:
            progress(Progress(0, 0, 0, 0, time.monotonic() - t0, 0, note=state.note))

    return say


def prepare_run(cfg: RunConfig, store=None, shard=None,
                fingerprints: Optional[dict] = None, stop: Optional[Stop] = None,
                progress: Optional[Callable] = None) -> Job:
    """The job of a run: against ``store``'s plan and fitted preprocessing when the run
    exists (checking that its data did not change), else planned afresh; a ``shard``
    count the plan cannot serve is refused. The one place a run is prepared: a new run,
    a continued one and a job array's process that joins one all come here.

    ``fingerprints``: the data's, known already (a process that joined a run).
    ``stop``: honoured while preparing, and by the job's backend. ``progress``: see
    :func:`prepare`.
    """
    if store is None:
        job = prepare(cfg, fingerprints=fingerprints, stop=stop, progress=progress)
    else:
        job = prepare(cfg, stored=store.run_manifest.compute, fingerprints=fingerprints,
                      preprocess=stored_preprocess(store),
                      extension=store.manifest.get("extend"), stop=stop, progress=progress)
        job.lineage = store.manifest.get("lineage")
    with closed_on_error(job):
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
    if manifest.get("config_fingerprint") != config_fingerprint(job.cfg, job.extension):
        raise RunDirError(
            f"{run_dir} holds a run of a different configuration ({manifest.get('name')!r}), "
            f"just created by another process; every process of a job array must be given "
            f"the same configuration and data")
    checked = Manifest.check(manifest, run_dir)
    check_same_data(job, manifest, run_dir)
    return (not refit and checked.engine == job.kfn.engine
            and all(manifest["plan"].get(k) == v for k, v in job.manifest()["plan"].items()))


_WHAT = {"labels": "the labels (data.labels_key, data.test_labels_key)",
         "preprocess": "the fitted data.preprocess",
         "append": "the training rows `kernelcli extend --append` added"}


class DataOf(Protocol):
    """What :func:`check_same_data` reads of a job: its data's fingerprints and the
    opened inputs they name (a :class:`Job`, or extend's old data alone)."""

    @property
    def fingerprints(self) -> dict: ...

    @property
    def inputs(self) -> Any: ...


def check_same_data(job: DataOf, manifest: dict, run_dir) -> None:
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
        arrays: dict[str, Any] = {k: v for k, v in (("labels", inputs.labels),
                                                    ("test_labels", inputs.test_labels))
                                  if v is not None}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        name = job.manifest().get("labels_file", LABELS)
        out[name] = buf.getvalue()
    if inputs.preprocess is not None:
        out[preprocess_name(job.fingerprints["preprocess"])] = inputs.preprocess.to_bytes()
    return out


@contextlib.contextmanager
def closed_on_error(job: Job):
    try:
        yield
    except BaseException:
        job.close()
        raise
