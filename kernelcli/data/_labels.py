"""Integer class labels beside the images (``data.labels_key``, ``data.test_labels_key``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import h5py
import numpy as np

from ..errors import DataError


def load_labels(path: Path, key: Optional[str], *, limit: Optional[int], n: Optional[int],
                what: str) -> np.ndarray:
    """The ``(n,)`` int64 labels stored under ``key`` in ``path`` (.npz or .h5; a .npy
    file needs no key), first ``limit`` rows; ``n`` (if given) is the number of
    images they label. ``what`` names the YAML key in errors."""
    path = Path(path)
    suffix = path.suffix.lower()
    if key is None and suffix != ".npy":
        raise DataError(f"{what}: labels in {path} need an array name; set the matching "
                        "*labels_key (e.g. labels_key: y)")
    try:
        if not path.is_file():
            raise DataError(f"{what}: {path} does not exist; expected a .npy, .npz or .h5 "
                            "file of integer labels")
        if suffix == ".npy":
            y = np.load(path, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                if key not in z.files:
                    raise DataError(f"{what}: {key!r} not found in {path}; keys present: "
                                    f"{', '.join(z.files)}")
                y = z[key]
        elif suffix in (".h5", ".hdf5"):
            with h5py.File(path, "r") as f:
                if key not in f:
                    raise DataError(f"{what}: {key!r} not found in {path}; keys present: "
                                    f"{', '.join(f.keys())}")
                y = f[key][...]
        else:
            raise DataError(f"{what}: labels are read from .npy, .npz or .h5 files; {path} is "
                            "not one")
    except (OSError, ValueError) as exc:
        raise DataError(f"{what}: cannot read {path}: {exc}") from None
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise DataError(f"{what}: {key or path.name!r} in {path} has shape {y.shape} and dtype {y.dtype}; "
                        "expected a 1-D array of integer class labels")
    if limit is not None:
        y = y[:limit]
    if n is not None and len(y) != n:
        raise DataError(f"{what}: {len(y)} labels in {path} for {n} images; expected one "
                        "label per image")
    if len(y) and y.min() < 0:
        raise DataError(f"{what}: labels must be class indices >= 0; found {int(y.min())}")
    return y.astype(np.int64)
