"""Assembly of the tiles into the final ``kernels.h5`` (read back through
:mod:`._result_file`'s check before it is published).

The result is written one band of rows at a time: a band is the block-row of tiles
(for a symmetric run, the tiles left of the diagonal as they are and those below it
transposed, which makes the result exactly symmetric), so memory stays at one band
per kind however large the matrix, and each band is hashed as it is written. Every
dataset gets the sha256 of its C-order bytes as its ``sha256`` attribute and the file
the run's identity as ``run``. After the file is closed it is read back band by band
and hashed again; only a file whose every dataset matches is renamed into place.
That read-back is what makes disk full, EIO or an HDF5 error that h5py only prints
(errors at close are not raised) unable to publish a wrong result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path

import h5py
import numpy as np

from .._untrusted import UntrustedFileError
from ..errors import ComputeError, DamagedFileError, DiskFullError
from ._atomic import atomic_path
from ._result_file import verify_result
from ._sealed import digest

FORMAT = 2


def assemble(result: Path, tiles, blocks, n1: int, n2: int, kinds, dtype,
             symmetric: bool, attrs: dict, n_test: int = 0, extra=None,
             run: str = "", tile_runs=None) -> Path:
    """Write ``result`` (datasets ``kinds``, each ``(n1, n2)`` of ``dtype``) atomically.

    Blocks whose rows start at ``n1`` or beyond are test rows (``n_test`` of them):
    they go to ``<kind>_test``, ``(n_test, n2)``, never mirrored. ``extra``: more
    datasets (name -> array) written as they are (labels, the test diagonal). Every
    tile is verified as it is read (:func:`read_tile`); call :func:`check_tiles` first
    to find all damaged ones at once. ``tiles``: the run's
    :class:`~._packs.TileSet`. ``tile_runs(block)``: the run identities a tile
    may carry (default: ``run`` alone; an extended run's inherited tiles carry an
    earlier one).
    """
    blocks = list(blocks)
    kinds = tuple(kinds)
    dtype = np.dtype(dtype)
    test = [b for b in blocks if b.r0 >= n1]
    blocks = [b for b in blocks if b.r0 < n1]
    _check_cover(blocks, n1, n2, symmetric)
    _check_cover(test, n_test, n2, False, offset=n1)
    have = tiles.keys()
    missing = [b.key for b in blocks + test if b.key not in have]
    if missing:
        raise ComputeError(
            f"cannot assemble {result}: {len(missing)} of {len(blocks) + len(test)} blocks "
            f"have no tile (first: {missing[0]}); resume the run to compute them"
        )
    extra = {name: np.ascontiguousarray(value) for name, value in (extra or {}).items()}
    need = (n1 + n_test) * n2 * dtype.itemsize * len(kinds) + sum(v.nbytes for v in extra.values())
    _check_free_space(result, need)
    runs = tile_runs or (lambda b: (run,))
    digests = {}
    with atomic_path(result) as tmp:
        f = h5py.File(tmp, "w")
        try:
            sets = {k: f.create_dataset(k, shape=(n1, n2), dtype=dtype) for k in kinds}
            for kind, h in _write_bands(sets, blocks, n1, n2, tiles, symmetric, runs).items():
                digests[kind] = h
            if n_test:
                tests = {f"{k}_test": f.create_dataset(f"{k}_test", shape=(n_test, n2),
                                                       dtype=dtype) for k in kinds}
                moved = [_Shifted(b, n1) for b in test]
                for kind, h in _write_bands(tests, moved, n_test, n2, tiles, False,
                                            runs, suffix="_test").items():
                    digests[f"{kind}_test"] = h
            for name, value in extra.items():
                f.create_dataset(name, data=value)
                digests[name] = digest(value)
            for name, value in digests.items():
                f[name].attrs["sha256"] = value
            for name, value in dict(attrs, run=run, format=FORMAT).items():
                f.attrs[name] = _attr_value(value)
        except BaseException as exc:
            with contextlib.suppress(Exception):  # the first error is the one to report
                f.close()
            raise _os_error(exc) from None
        try:
            f.close()  # an error HDF5 only prints here is caught by the read-back below
        except Exception as exc:
            raise _os_error(exc) from None
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        problem = verify_result(tmp, run, digests)
        if problem is not None:  # what HDF5 wrote is not what was assembled: publish nothing
            raise OSError(5, f"the file read back is wrong ({problem})", str(tmp))
    return Path(result)


def _os_error(exc: BaseException) -> BaseException:
    """h5py reports a failed write as RuntimeError or ValueError with the errno in its
    text; as an OSError it becomes the same kernelcli error as any other write's."""
    if isinstance(exc, OSError) or not isinstance(exc, (RuntimeError, ValueError)):
        return exc
    match = re.search(r"errno = (\d+)", str(exc))
    return OSError(int(match[1]) if match else 5, str(exc).splitlines()[0][:200])


class _Shifted:
    """A test block seen with its rows counted from the first test row."""

    def __init__(self, block, n1):
        self.block, self.key, self.diagonal = block, block.key, False
        self.r0, self.r1, self.c0, self.c1 = block.r0 - n1, block.r1 - n1, block.c0, block.c1
        self.row, self.col = block.row, block.col


def _write_bands(datasets: dict, blocks, n: int, n2: int, tiles, symmetric: bool,
                 runs, suffix: str = "") -> dict:
    """Fill ``datasets`` (name -> ``(n, n2)``) band by band; kind -> sha256 of its bytes."""
    kinds = [name[:len(name) - len(suffix)] for name in datasets]
    hashes = {k: hashlib.sha256() for k in kinds}
    dtype = next(iter(datasets.values())).dtype
    bands = sorted({(b.r0, b.r1) for b in blocks})
    for r0, r1 in bands:
        band = {k: np.empty((r1 - r0, n2), dtype) for k in kinds}
        for b in blocks:
            if (b.r0, b.r1) == (r0, r1):
                block = getattr(b, "block", b)
                got = tiles.read(block, kinds, runs(block))
                for k in kinds:
                    band[k][:, b.c0:b.c1] = got[k]
            elif symmetric and (b.c0, b.c1) == (r0, r1):  # the mirror of a tile below
                got = tiles.read(b, kinds, runs(b))
                for k in kinds:
                    band[k][:, b.r0:b.r1] = got[k].T
        for k, name in zip(kinds, datasets, strict=True):
            datasets[name][r0:r1] = band[k]
            hashes[k].update(band[k].data)
    return {k: h.hexdigest() for k, h in hashes.items()}


def result_space_bytes(need: int) -> int:
    """The free bytes the assembly asks for before it writes a result of ``need`` bytes
    of data: the data and a margin for HDF5's metadata (1 MiB and 1%)."""
    return need + (1 << 20) + need // 100


def _check_free_space(result: Path, need: int) -> None:
    """Refuse to start writing a result the file system cannot hold."""
    with contextlib.suppress(OSError):
        st = os.statvfs(Path(result).parent)
        free = st.f_bavail * st.f_frsize
        if free < result_space_bytes(need):
            raise DiskFullError(f"not enough space for {result}: it needs "
                                f"{_mib(result_space_bytes(need))}, {_mib(free)} is free; "
                                f"free some space, then resume", result)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


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


def check_tiles(tiles, blocks, kinds, run) -> list:
    """``[(block, DamagedFileError), ...]`` for every tile of ``blocks`` that exists and
    fails verification (missing tiles are not listed). ``run``: the run's identity, or
    a function of a block giving the identities its tile may carry; ``tiles``: the
    run's :class:`~._packs.TileSet`."""
    have = tiles.keys()
    bad = []
    for b in blocks:
        if b.key in have:
            try:
                tiles.read(b, kinds, run(b) if callable(run) else run)
            except UntrustedFileError:
                raise  # not a tile at all (a FIFO, a device, a link out): exit 2, never moved
            except DamagedFileError as exc:
                bad.append((b, exc))
    return bad


def _attr_value(value):
    """HDF5 attributes hold text and numbers; anything else is stored as JSON text."""
    if isinstance(value, (str, bytes, bool, int, float, np.generic, np.ndarray)):
        return value
    return json.dumps(value, sort_keys=True)
