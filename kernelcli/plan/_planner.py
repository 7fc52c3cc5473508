"""The plan: which blocks to compute, how many pairs per call, and what memory that takes.

Pure arithmetic on sizes; it never touches an array of the data set.

Two sizes are chosen, for different reasons:

* ``pair_batch`` -- pairs evaluated in one kernel call. Memory grows linearly with it
  (``fixed_bytes + pair_batch * bytes_per_pair``), so it is the largest that fits the
  budget. A batch larger than a block would never be filled, so it is capped there.
* ``block`` -- the edge of a storage tile. A block is the unit of durability: a kill
  loses at most the blocks in flight, and progress is counted in blocks, which
  argues for small blocks. Each block however costs a file, an fsync and a partly
  filled last batch, which argues for large ones. The automatic edge is therefore a
  multiple of 8 that holds at least one full batch (``edge**2 >= pair_batch``), is at
  least 64 (a smaller tile is all overhead), keeps the grid to at most ``_MAX_GRID``
  blocks a side (tens of thousands of files, not millions) and is at most 1024 (a
  tile of 8 MiB per kind, minutes of work at most to redo). A data set smaller than
  one block gets a single block.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import os

from ..errors import BudgetError, ConfigError
from ._blocks import Block
from ._units import MiB, format_size

_MIN_EDGE = 64
_MAX_EDGE = 1024
_MAX_GRID = 256
_MAX_BLOCKS = 1_000_000  # keeps the plan's tuple of blocks (and the tiles folder) sane


@dataclasses.dataclass(frozen=True)
class Plan:
    """The blocks of an ``(n1, n2)`` kernel matrix and the memory their computation needs.

    ``blocks`` are in row-major order; a symmetric plan lists only ``row >= col``.
    With ``n_test`` test rows (a symmetric plan only), the rows ``[n1, n1 + n_test)``
    follow the training rows: their blocks hold ``K(test, x1)``, every column, in
    rows of blocks of their own (the test grid starts at row ``n1``, so no block
    mixes training and test rows). Byte counts are per device.
    """

    n1: int
    n2: int
    symmetric: bool
    block: int
    pair_batch: int
    kinds: tuple
    itemsize: int
    bytes_per_pair: int
    fixed_bytes: int
    budget_bytes: int
    devices: int
    blocks: tuple
    untiled_bytes_per_pair: int = 0
    n_test: int = 0

    def is_test(self, block) -> bool:
        """Whether ``block`` holds test rows (``K(test, x1)``)."""
        return block.r0 >= self.n1

    @property
    def pairs_total(self) -> int:
        """Pair evaluations the plan runs (the lower triangle only when symmetric)."""
        return sum(b.n_pairs for b in self.blocks)

    @property
    def blocks_total(self) -> int:
        return len(self.blocks)

    @property
    def batches_total(self) -> int:
        """Kernel calls: each block is cut into batches of at most ``pair_batch`` pairs."""
        return sum(-(-b.n_pairs // self.pair_batch) for b in self.blocks)

    @property
    def peak_bytes_per_device(self) -> int:
        return self.fixed_bytes + self.pair_batch * self.bytes_per_pair

    @property
    def untiled_peak_bytes(self) -> int:
        """What one call over the whole ``n1 x n2`` square at once would need: every
        pair's covariance materialised together (``untiled_bytes_per_pair`` each,
        when the caller knows it, else ``bytes_per_pair``)."""
        per_pair = self.untiled_bytes_per_pair or self.bytes_per_pair
        return self.fixed_bytes + (self.n1 + self.n_test) * self.n2 * per_pair

    @property
    def output_bytes(self) -> int:
        """Size of the assembled result: one ``(n1, n2)`` matrix per kind (and one
        ``(n_test, n2)`` matrix and ``(n_test,)`` diagonal with a test set)."""
        per_kind = self.n1 * self.n2 + self.n_test * (self.n2 + 1)
        return per_kind * self.itemsize * len(self.kinds)

    def to_dict(self) -> dict:
        """The JSON form reported by ``estimate --memory --json``."""
        return {
            "n1": self.n1,
            "n2": self.n2,
            "n_test": self.n_test,
            "symmetric": self.symmetric,
            "pairs_total": self.pairs_total,
            "pair_batch": self.pair_batch,
            "block": self.block,
            "blocks_total": self.blocks_total,
            "batches_total": self.batches_total,
            "peak_bytes_per_device": self.peak_bytes_per_device,
            "memory_budget_bytes": self.budget_bytes,
            "untiled_peak_bytes": self.untiled_peak_bytes,
            "output_bytes": self.output_bytes,
            "bytes_per_pair": self.bytes_per_pair,
            "fixed_bytes": self.fixed_bytes,
            "devices": self.devices,
        }


def make_plan(
    n1: int,
    n2: int,
    *,
    symmetric: bool,
    bytes_per_pair: int,
    fixed_bytes: int,
    budget_bytes: int,
    kinds,
    itemsize: int,
    block: int | None = None,
    pair_batch: int | None = None,
    devices: int = 1,
    untiled_bytes_per_pair: int = 0,
    n_test: int = 0,
) -> Plan:
    """Plan the computation of an ``(n1, n2)`` kernel matrix within ``budget_bytes`` per device.

    ``bytes_per_pair`` and ``fixed_bytes`` model a kernel call's memory as
    ``fixed_bytes + pairs * bytes_per_pair``. ``block`` and ``pair_batch`` are taken
    as given when given (and a ``pair_batch`` that does not fit is an error, never
    shrunk); otherwise chosen as the module docstring explains.

    Raises :class:`BudgetError` when the budget cannot hold one pair (or the given
    ``pair_batch``) and :class:`ConfigError` for a non-positive ``block``/``devices``.
    """
    n1, n2, bytes_per_pair, itemsize = (
        _require_int(name, value, minimum=1, error=ValueError)
        for name, value in (("n1", n1), ("n2", n2), ("bytes_per_pair", bytes_per_pair),
                            ("itemsize", itemsize))
    )
    fixed_bytes = _require_int("fixed_bytes", fixed_bytes, minimum=0, error=ValueError)
    budget_bytes = _require_int("budget_bytes", budget_bytes, minimum=None, error=ValueError)
    kinds = tuple(kinds)
    if not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"`kinds` (={kinds!r}) must be non-empty and without repeats")
    if symmetric and n1 != n2:
        raise ValueError(f"a symmetric plan needs n1 == n2; got n1={n1}, n2={n2}")
    n_test = _require_int("n_test", n_test, minimum=0, error=ValueError)
    if n_test and not symmetric:
        raise ValueError(f"test rows (n_test={n_test}) need a symmetric plan")
    devices = _require_int("compute.devices", devices, minimum=1, error=ConfigError)
    if block is not None:
        block = _require_int("compute.block", block, minimum=1, error=ConfigError)
    if pair_batch is not None:
        pair_batch = _require_int("pair_batch", pair_batch, minimum=1, error=ConfigError)

    fit = (budget_bytes - fixed_bytes) // bytes_per_pair
    if fit < 1:
        smallest = fixed_bytes + bytes_per_pair
        raise BudgetError(
            f"the memory budget (`compute.memory`) of {format_size(budget_bytes)} cannot "
            f"hold one pair evaluation, which needs {format_size(bytes_per_pair)} on top "
            f"of {format_size(fixed_bytes)} fixed; the smallest budget that works is "
            f"{format_size(smallest)} ({smallest} bytes)"
        )
    if pair_batch is not None and pair_batch > fit:
        needed = fixed_bytes + pair_batch * bytes_per_pair
        raise BudgetError(
            f"`pair_batch` (={pair_batch}) needs {format_size(needed)} but the memory "
            f"budget (`compute.memory`) is {format_size(budget_bytes)}; at most {fit} "
            f"pairs fit, or the smallest budget that works for {pair_batch} is "
            f"{format_size(needed)} ({needed} bytes)"
        )

    edge = block if block is not None else _auto_edge(max(n1, n2), pair_batch or fit)
    rows, cols = -(-n1 // edge), -(-n2 // edge)
    count = rows * (rows + 1) // 2 if symmetric else rows * cols
    count += -(-n_test // edge) * cols
    if count > _MAX_BLOCKS:
        raise ConfigError(
            f"`compute.block` (={edge}) cuts the {n1} x {n2} matrix into {count} blocks; "
            f"at most {_MAX_BLOCKS} are supported, so use a larger block or leave it unset"
        )
    blocks = tuple(_grid(n1, n2, edge, symmetric)) + tuple(_test_grid(n1, n2, n_test, edge))
    if pair_batch is None:
        pair_batch = min(fit, max(b.n_pairs for b in blocks))
    return Plan(
        n1=n1, n2=n2, symmetric=bool(symmetric), block=edge, pair_batch=pair_batch,
        kinds=kinds, itemsize=itemsize, bytes_per_pair=bytes_per_pair,
        fixed_bytes=fixed_bytes, budget_bytes=budget_bytes, devices=devices, blocks=blocks,
        untiled_bytes_per_pair=int(untiled_bytes_per_pair), n_test=n_test,
    )


def assign(blocks, n_workers: int) -> list[list[Block]]:
    """Split ``blocks`` over ``n_workers`` with balanced pair counts; deterministic.

    Greedy longest-first: the largest remaining block goes to the least-loaded worker
    (ties to the lowest index). Each worker's list keeps the input order.
    """
    n_workers = _require_int("n_workers", n_workers, minimum=1, error=ValueError)
    blocks = list(blocks)
    order = sorted(range(len(blocks)), key=lambda k: (-blocks[k].n_pairs, k))
    heap = [(0, w) for w in range(n_workers)]
    chosen: list[list[int]] = [[] for _ in range(n_workers)]
    for k in order:
        load, w = heapq.heappop(heap)
        chosen[w].append(k)
        heapq.heappush(heap, (load + blocks[k].n_pairs, w))
    return [[blocks[k] for k in sorted(ks)] for ks in chosen]


def available_ram_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Host memory available to a new process now (``MemAvailable``), in bytes."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def auto_budget(available: int, headroom_fraction: float = 0.2,
                headroom_min: int = 512 * MiB) -> int:
    """``available`` less a headroom of ``max(fraction * available, headroom_min)``; >= 0."""
    headroom = max(int(available * headroom_fraction), headroom_min)
    return max(0, int(available) - headroom)


def _auto_edge(n_max: int, pair_batch: int) -> int:
    edge = max(math.isqrt(pair_batch - 1) + 1, -(-n_max // _MAX_GRID), _MIN_EDGE)
    return min(_round8(edge), _MAX_EDGE, _round8(n_max))


def _grid(n1: int, n2: int, edge: int, symmetric: bool):
    for row in range(-(-n1 // edge)):
        cols = range(row + 1) if symmetric else range(-(-n2 // edge))
        for col in cols:
            yield Block(
                row=row, col=col,
                r0=row * edge, r1=min((row + 1) * edge, n1),
                c0=col * edge, c1=min((col + 1) * edge, n2),
                diagonal=symmetric and row == col,
            )


def _test_grid(n1: int, n2: int, n_test: int, edge: int):
    """Blocks of the test rows ``[n1, n1 + n_test)``, numbered after the training rows."""
    first = -(-n1 // edge)
    for k in range(-(-n_test // edge)):
        for col in range(-(-n2 // edge)):
            yield Block(
                row=first + k, col=col,
                r0=n1 + k * edge, r1=min(n1 + (k + 1) * edge, n1 + n_test),
                c0=col * edge, c1=min((col + 1) * edge, n2),
            )


def _round8(n: int) -> int:
    return -(-n // 8) * 8


def _require_int(name, value, *, minimum, error) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"`{name}` (={value!r}) must be an integer")
    if minimum is not None and value < minimum:
        raise error(f"`{name}` (={value}) must be at least {minimum}")
    return int(value)
