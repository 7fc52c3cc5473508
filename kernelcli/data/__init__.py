"""Input data: arrays of examples read by row slices, their checks and fingerprint.

numpy and h5py only; no jax, no click.
"""

from ._fingerprint import fingerprint as fingerprint
from ._source import ArraySource as ArraySource
from ._source import LAYOUTS as LAYOUTS
from ._source import SUFFIXES as SUFFIXES
from ._source import check_finite as check_finite
from ._source import check_pair as check_pair
from ._source import open_array as open_array

__all__ = ["ArraySource", "LAYOUTS", "SUFFIXES", "check_finite", "check_pair",
           "fingerprint", "open_array"]
