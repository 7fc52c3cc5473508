"""The landmark rows of a Nystrom regression run (``data.landmarks: M``).

The landmarks ``Z`` are ``M`` rows of ``x1`` drawn uniformly without replacement
with a fixed seed (sorted, so they are read in file order). The run is then one
rectangle through the ordinary planner and store: its rows are the training rows,
the test rows and the landmarks again (``[X; T; Z]``), its columns the landmarks,
so ``kernels.h5`` holds ``K([X; T; Z], Z)`` -- ``K(X, Z)``, ``K(T, Z)`` and
``K(Z, Z)`` one after another, ``(N + T + M) x M``, nothing ``N x N``. Computing
``K(Z, Z)`` as its own rows (``M^2`` more pairs, a small share of ``N M``) keeps
prediction free of any record of which rows were drawn; the indices are still
fingerprinted in the manifest so that a resume with another draw is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
from numpy.typing import DTypeLike

from ..data import RowSource
from ..errors import DataError

LANDMARK_SEED = 0
FINGERPRINT_KEY = "landmarks"  # in the manifest's data fingerprints: a landmark run


def choose_landmarks(n: int, m: int) -> np.ndarray:
    """``m`` sorted row indices of ``range(n)`` (a seeded uniform draw); exit 2 when
    ``m`` is larger than ``n``."""
    if m > n:
        raise DataError(f"data.landmarks: {m} is more than the {n:,} rows of data.x1; "
                        f"expected a number of landmark rows from 1 to {n}")
    rng = np.random.default_rng(LANDMARK_SEED)
    return np.sort(rng.choice(n, size=m, replace=False)).astype(np.int64)


def landmarks_fingerprint(indices: np.ndarray, n: int) -> str:
    h = hashlib.sha256(np.ascontiguousarray(indices, dtype="<i8").data).hexdigest()
    return f"{len(indices)} of {n} rows of x1, seed {LANDMARK_SEED}, sha256 {h}"


class LandmarkRows(RowSource):
    """The rows ``indices`` of ``source`` as a row source of their own. They are few
    (``M`` rows), so the first read keeps them, at that dtype, for every later block."""

    def __init__(self, source: RowSource, indices: np.ndarray):
        self.source = source
        self.indices = np.asarray(indices, dtype=np.int64)
        self._kept: Optional[tuple[np.dtype, np.ndarray]] = None  # (dtype, rows)

    @property
    def n(self) -> int:
        return int(self.indices.size)

    @property
    def example_shape(self) -> tuple[int, ...]:
        return tuple(self.source.example_shape)

    def read(self, start: int, stop: int, dtype: DTypeLike = "float32") -> np.ndarray:
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"rows [{start}, {stop}) outside [0, {self.n})")
        dtype = np.dtype(dtype)
        if self._kept is None or self._kept[0] != dtype:
            rows = np.empty((self.n,) + self.example_shape, dtype=dtype)
            for j, i in enumerate(self.indices):
                rows[j] = self.source.read(int(i), int(i) + 1, dtype=dtype)[0]
            self._kept = (dtype, rows)
        return self._kept[1][start:stop]

    def close(self) -> None:
        """Nothing of its own: ``source`` is closed by whoever opened it."""


@dataclass(frozen=True)
class RouteCosts:
    """``estimate`` of a landmark configuration: the full kernel's route against the
    landmarks' (pairs, result bytes, the solve's float64 bytes and multiply-adds on
    Cholesky and the direct route, and, with a timed batch, seconds), for ``n_train``
    training and ``n_test`` test rows."""

    n_train: int
    n_test: int
    landmarks: int
    full_pairs: int
    full_result_bytes: int
    full_solve_bytes: int
    landmark_pairs: int
    landmark_result_bytes: int
    landmark_solve_bytes: int
    full_solve_operations: int = 0
    landmark_solve_operations: int = 0
    seconds_per_pair: Optional[float] = None

    def to_dict(self) -> dict:
        return {f"routes_{k}": v for k, v in asdict(self).items()}


def route_costs(n: int, t: int, m: int, kinds: int, itemsize: int, classes: int,
                seconds_per_pair: Optional[float] = None) -> RouteCosts:
    """The two routes for ``n`` training rows, ``t`` test rows and ``m`` landmarks: the
    lower triangle of ``K(X, X)`` plus ``K(T, X)``, against ``K([X; T; Z], Z)``."""
    from ..solvers import (
        cholesky_operations,
        landmark_memory_bytes,
        landmark_operations,
        solve_memory_bytes,
    )

    full = n * (n + 1) // 2 + t * n
    rect = (n + t + m) * m
    return RouteCosts(
        n_train=n, n_test=t, landmarks=m, full_pairs=full,
        full_result_bytes=(n * n + t * n) * kinds * itemsize,
        full_solve_bytes=solve_memory_bytes(n), landmark_pairs=rect,
        landmark_result_bytes=rect * kinds * itemsize,
        # predict's default sweep of five ridges, on its direct route
        landmark_solve_bytes=landmark_memory_bytes("direct", n, t, m, classes, 5, 5, kinds,
                                                   min(64 * 2**20, 8 * rect)),
        full_solve_operations=cholesky_operations(n, t, classes, 5, kinds),
        landmark_solve_operations=landmark_operations("direct", n, t, m, classes, 5,
                                                      min(5, n), kinds),
        seconds_per_pair=seconds_per_pair)
