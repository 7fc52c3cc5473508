"""Job arrays: process I of N takes a deterministic, balanced share of a run's blocks.

No coordination beyond the run directory: every process reads the same plan from
the manifest and splits its blocks with :func:`kernelcli.plan.assign` (greedy
longest-first by pair evaluations, ties to the lowest index), so all processes
agree on who does what without talking to each other. Nothing here imports jax.
"""

from __future__ import annotations

import re
from typing import Optional

from ..errors import UsageError
from ..plan import assign

# A job array's process: (I, N), process I (from 0) of N; ``None`` where a command runs
# every block itself
Shard = tuple[int, int]

_SHARD = re.compile(r"^\s*(\d{1,12})\s*/\s*(\d{1,12})\s*$")  # bounded: no 10**20 shards


def parse_shard(text) -> Shard:
    """``'I/N'`` -> ``(I, N)`` with ``0 <= I < N``; :class:`UsageError` otherwise."""
    expected = ("expected I/N with integers 0 <= I < N (I is this process's 0-based index, "
                "N the number of processes), e.g. 0/4")
    match = _SHARD.match(str(text))
    if match is None:
        raise UsageError.naming(f"<<shard>>: {text!r} is not of the form I/N; {expected}")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise UsageError.naming(f"<<shard>>: {text!r} has N = {count} processes; {expected}")
    if index >= count:
        raise UsageError.naming(f"<<shard>>: {text!r} has I = {index}, which is not below "
                                f"N = {count} (I counts from 0); {expected}")
    return index, count


def check_shard_count(shard: Optional[Shard], plan, argument: str = "shard") -> None:
    """A job array may not have more processes than the plan has blocks (each process
    gets whole blocks, so the rest would idle); refused before anything is written.
    ``argument`` names what gave the count (``shard``, ``workers``, ``shards``)."""
    if shard is None:
        return
    count = shard[1]
    if count > plan.blocks_total:
        label = f"{shard[0]}/{count}" if argument == "shard" else str(count)
        raise UsageError.naming(f"<<{argument}>>: {label} asks for {count:,} processes but the "
                                f"run has {plan.blocks_total:,} blocks; expected at most "
                                f"{plan.blocks_total:,} (a smaller compute.block gives more "
                                f"blocks)")


def shard_blocks(blocks, shard: Optional[Shard]) -> list:
    """The blocks process ``shard = (I, N)`` computes (all of them for ``None``)."""
    if shard is None:
        return list(blocks)
    index, count = shard
    return assign(blocks, count)[index]


def worker_loads(blocks, workers: int) -> list[int]:
    """Pair evaluations each of ``workers`` processes gets from :func:`assign`."""
    return [sum(b.n_pairs for b in part) for part in assign(blocks, workers)]


def shard_label(shard: Optional[tuple[int, int]]) -> str:
    return "" if shard is None else f"{shard[0]}/{shard[1]}"
