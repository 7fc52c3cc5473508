"""What every source of a run's examples is: rows read by slices (:class:`RowSource`).

One array file (:class:`~kernelcli.data.ArraySource`), the views built from others
(:class:`~kernelcli.data.ConcatRows`, :class:`~kernelcli.data.Preprocessed`), a Nystrom
run's landmark rows (``pipeline/_landmark_rows.py``) and ``kernel_matrix``'s arrays in
memory (``pipeline/_matrix.py``) all offer it, and the per-input pass and the blocks
read through it alone, so any of them is planned and computed like any other.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import DTypeLike


class RowSource(Protocol):
    """Examples, rows first: ``n`` of them, each of ``example_shape``."""

    @property
    def n(self) -> int:
        """How many rows (examples)."""
        ...

    @property
    def example_shape(self) -> tuple[int, ...]:
        """One example's shape: spatial sizes then channels, or ``(D,)``."""
        ...

    def read(self, start: int, stop: int, dtype: DTypeLike = "float32") -> np.ndarray:
        """Rows ``[start, stop)`` as an array of ``dtype``, shape
        ``(stop - start,) + example_shape``."""
        ...

    def close(self) -> None:
        """Release what the source holds open (a view: what it reads from)."""
        ...
