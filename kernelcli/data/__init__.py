"""Input data: arrays of examples read by row slices, their checks and fingerprint.

numpy and h5py only; no jax, no click.
"""

from ._fingerprint import fingerprint as fingerprint
from ._readers import array_names as array_names
from ._h5 import listed as listed
from ._source import ArraySource as ArraySource
from ._source import LAYOUTS as LAYOUTS
from ._source import SUFFIXES as SUFFIXES
from ._values import check_finite as check_finite
from ._values import check_rows as check_rows
from ._source import check_pair as check_pair
from ._source import open_array as open_array
from ._labels import MAX_LABEL as MAX_LABEL
from ._labels import load_labels as load_labels
from ._preprocess import Preprocess as Preprocess
from ._preprocess import fit_preprocess as fit_preprocess
from ._views import ConcatRows as ConcatRows
from ._views import Preprocessed as Preprocessed
from ._values import INPUT_BOUNDS as INPUT_BOUNDS
from ._values import input_bound as input_bound
from ._views import SliceableRows as SliceableRows

__all__ = ["ArraySource", "array_names", "check_rows", "listed", "ConcatRows", "INPUT_BOUNDS", "LAYOUTS", "MAX_LABEL", "Preprocess",
           "Preprocessed", "SUFFIXES", "SliceableRows", "check_finite", "check_pair",
           "fingerprint", "fit_preprocess", "input_bound", "load_labels", "open_array"]
