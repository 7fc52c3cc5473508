"""Tiles: one small HDF5 file per completed block, ``tiles/<key>.h5``.

A tile holds one dataset per kernel kind, of shape ``(r1 - r0, c1 - c0)``, and the
block's ranges as attributes so a tile can never be read into the wrong place. A
diagonal tile is stored as the full square, its upper triangle mirrored from the
lower one, so it is exactly symmetric.

Blocks are duck-typed (anything with ``key``, ``r0``, ``r1``, ``c0``, ``c1``,
``diagonal`` and ``local_pairs()``, i.e. :class:`kernelcli.plan.Block`); the store
does not import the planner.
"""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..errors import ComputeError, DamagedFileError, RunDirError
from ._manifest_schema import bytes_bound
from ._sealed import SealError, read_sealed, write_sealed

_TILE = re.compile(r"^(r\d{5}c\d{5})\.h5$")
_RANGE_ATTRS = ("r0", "r1", "c0", "c1")


class TileMissing(ComputeError):
    """A tile that is not there (under its own name; :mod:`._packs` looks in the packs)."""


def tile_path(tiles_dir: Path, key: str) -> Path:
    if not re.fullmatch(r"r\d{5}c\d{5}", key):
        raise ValueError(f"tile key {key!r} is not of the form 'r00000c00000'")
    return Path(tiles_dir) / f"{key}.h5"


def done_keys(tiles_dir: Path) -> set[str]:
    """Keys of the tiles present under their final name, i.e. of the completed blocks."""
    try:
        names = os.listdir(tiles_dir)
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise RunDirError(f"cannot list {tiles_dir}: {exc.strerror or exc}") from None
    return {m[1] for m in map(_TILE.match, names) if m is not None}


def full_tile(block, values: np.ndarray) -> np.ndarray:
    """The block's tile, shape ``(r1 - r0, c1 - c0)``, from computed ``values``.

    ``values`` is either the tile itself, shape ``(r1 - r0, c1 - c0)``, or one value
    per pair of ``block.local_pairs()``, shape ``(n_pairs,)``. For a diagonal block
    only the lower triangle (diagonal included) is read; the upper is its mirror.
    """
    shape = (block.r1 - block.r0, block.c1 - block.c0)
    values = np.asarray(values)
    if values.ndim == 1:
        i, j = block.local_pairs()
        if values.shape != i.shape:
            raise ValueError(
                f"block {block.key} has {i.shape[0]} pairs but {values.shape[0]} values were given"
            )
        tile = np.zeros(shape, dtype=values.dtype)
        tile[i, j] = values
        if block.diagonal:
            tile[j, i] = values
        return tile
    if values.shape != shape:
        raise ValueError(
            f"block {block.key} needs values of shape {shape} or ({block.n_pairs},), "
            f"got {values.shape}"
        )
    if block.diagonal:
        return np.where(np.tri(shape[0], dtype=bool), values, values.T)
    return np.ascontiguousarray(values)


def write_tile(tiles_dir: Path, block, arrays: dict, run: str = "") -> Path:
    """Write the tile of ``block`` as a sealed file: once its final name exists, it is
    complete and verified (:mod:`._sealed`).

    ``arrays`` maps each kind (``'nngp'``, ``'ntk'``) to values as :func:`full_tile`
    accepts them; ``run`` is the run's identity (the manifest checksum), stored so a
    tile of another run is never read into this one.
    """
    if not arrays:
        raise ValueError(f"no arrays given for block {block.key}")
    tiles = {}
    for kind, values in arrays.items():
        if not isinstance(kind, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kind):
            raise ValueError(f"kind {kind!r} is not a valid dataset name")
        tiles[kind] = full_tile(block, values)
    attrs: dict[str, Any] = {name: int(getattr(block, name)) for name in _RANGE_ATTRS}
    attrs.update(diagonal=bool(block.diagonal), key=block.key, run=run)
    return write_sealed(tile_path(tiles_dir, block.key), tiles, attrs)


def read_tile(tiles_dir: Path, block, kinds=None, run: str = "") -> dict:
    """The arrays of ``block``'s tile, each of shape ``(r1 - r0, c1 - c0)``, verified:
    every byte against the tile's checksum, its block and run against ``block`` and
    ``run`` (the run's identity, or a collection of the identities accepted for this
    block: an extended run also accepts the tiles it inherited, see
    :mod:`._lineage`). :class:`DamagedFileError` names the tile and what is wrong.

    ``kinds`` restricts (and requires) the kinds read; default all in the file.
    """
    path = tile_path(tiles_dir, block.key)
    try:
        datasets, attrs = read_sealed(path, max_bytes=None if kinds is None else bytes_bound(
            block.r1 - block.r0, block.c1 - block.c0, len(kinds)))
    except FileNotFoundError:
        raise TileMissing(f"tile {path} is missing: block {block.key} was not computed") from None
    except SealError as exc:
        raise DamagedFileError(f"tile {path} is damaged: {exc}") from None
    except OSError as exc:
        raise ComputeError(f"cannot read tile {path}: {exc.strerror or exc}") from None
    return check_tile(str(path), datasets, attrs, block, kinds, run)


def check_tile(path: str, datasets: dict, attrs: dict, block, kinds=None, run="") -> dict:
    """The arrays of ``datasets`` (an unsealed tile; messages call it ``tile <path>``)
    when its attributes say it is ``block``'s tile of ``run`` holding ``kinds``;
    :class:`DamagedFileError` otherwise (see :func:`read_tile`)."""
    found = tuple(_int(attrs.get(name)) for name in _RANGE_ATTRS)
    wanted = tuple(int(getattr(block, name)) for name in _RANGE_ATTRS)
    if found != wanted or _text(attrs.get("key")) != block.key:
        raise DamagedFileError(
            f"tile {path} covers rows/columns {found}, not block {block.key}'s "
            f"{wanted}: it belongs to another plan")
    accepted = (run,) if isinstance(run, str) else tuple(run)
    if _text(attrs.get("run")) not in accepted:
        raise DamagedFileError(f"tile {path} was computed by another run (its run identity "
                               f"differs from this manifest's)")
    names = list(datasets) if kinds is None else list(kinds)
    missing = [k for k in names if k not in datasets]
    if missing:
        raise DamagedFileError(f"tile {path} has no dataset {missing[0]!r}")
    shape = (block.r1 - block.r0, block.c1 - block.c0)
    for kind in names:
        if datasets[kind].shape != shape:
            raise DamagedFileError(f"tile {path} dataset {kind!r} has shape "
                                   f"{datasets[kind].shape}, not {shape}")
    return {kind: datasets[kind] for kind in names}


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def tile_write_seconds(kinds, tile: np.ndarray) -> float:
    """Seconds to serialise ``tile`` once per kind as an HDF5 image in memory (what
    ``estimate`` times of the store's writes; nothing touches the disk)."""
    t = time.perf_counter()
    with h5py.File(io.BytesIO(), "w") as f:
        for kind in kinds:
            f.create_dataset(kind, data=tile)
    return time.perf_counter() - t
