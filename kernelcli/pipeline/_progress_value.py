"""What a run's progress callback receives: its own module, a value both the executor
(after each batch) and a job being prepared (a backend's word on its workers before the
plan exists) make, so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Progress:
    """What a progress callback receives after each batch."""

    pairs_done: int
    pairs_total: int
    blocks_done: int
    blocks_total: int
    elapsed: float        # seconds since this process started computing
    pairs_this_run: int   # pairs computed by this process (for the rate)
    platform: str = ""    # of the local devices computing ("" when not known: Ray)
    devices: int = 0      # how many of them
    note: str = ""        # what the backend says of its workers ("" while all is well; Ray:
    #                       "waiting for 1 actor (cluster has 0 CPUs free); 1 node lost, ...")
