"""How large a fitted preprocessing's side file (``preprocess-*.npz``) will be, from the
configuration and one example's shape alone, before any fit: what ``estimate`` counts
on disk."""

from __future__ import annotations

import math

from ._patches import fitted_arrays
from ._preprocess import KINDS

# What a fitted kind's side file (``preprocess-*.npz``) holds beyond its settings: its
# float64 arrays, name -> shape, from ``data.preprocess`` and one example's shape alone,
# before any fit (what ``estimate`` counts on disk). A new kind adds its entry.
FITTED_ARRAYS = {
    "standardize": lambda spec, shape: {"mean": tuple(shape[-1:]), "std": tuple(shape[-1:])},
    "zca": lambda spec, shape: {"whitening": (math.prod(shape), math.prod(shape))},
    "random_patches": lambda spec, shape: fitted_arrays(shape, spec.size, spec.count),
}

# An array's entry in an .npz beside its values: its .npy header (128 bytes) and its
# zip headers, local and central, with their zip64 fields and its name (under 128).
_NPZ_ENTRY_BYTES = 256
_NPZ_END_BYTES = 22  # the zip's end record


def preprocess_file_bytes(spec, example_shape) -> int:
    """The bytes of the side file of ``spec`` (``data.preprocess``) fitted on examples of
    ``example_shape``: its fitted arrays (:data:`FITTED_ARRAYS`) and settings, as
    :meth:`Preprocess.to_bytes` writes them (to a few hundred bytes)."""
    arrays = FITTED_ARRAYS[spec.kind](spec, tuple(example_shape))
    values = sum(8 * math.prod(shape) for shape in arrays.values())
    # kind, feature_shape, per_image (and zca_reg where set): a few bytes each
    entries = len(arrays) + 3 + (getattr(spec, "zca_reg", None) is not None)
    settings = 4 * max(map(len, KINDS)) + 8 * len(example_shape) + 1 + 8
    return values + settings + entries * _NPZ_ENTRY_BYTES + _NPZ_END_BYTES
