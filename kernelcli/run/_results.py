"""What the operations of :mod:`kernelcli.run` return: frozen value objects, each with
the ``to_dict()`` that ``--json`` prints (its keys are a contract)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

from ..config import Engine

if TYPE_CHECKING:
    from ..plan import Plan


class _Part(Protocol):
    """A part of a result that gives its own ``to_dict()`` keys."""

    def to_dict(self) -> dict: ...


class _Flat:
    """A part of a result whose fields are keys of the result's ``to_dict()``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # each subclass is a dataclass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ExtendSummary(_Flat):
    """What ``kernelcli extend`` grew a run from, and the tiles it keeps."""

    n1_before: Optional[int]
    n1: int
    n_test_before: Optional[int]
    n_test: int
    blocks_reused: int


@dataclasses.dataclass(frozen=True)
class SolveNeed(_Flat):
    """What ``kernelcli predict`` will need with its default ridges on the route it will
    pick on this machine (the quickest that fits; ``none``: predict refuses, counted on
    Cholesky): ``solve_bytes``, ``solve_operations`` (multiply-adds, an upper bound on
    CG); ``classes``: the one-hot target columns (the largest label + 1);
    ``solve_routes``: every route's estimated seconds, bytes and whether it fits
    (``kernelcli.solvers.RouteCost``)."""

    solve_bytes: int
    solve_available_bytes: int
    solver: str
    classes: int = 1
    solve_operations: int = 0
    solve_routes: tuple = ()


@dataclasses.dataclass(frozen=True)
class WorkerSplit(_Flat):
    """How a job array of ``workers`` processes divides the pairs (``worker_balance``:
    the busiest worker's pairs over an even share; 1.0 is a perfect split)."""

    workers: int
    worker_pairs_max: int
    worker_pairs_min: int
    worker_balance: float


@dataclasses.dataclass(frozen=True)
class Timing(_Flat):
    """The parts of ``compute``'s wall time, in seconds, and their sum; on ``workers``
    processes (``seconds_estimate_workers``) when asked.

    ``seconds_per_pair``: the process's wall time per pair evaluation, its
    ``timed_devices`` computing at once (``pairs_total * seconds_per_pair ==
    pairs_seconds``); ``seconds_per_pair_per_device``: one device's. ``cores_share``:
    the share of the ``timed_cores`` its calls run on that the process had while it
    timed them (below 1 on a machine loaded by other work), at 1-minute
    ``load_average``; ``seconds_estimate_idle``: the estimate with those cores to itself;
    ``timed_on``: the machine the times hold for (CPU model, cores, level, native
    library), since they hold for no other."""

    seconds_estimate: float
    startup_seconds: float
    compile_seconds: float
    stats_seconds: float
    pairs_seconds: float
    writes_seconds: float
    seconds_per_pair: float
    seconds_per_pair_per_device: float = 0.0
    timed_devices: int = 1  # the devices timed at once (the plan's `devices` on CPU)
    timed_cores: int = 1  # the cores they run on: at most one per device
    cores_share: float = 1.0
    load_average: float = 0.0
    seconds_estimate_idle: float = 0.0
    seconds_estimate_workers: Optional[float] = None
    timed_on: str = ""

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if self.seconds_estimate_workers is None:
            del out["seconds_estimate_workers"]
        return out


@dataclasses.dataclass(frozen=True)
class PatchCost(_Flat):
    """``data.preprocess: random_patches``: the feature maps, the memory of the fit and
    of the mapping (all devices' reads together), the fitted file's bytes, and with
    ``--time`` the seconds of the fit and of mapping every row a run reads."""

    patches_channels: int
    patches_output_shape: list
    patches_fit_bytes: int
    patches_apply_bytes: int
    patches_file_bytes: int
    patches_fit_seconds: Optional[float] = None
    patches_apply_seconds: Optional[float] = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ReadoutWork(_Flat):
    """What one pass with readouts saves, as layers evaluated per pair."""

    readouts: list
    readout_layers_one_pass: int
    readout_layers_separate: int


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The outcome of ``compute``, ``resume`` or ``assemble``.

    ``result``: path of ``kernels.h5`` when the run is complete, else ``None`` (a shard
    of a job array that finished its tiles while others have not). ``already_finished``:
    it was complete before the call (nothing else is then known). ``repaired``: one
    line per file that failed verification and was computed again. ``resumed``: the
    run directory held the run already (``None`` for ``assemble``). ``shard``:
    ``(I, N)`` of a job array and ``shard_blocks`` the tiles of that process.
    ``tiles_removed``: tiles deleted after the result verified (``output.keep_tiles:
    false``).
    """

    result: Optional[str]
    already_finished: bool = False
    assembled: bool = False
    blocks_missing: int = 0
    blocks_total: int = 0
    repaired: tuple = ()
    resumed: Optional[bool] = None
    shard: Optional[tuple] = None
    shard_blocks: int = 0
    computed: bool = True  # False for assemble: no tile was computed by this call
    tiles_removed: int = 0

    def to_dict(self) -> dict:
        if self.already_finished or not self.computed:
            return {"result": self.result, "already_finished": self.already_finished}
        out = {"result": self.result, "already_finished": False, "assembled": self.assembled,
               "blocks_missing": self.blocks_missing, "blocks_total": self.blocks_total,
               "repaired": list(self.repaired), "tiles_removed": self.tiles_removed}
        if self.shard is not None:
            out.update(shard=list(self.shard), shard_blocks=self.shard_blocks)
        if self.resumed is not None:
            out["resumed"] = self.resumed
        return out


@dataclasses.dataclass(frozen=True)
class ExtendResult:
    """``extend``: the run grown from ``n1_before`` to ``n1`` training rows (and from
    ``n_test_before`` to ``n_test`` test rows) and what that costs: of the grown plan's
    ``blocks_total`` tiles, ``blocks_reused`` are the old run's, kept, and ``blocks_new``
    are computed (``pairs_new`` of ``pairs_total`` pair evaluations, what a fresh run
    computes). ``run``: the :class:`RunResult` of the computation (``None`` for a dry
    run)."""

    run_dir: str
    n1_before: int
    n1: int
    n_test_before: int
    n_test: int
    blocks_total: int
    blocks_reused: int
    blocks_new: int
    pairs_total: int
    pairs_new: int
    dry_run: bool = False
    run: Optional[RunResult] = None

    @property
    def result(self) -> Optional[str]:
        return None if self.run is None else self.run.result

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("run_dir", "n1_before", "n1", "n_test_before",
                                             "n_test", "blocks_total", "blocks_reused",
                                             "blocks_new", "pairs_total", "pairs_new",
                                             "dry_run")}
        if self.run is not None:
            out.update(self.run.to_dict())
        return out


@dataclasses.dataclass(frozen=True)
class CleanResult:
    """``clean``: the tiles deleted (``tiles_removed`` files, ``bytes_removed`` bytes)
    once ``result`` (``kernels.h5``) verified."""

    run_dir: str
    result: str
    tiles_removed: int
    bytes_removed: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ShardProgress:
    """Progress of process ``index`` of a job array of ``count``."""

    index: int
    count: int
    blocks_done: int
    blocks_total: int
    pairs_done: int
    pairs_total: int
    finished: bool
    started: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RayRecord(_Flat):
    """What the last Ray driver of a run saw of its cluster (``shards/ray.json``),
    written only when it had something to say: actors awaited (``waiting``) or given
    up, nodes and actors lost, blocks requeued. ``running``: the driver was computing
    when it wrote it (false once it stopped, or, on this host, when its process is
    gone)."""

    note: str
    planned: int
    placed: int
    waiting: int
    given_up: int
    nodes_lost: tuple
    actors_lost: int
    requeued: int
    running: bool
    host: str
    pid: int
    updated: str

    def to_dict(self) -> dict:
        return dict(dataclasses.asdict(self), nodes_lost=list(self.nodes_lost))


@dataclasses.dataclass(frozen=True)
class StatusReport:
    """``status``: how far a run has got, from its files alone. ``result_problem``: why a
    ``kernels.h5`` that exists does not verify; ``shards`` (with ``shard_count`` and the
    counts the shard processes recorded) for a job array; ``tiles_removed``: the tiles
    were deleted once the result verified (the counts then come from the result)."""

    run_dir: str
    name: Optional[str]
    pairs_done: int
    pairs_total: int
    blocks_done: int
    blocks_total: int
    finished: bool
    result: Optional[str]
    result_problem: Optional[str] = None
    shard_count: Optional[int] = None
    shards: tuple = ()
    shard_counts_seen: tuple = ()
    tiles_removed: bool = False  # deleted on purpose after assembly (kernelcli clean)
    readouts: tuple = ()  # a run with readouts: its kernels' datasets (nngp_d3, ...)
    extend: Optional[ExtendSummary] = None  # a run grown by `kernelcli extend`
    files: int = 0        # files in the run directory (a few thousand at most: packs)
    tile_packs: int = 0   # of them, packs of tiles
    tiles_loose: int = 0  # and tiles in files of their own
    engine: Engine = Engine("cpu")  # the execution engine the run computes with
    ray: Optional[RayRecord] = None  # what its last Ray driver saw (when it said anything)
    skipped: tuple = ()  # diagnostics files there but unreadable: "<path> (why)" each

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("run_dir", "name", "pairs_done", "pairs_total",
                                             "blocks_done", "blocks_total", "finished",
                                             "result", "tiles_removed", "files",
                                             "tile_packs", "tiles_loose")}
        out.update(engine=self.engine.name, native_revision=self.engine.native_revision,
                   native_library=self.engine.native_library,
                   cpu_level=self.engine.cpu_level)
        if self.readouts:
            out["readouts"] = list(self.readouts)
        if self.result_problem is not None:
            out["result_problem"] = self.result_problem
        if self.extend is not None:
            out["extend"] = self.extend.to_dict()
        if self.ray is not None:
            out["ray"] = self.ray.to_dict()
        if self.skipped:
            out["skipped"] = list(self.skipped)
        if self.shard_count is not None:
            out.update(shard_count=self.shard_count,
                       shards=[s.to_dict() for s in self.shards],
                       shard_counts_seen=list(self.shard_counts_seen))
        return out


@dataclasses.dataclass(frozen=True)
class PlannedFiles:
    """The files of the finished run directory ``estimate`` plans: ``tiles`` (loose),
    ``packs`` and ``other`` (manifest, result, lock, side files) under ``keep_tiles``;
    and its bytes: the result's (``result_bytes``), the fitted preprocessing's side
    file (``preprocess_bytes``: a ZCA's (d, d) matrix can outweigh the kernels) and the
    tiles kept (``tile_bytes``)."""

    keep_tiles: bool
    tiles: int
    packs: int
    other: int
    result_bytes: int = 0
    preprocess_bytes: int = 0
    tile_bytes: int = 0

    @property
    def total(self) -> int:
        return self.tiles + self.packs + self.other

    @property
    def disk_bytes(self) -> int:
        """The finished run directory's bytes (its small files, a few KiB, left out)."""
        return self.result_bytes + self.preprocess_bytes + self.tile_bytes

    def to_dict(self) -> dict:
        return {"files_planned": {"tiles": self.tiles, "packs": self.packs,
                                  "other": self.other, "total": self.total,
                                  "keep_tiles": self.keep_tiles},
                "preprocess_bytes": self.preprocess_bytes, "disk_bytes": self.disk_bytes}


@dataclasses.dataclass(frozen=True)
class EstimateResult:
    """``estimate``: the plan (``plan.to_dict()`` keys), what the process around it needs,
    what bound the memory budget (``memory_source``), and the optional parts: ``solve`` (what ``predict`` will need), ``workers`` (how a job
    array divides the work) and ``timing`` (a timed batch, extrapolated)."""

    plan: Plan
    name: str
    kinds: tuple
    dtype: str
    platform: str
    stats_bytes: int
    cov_elements_per_pair: int
    stats_peak_bytes: int
    process_peak_bytes_estimate: int
    solve: Optional[SolveNeed] = None
    workers: Optional[WorkerSplit] = None
    timing: Optional[Timing] = None
    memory_source: str = "compute.memory"  # "MemAvailable", "cgroup <folder>" or this
    readouts: Optional[ReadoutWork] = None
    augment: tuple = ()          # kernel.augment: each pair is group_size evaluations
    group_size: int = 1
    # on an accelerator: the devices' peak, per device (the process peak is the host's)
    device_peak_bytes: Optional[int] = None
    cost: Optional[_Part] = None  # an accelerator engine's kernelcli.kernels.CostModel
    routes: Optional[_Part] = None  # data.landmarks: run._landmarks.RouteCosts
    files: Optional[PlannedFiles] = None  # the finished run directory's files
    engine_reason: str = ""  # why plan.engine, the engine, computes (kernels.engine_reason)
    patches: Optional[PatchCost] = None  # data.preprocess: random_patches

    def to_dict(self) -> dict:
        out = self.plan.to_dict()
        out.update(name=self.name, kinds=list(self.kinds), dtype=self.dtype,
                   devices=self.plan.devices, platform=self.platform,
                   stats_bytes=self.stats_bytes,
                   cov_elements_per_pair=self.cov_elements_per_pair,
                   stats_peak_bytes=self.stats_peak_bytes,
                   process_peak_bytes_estimate=self.process_peak_bytes_estimate,
                   memory_source=self.memory_source, augment=list(self.augment),
                   group_size=self.group_size, engine_reason=self.engine_reason,
                   network_evaluations=self.plan.pairs_total * self.group_size)
        for part in (self.solve, self.workers, self.timing, self.readouts, self.routes,
                     self.files, self.patches):
            if part is not None:
                out.update(part.to_dict())
        if self.device_peak_bytes is not None:
            out["device_peak_bytes_estimate"] = self.device_peak_bytes
        if self.cost is not None:
            out.update(self.cost.to_dict())
        return out
