"""Open, validate and fingerprint the data a run configuration names.

Nothing here holds a whole data set in memory: ``.npy`` files are memory-mapped,
HDF5 datasets read by slices, and every check streams rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..data import ArraySource, check_finite, check_pair, fingerprint, open_array
from ..spec import RunConfig, check_architecture


@dataclass
class Inputs:
    """The opened data of a run. ``x2`` is ``None`` for a symmetric run."""

    x1: ArraySource
    x2: Optional[ArraySource]

    @property
    def symmetric(self) -> bool:
        return self.x2 is None

    @property
    def n1(self) -> int:
        return self.x1.n

    @property
    def n2(self) -> int:
        return self.x1.n if self.x2 is None else self.x2.n

    @property
    def second(self) -> ArraySource:
        return self.x1 if self.x2 is None else self.x2

    def fingerprints(self) -> dict:
        out = {"x1": fingerprint(self.x1)}
        if self.x2 is not None:
            out["x2"] = fingerprint(self.x2)
        return out

    def close(self) -> None:
        self.x1.close()
        if self.x2 is not None:
            self.x2.close()


def open_inputs(cfg: RunConfig, check_values: bool = True) -> Inputs:
    """Open ``data.x1`` (and ``data.x2``), check shapes against the architecture and,
    with ``check_values``, that every value is finite in ``kernel.dtype``."""
    d = cfg.data
    x1 = open_array(d.x1, d.key, layout=d.layout, limit=d.limit, what="data.x1")
    x2 = None
    try:
        if d.x2 is not None:
            x2 = open_array(d.x2, d.x2_key if d.x2_key is not None else d.key,
                            layout=d.layout, limit=None, what="data.x2")
            check_pair(x1, x2)
        check_architecture(cfg.architecture, x1.example_shape)
        if check_values:
            for src in (x1, x2):
                if src is not None:
                    check_finite(src, dtype=cfg.kernel.dtype)
    except BaseException:
        x1.close()
        if x2 is not None:
            x2.close()
        raise
    return Inputs(x1, x2)
