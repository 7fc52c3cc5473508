"""The execution engine a kernel function computes with, as one value.

``compute.engine`` names an engine, or ``auto`` (:data:`ENGINES`), which
:func:`kernelcli.kernels.resolve_engine` turns into one of :data:`ENGINE_NAMES`.
The engines agree to rounding, not bit for bit, so a run records the one it
computes with (its manifest's ``engine`` section) and keeps it: a resume, an extend,
a joining shard and Ray's workers all compute with the recorded :class:`Engine`.
It lives here, beside the names, and not in :mod:`kernelcli.kernels`, so that what
reads a run directory (the store, ``status``) knows it without importing jax.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ._allowed import ENGINES

# what "auto" resolves to: every engine a config may name but the one that picks
ENGINE_NAMES = tuple(e for e in ENGINES if e != "auto")


@dataclasses.dataclass(frozen=True)
class Engine:
    """An execution engine (``name``: ``"cpu"``, ``"native"`` or ``"accelerator"``).

    ``native_revision``: the native engine's revision (which layers its custom calls
    take; revision 1 is what runs recorded before the key); ``native_library``: the
    identity of its library (16 hex digits; ``None`` for native runs from before the
    identity was recorded). Both are the native engine's alone: ``None`` for the others.
    ``cpu_level``: the CPU level its tiles were computed at (``kernels._cpu_level``: the
    XLA instruction set and OpenBLAS kernels that decide their last bits, on every
    engine; ``None`` for runs from before it was recorded).
    """

    name: str
    native_revision: Optional[int] = None
    native_library: Optional[str] = None
    cpu_level: Optional[str] = None

    def __post_init__(self):
        if self.name not in ENGINE_NAMES:
            raise ValueError(f"engine {self.name!r}: expected one of "
                             f"{', '.join(ENGINE_NAMES)}")
        if self.name == "native":
            if not isinstance(self.native_revision, int) or self.native_revision < 1:
                raise ValueError(f"the native engine needs its revision (an integer from "
                                 f"1), not {self.native_revision!r}")
        elif self.native_revision is not None or self.native_library is not None:
            raise ValueError(f"the {self.name} engine has no native revision or library")

    @property
    def native(self) -> bool:
        """Whether this is the native engine (C++ custom calls for some layers)."""
        return self.name == "native"

    @property
    def batched(self) -> bool:
        """Whether the layers run as the accelerator engine's: each one pass over a whole
        batch of pairs (``kernels/_batched``), no chunk, row or slab loops."""
        return self.name == "accelerator"
