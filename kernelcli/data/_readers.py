"""Opening the array stored in a .npy, .npz or .h5 file, trusting nothing in it.

Each opener reads only headers and metadata, checks them against the file (a
header may claim more data than the file holds), and returns an :class:`Opened`:
the stored shape and dtype and how to get at the values (a memory map, a loader
run on the first read, or an h5py dataset) and to close the file. Every failure
is a one-line :class:`DataError` naming the file and key.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import DataError
from . import _h5
from ._h5 import H5_ERRORS, one_line
from ._unpack import array_bytes, bound_of, check_unpacked, read_member
from ._value_checks import NUMERIC, dtype_problem, where_of

# What numpy and zipfile raise on damaged or hostile files (no pickle is ever loaded).
NPY_ERRORS = (OSError, ValueError, TypeError, SyntaxError, OverflowError, EOFError, KeyError,
              RuntimeError, NotImplementedError, UnicodeDecodeError, zipfile.BadZipFile,
              zlib.error)


@dataclass
class Opened:
    shape: tuple[int, ...]
    dtype: np.dtype
    kwargs: dict = field(default_factory=dict)  # raw / loader / closer for ArraySource

    def close(self) -> None:
        if self.kwargs.get("closer"):
            self.kwargs["closer"]()


def npy_header(fp) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) from an open .npy stream, reading no data."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fp)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fp)
    # Version 3 (utf-8 field names) has no public header reader; it only
    # matters for structured dtypes, which are rejected anyway.
    raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")


def check_dtype(path, key, dtype: np.dtype, what: str, accepted=NUMERIC) -> None:
    problem = dtype_problem(dtype, accepted)
    if problem is not None:
        raise DataError(f"{what}: {where_of(path, key)} {problem}; accepted: {accepted[1]}")


def _check_size(path, key, what, shape, dtype, have: int, kind: str) -> None:
    """A header's shape must be non-negative and its data present in ``have`` bytes."""
    where = where_of(path, key)
    if any(d < 0 for d in shape):
        raise DataError(f"{what}: {where} has a header claiming shape {tuple(shape)}, with a "
                        f"negative size; accepted: a complete {kind} array")
    need = math.prod(shape) * dtype.itemsize  # Python ints: no overflow on hostile shapes
    if have < need:
        raise DataError(f"{what}: {where} is truncated or its header is wrong: shape "
                        f"{tuple(shape)} of {dtype} needs {need} bytes of data, the file holds "
                        f"{have}; accepted: a complete {kind} array")


def _rows_kept(shape, limit: Optional[int]) -> int:
    """The rows of an array of ``shape`` that a ``limit`` keeps (0 for a scalar, which is
    refused later by its rank)."""
    return 0 if not shape else shape[0] if limit is None else min(limit, shape[0])


def _check_entry(path, key, what, shape, dtype, declared: int) -> None:
    """A zip entry must declare exactly its header's data: more is a member whose size
    and header disagree (a crafted or damaged file), never read on trust."""
    need = math.prod(shape) * dtype.itemsize
    if declared != need:
        raise DataError(f"{what}: {where_of(path, key)} has a zip entry declaring {declared} "
                        f"bytes of data, but its header's shape {tuple(shape)} of {dtype} "
                        f"needs {need}; accepted: a member whose size and header agree (as "
                        f"numpy.savez writes them)")


def check_key(path, key: Optional[str], listed: str, key_name: str, kind: str) -> str:
    """``key``, which a file that can hold several arrays needs."""
    if key is None:
        raise DataError(f"{key_name}: not set, but {path} is a {kind} file that can hold several "
                        f"arrays; set {key_name} to one of: {listed}")
    return key


def open_npy(path: Path, what: str, accepted=NUMERIC) -> Opened:
    try:
        with open(path, "rb") as fp:
            shape, _, dtype = npy_header(fp)
            have = os.fstat(fp.fileno()).st_size - fp.tell()
    except NPY_ERRORS as exc:
        raise DataError(f"{what}: {path} is not a readable .npy file ({one_line(exc)})") from None
    check_dtype(path, None, dtype, what, accepted)
    _check_size(path, None, what, shape, dtype, have, ".npy")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_ERRORS as exc:
        raise DataError(f"{what}: {path} is not a readable .npy file ({one_line(exc)})") from None
    return Opened(tuple(shape), dtype, {"raw": arr})


def npz_member(npz, key: str) -> str:
    return f"{key}.npy" if f"{key}.npy" in npz.zip.namelist() else key


def open_npz(path: Path, key: Optional[str], what: str, key_name: str,
             accepted=NUMERIC, max_bytes: Optional[int] = None, stop=None,
             limit: Optional[int] = None) -> Opened:
    """A member's header and zip entry, checked; its values are unpacked on the first
    read, and only its first ``limit`` rows (default: all) then (``_unpack``)."""
    try:
        npz = np.load(path, allow_pickle=False)
    except NPY_ERRORS as exc:
        raise DataError(f"{what}: {path} is not a readable .npz file ({one_line(exc)})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise DataError(f"{what}: {path} is not a readable .npz file (it holds a single .npy "
                        "array)")
    zf = npz.zip
    assert zf is not None  # None only once closed
    try:
        listed = _h5.listed(npz.files)
        key = check_key(path, key, listed, key_name, ".npz")
        if key not in npz.files:
            raise DataError(f"{key_name}: {key!r} not found in {path}; keys present: {listed}")
        member = npz_member(npz, key)
        try:
            with zf.open(member) as fp:
                shape, fortran, dtype = npy_header(fp)
                offset = fp.tell()
            info = zf.getinfo(member)
            size = info.file_size
        except NPY_ERRORS as exc:
            raise DataError(f"{what}: member {key!r} of {path} is not a readable array "
                            f"({one_line(exc)})") from None
        check_dtype(path, key, dtype, what, accepted)
        _check_size(path, key, what, shape, dtype, size - offset, ".npz member")
        _check_entry(path, key, what, shape, dtype, size - offset)
        rows = _rows_kept(shape, limit)
        if info.compress_type != zipfile.ZIP_STORED:
            kept = (rows,) + tuple(shape[1:]) if shape else ()
            detail = f"shape {tuple(shape)} of {dtype}" if kept == tuple(shape) else \
                f"the first {rows} rows of shape {tuple(shape)} of {dtype}"
            check_unpacked(path, key, what, array_bytes(kept, dtype), bound_of(max_bytes),
                           detail)
    except BaseException:
        npz.close()
        raise

    def load():
        with zf.open(member) as fp:
            npy_header(fp)
            if not shape:
                return read_member(fp, (1,), fortran, dtype, stop).reshape(())
            return read_member(fp, tuple(shape), fortran, dtype, stop, rows)
    return Opened(tuple(shape), dtype, {"loader": load, "closer": npz.close})


def open_h5(path: Path, key: Optional[str], what: str, key_name: str,
            accepted=NUMERIC, max_bytes: Optional[int] = None, stop=None,
            limit: Optional[int] = None) -> Opened:
    """A dataset, checked (``_h5``); a deflated one of which ``limit`` keeps fewer rows
    than it holds is read by its first rows' prefix of each chunk (``_h5.first_rows``)."""
    f = _h5.open_file(path, what)
    closers: list = [f.close]
    try:
        if key is None:
            key = check_key(path, key, _h5.listing(f), key_name, ".h5")
        dset = _h5.lookup(f, key, path, key_name)
        if dset.file.filename != f.filename:  # reached through an external link
            closers.insert(0, dset.file.close)
        try:
            dtype, shape = dset.dtype, tuple(dset.shape) if dset.shape is not None else ()
        except H5_ERRORS as exc:
            raise DataError(f"{what}: {where_of(path, key)} has an HDF5 datatype that cannot be "
                            f"read ({one_line(exc)}); accepted: {accepted[1]}") from None
        check_dtype(path, key, dtype, what, accepted)
        rows = _rows_kept(shape, limit)
        loader = _h5.first_rows(dset, rows, stop) if shape and rows < shape[0] else None
        if loader is not None:  # the kept rows are what is unpacked
            check_unpacked(path, key, what, array_bytes((rows,) + shape[1:], dtype),
                           bound_of(max_bytes), f"the first {rows} rows of shape {shape} "
                           f"of {dtype}")
            return Opened(shape, dtype, {"loader": loader,
                                         "closer": lambda: _close_all(closers)})
        dset = _h5.bounded(dset, path, key, what, bound_of(max_bytes))
    except BaseException:
        _close_all(closers)
        raise
    return Opened(shape, dtype, {"raw": dset, "closer": lambda: _close_all(closers)})


def _close_all(closers: Sequence[Callable[[], None]]) -> None:
    for close in closers:
        try:
            close()
        except H5_ERRORS:  # closing a damaged file must not hide the error being reported
            pass


def array_names(path: Path) -> Optional[list]:
    """The names of the arrays a .npz or .h5 file holds (``None`` for a .npy file, which
    holds one array without a name); at most ``MAX_NAMES`` are read."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return None
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as npz:
                return [n for n in npz.files[:MAX_NAMES]]
        except NPY_ERRORS + (AttributeError,):  # unreadable: the open that follows says so
            return []
    try:
        f = _h5.open_file(path, str(path))
    except DataError:  # unreadable: the open that follows says so
        return []
    try:
        return _h5.names(f, MAX_NAMES)
    finally:
        f.close()


MAX_NAMES = 1000  # a hostile file may name millions


def open_any(path: Path, key: Optional[str], what: str, key_name: str,
             accepted=NUMERIC, max_bytes: Optional[int] = None, stop=None,
             limit: Optional[int] = None) -> Opened:
    """The opener for ``path``'s suffix (.npy takes no key; checked by the caller).
    ``max_bytes``: what a compressed array may unpack to (``_unpack``); ``stop`` is
    honoured while a .npz member is unpacked; ``limit``: the rows that will be read
    (a validated row count, or None for all)."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return open_npy(path, what, accepted)
    if suffix == ".npz":
        return open_npz(path, key, what, key_name, accepted, max_bytes, stop, limit)
    return open_h5(path, key, what, key_name, accepted, max_bytes, stop, limit)
