"""Input arrays read by row slices from .npy, .npz and .h5/.hdf5 files.

An :class:`ArraySource` is one array of examples, rows first, channels last:
sequences ``(N, L, C)``, images ``(N, H, W, C)`` or volumes ``(N, D, H, W, C)``
(a channels-first file, ``layout`` NCL, NCHW or NCDHW, is transposed on read),
or flat rows ``(N, D)``.
Rows are read in batches, so a data set larger than memory is never loaded
whole: .npy files are memory-mapped and HDF5 datasets are sliced. A .npz
member cannot be memory-mapped (it may be compressed), so the rows the source
keeps (``limit``) are unpacked on the first read, and nothing after them.

Values are only cast to the requested float dtype, never rescaled: uint8
images in 0..255 arrive as floats in 0..255.

Files are untrusted: the openers (``_readers``, ``_h5``) check headers against
the bytes present and HDF5 storage against the files it reads from; a slice read
that fails on a damaged file is a :class:`DataError` naming the rows; and
:func:`check_finite` (``_value_checks``) refuses non-finite values and magnitudes that
would overflow the kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import h5py
import numpy as np
from numpy.typing import DTypeLike

from ..config import LAYOUTS  # one list: the configuration's
from ..errors import DataError
from ._h5 import one_line
from ._readers import H5_ERRORS, NPY_ERRORS, open_any
from ._row_source import RowSource
from ._value_checks import where_of

SUFFIXES = (".npy", ".npz", ".h5", ".hdf5")

_ACCEPTED_RANKS = ("rank 2 rows (N, D), rank 3 sequences (N, L, C), rank 4 images "
                   "(N, H, W, C) or rank 5 volumes (N, D, H, W, C)")
# The layouts that fit each rank, and what an array of that rank holds, for messages.
_FITS = {2: "NHWC (the default) for rank 2 rows", 3: "NLC or NCL for rank 3 sequences",
         4: "NHWC or NCHW for rank 4 images", 5: "NDHWC or NCDHW for rank 5 volumes"}
_HOLDS = {3: "sequences", 4: "images", 5: "volumes"}

# A failed slice read of a damaged file (a corrupt chunk, a CRC error in a .npz
# member, a short external file that lost its end after opening).
_READ_ERRORS: tuple[type[Exception], ...] = tuple(set(H5_ERRORS) | set(NPY_ERRORS))


def channels_first(layout: str) -> bool:
    """Whether ``layout`` (one of :data:`LAYOUTS`) puts the channels right after N."""
    return layout[1] == "C"


def _key_name(what: str) -> str:
    # data.x1's array name is `data.key`; data.x2's is `data.x2_key`.
    return "data.key" if what == "data.x1" else f"{what}_key"


class ArraySource(RowSource):
    """One array of examples, read by rows.

    Build it with :func:`open_array`. ``shape`` is ``(N, H, W, C)`` (channels
    last, with 1 to 3 spatial axes) or ``(N, D)`` after the layout transform and
    the row limit; ``dtype`` is the dtype stored in the file.
    """

    def __init__(self, *, path: Path, key: Optional[str], what: str, layout: str,
                 raw_shape: tuple[int, ...], dtype: np.dtype, n: int,
                 raw=None, loader=None, closer=None):
        self.path = path
        self.key = key
        self.what = what
        self.layout = layout
        self.dtype = np.dtype(dtype)
        self._raw = raw          # memmap, h5py.Dataset, or None until `loader` runs
        self._loader = loader
        self._closer = closer
        self._closed = False
        rest = tuple(raw_shape[1:])
        if channels_first(layout):  # (C, H, W) -> (H, W, C)
            rest = rest[1:] + rest[:1]
        self.shape: tuple[int, ...] = (n,) + rest

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def example_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def memory_mapped(self) -> bool:
        """True when rows are read from a memory map (.npy files)."""
        return isinstance(self._raw, np.memmap)

    def _array(self):
        if self._closed:
            raise ValueError(f"{self.what}: {self.path} is closed")
        if self._raw is None:
            self._raw = self._loader()
        return self._raw

    def _read_raw(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) in the file's dtype, post-layout, C-contiguous."""
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"rows [{start}, {stop}) outside [0, {self.n}) of {self.what}")
        if self._closed:
            raise ValueError(f"{self.what}: {self.path} is closed")
        try:
            block = self._array()[start:stop]
        except _READ_ERRORS as exc:
            raise DataError(f"{self.what}: rows {start}..{stop - 1} of "
                            f"{where_of(self.path, self.key)} cannot be read ({one_line(exc)}); "
                            "the file is damaged or truncated") from None
        # h5py hands back a fresh array; a memmap or loaded .npz slice is a view
        # of the file's (possibly read-only) buffer, which callers must not share.
        fresh = isinstance(self._raw, h5py.Dataset)
        if channels_first(self.layout):  # NCHW -> NHWC: (0, 2, 3, 1)
            block, fresh = np.moveaxis(np.asarray(block), 1, -1), False
        return np.ascontiguousarray(block) if fresh else np.array(block, order="C", subok=False)

    def read(self, start: int, stop: int, dtype: DTypeLike = "float32") -> np.ndarray:
        """Rows [start, stop) as a new, writable, C-contiguous array of ``dtype``.

        Shape ``(stop - start,) + example_shape``. Values are cast, not rescaled.
        """
        dtype = _float_dtype(dtype)
        return self._read_raw(start, stop).astype(dtype, copy=False)

    def take(self, indices: Sequence[int], dtype="float32") -> np.ndarray:
        """Rows at ``indices`` (any order, repeats allowed), shape ``(len(indices),) + example_shape``.

        The distinct rows are read in ascending order, one slice per run of
        consecutive indices.
        """
        dtype = _float_dtype(dtype)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise ValueError(f"row indices must lie in [0, {self.n}) for {self.what}")
        uniq, inverse = np.unique(idx, return_inverse=True)
        out = np.empty((uniq.size,) + self.example_shape, dtype=dtype)
        breaks = np.flatnonzero(np.diff(uniq) != 1) + 1
        pos = 0
        for run in np.split(uniq, breaks) if uniq.size else []:
            first, count = int(run[0]), run.size
            out[pos:pos + count] = self._read_raw(first, first + count)
            pos += count
        return out[inverse.reshape(-1)]

    def close(self) -> None:
        if not self._closed and self._closer is not None:
            self._closer()
        self._raw = None
        self._closed = True

    def __enter__(self) -> ArraySource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        key = f"[{self.key!r}]" if self.key is not None else ""
        return f"ArraySource({self.what}={str(self.path)!r}{key}, shape={self.shape}, dtype={self.dtype})"


def _float_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"read dtype must be a float dtype, got {dt}")
    return dt


def open_array(path: Path, key: Optional[str] = None, *, layout: str = "NHWC",
               limit: Optional[int] = None, what: str = "data.x1",
               key_name: Optional[str] = None, max_bytes: Optional[int] = None,
               stop=None) -> ArraySource:
    """Open the array of examples at ``path`` (and ``key`` for .npz and .h5).

    ``what`` is the config key that named the file (``data.x1`` or
    ``data.x2``); every :class:`DataError` message starts with the key at fault.
    ``limit`` keeps only the first ``limit`` rows. ``key_name``: what names ``key`` in
    messages (default: the config key beside ``what``, ``data.key`` for ``data.x1``).
    ``max_bytes`` (``compute.memory``; default: the host's free memory) bounds what a
    compressed array may unpack to (:mod:`._unpack`); ``stop`` is honoured while a
    ``.npz`` member is unpacked.
    """
    path = Path(path)
    key_name = key_name or _key_name(what)
    if layout not in LAYOUTS:
        raise DataError(f"data.layout: {layout!r} is not a layout; accepted: {', '.join(LAYOUTS)}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(f"{what}: {path} has suffix {path.suffix or '(none)'!r}; "
                        f"accepted: {', '.join(SUFFIXES)}")
    if not path.exists():
        # A data folder that ships a converter (configs/data/cifar10_to_npy.py) says how
        # its files are made: name it, so the fix is in the message.
        makers = sorted(path.parent.glob("*_to_npy.py")) if path.parent.is_dir() else []
        hint = "".join(f" (or make it with python {m})" for m in makers[:1])
        raise DataError(f"{what}: {path} does not exist; give the path to a "
                        f"{', '.join(SUFFIXES)} file{hint}")
    if not path.is_file():
        raise DataError(f"{what}: {path} is not a file; give the path to a "
                        f"{', '.join(SUFFIXES)} file")
    if suffix == ".npy" and key is not None:
        raise DataError(f"{key_name}: {key!r} is only used for .npz and .h5 files; "
                        f"{path} is a .npy file holding one array: remove {key_name}")
    _check_limit(limit)
    opened = open_any(path, key, what, key_name, max_bytes=max_bytes, stop=stop, limit=limit)
    try:
        n = _validate(path, key, opened.shape, layout, limit, what)
    except DataError:
        opened.close()
        raise
    return ArraySource(path=path, key=key, what=what, layout=layout,
                       raw_shape=opened.shape, dtype=opened.dtype, n=n, **opened.kwargs)


def _check_limit(limit) -> None:
    if limit is not None and (isinstance(limit, bool) or
                              not isinstance(limit, (int, np.integer)) or limit < 1):
        raise DataError(f"data.limit: {limit!r} is not a positive integer; "
                        "accepted: a row count of at least 1, or null for all rows")


def _validate(path, key, shape, layout, limit, what) -> int:
    """Check rank, sizes, layout and limit; return the number of rows used."""
    where = where_of(path, key)
    if len(shape) not in (2, 3, 4, 5):
        raise DataError(f"{what}: {where} holds an array of shape {shape} (rank {len(shape)}); "
                        f"accepted: {_ACCEPTED_RANKS}")
    if layout != "NHWC" and len(shape) != len(layout):
        raise DataError(f"data.layout: {layout!r} needs rank {len(layout)} "
                        f"{_HOLDS[len(layout)]}, but {what} {where} has shape {shape}; use "
                        f"{_FITS[len(shape)]}")
    if min(shape) == 0:
        raise DataError(f"{what}: {where} holds an empty array of shape {shape}; "
                        "accepted: at least one example with every dimension at least 1")
    rows = shape[0]
    if limit is None:
        return rows
    if limit > rows:
        raise DataError(f"data.limit (={limit}) exceeds the {rows} rows of {what} {where}; "
                        f"use at most {rows}, or null for all rows")
    return int(limit)


def check_pair(src1: ArraySource, src2: ArraySource) -> None:
    """Both sets must have the same example shape, since K(x1, x2) compares them."""
    if src1.example_shape != src2.example_shape:
        raise DataError(f"{src2.what}: examples of {src2.path} have shape {src2.example_shape}, "
                        f"but those of {src1.what} ({src1.path}) have shape {src1.example_shape}; "
                        "both sets must have the same example shape")
