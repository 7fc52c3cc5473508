"""``kernels.h5`` read back: the one reader of a run's result file (and of any stored
kernel a caller names by path).

Every reader of a result goes through :class:`ResultFile`: the library's
``open_run`` (names, memory-mapped datasets), ``predict`` (labels, streamed row
blocks, whole kernels in float64), ``extend`` (the diagonal blocks of the old
result), ``verify``/``status`` (identity, checksums, shapes, finiteness, symmetry).
The file is opened per call and closed after, so a ``ResultFile`` can be kept,
pickled or shared by processes; nothing here writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

import h5py
import numpy as np

from .._untrusted import UntrustedFileError, check_untrusted
from ..errors import DataError

_BAND_BYTES = 64 << 20  # rows of a dataset read (hashed, checked) at once


def _open_h5(path: Path, max_bytes: Optional[int] = None):
    """``h5py.File(path, "r")`` once ``path`` is checked as untrusted: a FIFO, device,
    socket, a link out of its folder or a file over ``max_bytes`` raises
    :class:`UntrustedFileError` instead of hanging or flooding HDF5's reader."""
    check_untrusted(path, None, max_bytes)
    return h5py.File(path, "r")


@dataclasses.dataclass(frozen=True)
class ResultFile:
    """The HDF5 kernel file at ``path`` (a run's ``kernels.h5``, or any file of 2-D
    kernels), read only."""

    path: Path
    max_bytes: Optional[int] = None  # a run's kernels.h5: the size its plan implies

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    # --- identity and checks ---------------------------------------------------------

    def problem(self, run: str, full: bool = True, expected: Optional[dict] = None):
        """``None`` when the file carries ``run`` and every dataset matches its checksum
        (``full=False``: identity and structure only, no data read); else what is
        wrong, in words."""
        return verify_result(self.path, run, expected, full=full,
                             max_bytes=self.max_bytes)

    def run_identity(self) -> Optional[str]:
        """The run identity the file carries (``None``: none, or unreadable)."""
        try:
            with _open_h5(self.path, self.max_bytes) as f:
                found = f.attrs.get("run")
        except (OSError, KeyError, ValueError, RuntimeError, TypeError, UntrustedFileError):
            return None
        return found.decode(errors="replace") if isinstance(found, bytes) else found

    def digests(self) -> dict:
        """dataset -> its ``sha256`` attribute (the file verified by the caller)."""
        return result_digests(self.path)

    def values_problem(self, shapes: dict, dtype, symmetric_names=()) -> Optional[str]:
        """``None`` when every dataset of ``shapes`` (name -> shape) is there with that
        shape and ``dtype``, finite, and those of ``symmetric_names`` exactly symmetric
        with a positive diagonal (a ``*_test_diag`` positive); else what is wrong."""
        dtype = np.dtype(dtype)
        with _open_h5(self.path, self.max_bytes) as f:
            for name, shape in shapes.items():
                if name not in f:
                    return f"it has no dataset {name!r}"
                d = f[name]
                if d.shape != shape or d.dtype != dtype:
                    return (f"dataset {name!r} is {d.dtype}{list(d.shape)}, not "
                            f"{dtype}{list(shape)}")
                for r0, band in row_bands(d):
                    if not np.isfinite(band).all():
                        return f"dataset {name!r} has values that are not finite (rows from {r0})"
                    if name in symmetric_names:
                        r1 = r0 + band.shape[0]
                        if not np.array_equal(band, d[:, r0:r1].T):
                            return (f"dataset {name!r} is not exactly symmetric "
                                    f"(rows {r0}-{r1 - 1})")
                        diag = band[np.arange(r1 - r0), np.arange(r0, r1)]
                        if not (diag > 0).all():
                            return f"dataset {name!r} has a diagonal entry that is not positive"
                    if name.endswith("_test_diag") and not (band > 0).all():
                        return f"dataset {name!r} has an entry that is not positive"
        return None

    # --- names and values ------------------------------------------------------------

    def names(self) -> tuple:
        """The names at the file's root, in the file's order."""
        with _open_h5(self.path, self.max_bytes) as f:
            return tuple(f.keys())

    def labels(self) -> dict:
        """``labels`` / ``test_labels``, those the file holds."""
        with _open_h5(self.path, self.max_bytes) as f:
            return {k: f[k][...] for k in ("labels", "test_labels") if k in f}

    def read(self, name: str, dtype=None) -> np.ndarray:
        """The whole dataset ``name`` (converted to ``dtype`` as it is read)."""
        with _open_h5(self.path, self.max_bytes) as f:
            value = f[name][...]
        return value if dtype is None else value.astype(dtype)

    def memmap(self, name: str, missing) -> np.ndarray:
        """The dataset ``name`` memory-mapped read-only (nothing read yet), or read whole
        when it is not contiguous on disk (not written by kernelcli). ``missing(names)``
        makes the error for a name the file lacks."""
        with _open_h5(self.path, self.max_bytes) as f:
            if name not in f:
                raise missing(sorted(f.keys()))
            ds = f[name]
            offset = ds.id.get_offset()
            if offset is None or ds.chunks is not None or ds.compression is not None:
                return ds[...]
            dtype, shape = ds.dtype, ds.shape
        return np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)

    def diagonal_blocks(self, name: str, n: int, edge: int):
        """``(r0, diagonal of rows r0..r1)`` of the first ``n`` rows of square ``name``,
        reading the diagonal ``edge``-blocks only."""
        with _open_h5(self.path, self.max_bytes) as f:
            d = f[name]
            for r0 in range(0, n, edge):
                r1 = min(r0 + edge, n)
                yield r0, np.diag(d[r0:r1, r0:r1])

    # --- a stored kernel, streamed -----------------------------------------------------

    @contextlib.contextmanager
    def kernel(self, name: str):
        """The dataset ``name`` of the open file, for streamed reads (``shape``,
        ``dtype``, ``ndim``, ``read_direct``, slicing); :class:`DataError` when the file
        or the dataset is not there."""
        if not self.path.is_file():
            raise DataError(f"{self.path} does not exist; give the kernels.h5 of a finished run")
        try:
            f = _open_h5(self.path, self.max_bytes)
        except OSError as exc:
            raise DataError(f"{self.path} is not a readable HDF5 file ({exc})") from None
        with f:
            if name not in f or not isinstance(f[name], h5py.Dataset):
                names = ", ".join(k for k in f if isinstance(f[k], h5py.Dataset)) or "(none)"
                raise DataError(f"{self.path} holds no dataset {name!r}; it holds: {names}")
            yield f[name]

    def load_float64(self, name: str) -> np.ndarray:
        """The whole kernel ``name`` as a C-ordered float64 array, with no float32 copy."""
        return self.load(name, lambda shape: np.empty(shape, dtype=np.float64))

    def load(self, name: str, allocate: Callable[[tuple], np.ndarray],
             each_band: Optional[Callable[[], None]] = None) -> np.ndarray:
        """The whole kernel ``name`` read into ``allocate(shape)`` (a C-ordered array of
        the dtype wanted: HDF5 converts as it reads, with no other copy), in bands of at
        most 64 MiB of stored rows; ``each_band()`` is called before each (a stop's
        check)."""
        with self.kernel(name) as ds:
            out = allocate(ds.shape)
            step = _band_rows(ds)
            for s in range(0, out.shape[0] if out.size else 0, step):
                if each_band is not None:
                    each_band()
                rows = np.s_[s:s + step]
                ds.read_direct(out, rows, rows)
        return out


def _band_rows(dataset) -> int:
    """Rows of an h5py dataset in one band: as many as fit in 64 MiB, at least one."""
    row_bytes = max(1, dataset.dtype.itemsize * int(np.prod(dataset.shape[1:])))
    return max(1, _BAND_BYTES // row_bytes)


def row_bands(dataset):
    """``(first row, rows)`` of an h5py dataset in bands of at most 64 MiB, in order
    (a 0-d or empty dataset is one band), so a result of any size is read in bounded
    memory."""
    if dataset.ndim == 0 or dataset.shape[0] == 0:
        yield 0, np.ascontiguousarray(dataset[...])
        return
    step = _band_rows(dataset)
    for s in range(0, dataset.shape[0], step):
        yield s, np.ascontiguousarray(dataset[s:s + step])


def dataset_digest(dataset) -> str:
    """sha256 of an h5py dataset's C-order bytes, read in bands of rows. Each band is
    hashed in a second thread while the next one is read (hashlib lets go of the GIL
    on large buffers), in order, so checking a large kernel costs about the larger of
    reading and hashing rather than their sum (10 GB: 13 s read then hashed here)."""
    h = hashlib.sha256()
    with ThreadPoolExecutor(1, thread_name_prefix="kernelcli-digest") as pool:
        hashing = None
        for _, band in row_bands(dataset):
            if hashing is not None:
                hashing.result()
            hashing = pool.submit(h.update, band.data)
        if hashing is not None:
            hashing.result()
    return h.hexdigest()


def verify_result(path: Path, run: str, expected: Optional[dict] = None, full: bool = True,
                  max_bytes: Optional[int] = None):
    """``None`` when ``kernels.h5`` at ``path`` is whole; else what is wrong, in words.

    Whole means: readable, carrying ``run`` as its identity, and every dataset
    matching its ``sha256`` attribute (and ``expected``: name -> digest, when given).
    ``full=False`` checks identity and structure but reads no data.
    """
    try:
        with _open_h5(path, max_bytes) as f:
            found = f.attrs.get("run")
            found = found.decode(errors="replace") if isinstance(found, bytes) else found
            if found != run:
                return "it belongs to another run (its run identity differs)"
            names = set(f.keys())
            if expected is not None and names != set(expected):
                return f"it holds datasets {sorted(names)}, not {sorted(expected)}"
            for name in sorted(names):
                d = f[name]
                if not isinstance(d, h5py.Dataset):
                    return f"{name!r} is not a dataset"
                stored = d.attrs.get("sha256")
                if stored is None or (expected is not None and stored != expected[name]):
                    return f"dataset {name!r} has no matching checksum"
                if full and dataset_digest(d) != stored:
                    return f"dataset {name!r} does not match its checksum (damaged)"
    except UntrustedFileError as exc:
        return "it " + str(exc).removeprefix(f"{path} ")
    except (OSError, KeyError, ValueError, RuntimeError, TypeError) as exc:
        return f"it is unreadable ({str(exc).splitlines()[0][:200] if str(exc) else exc!r})"
    return None


def result_digests(path: Path) -> dict:
    """dataset -> its ``sha256`` attribute, of a ``kernels.h5`` (verified by the caller)."""
    with _open_h5(path) as f:
        out = {}
        for name in f:
            value = f[name].attrs.get("sha256", "")
            out[name] = value.decode() if isinstance(value, bytes) else str(value)
        return out
