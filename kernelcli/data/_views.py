"""Row sources built from others: training and test rows as one index range, and
preprocessing applied as rows are read.

Both are row sources (:class:`~._row_source.RowSource`, what the executor reads
through) made of row sources, so a run over a training and a test set, or over
preprocessed data, is planned and executed like any other.
Fingerprints are taken of the underlying :class:`ArraySource` files, never of
these views.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.typing import DTypeLike

from ._row_source import RowSource


class ConcatRows(RowSource):
    """The rows of ``parts`` one after another: row ``i`` of the view is row ``i``
    of the first part, row ``n0 + i`` row ``i`` of the second, and so on. All parts
    have one ``example_shape``."""

    def __init__(self, parts: Sequence[RowSource]):
        self.parts = tuple(parts)
        shapes = {tuple(p.example_shape) for p in self.parts}
        if len(shapes) != 1:
            raise ValueError(f"ConcatRows needs one example shape, got {sorted(shapes)}")
        self.starts = np.cumsum([0] + [p.n for p in self.parts])

    @property
    def n(self) -> int:
        return int(self.starts[-1])

    @property
    def example_shape(self) -> tuple[int, ...]:
        return tuple(self.parts[0].example_shape)

    def read(self, start: int, stop: int, dtype: DTypeLike = "float32") -> np.ndarray:
        """Rows ``[start, stop)``, shape ``(stop - start,) + example_shape``."""
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"rows [{start}, {stop}) outside [0, {self.n})")
        pieces = []
        for part, s0 in zip(self.parts, self.starts[:-1], strict=True):
            lo, hi = max(start, s0), min(stop, s0 + part.n)
            if lo < hi:
                pieces.append(part.read(int(lo - s0), int(hi - s0), dtype=dtype))
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.empty((0,) + self.example_shape, dtype=dtype)
        return np.concatenate(pieces)

    def close(self) -> None:
        for p in self.parts:
            p.close()


class Preprocessed(RowSource):
    """``source`` with a fitted :class:`~kernelcli.data.Preprocess` applied to every
    row read (the computation happens in float64, then the rows are cast)."""

    def __init__(self, source: RowSource, preprocess):
        self.source = source
        self.preprocess = preprocess

    @property
    def n(self) -> int:
        return self.source.n

    @property
    def example_shape(self) -> tuple[int, ...]:
        """The preprocessed shape (random patches make images feature maps)."""
        return tuple(self.preprocess.output_shape)

    def read(self, start: int, stop: int, dtype: DTypeLike = "float32") -> np.ndarray:
        rows = self.source.read(start, stop, dtype="float64")
        return self.preprocess.apply(rows, dtype=np.dtype(dtype), where=self._where(),
                                     row0=start)

    def _where(self) -> str:
        """How output errors name the rows: ``data.test: path ['key']`` for a file."""
        src = self.source  # a file's (ArraySource) names it; another view does not
        if getattr(src, "path", None) is None:
            return "the preprocessed data"
        # imported only here: a source with a path is a file's, whose module (and h5py)
        # is loaded already; a view of rows in memory never loads it
        from ._source import ArraySource

        if not isinstance(src, ArraySource):
            return "the preprocessed data"
        key = src.key
        return f"{src.what}: {src.path}" + ("" if key is None else f" [{key!r}]")

    def close(self) -> None:
        self.source.close()


class SliceableRows:
    """``source`` with numpy's ``x[start:stop]`` and ``x.shape``, in float64: what
    :func:`~kernelcli.data.fit_preprocess` reads its training rows through."""

    def __init__(self, source: RowSource):
        self.source = source
        self.shape = (source.n,) + tuple(source.example_shape)

    def __getitem__(self, item) -> np.ndarray:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("SliceableRows supports contiguous row slices only")
        start, stop, _ = item.indices(self.shape[0])
        return self.source.read(start, max(start, stop), dtype="float64")
