"""The test tiles an extend by more training rows keeps (``kernelcli extend --append``).

The test rows follow the training rows, so when those grow every test block moves
down: the tile of test block row ``k`` and column ``c`` has another key and other row
coordinates in the grown plan, though the same numbers -- when its columns have the
same extent and the per-input numbers of its rows and columns are unchanged (checked
by the caller, as for the training tiles). Such a tile is set aside before the switch
to the grown run (renamed ``tiles/carry-<new key>.h5``, out of the completed tiles)
and written again as the grown run's own tile after it; the manifest's
``extend.carry`` lists the keys, so a resume after a kill finishes the job, and a
tile that does not read back whole, from the run it grew from, at the coordinates
expected, is dropped (and computed).
"""

from __future__ import annotations

from ..store import RunStore


def _old_key(block, first_old: int, first_new: int) -> str:
    return f"r{block.row - first_new + first_old:05d}c{block.col:05d}"


def carry_keys(before, plan, rows: int, test_same) -> list:
    """Keys of the grown plan's test blocks whose old tile stays: same height and
    columns in both plans, columns below ``rows`` (training rows with unchanged
    numbers), every test row unchanged (``test_same``, a mask over the test rows)."""
    if test_same is None or not before.n_test or plan.n_test != before.n_test:
        return []
    first_old, first_new = -(-before.n1 // before.block), -(-plan.n1 // plan.block)
    old = {b.key: b for b in before.blocks if b.r0 >= before.n1}
    out = []
    for b in plan.blocks:
        if b.r0 < plan.n1 or b.c1 > rows:
            continue
        ob = old.get(_old_key(b, first_old, first_new))
        if (ob is not None and (ob.c0, ob.c1) == (b.c0, b.c1)
                and ob.r1 - ob.r0 == b.r1 - b.r0
                and test_same[ob.r0 - before.n1:ob.r1 - before.n1].all()):
            out.append(b.key)
    return out


def set_aside(store: RunStore, before, plan, keys) -> set:
    """Before the switch: rename the old tiles of ``keys`` (new keys) out of the way."""
    first_old, first_new = -(-before.n1 // before.block), -(-plan.n1 // plan.block)
    by_key = {b.key: b for b in plan.blocks}
    for key in keys:
        store.growth.set_aside(_old_key(by_key[key], first_old, first_new), key)
    return set(keys)


def take_over(store: RunStore, plan) -> int:
    """After the switch (and on any resume): the tiles set aside become this run's own
    tiles, when the manifest lists them; others are dropped. How many were written."""
    ext = store.manifest.get("extend") or {}
    wanted = set(ext.get("carry") or ())
    previous, before = ext.get("previous"), ext.get("n1_before")
    by_key = {b.key: b for b in plan.blocks}
    written = 0
    for key in store.growth.carried():
        block = by_key.get(key)
        if (key not in wanted or block is None or not isinstance(before, int)
                or store.has(block)):
            store.growth.drop_carried(key)
            continue
        shift = plan.n1 - before
        attrs = {"r0": block.r0 - shift, "r1": block.r1 - shift, "c0": block.c0,
                 "c1": block.c1}
        written += store.growth.take_carried(key, block, previous, attrs)
    return written
