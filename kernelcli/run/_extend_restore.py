"""``extend`` of a run whose tiles were removed (``output.keep_tiles: false``, the
default, or ``kernelcli clean``): the tiles the grown run keeps are written again from
the old run's verified ``kernels.h5``, before the switch.

A tile is exactly its block of the result (:mod:`kernelcli.store`'s assembly copies a
tile's values into its rows and columns, and mirrors those below the diagonal), so a
tile written back from the result holds the bits the removed one held and the grown
result is the one a fresh run of the grown data set writes. They are written under
the old run's identity, as the removed tiles were: until the switch the run is the
old one, finished (its ``kernels.h5`` untouched, the record that its tiles were removed
kept), so a kill here leaves the old run as it was plus some of its own tiles, and
the same extend again writes the rest.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..errors import RunDirError, resume_command
from ..store import RunStore

__all__ = ["restore_tiles"]


def restore_tiles(store: RunStore, before, keys: set, test: bool) -> int:
    """Write the old run's tiles of ``keys`` (training blocks of ``before``, the old
    plan's geometry), and with ``test`` its test blocks, from ``kernels.h5``; those
    present are left. Nothing is done when the tiles were never removed. How many
    were written.

    The result is read through :class:`~kernelcli.store.ResultFile` once it verifies
    (every dataset's checksum: ``check_extensible``; the run's identity: here) and holds
    the run's kinds in its dtype and shapes; otherwise :class:`RunDirError` (exit 2)
    and nothing is written."""
    if store.tiles_removed is None:
        return 0
    # check_extensible read every checksum already; here the identity and structure
    if not store.finished or store.result_problem(full=False) is not None:
        raise RunDirError(f"{store.run_dir}: its tiles were removed and its kernels.h5 "
                          f"does not exist or does not verify, so nothing is left to grow "
                          f"from: `{resume_command(store.run_dir)}` computes it again, "
                          f"then extend")
    plan = store.manifest["plan"]
    kinds, dtype, n1 = tuple(plan["kinds"]), np.dtype(plan["dtype"]), before.n1
    have = store.done_keys()
    blocks = [b for b in before.blocks if b.key not in have
              and (b.key in keys if b.r0 < n1 else test)]
    if not blocks:
        return 0
    result = store.result()
    names = [k for k in kinds] + ([f"{k}_test" for k in kinds]
                                  if any(b.r0 >= n1 for b in blocks) else [])
    with contextlib.ExitStack() as stack:
        sets = {}
        for name in names:
            ds = stack.enter_context(result.kernel(name))
            shape = (before.n_test if name.endswith("_test") else n1, before.n2)
            if ds.dtype != dtype or ds.shape != shape:
                raise RunDirError(f"{store.result_path}: dataset {name!r} is {ds.dtype} "
                                  f"{ds.shape}, not the run's {dtype} {shape}")
            sets[name] = ds
        for b in blocks:
            if b.r0 < n1:
                arrays = {k: sets[k][b.r0:b.r1, b.c0:b.c1] for k in kinds}
            else:
                arrays = {k: sets[f"{k}_test"][b.r0 - n1:b.r1 - n1, b.c0:b.c1] for k in kinds}
            store.write_tile(b, arrays)
    return len(blocks)
