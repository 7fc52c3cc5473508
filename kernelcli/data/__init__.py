"""Input data: arrays of examples read by row slices, their checks and fingerprint.

numpy and h5py only; no jax, no click.
"""

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
    "fit_preprocess": "._preprocess", "ConcatRows": "._views",
    "Preprocessed": "._views", "SliceableRows": "._views", "RowSource": "._row_source",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
