"""The geometry of a run: which blocks of the kernel matrix exist and how many pairs a
kernel call takes. All that a run directory's readers (status, verify, assemble,
shards) need: no memory figures, no jax, no h5py. How a manifest records it is
:class:`kernelcli.store.Manifest`'s."""

from __future__ import annotations

import dataclasses
import numbers

from ..errors import ConfigError
from ._blocks import Block

_MAX_BLOCKS = 1_000_000  # keeps the plan's tuple of blocks (and the tiles folder) sane


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The blocks of an ``(n1, n2)`` kernel matrix and the pairs per kernel call.

    ``blocks`` are in row-major order; a symmetric geometry lists only ``row >= col``.
    With ``n_test`` test rows (symmetric only), the rows ``[n1, n1 + n_test)`` follow
    the training rows: their blocks hold ``K(test, x1)``, every column, in rows of
    blocks of their own (the test grid starts at row ``n1``, so no block mixes
    training and test rows). ``itemsize`` is the bytes of one kernel value.
    """

    n1: int
    n2: int
    symmetric: bool
    block: int
    pair_batch: int
    kinds: tuple
    itemsize: int
    blocks: tuple
    n_test: int = 0

    def is_test(self, block) -> bool:
        """Whether ``block`` holds test rows (``K(test, x1)``)."""
        return block.r0 >= self.n1

    @property
    def pairs_total(self) -> int:
        """Pair evaluations (the lower triangle only when symmetric)."""
        return sum(b.n_pairs for b in self.blocks)

    @property
    def blocks_total(self) -> int:
        return len(self.blocks)

    @property
    def batches_total(self) -> int:
        """Kernel calls: each block is cut into batches of at most ``pair_batch`` pairs."""
        return sum(-(-b.n_pairs // self.pair_batch) for b in self.blocks)

    @property
    def output_bytes(self) -> int:
        """Size of the assembled result: one ``(n1, n2)`` matrix per kind (and one
        ``(n_test, n2)`` matrix and ``(n_test,)`` diagonal with a test set)."""
        per_kind = self.n1 * self.n2 + self.n_test * (self.n2 + 1)
        return per_kind * self.itemsize * len(self.kinds)


def make_geometry(n1: int, n2: int, *, symmetric: bool, block: int, pair_batch: int,
                  kinds, itemsize: int, n_test: int = 0) -> Geometry:
    """The geometry of an ``(n1, n2)`` matrix cut into ``block``-edged tiles.

    Raises ValueError for inconsistent sizes and :class:`ConfigError` naming
    ``compute.block`` for a block that is not positive or cuts too many tiles.
    """
    n1, n2, itemsize = (require_int(name, value, minimum=1, error=ValueError)
                        for name, value in (("n1", n1), ("n2", n2), ("itemsize", itemsize)))
    kinds = tuple(kinds)
    if not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"`kinds` (={kinds!r}) must be non-empty and without repeats")
    if symmetric and n1 != n2:
        raise ValueError(f"a symmetric plan needs n1 == n2; got n1={n1}, n2={n2}")
    n_test = require_int("n_test", n_test, minimum=0, error=ValueError)
    if n_test and not symmetric:
        raise ValueError(f"test rows (n_test={n_test}) need a symmetric plan")
    edge = require_int("compute.block", block, minimum=1, error=ConfigError)
    pair_batch = require_int("pair_batch", pair_batch, minimum=1, error=ConfigError)
    rows, cols = -(-n1 // edge), -(-n2 // edge)
    count = rows * (rows + 1) // 2 if symmetric else rows * cols
    count += -(-n_test // edge) * cols
    if count > _MAX_BLOCKS:
        raise ConfigError(
            f"`compute.block` (={edge}) cuts the {n1} x {n2} matrix into {count} blocks; "
            f"at most {_MAX_BLOCKS} are supported, so use a larger block or leave it unset"
        )
    blocks = tuple(_grid(n1, n2, edge, symmetric)) + tuple(_test_grid(n1, n2, n_test, edge))
    return Geometry(n1=n1, n2=n2, symmetric=bool(symmetric), block=edge,
                    pair_batch=pair_batch, kinds=kinds, itemsize=itemsize, blocks=blocks,
                    n_test=n_test)


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


def require_int(name, value, *, minimum, error) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"`{name}` (={value!r}) must be an integer")
    if minimum is not None and value < minimum:
        raise error(f"`{name}` (={value}) must be at least {minimum}")
    return int(value)
