"""Input data: arrays of examples read by row slices, their checks and fingerprint.

numpy and h5py only; no jax, no click.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

# Each name loaded on first use: checking rows (the library's in-memory calls) should
# not import h5py, which the readers of files need (0.05 s of a first call's time).
_LAZY = {
    "fingerprint": "._fingerprint", "array_names": "._readers", "listed": "._h5",
    "ArraySource": "._source", "LAYOUTS": "._source", "SUFFIXES": "._source",
    "check_pair": "._source", "open_array": "._source", "check_finite": "._value_checks",
    "check_rows": "._value_checks", "NUMERIC": "._value_checks", "dtype_problem": "._value_checks",
    "INPUT_BOUNDS": "._value_checks", "input_bound": "._value_checks",
    "MAX_LABEL": "._labels", "load_labels": "._labels", "Preprocess": "._preprocess",
    "fit_preprocess": "._preprocess", "PatchSettings": "._patches",
    "patches_file_bytes": "._patches", "preprocess_file_bytes": "._preprocess_size",
    "ConcatRows": "._views",
    "Preprocessed": "._views", "SliceableRows": "._views", "RowSource": "._row_source",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

if TYPE_CHECKING:  # the names as type checkers see them (_LAZY's, loaded on first use)
    from ._fingerprint import fingerprint as fingerprint
    from ._h5 import listed as listed
    from ._labels import MAX_LABEL as MAX_LABEL
    from ._labels import load_labels as load_labels
    from ._patches import PatchSettings as PatchSettings
    from ._patches import patches_file_bytes as patches_file_bytes
    from ._preprocess import Preprocess as Preprocess
    from ._preprocess import fit_preprocess as fit_preprocess
    from ._preprocess_size import preprocess_file_bytes as preprocess_file_bytes
    from ._readers import array_names as array_names
    from ._row_source import RowSource as RowSource
    from ._source import LAYOUTS as LAYOUTS
    from ._source import SUFFIXES as SUFFIXES
    from ._source import ArraySource as ArraySource
    from ._source import check_pair as check_pair
    from ._source import open_array as open_array
    from ._value_checks import INPUT_BOUNDS as INPUT_BOUNDS
    from ._value_checks import NUMERIC as NUMERIC
    from ._value_checks import check_finite as check_finite
    from ._value_checks import check_rows as check_rows
    from ._value_checks import dtype_problem as dtype_problem
    from ._value_checks import input_bound as input_bound
    from ._views import ConcatRows as ConcatRows
    from ._views import Preprocessed as Preprocessed
    from ._views import SliceableRows as SliceableRows
