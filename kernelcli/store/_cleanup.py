"""Removing the tiles of a finished run, and the record that they were removed.

Tiles are the run's own copy of every number in ``kernels.h5``: kept, a damaged
result is assembled again without computing anything. On a large run they double
the disk used, so a user may drop them once the result is known to be whole; the
caller (``kernelcli clean``, ``output.keep_tiles: false``) verifies ``kernels.h5``
first. This module only deletes, and records that it did.

``tiles_removed.json`` is written (atomically) before the first tile goes, so that a
run whose tiles are missing because they were removed on purpose is told apart from
one that lost them: ``status``, ``assemble`` and ``verify`` read it. A kill half-way
leaves the record and some tiles; removing again finishes the job.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from .._untrusted import read_untrusted
from ..errors import RunDirError
from ._atomic import fsync_dir, storage_error, write_bytes_atomic
from ._ownership import check_tiles_own
from ._packs import TileSet
from ._run_files import TILES
from ._tiles import tile_path

_RECORD_BYTES = 1 << 20  # tiles_removed.json: a count, a size and a digest

TILES_REMOVED = "tiles_removed.json"


def remove_tiles(run_dir: Path, tiles: TileSet, result_digests: dict,
                 ids: set) -> tuple[int, int]:
    """Delete every completed tile of ``tiles``, loose and packed: ``(tiles, bytes)``
    removed.

    ``result_digests`` (dataset -> sha256 of the verified ``kernels.h5``) goes into the
    record, which names what the tiles were removed in favour of. Only this run's tiles
    are deleted (their identity among ``ids``; a tile of another run is refused before
    anything goes, and a file under a tile's name whose identity cannot be read, a
    damaged tile or a user's file, is left in place); the folder goes when that leaves
    it empty.
    """
    tiles_dir = tiles.dir
    keys = sorted(tiles.keys())
    loose = tiles.loose()
    packs = [p.path for p in tiles.packs()]
    own = [tile_path(tiles_dir, k) for k in sorted(loose)] + packs
    unproven = set(check_tiles_own(own, ids))
    record = {"removed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tiles": len(keys),
              "result_sha256": dict(sorted(result_digests.items()))}
    write_bytes_atomic(Path(run_dir) / TILES_REMOVED,
                       (json.dumps(record, sort_keys=True) + "\n").encode())
    size = 0
    try:
        # loose tiles first: a pack goes last, so a kill half-way leaves whole tiles only
        for path in own:
            if path in unproven:  # damaged, or not kernelcli's at all: left where it is
                continue
            try:
                size += path.stat().st_size
                path.unlink()
            except FileNotFoundError:  # another process removed it first
                continue
        removed = len(keys) - len(unproven & {tile_path(tiles_dir, k) for k in loose})
        if keys:
            fsync_dir(tiles_dir)
        try:
            os.rmdir(tiles_dir)
            fsync_dir(Path(run_dir))
        except OSError:  # not empty (a user's file, a writer's temporary file), or gone
            pass
    except OSError as exc:
        raise storage_error(exc, tiles_dir) from None
    return removed, size


def tiles_removed(run_dir: Path) -> Optional[dict]:
    """The record :func:`remove_tiles` wrote (``removed``, ``tiles``,
    ``result_sha256``), or ``None`` when the tiles were never removed. An unreadable
    record still says they were: ``{}``. A record whose tiles are all still there
    (a ``clean`` killed between writing it and deleting the first tile) is void:
    ``None``, so the next command takes the run as the whole one it is."""
    path = Path(run_dir) / TILES_REMOVED
    try:
        record = json.loads(read_untrusted(path, run_dir, _RECORD_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    count = record.get("tiles")
    if type(count) is int and count > 0:
        try:
            if len(TileSet(Path(run_dir) / TILES).keys()) >= count:
                return None
        except RunDirError:  # an unlistable folder: the record stands
            pass
    return record


def forget_tiles_removed(run_dir: Path) -> None:
    """Drop the record: the tiles are being computed again."""
    path = Path(run_dir) / TILES_REMOVED
    try:
        path.unlink()
        fsync_dir(Path(run_dir))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(exc, path) from None
