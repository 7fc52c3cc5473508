"""Value checks of input rows: every value finite, and small enough for the kernel.

Why a magnitude bound, not only "finite"
----------------------------------------
The kernel squares the inputs and averages the squares over features (the first
layer's variance is ``W_std^2 * mean(x^2) + b_std^2``); later layers multiply by
``W_std^2`` again and add. A finite input of 1e20 has a square of 1e40, past
float32's largest value (3.4e38), and the kernel silently turns to Inf/NaN.

``|x| <= 1e15`` (float32) keeps every square, and so every per-feature mean, at
or below 1e30: eight orders of magnitude (3.4e8) below float32's largest value,
which is the room left for the ``W_std^2`` factors of the layers (a product of
up to 3.4e8 over all layers, e.g. W_std = 10 on four layers), the standard
parameterization's fan-in factor of the NTK, and the partial sums of the
Gram-matrix products (a sum over d features of values up to 1e30 stays finite
for d up to 3.4e8). ``|x| <= 1e150`` does the same for float64 (1e300 against
1.8e308). Outside these bounds inputs are refused at load; a network whose own
weights overflow the kernel is not a data problem and is not caught here.

Checks stream rows in batches of a bounded byte size (a memory-mapped data set
larger than memory is fine). Integer values are measured in float64 before any
cast, so an int64 2**62 is measured as 4.6e18, not first cast to float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DataError

# Largest accepted |x| per compute dtype (see the module docstring for why).
INPUT_BOUNDS = {"float32": 1e15, "float64": 1e150}
_BATCH_BYTES = 64 * 2**20  # memory bound of one checked batch (float64 copy of a batch)


def input_bound(dtype) -> float:
    """The largest accepted input magnitude for a kernel computed in ``dtype``."""
    name = np.dtype(dtype).name
    if name not in INPUT_BOUNDS:
        raise ValueError(f"no input bound for dtype {name}; known: {', '.join(INPUT_BOUNDS)}")
    return INPUT_BOUNDS[name]


def _dtype_max(dtype: np.dtype) -> float:
    """The largest magnitude ``dtype`` can hold (bool 1)."""
    if dtype.kind == "b":
        return 1.0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return float(max(abs(int(info.min)), int(info.max)))
    return float("inf")  # floats: measured, since even float16's Inf is possible


# The dtypes an input may have, the files' and the library's alike: numpy kinds, and
# what a message says is accepted.
NUMERIC = ("biuf", "a numeric array (bool, integer or float)")
# bfloat16 (ml_dtypes, jax's) is not a numpy type: numpy saves it as raw 2-byte values
# (V2), which cannot be told from other bytes, so it is refused on both sides alike.
_BFLOAT16 = ("; bfloat16 is not one of numpy's numeric types and a .npy file holds it as "
             "raw 2-byte values (V2): cast it to float32 first")


def dtype_problem(dtype: np.dtype, accepted=NUMERIC) -> Optional[str]:
    """Why an input of ``dtype`` is refused (a phrase: "has dtype ..."), or None."""
    if dtype.hasobject:
        return "holds Python objects (dtype object), which are not read for safety"
    if dtype.kind not in accepted[0] or dtype.fields is not None or dtype.subdtype is not None:
        hint = _BFLOAT16 if dtype.kind == "V" and dtype.itemsize == 2 and not dtype.fields \
            else ""
        return f"has dtype {dtype}, which is not numeric{hint}"
    return None


def where_of(path: Path, key: Optional[str]) -> str:
    return f"{path}" if key is None else f"{path} [{key!r}]"


def check_finite(src, what: Optional[str] = None, batch: int = 1024, dtype=None,
                 stop=None) -> float:
    """Raise :class:`DataError` naming the first row holding NaN or Inf, or, with
    ``dtype`` (the kernel's compute dtype, ``float32`` or ``float64``), a value whose
    magnitude exceeds :data:`INPUT_BOUNDS` for it.

    Return an upper bound of the largest magnitude in ``src``: the one measured, or,
    for integers too small ever to exceed the bound (uint8 images), the dtype's
    largest value, without reading. Streams at most ``batch`` rows (and about
    64 MiB) at a time, through the same slice reads the computation uses; a requested
    ``stop`` (:class:`kernelcli.run.Stop`) is honoured between batches.
    """
    return check_rows(src._read_raw, src.n, src.example_shape, src.dtype, what or src.what,
                      where_of(src.path, src.key), batch, dtype, stop)


def check_rows(read, n: int, example_shape, source_dtype, what: str, where: str,
               batch: int = 1024, dtype=None, stop=None) -> float:
    """:func:`check_finite` over any rows: ``read(start, stop)`` returns rows
    ``[start, stop)`` of ``n``, of ``source_dtype``; ``where`` names them in messages."""
    source_dtype = np.dtype(source_dtype)
    bound = input_bound(dtype) if dtype is not None else None
    kind = source_dtype.kind
    if kind != "f" and (bound is None or _dtype_max(source_dtype) <= bound):
        return _dtype_max(source_dtype)
    row_bytes = max(1, int(np.prod(example_shape)) * 8)
    step = max(1, min(batch, _BATCH_BYTES // row_bytes))
    largest = 0.0
    for start in range(0, n, step):
        if stop is not None:
            stop.check()
        block = read(start, min(start + step, n))
        flat = block.reshape(block.shape[0], -1)
        mags = _magnitudes(flat)  # NaN for a row holding NaN (max propagates it)
        finite = np.isfinite(mags)
        over = ~finite if bound is None else ~finite | (mags > bound)
        if over.any():
            i = int(np.argmax(over))
            if not finite[i]:
                word = "NaN" if np.isnan(flat[i]).any() else "Inf"
                raise DataError(f"{what}: row {start + i} of {where} contains {word}; "
                                "every value must be finite")
            raise DataError(f"{what}: row {start + i} of {where} holds a value of magnitude "
                            f"{_show(mags[i])}, too large for kernel.dtype {np.dtype(dtype).name}; "
                            f"accepted: |x| <= {bound:.0e} (larger inputs overflow the kernel's "
                            "sums of squares); rescale the data")
        if mags.size:
            largest = max(largest, float(mags.max()))
    return largest


def _magnitudes(flat: np.ndarray) -> np.ndarray:
    """Largest |value| of each row, in float64 (integers converted before abs, so the
    most negative int64 has no overflow); long doubles keep their own precision."""
    if flat.shape[0] == 0 or flat.shape[1] == 0:
        return np.zeros(flat.shape[0])
    if flat.dtype.kind == "f" and flat.dtype.itemsize > 8:
        return np.abs(flat).max(axis=1)
    return np.abs(flat.astype(np.float64, copy=False)).max(axis=1)


def _show(value) -> str:
    shown = f"{float(value):.4g}"
    # a long double beyond float64's range keeps its own digits
    return shown if shown != "inf" else np.format_float_scientific(value, precision=3)
