"""Assembly of the tiles into the final ``kernels.h5``.

Tiles are read one at a time and written into the result by slices, so memory stays
at one tile whatever the size of the matrix. For a symmetric run only blocks with
``row >= col`` exist; each off-diagonal tile is also written transposed into its
mirror place, which makes the result exactly symmetric.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from ..errors import ComputeError
from ._atomic import atomic_path
from ._tiles import done_keys, read_tile


def assemble(result: Path, tiles_dir: Path, blocks, n1: int, n2: int, kinds, dtype,
             symmetric: bool, attrs: dict, n_test: int = 0, extra=None) -> Path:
    """Write ``result`` (datasets ``kinds``, each ``(n1, n2)`` of ``dtype``) atomically.

    Blocks whose rows start at ``n1`` or beyond are test rows (``n_test`` of them):
    they go to ``<kind>_test``, ``(n_test, n2)``, never mirrored. ``extra``: more
    datasets (name -> array) written as they are (labels, the test diagonal).
    """
    blocks = list(blocks)
    kinds = tuple(kinds)
    dtype = np.dtype(dtype)
    test = [b for b in blocks if b.r0 >= n1]
    blocks = [b for b in blocks if b.r0 < n1]
    _check_cover(blocks, n1, n2, symmetric)
    _check_cover(test, n_test, n2, False, offset=n1)
    have = done_keys(tiles_dir)
    missing = [b.key for b in blocks + test if b.key not in have]
    if missing:
        raise ComputeError(
            f"cannot assemble {result}: {len(missing)} of {len(blocks) + len(test)} blocks "
            f"have no tile (first: {missing[0]}); resume the run to compute them"
        )
    with atomic_path(result) as tmp:
        with h5py.File(tmp, "w") as f:
            datasets = {k: f.create_dataset(k, shape=(n1, n2), dtype=dtype) for k in kinds}
            if n_test:
                tests = {k: f.create_dataset(f"{k}_test", shape=(n_test, n2), dtype=dtype)
                         for k in kinds}
                for block in test:
                    for kind, tile in read_tile(tiles_dir, block, kinds).items():
                        tests[kind][block.r0 - n1:block.r1 - n1, block.c0:block.c1] = (
                            tile.astype(dtype, copy=False))
            for name, value in (extra or {}).items():
                f.create_dataset(name, data=value)
            for block in blocks:
                tiles = read_tile(tiles_dir, block, kinds)
                for kind, tile in tiles.items():
                    tile = tile.astype(dtype, copy=False)
                    datasets[kind][block.r0:block.r1, block.c0:block.c1] = tile
                    if symmetric and not block.diagonal:
                        datasets[kind][block.c0:block.c1, block.r0:block.r1] = (
                            np.ascontiguousarray(tile.T)
                        )
            for name, value in attrs.items():
                f.attrs[name] = _attr_value(value)
    return Path(result)


def _check_cover(blocks, n1, n2, symmetric, offset: int = 0):
    """The blocks must tile the matrix (with their mirrors, when symmetric) in bounds;
    its rows start at ``offset``."""
    if symmetric and n1 != n2:
        raise ValueError(f"a symmetric result must be square; got n1={n1}, n2={n2}")
    area = 0
    for b in blocks:
        if b.r1 > offset + n1 or b.c1 > n2:
            raise ValueError(f"block {b.key} reaches past the ({n1}, {n2}) matrix")
        if symmetric and (b.diagonal != (b.row == b.col) or b.row < b.col):
            raise ValueError(f"block {b.key} does not belong to a symmetric plan")
        h, w = b.r1 - b.r0, b.c1 - b.c0
        area += h * w if (b.diagonal or not symmetric) else 2 * h * w
    if area != n1 * n2 or len({b.key for b in blocks}) != len(blocks):
        raise ValueError(f"the blocks do not cover the ({n1}, {n2}) matrix exactly once")


def _attr_value(value):
    """HDF5 attributes hold text and numbers; anything else is stored as JSON text."""
    if isinstance(value, (str, bytes, bool, int, float, np.generic, np.ndarray)):
        return value
    return json.dumps(value, sort_keys=True)
