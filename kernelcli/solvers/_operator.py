"""A stored kernel as a linear operator, streamed from HDF5 by row blocks (numpy, the
products by jax on the CPU; the file is read through :class:`kernelcli.store.ResultFile`).

``K @ v`` reads the dataset one block of rows at a time straight into a
float64 buffer (HDF5 converts float32 on read, so no float32 copy is made):
memory is two blocks, ``2 * block_rows * n_cols * 8`` bytes, whatever the kernel's
size, so kernels larger than memory can be solved by conjugate gradients.
The file is opened per call and closed after, so an operator can be kept
around, pickled or shared by processes.

A pass runs in two lanes (threads, joined before it returns), lane ``i`` taking the
blocks ``i, i + 2, ...`` into its own buffer, each lane's products on its own jax
device where there are two (the CLI's one host device per core): one lane's read from
the page cache overlaps the other's product, and the two products use both cores.
A lane multiplies whole blocks, the blocks a sequential pass of the same
``block_rows`` multiplies: XLA's float32 dot rounds a row differently with the
block's row count (its vector tiles' remainder; bench/history/), not with the device,
so the lanes are bit-identical to the sequential pass (``tests/run/test_predict_overlap.py``),
and ``_bands``' workers, which multiply the same blocks, to both.

``matmul32`` is the fast product of conjugate gradients' inner steps: the kernel read
as float32 (what a float32 run stores: no conversion), ``v`` rounded to float32, sgemm
(twice dgemm's rate on half the bytes), each row's result stored in float64. Its error,
about 1e-7 of ``|K| |v|``, is why ``_cg`` recomputes the residual with ``matmul``.

Both products of a row block are one jitted XLA dot (:func:`block_product`, jax on the
CPU, float32 at ``Precision.HIGHEST``: no reduced-precision path), not numpy's: numpy's
OpenBLAS is held to its Haswell kernels on AVX-512 CPUs (the CPU level, ``kernels._cpu_level``:
SkylakeX's crash), whose sgemm costs about 1.7x XLA's on the same block, and XLA does not call
OpenBLAS. The block is read into a 64-byte aligned buffer, which XLA then uses in place
(no copy). The band workers of ``_bands`` call the same function, so a spread product
stays bit-identical to this one. The kernel layer is not imported: jax only.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from pathlib import Path
from typing import Optional

import numpy as np

from .._stop import Stop, check
from ..errors import DataError, UsageError
from ..store import ResultFile
from ._memory import STREAM_BLOCK_BYTES

LANES = 2  # row blocks in flight in a pass: one read while the other is multiplied
# one float64 row block of a lane: the lanes together hold half of what one block held
# before them (a product's CPU time does not grow with smaller blocks, measured at N 20,000)
DEFAULT_BLOCK_BYTES = STREAM_BLOCK_BYTES // (2 * LANES)
_ALIGN = 64  # bytes: XLA on the CPU uses a host buffer aligned so without copying it


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts on a ``_ALIGN``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    off = -raw.ctypes.data % _ALIGN
    return raw[off:off + nbytes].view(dtype).reshape(shape)


@functools.lru_cache(maxsize=1)
def _dot():
    """The jitted dot (made once: jax imported only when a product is taken; jax keeps
    one compilation per shape and dtype)."""
    import jax
    import jax.numpy as jnp

    highest = jax.lax.Precision.HIGHEST
    # (k, n2) x (rows, n2)^T: the block's rows are contiguous in the reduction, the
    # layout XLA's CPU dot runs fastest (measured against block @ v; bench/history/)
    return jax.jit(lambda vt, block: jnp.dot(vt, block.T, precision=highest))


def transposed(v: np.ndarray, dtype=None) -> np.ndarray:
    """``v`` (n2,) or (n2, k) as the aligned C-ordered (k, n2) of ``dtype`` (default:
    ``v``'s) that :func:`block_product` takes (aligned: XLA uses it in place, not a copy
    per block; converted in the one copy)."""
    vt = (v[:, None] if v.ndim == 1 else v).T
    out = aligned_empty(vt.shape, vt.dtype if dtype is None else dtype)
    out[...] = vt
    return out


def block_product(block: np.ndarray, vt: np.ndarray, device=None) -> np.ndarray:
    """``block @ vt.T`` (rows, k) float64 for a (rows, n2) ``block`` and ``vt`` (k, n2) of
    one dtype (float32 or float64), by a jitted XLA dot accumulating in that dtype, on
    ``device`` (a jax device; None: the default one)."""
    import jax

    with jax.enable_x64(block.dtype == np.float64), jax.default_device(device):
        out = _dot()(vt, block)
        return np.asarray(out, dtype=np.float64).T


def lane_devices(lanes: int) -> list:
    """The jax device of each of ``lanes`` lanes: the default backend's local devices
    in turn (one device: every lane on it, the reads still overlapping the products)."""
    import jax

    devices = jax.local_devices()
    return [devices[i % len(devices)] for i in range(lanes)]


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back (where POSIX threads allow) while the lanes start:
    a Ctrl-C interrupting ``Thread.start`` could leave a lane running that the caller
    does not know it must join; held, it comes once every lane has started (and the
    lanes, started with them held, leave them to the caller)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _open_dataset(path: Path, dataset: str):
    """The dataset, for streamed reads; DataError when the file or it is not there."""
    return ResultFile(path).kernel(dataset)


class H5KernelOperator:
    """The (N1, N2) kernel stored as ``dataset`` in HDF5 file ``path``, read lazily.

    ``block_rows``: rows read per block (default: as many as fit in 64 MiB of
    float64, the two lanes' buffers 128 MiB). ``op @ v`` / ``op.matmul(v)``: (N2, k) or
    (N2,) -> (N1, k) or (N1,). ``stop``: a pass ends at the next block once it is
    requested, raising :class:`~kernelcli.errors.Interrupted`.
    """

    def __init__(self, path, dataset: str, block_rows: Optional[int] = None,
                 stop: Optional[Stop] = None):
        self.path = Path(path)
        self.dataset = dataset
        self.stop = stop
        with _open_dataset(self.path, dataset) as ds:
            if ds.ndim != 2 or 0 in ds.shape:
                raise DataError(f"{dataset!r} in {self.path} must be a non-empty 2-D kernel, "
                                f"got shape {ds.shape}")
            self.shape: tuple[int, int] = (int(ds.shape[0]), int(ds.shape[1]))
            self.dtype = ds.dtype
        if block_rows is None:
            block_rows = max(1, DEFAULT_BLOCK_BYTES // (8 * self.shape[1]))
        if int(block_rows) != block_rows or block_rows < 1:
            raise UsageError.naming(f"<<block_rows>>: {block_rows!r} is not accepted; give an "
                                    f"integer >= 1")
        self.block_rows = min(int(block_rows), self.shape[0])
        self._held: Optional[np.ndarray] = None  # the float32 kernel, while ``held``

    def __getstate__(self):  # a Stop (its lock) and a held copy stay in their process
        return {**self.__dict__, "stop": None, "_held": None}

    @contextlib.contextmanager
    def held(self):
        """The kernel read once into memory as float32 for the block's duration.

        A streamed pass copies every row block from the page cache, about a sixth of a
        300-column pass at N = 20,000 and half of a 30-column one, on cores the product
        also needs. Held, a float32 pass multiplies the copy's rows in place, and a
        float64 pass widens them (a float32 kernel only; a float64 one streams its
        float64 rows). The same values in the same blocks, so the same bits as
        streaming. Costs ``4 N1 N2`` bytes besides the page cache's copy: the caller
        decides (:func:`~kernelcli.solvers._memory.hold_fits`)."""
        held = ResultFile(self.path).load(
            self.dataset, lambda shape: aligned_empty(shape, np.float32),
            lambda: check(self.stop))
        self._held = held
        try:
            yield self
        finally:
            self._held = None

    @property
    def block_bytes(self) -> int:
        """Bytes of one float64 row buffer (a pass holds ``LANES`` of them)."""
        return self.block_rows * self.shape[1] * 8

    def _check_v(self, v) -> np.ndarray:
        v = np.asarray(v)  # converted once, by the pass (``transposed``)
        if v.shape[:1] != (self.shape[1],) or v.ndim > 2:
            raise DataError(f"{self.dataset!r} in {self.path} has {self.shape[1]:,} columns; "
                            f"it cannot multiply an array of shape {v.shape}")
        return v

    def matmul(self, v) -> np.ndarray:
        """``K @ v`` in float64 for ``v`` (N2,) or (N2, k); one pass over the file."""
        return self._product(self._check_v(v), np.float64)

    def matmul32(self, v) -> np.ndarray:
        """``K @ v`` with float32 products (``v`` rounded), returned as float64; one pass."""
        return self._product(self._check_v(v), np.float32)

    def _product(self, v: np.ndarray, dtype) -> np.ndarray:
        n1, n2 = self.shape
        out = np.empty((n1,) + v.shape[1:], dtype=np.float64)
        vt = transposed(v, dtype)
        starts = range(0, n1, self.block_rows)
        lanes = min(LANES, len(starts))
        devices = lane_devices(lanes)
        halt = threading.Event()  # a lane failed, the caller was interrupted or stopped
        ended = [threading.Event() for _ in range(lanes)]
        errors: list = []

        held = self._held
        if held is not None and dtype == np.float64 and self.dtype != np.float32:
            held = None  # a float64 kernel's float64 pass reads its own rows

        def lane(i: int, ds) -> None:
            try:
                buf = aligned_empty((self.block_rows, n2), dtype)
                for start in starts[i::lanes]:
                    if halt.is_set() or (self.stop is not None and self.stop()):
                        return
                    end = min(start + self.block_rows, n1)
                    block = buf[:end - start]
                    if held is None:
                        ds.read_direct(buf, np.s_[start:end], np.s_[0:end - start])
                    elif dtype == np.float32 and held[start].ctypes.data % _ALIGN == 0:
                        block = held[start:end]  # used in place by XLA: no copy
                    else:
                        block[...] = held[start:end]  # widened, or realigned
                    out[start:end] = block_product(block, vt, devices[i]).reshape(
                        (end - start,) + v.shape[1:])
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                errors.append(exc)
                halt.set()
            finally:
                ended[i].set()

        with _open_dataset(self.path, self.dataset) as ds:
            threads = [threading.Thread(target=lane, args=(i, ds), daemon=True,
                                        name=f"kernelcli-rows-{i}") for i in range(lanes)]
            try:
                with _signals_held():
                    for t in threads:
                        t.start()
                for e in ended:
                    # awake every 0.1 s: a SIGINT that the kernel handed to another
                    # thread (the lanes hold it; jax's and BLAS's threads do not) is only
                    # flagged, and an untimed wait would sleep through it until the end
                    while not e.wait(0.1):
                        pass
            finally:
                # Ctrl-C in the wait: no lane outlives the call (each ends its block). The
                # wait is on events: a KeyboardInterrupt in Thread.join can mark a running
                # thread as ended (CPython 3.11), and a later join then returns at once.
                halt.set()
                for t, e in zip(threads, ended, strict=True):
                    if t.ident is not None:
                        e.wait()
                        t.join()
        if errors:
            raise errors[0]
        check(self.stop)
        return out

    __matmul__ = matmul

    def columns(self, idx) -> np.ndarray:
        """``K[:, idx]`` (N1, len(idx)) float64 of a symmetric training kernel, read as the
        rows ``idx`` (sorted, distinct): a few contiguous reads instead of a pass."""
        idx = np.asarray(idx, dtype=np.int64)
        if self.shape[0] != self.shape[1]:
            raise DataError(f"{self.dataset!r} in {self.path} is {self.shape[0]:,} x "
                            f"{self.shape[1]:,}, not square; its columns are not its rows")
        out = np.empty((idx.size, self.shape[1]), dtype=np.float64)
        with _open_dataset(self.path, self.dataset) as ds:
            for i, row in enumerate(idx):
                ds.read_direct(out, np.s_[int(row):int(row) + 1], np.s_[i:i + 1])
        return np.ascontiguousarray(out.T)

    def diagonal(self) -> np.ndarray:
        """The diagonal (n,) float64 of a square kernel, reading only diagonal tiles."""
        n1, n2 = self.shape
        if n1 != n2:
            raise DataError(f"{self.dataset!r} in {self.path} is {n1:,} x {n2:,}, not square; "
                            "a training kernel K(train, train) is needed here")
        out = np.empty(n1, dtype=np.float64)
        with _open_dataset(self.path, self.dataset) as ds:
            for start in range(0, n1, self.block_rows):
                stop = min(start + self.block_rows, n1)
                out[start:stop] = np.diagonal(ds[start:stop, start:stop]).astype(np.float64)
        return out

    def trace(self) -> float:
        return float(self.diagonal().sum())

    def __repr__(self) -> str:
        return (f"H5KernelOperator({str(self.path)!r}, {self.dataset!r}, shape={self.shape}, "
                f"block_rows={self.block_rows})")


class ArrayOperator:
    """An in-memory (N1, N2) kernel behind the same interface as ``H5KernelOperator``."""

    def __init__(self, k):
        self.k = np.asarray(k, dtype=np.float64)  # converted once, not per product
        if self.k.ndim != 2 or 0 in self.k.shape:
            raise DataError(f"a kernel must be a non-empty 2-D matrix, got shape {self.k.shape}")
        self.shape = self.k.shape
        self._k32 = None  # made by the first matmul32

    def matmul(self, v) -> np.ndarray:
        return self.k @ np.asarray(v, dtype=np.float64)

    def matmul32(self, v) -> np.ndarray:
        if self._k32 is None:
            self._k32 = self.k.astype(np.float32)
        return (self._k32 @ np.asarray(v, dtype=np.float32)).astype(np.float64)

    __matmul__ = matmul

    def columns(self, idx) -> np.ndarray:
        return np.ascontiguousarray(self.k[:, np.asarray(idx, dtype=np.int64)])

    def diagonal(self) -> np.ndarray:
        return np.diagonal(self.k).copy()

    def trace(self) -> float:
        return float(self.diagonal().sum())


def load_kernel(path, dataset: str) -> np.ndarray:
    """Read a whole stored kernel as a C-ordered float64 array (N1, N2), with no float32 copy."""
    return ResultFile(path).load_float64(dataset)
