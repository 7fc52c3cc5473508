"""Compressed inputs: what they unpack to is bounded before anything is unpacked.

A few megabytes of gzip or deflate can declare gigabytes of zeros. What a
compressed array unpacks to is held in memory (a ``.npz`` member is loaded whole;
an HDF5 chunk is decompressed whole for any value in it, and the chunk cache holds
a row of chunks so each is decompressed once per pass), so its declared size --
the header's shape times the itemsize, a zip entry's declared ``file_size``, an
HDF5 chunk -- must fit the memory the run may use: ``compute.memory`` when the
configuration sets it, else the host's free memory. Uncompressed inputs (``.npy``,
plain HDF5) are read by slices and are not bounded: their bytes are on disk.

A zip entry's stream may hold more than it declares: only the declared bytes are
read (zipfile stops there, and so does :func:`read_member`), in pieces, honouring
``stop`` between them.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .._system import available_ram_bytes
from ..errors import DataError
from ._values import where_of

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


def array_bytes(shape: Tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: no overflow


def read_member(fp, shape: Tuple[int, ...], fortran: bool, dtype: np.dtype,
                stop=None) -> np.ndarray:
    """The array whose ``.npy`` header was just read from the zip member stream ``fp``:
    exactly its declared bytes, read in pieces (never more: a stream longer than its
    header says is cut there), with ``stop.check()`` between pieces."""
    need = array_bytes(shape, dtype)
    buf = bytearray(need)
    view, got = memoryview(buf), 0
    while got < need:
        if stop is not None:
            stop.check()
        n = fp.readinto(view[got:got + min(_PIECE, need - got)])
        if not n:
            raise EOFError(f"{got} bytes of data, {need} expected")
        got += n
    arr = np.frombuffer(buf, dtype=dtype)
    return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
