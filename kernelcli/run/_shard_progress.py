"""A job array's progress per process, from the run's tiles and shard markers: what
``status`` shows and what ``assemble`` names when tiles are missing."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..plan import assign
from ..store import RunStore
from ._results import ShardProgress


@dataclasses.dataclass(frozen=True)
class ShardCounts:
    """``count``: the job array's N (``None``: no job array); ``shards``: each
    process's :class:`ShardProgress`; ``counts_seen``: every N the run's markers name."""

    count: Optional[int] = None
    shards: tuple = ()
    counts_seen: tuple = ()


def shard_counts(store: RunStore, plan, shards: Optional[int],
                 done: Optional[set] = None, markers: Optional[list] = None
                 ) -> Optional[ShardCounts]:
    """Per-shard progress for a job array of ``shards`` processes (default: the N of the
    newest ``shards/<I>of<N>.json`` marker); ``None`` when there is no job array.
    ``done``: the keys of the blocks done (default: the tiles present); ``markers``: the
    run's shard markers, read already (default: read here)."""
    if markers is None:
        markers = store.shard_markers()[0]
    if shards is None:
        if not markers:
            return None
        shards = markers[0]["count"]
    started = {m["index"] for m in markers if m["count"] == shards}
    if done is None:
        done = store.done_keys()
    rows = []
    for index, part in enumerate(assign(plan.blocks, shards)):
        blocks_done = sum(1 for b in part if b.key in done)
        rows.append(ShardProgress(
            index=index, count=shards, blocks_done=blocks_done, blocks_total=len(part),
            pairs_done=sum(b.n_pairs for b in part if b.key in done),
            pairs_total=sum(b.n_pairs for b in part),
            finished=blocks_done == len(part), started=index in started))
    return ShardCounts(shards, tuple(rows), tuple(sorted({m["count"] for m in markers})))
