"""Compressed inputs: what they unpack to is bounded before anything is unpacked.

A few megabytes of gzip or deflate can declare gigabytes of zeros. What a
compressed array unpacks to is held in memory (a ``.npz`` member's rows that the
run reads -- ``data.limit`` of them, or all -- and nothing after them, and so for an
HDF5 dataset deflated alone in chunks of whole rows, ``_h5.first_rows``; any other
HDF5 chunk is decompressed whole for any value in it, and the chunk cache holds a
row of chunks so each is decompressed once per pass), so its declared size -- the
rows kept times the row size, an HDF5 chunk -- must fit the memory the run may
use: ``compute.memory`` when the configuration sets it, else the host's free memory.
Uncompressed inputs (``.npy``, plain HDF5) are read by slices and are not bounded:
their bytes are on disk.

A zip entry must declare exactly the bytes its ``.npy`` header needs, and its stream
is read no further than the rows kept (zipfile stops at the declared size in any
case: a stream longer than it declares is cut there), in pieces, honouring ``stop``
between them.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .._system import available_ram_bytes
from ..errors import DataError
from ._value_checks import where_of

_PIECE = 16 * 2**20  # bytes unpacked between two checks of `stop`
_ACCEPTED = ("accepted: a compressed array within compute.memory (the host's free memory "
             "when it is auto), or the same array uncompressed (.npy or an HDF5 dataset "
             "without filters), which is read by slices")


def bound_of(max_bytes: Optional[int]) -> int:
    """The bound of what one compressed input may unpack to: ``max_bytes``
    (``compute.memory``) when given, else the memory this process can take now."""
    return int(max_bytes) if max_bytes is not None else available_ram_bytes()


def check_unpacked(path, key, what: str, declared: int, bound: int, detail: str) -> None:
    """Refuse an input whose declared unpacked size ``declared`` exceeds ``bound``;
    ``detail`` says what declares it (e.g. ``shape (10, 3) of float32``)."""
    if declared > bound:
        raise DataError(f"{what}: {where_of(path, key)} is compressed and declares {declared} "
                        f"bytes unpacked ({detail}), more than the {bound} bytes of memory "
                        f"the run may use; {_ACCEPTED}")


def array_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: no overflow


def read_member(fp, shape: tuple[int, ...], fortran: bool, dtype: np.dtype,
                stop=None, rows: Optional[int] = None) -> np.ndarray:
    """The first ``rows`` rows (default: all) of the array whose ``.npy`` header was just
    read from the zip member stream ``fp``, in pieces with ``stop.check()`` between them.

    In C order the rows are the stream's first bytes: only those are unpacked, and the
    rest of the member is never inflated. In Fortran order each of the other axes' runs
    of ``shape[0]`` values gives its first ``rows``: the whole member is streamed, one
    piece in memory at a time. Never more than the header's bytes are read (a stream
    longer than its header says is cut there)."""
    rows = shape[0] if rows is None else rows
    kept = (rows,) + tuple(shape[1:])
    out = bytearray(array_bytes(kept, dtype))
    if not fortran or rows == shape[0]:
        _read_into(fp, memoryview(out), stop)
    else:
        _read_fortran_rows(fp, out, shape[0] * dtype.itemsize, rows * dtype.itemsize, stop)
    arr = np.frombuffer(out, dtype=dtype)
    return arr.reshape(kept[::-1]).transpose() if fortran else arr.reshape(kept)


def _read_into(fp, view: memoryview, stop) -> None:
    """Fill ``view`` from ``fp`` in pieces; a stream that ends first is an EOFError."""
    got, need = 0, len(view)
    while got < need:
        if stop is not None:
            stop.check()
        n = fp.readinto(view[got:got + min(_PIECE, need - got)])
        if not n:
            raise EOFError(f"{got} bytes of data, {need} expected")
        got += n


def _read_fortran_rows(fp, out: bytearray, run: int, keep: int, stop) -> None:
    """The first ``keep`` bytes of each ``run`` bytes of ``fp``, into ``out``."""
    runs = len(out) // keep
    per = max(1, _PIECE // run)  # whole runs per piece
    scratch = bytearray(min(per * run, _PIECE) if per > 1 else min(run, _PIECE))
    done = 0
    while done < runs:
        if per > 1:
            k = min(per, runs - done)
            _read_into(fp, memoryview(scratch)[:k * run], stop)
            block = np.frombuffer(scratch, np.uint8, k * run).reshape(k, run)
            np.frombuffer(out, np.uint8)[done * keep:(done + k) * keep] = block[:, :keep].ravel()
            done += k
            continue
        _read_into(fp, memoryview(out)[done * keep:(done + 1) * keep], stop)
        skip = run - keep
        while skip:  # the rest of the run, read through one piece at a time
            n = min(skip, len(scratch))
            _read_into(fp, memoryview(scratch)[:n], stop)
            skip -= n
        done += 1
