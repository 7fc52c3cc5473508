"""Input arrays read by row slices from .npy, .npz and .h5/.hdf5 files.

An :class:`ArraySource` is one array of examples, rows first: images of shape
``(N, H, W, C)`` (an NCHW file is transposed on read) or flat rows ``(N, D)``.
Rows are read in batches, so a data set larger than memory is never loaded
whole: .npy files are memory-mapped and HDF5 datasets are sliced. A .npz
member cannot be memory-mapped (it may be compressed), so its one array is
loaded on the first read.

Values are only cast to the requested float dtype, never rescaled: uint8
images in 0..255 arrive as floats in 0..255.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Optional, Sequence, Tuple

import h5py
import numpy as np

from ..errors import DataError

SUFFIXES = (".npy", ".npz", ".h5", ".hdf5")
LAYOUTS = ("NHWC", "NCHW")
_NUMERIC_KINDS = "biuf"  # bool, signed and unsigned integer, real float
_ACCEPTED_RANKS = "rank 4 images (N, H, W, C) or rank 2 rows (N, D)"


def _key_name(what: str) -> str:
    # data.x1's array name is `data.key`; data.x2's is `data.x2_key`.
    return "data.key" if what == "data.x1" else f"{what}_key"


def _npy_header(fp) -> Tuple[Tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) from an open .npy stream, reading no data."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fp)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fp)
    # Version 3 (utf-8 field names) has no public header reader; it only
    # matters for structured dtypes, which are rejected anyway.
    raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")


class ArraySource:
    """One array of examples, read by rows.

    Build it with :func:`open_array`. ``shape`` is ``(N, H, W, C)`` or
    ``(N, D)`` after the layout transform and the row limit; ``dtype`` is the
    dtype stored in the file.
    """

    def __init__(self, *, path: Path, key: Optional[str], what: str, layout: str,
                 raw_shape: Tuple[int, ...], dtype: np.dtype, n: int,
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
        if layout == "NCHW":
            c, h, w = rest
            rest = (h, w, c)
        self.shape: Tuple[int, ...] = (n,) + rest

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def example_shape(self) -> Tuple[int, ...]:
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
        block = self._array()[start:stop]
        # h5py hands back a fresh array; a memmap or loaded .npz slice is a view
        # of the file's (possibly read-only) buffer, which callers must not share.
        fresh = isinstance(self._raw, h5py.Dataset)
        if self.layout == "NCHW":
            block, fresh = np.asarray(block).transpose(0, 2, 3, 1), False
        return np.ascontiguousarray(block) if fresh else np.array(block, order="C", subok=False)

    def read(self, start: int, stop: int, dtype="float32") -> np.ndarray:
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

    def __enter__(self) -> "ArraySource":
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
               limit: Optional[int] = None, what: str = "data.x1") -> ArraySource:
    """Open the array of examples at ``path`` (and ``key`` for .npz and .h5).

    ``what`` is the config key that named the file (``data.x1`` or
    ``data.x2``); every :class:`DataError` message starts with the key at fault.
    ``limit`` keeps only the first ``limit`` rows.
    """
    path = Path(path)
    key_name = _key_name(what)
    if layout not in LAYOUTS:
        raise DataError(f"data.layout: {layout!r} is not a layout; accepted: {', '.join(LAYOUTS)}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(f"{what}: {path} has suffix {path.suffix or '(none)'!r}; "
                        f"accepted: {', '.join(SUFFIXES)}")
    if not path.exists():
        raise DataError(f"{what}: {path} does not exist; give the path to a "
                        f"{', '.join(SUFFIXES)} file")
    if not path.is_file():
        raise DataError(f"{what}: {path} is not a file; give the path to a "
                        f"{', '.join(SUFFIXES)} file")
    if suffix == ".npy":
        if key is not None:
            raise DataError(f"{key_name}: {key!r} is only used for .npz and .h5 files; "
                            f"{path} is a .npy file holding one array: remove {key_name}")
        opened = _open_npy(path, what)
    elif suffix == ".npz":
        opened = _open_npz(path, key, what, key_name)
    else:
        opened = _open_h5(path, key, what, key_name)
    raw_shape, dtype, kwargs = opened
    try:
        n = _validate(path, key, raw_shape, layout, limit, what)
    except DataError:
        if kwargs.get("closer"):
            kwargs["closer"]()
        raise
    return ArraySource(path=path, key=key, what=what, layout=layout,
                       raw_shape=raw_shape, dtype=dtype, n=n, **kwargs)


def _open_npy(path: Path, what: str):
    try:
        with open(path, "rb") as fp:
            shape, _, dtype = _npy_header(fp)
        _check_dtype(path, None, dtype, what)
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{what}: {path} is not a readable .npy file ({exc})") from None
    return tuple(shape), dtype, {"raw": arr}


def _open_npz(path: Path, key: Optional[str], what: str, key_name: str):
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{what}: {path} is not a readable .npz file ({exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise DataError(f"{what}: {path} is not a readable .npz file (it holds a single .npy array)")
    try:
        _check_key(path, key, npz.files, key_name, ".npz", key in npz.files)
        member = f"{key}.npy" if f"{key}.npy" in npz.zip.namelist() else key
        with npz.zip.open(member) as fp:
            shape, _, dtype = _npy_header(fp)
        _check_dtype(path, key, dtype, what)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        npz.close()
        raise DataError(f"{what}: member {key!r} of {path} is not a readable array ({exc})") from None
    except DataError:
        npz.close()
        raise
    return tuple(shape), dtype, {"loader": lambda: npz[key], "closer": npz.close}


def _open_h5(path: Path, key: Optional[str], what: str, key_name: str):
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{what}: {path} is not a readable HDF5 file ({exc})") from None
    try:
        datasets = []
        f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
        _check_key(path, key, datasets, key_name, ".h5", key is not None and key in f)
        dset = f[key]
        if not isinstance(dset, h5py.Dataset):
            raise DataError(f"{key_name}: {key!r} in {path} is a group, not a dataset; "
                            f"datasets present: {', '.join(datasets) or '(none)'}")
        _check_dtype(path, key, dset.dtype, what)
        shape = tuple(dset.shape) if dset.shape is not None else ()
    except DataError:
        f.close()
        raise
    return shape, dset.dtype, {"raw": dset, "closer": f.close}


def _check_key(path, key, present, key_name, kind, found) -> None:
    listed = ", ".join(present) or "(none)"
    if key is None:
        raise DataError(f"{key_name}: not set, but {path} is a {kind} file that can hold several "
                        f"arrays; set {key_name} to one of: {listed}")
    if not found:
        raise DataError(f"{key_name}: {key!r} not found in {path}; keys present: {listed}")


def _check_dtype(path, key, dtype: np.dtype, what: str) -> None:
    where = f"{path}" if key is None else f"{path} [{key!r}]"
    if dtype.hasobject:
        raise DataError(f"{what}: {where} holds Python objects (dtype object), which are not read "
                        "for safety; accepted: a numeric array (bool, integer or float)")
    if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
        raise DataError(f"{what}: {where} has dtype {dtype}, which is not numeric; "
                        "accepted: a numeric array (bool, integer or float)")


def _validate(path, key, shape, layout, limit, what) -> int:
    """Check rank, sizes, layout and limit; return the number of rows used."""
    where = f"{path}" if key is None else f"{path} [{key!r}]"
    if len(shape) not in (2, 4):
        raise DataError(f"{what}: {where} holds an array of shape {shape} (rank {len(shape)}); "
                        f"accepted: {_ACCEPTED_RANKS}")
    if layout == "NCHW" and len(shape) != 4:
        raise DataError(f"data.layout: 'NCHW' needs rank 4 images, but {what} {where} has shape "
                        f"{shape}; use NHWC (the default) for rank 2 rows")
    if min(shape) == 0:
        raise DataError(f"{what}: {where} holds an empty array of shape {shape}; "
                        "accepted: at least one example with every dimension at least 1")
    rows = shape[0]
    if limit is None:
        return rows
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise DataError(f"data.limit: {limit!r} is not a positive integer; "
                        "accepted: a row count of at least 1, or null for all rows")
    if limit > rows:
        raise DataError(f"data.limit (={limit}) exceeds the {rows} rows of {what} {where}; "
                        f"use at most {rows}, or null for all rows")
    return int(limit)


def check_finite(src: ArraySource, what: Optional[str] = None, batch: int = 1024,
                 dtype=None) -> None:
    """Raise :class:`DataError` naming the first row holding NaN or Inf.

    Streams ``batch`` rows at a time. Integer and bool sources cannot hold
    either and are skipped. With ``dtype`` (e.g. ``"float32"``) a finite value
    that overflows to Inf when cast to it is an error too.
    """
    what = what or src.what
    cast = _float_dtype(dtype) if dtype is not None else None
    if src.dtype.kind != "f" and cast is None:
        return
    for start in range(0, src.n, batch):
        block = src._read_raw(start, min(start + batch, src.n))
        flat = block.reshape(block.shape[0], -1)
        if src.dtype.kind == "f":
            _raise_first_bad(flat, start, what, src.path, None)
        if cast is not None:
            with np.errstate(over="ignore"):
                _raise_first_bad(flat.astype(cast), start, what, src.path, cast)


def _raise_first_bad(flat: np.ndarray, start: int, what: str, path: Path, cast) -> None:
    bad = ~np.isfinite(flat).all(axis=1)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    if cast is not None:
        raise DataError(f"{what}: row {start + i} of {path} has a value too large for {cast} "
                        f"(largest {np.finfo(cast).max:.4g}); every value must fit kernel.dtype")
    kind = "NaN" if np.isnan(flat[i]).any() else "Inf"
    raise DataError(f"{what}: row {start + i} of {path} contains {kind}; every value must be finite")


def check_pair(src1: ArraySource, src2: ArraySource) -> None:
    """Both sets must have the same example shape, since K(x1, x2) compares them."""
    if src1.example_shape != src2.example_shape:
        raise DataError(f"{src2.what}: examples of {src2.path} have shape {src2.example_shape}, "
                        f"but those of {src1.what} ({src1.path}) have shape {src1.example_shape}; "
                        "both sets must have the same example shape")
