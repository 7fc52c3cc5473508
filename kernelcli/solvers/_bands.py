"""Conjugate gradients' products with K spread over row bands (numpy; the file is read
through :class:`kernelcli.store.ResultFile`).

A :class:`BandOperator` stands where an :class:`~._operator.H5KernelOperator` stands
(``shape``, ``matmul``, ``matmul32``, ``columns``, ``diagonal``, ``trace``): its two
products are split into row bands, each computed by a :class:`BandWorker` that reads
only its band of ``kernels.h5`` (where the file is stored: a worker of a cluster needs
the run directory at the same path, not the whole kernel in its page cache), and the
bands' results are stacked in row order. The small reads (the diagonal, a few
columns for the preconditioner) stay in the calling process.

Bit-identical to the single-process product: the bands start at multiples of the
operator's ``block_rows``, and a worker multiplies its band block by block with the
same ``block_rows``, so every BLAS call (rows, columns, dtypes, the block read as
HDF5 converts it) is one the single-process operator makes; the blocks' results are
placed, not summed. Where to run the workers is the caller's: ``pool`` is any object
with ``product(v, exact) -> [band results in band order]`` (the local processes and
Ray actors of :mod:`kernelcli.run._predict_spread`).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DataError
from ..store import ResultFile
from ._operator import aligned_empty, block_product, transposed

DEFAULT_BAND_CACHE_BYTES = 1 << 30  # a worker keeps its band in memory up to this size


def band_bounds(n_rows: int, block_rows: int, workers: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: at most ``workers`` bands covering ``n_rows``, each a
    whole number of ``block_rows`` blocks (the last one's end excepted), in order."""
    blocks = -(-n_rows // block_rows)
    per = -(-blocks // max(1, min(int(workers), blocks)))
    step = per * block_rows
    return [(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


class BandWorker:
    """Rows ``[start, stop)`` of ``dataset`` in ``path``: ``product(v, exact)`` is those
    rows of ``K @ v`` (float64 products when ``exact``, else float32 ones returned as
    float64), block by block of ``block_rows`` as :class:`~._operator.H5KernelOperator`
    computes them. The band is read once and kept in its stored dtype when it takes at
    most ``cache_bytes``; otherwise each product reads it again, one block at a time."""

    def __init__(self, path, dataset: str, start: int, stop: int, block_rows: int,
                 cache_bytes: int = DEFAULT_BAND_CACHE_BYTES):
        self.path, self.dataset = str(path), dataset
        self.start, self.stop, self.block_rows = int(start), int(stop), int(block_rows)
        with ResultFile(Path(self.path)).kernel(dataset) as ds:
            self.n_cols, self.stored = int(ds.shape[1]), np.dtype(ds.dtype)
            if not (0 <= self.start < self.stop <= ds.shape[0]):
                raise DataError(f"{dataset!r} in {self.path} has {ds.shape[0]:,} rows; it "
                                f"has no band {self.start}:{self.stop}")
            band_bytes = (self.stop - self.start) * self.n_cols * self.stored.itemsize
            self.band: Optional[np.ndarray] = None
            if band_bytes <= cache_bytes:
                self.band = np.empty((self.stop - self.start, self.n_cols), self.stored)
                ds.read_direct(self.band, np.s_[self.start:self.stop])

    def _blocks(self, dtype):
        """``(offset in the band, block (rows, n_cols) dtype)``, as the operator reads."""
        if self.band is not None:
            for s in range(0, self.stop - self.start, self.block_rows):
                block = self.band[s:s + self.block_rows]
                # a float32 -> float64 (or float64 -> float32) cast is the one HDF5 makes
                yield s, (block if block.dtype == dtype else block.astype(dtype))
            return
        buf = aligned_empty((self.block_rows, self.n_cols), dtype)
        with ResultFile(Path(self.path)).kernel(self.dataset) as ds:
            for s in range(self.start, self.stop, self.block_rows):
                e = min(s + self.block_rows, self.stop)
                ds.read_direct(buf, np.s_[s:e], np.s_[0:e - s])
                yield s - self.start, buf[:e - s]

    def product(self, v: np.ndarray, exact: bool) -> np.ndarray:
        dtype = np.float64 if exact else np.float32
        v = np.asarray(v, dtype=dtype)
        out = np.empty((self.stop - self.start,) + v.shape[1:], dtype=np.float64)
        vt = transposed(v)  # the operator's own product, so the bands stay bit-identical
        for s, block in self._blocks(dtype):
            out[s:s + block.shape[0]] = block_product(block, vt).reshape(
                (block.shape[0],) + v.shape[1:])
        return out

    def ping(self) -> int:
        return self.stop - self.start


def serve_band(conn, path, dataset: str, start: int, stop: int, block_rows: int,
               cache_bytes: int) -> None:
    """A worker process's loop: ``(iteration, v, exact)`` in, ``(iteration, rows of
    K @ v)`` out, until ``None`` or the pipe closes. An exception goes back as
    ``(iteration, None, text)`` (the same band would fail again). Ctrl-C in a terminal
    reaches the whole process group: the coordinator handles it and closes the pipe,
    which ends this loop, so the worker ignores SIGINT (no traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # this process is the worker's own
    try:
        worker = BandWorker(path, dataset, start, stop, block_rows, cache_bytes)
        conn.send((-1, worker.ping(), None))
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which raises
        conn.send((-1, None, f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        iteration, v, exact = msg
        try:
            conn.send((iteration, worker.product(v, exact), None))
        except Exception as exc:  # noqa: BLE001
            conn.send((iteration, None, f"{type(exc).__name__}: {exc}"))


class BandOperator:
    """``base`` (an :class:`~._operator.H5KernelOperator`) with its products done by
    ``pool`` over ``bounds`` (from :func:`band_bounds` with ``base.block_rows``)."""

    def __init__(self, base, pool, bounds):
        self.base, self.pool, self.bounds = base, pool, list(bounds)
        self.shape = base.shape
        self.path, self.dataset = base.path, base.dataset

    def _product(self, v, exact: bool) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64 if exact else np.float32)
        if v.shape[:1] != (self.shape[1],) or v.ndim > 2:
            raise DataError(f"{self.dataset!r} in {self.path} has {self.shape[1]:,} columns; "
                            f"it cannot multiply an array of shape {v.shape}")
        parts = self.pool.product(v, exact)
        for (s, e), part in zip(self.bounds, parts, strict=True):
            if part.shape != (e - s,) + v.shape[1:]:
                raise DataError(f"the band {s}:{e} of {self.dataset!r} came back with shape "
                                f"{part.shape}, not {(e - s,) + v.shape[1:]}")
        return np.concatenate(parts, axis=0)

    def matmul(self, v) -> np.ndarray:
        return self._product(v, True)

    def matmul32(self, v) -> np.ndarray:
        return self._product(v, False)

    __matmul__ = matmul

    def columns(self, idx) -> np.ndarray:
        return self.base.columns(idx)

    def diagonal(self) -> np.ndarray:
        return self.base.diagonal()

    def trace(self) -> float:
        return self.base.trace()

    def __repr__(self) -> str:
        return f"BandOperator({self.base!r}, {len(self.bounds)} bands)"
