"""A content fingerprint of the rows a run uses.

The digest covers the dtype, the post-layout shape and the bytes of the rows,
and nothing about where they came from: the same array saved as .npy, .npz or
.h5 (or NCHW and transposed), or moved to another folder, keeps its
fingerprint, while a single changed value changes it. Multi-byte values are
hashed little-endian so that a big-endian HDF5 copy agrees too.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ._source import ArraySource

_VERSION = "kernelcli-data-fingerprint-v1"
_BATCH_BYTES = 64 * 2**20  # memory bound of one hashed batch


def fingerprint(src: ArraySource, *, batch_bytes: int = _BATCH_BYTES, stop=None) -> str:
    """sha256 hex digest of ``src``'s dtype, shape and row bytes, streamed by batches;
    a requested ``stop`` is honoured between them."""
    dtype = src.dtype.newbyteorder("<") if src.dtype.itemsize > 1 else src.dtype
    h = hashlib.sha256()
    h.update(f"{_VERSION}\ndtype={dtype.str}\nshape={tuple(src.shape)}\n".encode())
    row_bytes = max(1, int(np.prod(src.example_shape)) * dtype.itemsize)
    batch = max(1, batch_bytes // row_bytes)
    for start in range(0, src.n, batch):
        if stop is not None:
            stop.check()
        block = src._read_raw(start, min(start + batch, src.n))
        # bytes, not the buffer: a long double has no buffer in an explicit byte order
        h.update(np.ascontiguousarray(block, dtype=dtype).view(np.uint8).data)
    return h.hexdigest()
