"""The plan: the run's geometry (blocks, pairs per call) and the memory it takes.

Pure arithmetic on sizes; it never touches an array of the data set, and what it
knows of the engine comes in as :class:`EngineCosts`, measured by the run layer.

Two sizes are chosen, for different reasons:

* ``block`` -- the edge of a storage tile, from the cost of a pair, not from memory
  (the engine's memory does not grow with the block, the time per block does). A
  block is the unit of durability: a kill loses at most the blocks in flight and
  progress is counted in blocks, which argues for small blocks; each block however
  costs a file, an fsync and a partly filled last batch, which argues for large
  ones. :func:`auto_block` aims at about half a minute of work per block.
* ``pair_batch`` -- pairs evaluated in one kernel call: enough chunks to amortise a
  call, few enough that every device gets several batches of a block, and never
  more than the memory budget fits (``fixed_bytes + pair_batch * bytes_per_pair``).
  The accelerator engine (``EngineCosts.engine``) has no chunk loop: a call is one
  program step over its pairs, so its batch is as large as the (device) memory
  budget holds, up to ``ACCELERATOR_MAX_PAIR_BATCH`` and about two batches per device
  of a block.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Callable, Optional

from ..config import format_size
from ..errors import BudgetError, ConfigError
from ._geometry import Geometry, make_geometry, require_int

MiB = 1024**2

# Work of one block, in elementwise operations: about half a minute here. Fewer
# makes per-block costs (a tile file, an fsync) show; more loses more to a kill.
_BLOCK_WORK = 2e11
# On the accelerator engine: a GPU streams two to three orders of magnitude more
# elementwise work than a CPU core (an H200 copies at ~3 TB/s, this VM at ~26 GB/s),
# so the same half minute per block is about this many times the work; smaller blocks
# would spend a visible share of the device's time on a tile's file and fsync.
_ACCELERATOR_BLOCK_FACTOR = 1000
_OPS_PER_ENTRY = 30  # elementwise operations per covariance entry per layer (measured HLO)
# The accelerator engine's largest pair batch: beyond a few thousand pairs a step is long
# enough to hide a launch, and larger programs only cost compile time and device memory.
ACCELERATOR_MAX_PAIR_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class EngineCosts:
    """What the planner needs to know of the compiled kernel (measured by the run layer).

    ``chunk``: pairs the engine evaluates at once inside a call; ``min_call``: the
    fewest pairs a call evaluates (a smaller batch is padded up to it); ``flat_input``: one
    Gram matrix per call (a fully connected net); ``cov_elements``: covariance entries
    of one pair; ``layers``: layers of the architecture, those inside branches too;
    ``compiled_memory(rows, cols, pairs)``: bytes per device of one call at ``pairs``
    pairs of a ``rows x cols`` block, from XLA's analysis of the compiled program (each
    call is a compilation).
    """

    chunk: int
    flat_input: bool
    cov_elements: int
    layers: int
    kinds: tuple
    itemsize: int
    compiled_memory: Callable[[int, int, int], int]
    engine: str = "cpu"
    min_call: int = 1


@dataclasses.dataclass(frozen=True)
class MemoryFigures:
    """Bytes per device of one kernel call: ``fixed_bytes + pairs * bytes_per_pair``,
    within ``budget_bytes``; ``untiled_bytes_per_pair`` (when known) is a pair's whole
    covariance, for what one untiled call would need; ``memory_kind``: which memory the
    budget is, ``"host"`` (CPU devices) or ``"device"`` (an accelerator's own)."""

    bytes_per_pair: int
    fixed_bytes: int
    budget_bytes: int
    devices: int = 1
    untiled_bytes_per_pair: int = 0
    memory_kind: str = "host"

    def fit(self) -> int:
        """Pairs per call the budget holds (< 1: not even one)."""
        return (self.budget_bytes - self.fixed_bytes) // self.bytes_per_pair

    def peak(self, pairs: int) -> int:
        return self.fixed_bytes + pairs * self.bytes_per_pair


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run's :class:`Geometry` and the :class:`MemoryFigures` of its kernel calls.

    Every field of both reads as an attribute of the plan (``plan.blocks``,
    ``plan.budget_bytes``); byte counts are per device.
    """

    geometry: Geometry
    memory: MemoryFigures
    engine: str = "cpu"  # the kernels' execution engine (compute.engine, resolved)

    # The two parts' fields, read through the plan (``plan.blocks``, ``plan.budget_bytes``):
    # one read-only property each, so the plan's surface is written out here.
    n1 = property(lambda self: self.geometry.n1)
    n2 = property(lambda self: self.geometry.n2)
    symmetric = property(lambda self: self.geometry.symmetric)
    block = property(lambda self: self.geometry.block)
    pair_batch = property(lambda self: self.geometry.pair_batch)
    kinds = property(lambda self: self.geometry.kinds)
    itemsize = property(lambda self: self.geometry.itemsize)
    blocks = property(lambda self: self.geometry.blocks)
    n_test = property(lambda self: self.geometry.n_test)
    pairs_total = property(lambda self: self.geometry.pairs_total)
    blocks_total = property(lambda self: self.geometry.blocks_total)
    batches_total = property(lambda self: self.geometry.batches_total)
    output_bytes = property(lambda self: self.geometry.output_bytes)
    bytes_per_pair = property(lambda self: self.memory.bytes_per_pair)
    fixed_bytes = property(lambda self: self.memory.fixed_bytes)
    budget_bytes = property(lambda self: self.memory.budget_bytes)
    devices = property(lambda self: self.memory.devices)
    untiled_bytes_per_pair = property(lambda self: self.memory.untiled_bytes_per_pair)
    memory_kind = property(lambda self: self.memory.memory_kind)

    def is_test(self, block) -> bool:
        return self.geometry.is_test(block)

    @property
    def peak_bytes_per_device(self) -> int:
        return self.memory.peak(self.geometry.pair_batch)

    @property
    def untiled_peak_bytes(self) -> int:
        """What one call over the whole ``n1 x n2`` square at once would need: every
        pair's covariance materialised together (``untiled_bytes_per_pair`` each,
        when known, else ``bytes_per_pair``)."""
        m, g = self.memory, self.geometry
        per_pair = m.untiled_bytes_per_pair or m.bytes_per_pair
        return m.fixed_bytes + (g.n1 + g.n_test) * g.n2 * per_pair

    def to_dict(self) -> dict:
        """The JSON form reported by ``estimate --memory --json``."""
        g, m = self.geometry, self.memory
        return {
            "n1": g.n1, "n2": g.n2, "n_test": g.n_test, "symmetric": g.symmetric,
            "pairs_total": g.pairs_total, "pair_batch": g.pair_batch, "block": g.block,
            "blocks_total": g.blocks_total, "batches_total": g.batches_total,
            "peak_bytes_per_device": self.peak_bytes_per_device,
            "memory_budget_bytes": m.budget_bytes,
            "untiled_peak_bytes": self.untiled_peak_bytes,
            "output_bytes": g.output_bytes,
            "bytes_per_pair": m.bytes_per_pair, "fixed_bytes": m.fixed_bytes,
            "devices": m.devices, "memory_budget_of": m.memory_kind, "engine": self.engine,
        }


def make_plan(n1: int, n2: int, *, symmetric: bool, bytes_per_pair: int, fixed_bytes: int,
              budget_bytes: int, kinds, itemsize: int, block: int,
              pair_batch: Optional[int] = None, devices: int = 1,
              untiled_bytes_per_pair: int = 0, n_test: int = 0,
              memory: str = "host") -> Plan:
    """Plan an ``(n1, n2)`` kernel matrix in ``block``-edged tiles within ``budget_bytes``
    per device, from a known memory line (``fixed_bytes + pairs * bytes_per_pair``).

    A given ``pair_batch`` is kept (and one that does not fit is an error, never
    shrunk); without one it is the most the budget holds, capped at a block's pairs.

    Raises :class:`BudgetError` when the budget cannot hold one pair (or the given
    ``pair_batch``) and :class:`ConfigError` for a non-positive ``block``/``devices``.
    ``memory``: which memory the budget is (``"host"`` or ``"device"``, for messages).
    """
    bytes_per_pair = require_int("bytes_per_pair", bytes_per_pair, minimum=1, error=ValueError)
    figures = MemoryFigures(
        bytes_per_pair=bytes_per_pair,
        fixed_bytes=require_int("fixed_bytes", fixed_bytes, minimum=0, error=ValueError),
        budget_bytes=require_int("budget_bytes", budget_bytes, minimum=None, error=ValueError),
        devices=require_int("compute.devices", devices, minimum=1, error=ConfigError),
        untiled_bytes_per_pair=int(untiled_bytes_per_pair), memory_kind=memory)
    # the key, and which memory it means where that is not the host's
    key = "`compute.memory`" + (", device memory" if figures.memory_kind == "device" else "")
    if pair_batch is not None:
        pair_batch = require_int("pair_batch", pair_batch, minimum=1, error=ConfigError)
    fit = figures.fit()
    if fit < 1:
        smallest = figures.peak(1)
        raise BudgetError(
            f"the memory budget ({key}) of {format_size(figures.budget_bytes)} "
            f"cannot hold one pair evaluation, which needs {format_size(bytes_per_pair)} on "
            f"top of {format_size(figures.fixed_bytes)} fixed; the smallest budget that works "
            f"is {format_size(smallest)} ({smallest} bytes)"
        )
    if pair_batch is not None and pair_batch > fit:
        needed = figures.peak(pair_batch)
        raise BudgetError(
            f"`pair_batch` (={pair_batch}) needs {format_size(needed)} but the memory "
            f"budget ({key}) is {format_size(figures.budget_bytes)}; at most {fit} "
            f"pairs fit, or the smallest budget that works for {pair_batch} is "
            f"{format_size(needed)} ({needed} bytes)"
        )
    geometry = make_geometry(n1, n2, symmetric=symmetric, block=block,
                             pair_batch=pair_batch or 1, kinds=kinds, itemsize=itemsize,
                             n_test=n_test)
    if pair_batch is None:  # a batch larger than a block would never be filled
        largest = max(b.n_pairs for b in geometry.blocks)
        geometry = dataclasses.replace(geometry, pair_batch=min(fit, largest))
    return Plan(geometry, figures)


def plan_run(n1: int, n2: int, *, symmetric: bool, costs: EngineCosts, budget_bytes: int,
             devices: int = 1, n_test: int = 0, block: Optional[int] = None,
             pair_batch: Optional[int] = None, memory: str = "host") -> Plan:
    """The plan of a run: block edge and pair batch (given, as on resume, or chosen as
    the module docstring explains), the memory line measured at that batch, and the fit.

    ``budget_bytes`` is per device, of ``memory`` (``"host"``, or ``"device"`` on an
    accelerator). A given ``pair_batch`` is kept exactly, so a resumed
    run evaluates the batches an uninterrupted one would.
    """
    if block is None:
        block = auto_block(costs, max(n1, n2))
    # batches cut a block's evaluated pairs: a batch sized by a diagonal block's
    # n (n + 1) / 2 left a last call of a pair or two, padded to a whole batch (13% of
    # cnn21_gap's work at 16 inputs)
    largest = max(b.n_evaluated for b in make_geometry(
        n1, n2, symmetric=symmetric, block=block, pair_batch=1, kinds=costs.kinds,
        itemsize=costs.itemsize, n_test=n_test).blocks)
    want = pair_batch or auto_pair_batch(costs, block, devices, 1 << 62, largest)
    assert want is not None  # None only where not one pair fits, and 2^62 pairs do
    bytes_per_pair, fixed = memory_line(costs, block, want)
    if pair_batch is None:
        fit = (budget_bytes - fixed) // bytes_per_pair
        pair_batch = None if fit < 1 else min(want, fit)  # None: make_plan says why
    plan = make_plan(n1, n2, symmetric=symmetric, bytes_per_pair=bytes_per_pair,
                     fixed_bytes=fixed, budget_bytes=budget_bytes, kinds=costs.kinds,
                     itemsize=costs.itemsize, block=block, pair_batch=pair_batch,
                     devices=devices, untiled_bytes_per_pair=costs.cov_elements * costs.itemsize,
                     n_test=n_test, memory=memory)
    return dataclasses.replace(plan, engine=costs.engine)


def memory_line(costs: EngineCosts, block: int, batch: int) -> tuple[int, int]:
    """``(bytes_per_pair, fixed_bytes)`` of one call on a ``block x block`` tile, from
    the compiled program at ``batch`` pairs and at half of it: exact at ``batch`` (the
    plan's peak) and a conservative line below it (memory is flat above a chunk, so a
    smaller batch that a tight budget forces needs at most that)."""
    if costs.flat_input and batch >= block * block:
        # one grid program per block, whatever the batch: its memory is all fixed, and
        # bounds that of a smaller batch (arrays of the batch's length, not the block's)
        return 1, costs.compiled_memory(block, block, block * block)
    p2 = max(2, batch)
    p1 = p2 // 2
    # the batch the run calls first: the engine may answer at half of it from that
    # program, without compiling another (kernels._memory_model)
    m2 = costs.compiled_memory(block, block, p2)
    m1 = costs.compiled_memory(block, block, p1)
    per_pair = max(1, -(-(m2 - m1) // (p2 - p1)))
    return per_pair, max(0, m1 - p1 * per_pair)


def auto_block(costs: EngineCosts, n_max: int) -> int:
    """Block edge (multiple of 8, 64..1024, at most the data set rounded up to 8) for
    about ``_BLOCK_WORK`` elementwise operations per block (on the accelerator engine
    ``_ACCELERATOR_BLOCK_FACTOR`` times that).

    Networks on flat inputs (one Gram matrix per call) may take blocks up to 4096: a
    pair costs them a few operations, so a 1024 block is milliseconds of work, and
    the padding, index arrays and per-call costs of many small blocks would show
    (fc2 at N 2000: 0.45 s in 1024 blocks, 0.27 s in one)."""
    work = costs.cov_elements * max(1, costs.layers) * _OPS_PER_ENTRY
    largest = 4096 if costs.flat_input else 1024
    budget = _BLOCK_WORK * (_ACCELERATOR_BLOCK_FACTOR if costs.engine == "accelerator" else 1)
    target = min(max(budget / work, 64 * 64), largest * largest)
    edge = int(round(target ** 0.5 / 8)) * 8
    return max(8, min(max(edge, 64), largest, -(-n_max // 8) * 8))


def auto_pair_batch(costs: EngineCosts, block: int, n_devices: int, fit: int,
                    pairs: Optional[int] = None) -> Optional[int]:
    """Pairs per call: enough chunks to amortise a call, few enough that every device
    gets several batches of a block of ``pairs`` pairs (default: ``block^2 / 2``, a
    diagonal block's); never more than the budget fits (``fit``; ``None`` when it
    holds not one pair)."""
    if fit < 1:
        return None
    if costs.flat_input:  # one Gram matrix per call: one call per block
        return int(min(fit, block * block))
    pairs = block * block // 2 if pairs is None else pairs
    if costs.engine == "accelerator":
        # No chunk loop: the batch is the program step, as large as memory holds (the
        # caller caps it at the budget's fit), but about two batches per device of a
        # block, so a device runs one batch while the next is being launched.
        per_device = -(-pairs // (2 * n_devices))
        return int(max(1, min(fit, ACCELERATOR_MAX_PAIR_BATCH, per_device)))
    # Several (4) batches per device in a block's pairs, for the work queue to balance;
    # but never fewer than 4 pairs a batch when the block has them (a small data set):
    # a call on a few pairs costs about what one on a single pair does (measured).
    # The engine pads a call to whole chunks, and a smaller one to ``min_call`` pairs:
    # a batch is that (on a small data set, one device gets fewer batches of real
    # pairs rather than several of padding; 4-7x the pairs at N 8 to 32 of a flatten
    # network), or the nearest number of whole chunks; never more
    # than the block, which would only evaluate padding.
    per_device = max(-(-pairs // (4 * n_devices)), min(-(-pairs // n_devices), 4))
    want = min(64 * costs.chunk, per_device)
    if want >= costs.chunk:
        want = max(1, round(want / costs.chunk)) * costs.chunk
        if want == 2 * costs.chunk > 2:
            # the memory line's half of two chunks is one, another program (XLA drops
            # a one-step loop: kernels._memory_model), so a second compilation before
            # the first pair; three chunks' half is answered from the same program
            want = 3 * costs.chunk
    want = min(max(want, costs.min_call), max(pairs, 1))
    if costs.chunk == 1 and want < pairs:
        # a pair a chunk (pooling networks): the same number of calls for every device,
        # cut evenly, so no device waits on another's last call and none pads much
        calls = -(-pairs // want)
        calls = -(-calls // n_devices) * n_devices
        want = -(-pairs // calls)
    return int(max(1, min(fit, want)))


def assign(blocks, n_workers: int) -> list:
    """Split ``blocks`` over ``n_workers`` with balanced pair counts; deterministic.

    Greedy longest-first: the largest remaining block goes to the least-loaded worker
    (ties to the lowest index). Each worker's list keeps the input order.
    """
    n_workers = require_int("n_workers", n_workers, minimum=1, error=ValueError)
    blocks = list(blocks)
    order = sorted(range(len(blocks)), key=lambda k: (-blocks[k].n_pairs, k))
    heap = [(0, w) for w in range(n_workers)]
    chosen: list[list[int]] = [[] for _ in range(n_workers)]
    for k in order:
        load, w = heapq.heappop(heap)
        chosen[w].append(k)
        heapq.heappush(heap, (load + blocks[k].n_pairs, w))
    return [[blocks[k] for k in sorted(ks)] for ks in chosen]


def auto_budget(available: int, headroom_fraction: float = 0.2,
                headroom_min: int = 512 * MiB) -> int:
    """``available`` less a headroom of ``max(fraction * available, headroom_min)``; >= 0."""
    headroom = max(int(available * headroom_fraction), headroom_min)
    return max(0, int(available) - headroom)

