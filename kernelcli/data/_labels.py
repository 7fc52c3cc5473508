"""Integer class labels beside the images (``data.labels_key``, ``data.test_labels_key``).

Accepted: a 1-D array of class indices in ``0..2**31-1`` (:data:`MAX_LABEL`), stored as
integers or as whole-number floats (3.0, as some tools write them); they come back as
int64. Anything else (negative, 2**40, NaN, 0.5, booleans, strings) is refused with
the first bad row. Only the rows used are read (``limit`` of them), so a hostile
header claiming a billion labels costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DataError
from ._h5 import one_line
from ._readers import H5_ERRORS, NPY_ERRORS, npy_header, npz_member, open_any
from ._value_checks import where_of

MAX_LABEL = 2**31 - 1  # class indices fit int32 everywhere downstream
_ACCEPTED = f"integer class labels in 0..{MAX_LABEL}"
# bool passes the dtype check of the opener only to get its own message below.
_KINDS = ("biuf", f"{_ACCEPTED} (integer or whole-number float dtype)")
_READ_ERRORS: tuple[type[Exception], ...] = tuple(set(H5_ERRORS) | set(NPY_ERRORS))


def load_labels(path: Path, key: Optional[str], *, limit: Optional[int], n: Optional[int],
                what: str) -> np.ndarray:
    """The ``(n,)`` int64 labels stored under ``key`` in ``path`` (.npz or .h5; a .npy
    file needs no key), first ``limit`` rows; ``n`` (if given) is the number of
    images they label. ``what`` names the YAML key in errors."""
    path = Path(path)
    suffix = path.suffix.lower()
    key_name = what if what.endswith("_key") else f"{what}_key"
    if suffix not in (".npy", ".npz", ".h5", ".hdf5"):
        raise DataError(f"{what}: labels are read from .npy, .npz or .h5 files; {path} is "
                        "not one")
    if key is None and suffix != ".npy":
        raise DataError(f"{what}: labels in {path} need an array name; set the matching "
                        "*labels_key (e.g. labels_key: y)")
    if not path.is_file():
        raise DataError(f"{what}: {path} does not exist; expected a .npy, .npz or .h5 "
                        "file of integer labels")
    if suffix == ".npy":
        key = None  # a .npy file holds one array: the key names nothing
    opened = open_any(path, key, what, key_name, _KINDS)
    try:
        shown = key or path.name
        if len(opened.shape) != 1:
            raise DataError(f"{what}: {shown!r} in {path} has shape {opened.shape} and dtype "
                            f"{opened.dtype}; expected a 1-D array of integer class labels")
        if opened.dtype.kind == "b":
            raise DataError(f"{what}: {where_of(path, key)} holds booleans (dtype bool), not "
                            f"class indices; accepted: {_ACCEPTED}")
        rows = opened.shape[0] if limit is None else min(opened.shape[0], limit)
        if n is not None and rows != n:
            raise DataError(f"{what}: {rows} labels in {path} for {n} images; expected one "
                            "label per image")
        y = _read(opened, path, key, rows, what)
    finally:
        opened.close()
    return _checked(y, path, key, what)


def _read(opened, path: Path, key: Optional[str], rows: int, what: str) -> np.ndarray:
    """The first ``rows`` labels, reading no more than those."""
    try:
        if "raw" in opened.kwargs:  # memory map or h5py dataset: a slice read
            return np.array(opened.kwargs["raw"][:rows])
        # A .npz member: stream just its header and the first rows.
        assert key is not None  # open_npz refused a member without one
        with np.load(path, allow_pickle=False) as npz, npz.zip.open(npz_member(npz, key)) as fp:
            _, _, dtype = npy_header(fp)
            data = fp.read(rows * dtype.itemsize)
        if len(data) < rows * dtype.itemsize:
            raise EOFError(f"{len(data)} bytes of data, {rows * dtype.itemsize} expected")
        return np.frombuffer(data, dtype=dtype).copy()
    except _READ_ERRORS as exc:
        raise DataError(f"{what}: the labels {where_of(path, key)} cannot be read "
                        f"({one_line(exc)}); the file is damaged or truncated") from None


def _checked(y: np.ndarray, path: Path, key: Optional[str], what: str) -> np.ndarray:
    """``y`` as int64, or DataError naming the first row outside the accepted labels."""
    if y.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(y) | (y != np.floor(y)) | (y < 0) | (y > MAX_LABEL)
    else:  # compare as Python-sized ints: uint64 and int64 extremes both fit float-free
        bad = (y < 0) | (y > MAX_LABEL)
    if bad.any():
        i = int(np.argmax(bad))
        value = y[i].item()
        raise DataError(f"{what}: row {i} of {where_of(path, key)} holds label {value!r}; "
                        f"accepted: {_ACCEPTED}")
    return y.astype(np.int64)
