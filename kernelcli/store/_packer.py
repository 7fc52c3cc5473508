"""The writer of tile packs (:mod:`._packs`: the format, and :class:`~._packs.TileSet`,
the one reader): a process packs the tiles of its own share as they are published,
``PACK_TILES`` (or ``PACK_BYTES``) at a time, and deletes the loose copies only once
the pack is published (written, fsynced, read back and compared, renamed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ._atomic import fsync_dir, storage_error
from ._packs import PACK_BYTES, PACK_TILES, TileSet, read_loose, text, write_pack
from ._sealed import SealError, unseal
from ._tiles import tile_path

__all__ = ["Packer", "planned_tile_files"]


class Packer:
    """Packs the loose tiles of ``keys`` (one process's share of a run) as they come:
    :meth:`add` after each tile is published. ``max_tiles`` 0: no packing at all."""

    def __init__(self, tiles: TileSet, run: str, ids: set, keys, max_tiles: int = PACK_TILES,
                 max_bytes: int = PACK_BYTES):
        self.tiles, self.run, self.ids = tiles, run, set(ids)
        self.keys = set(keys)
        self.max_tiles, self.max_bytes = max_tiles, max_bytes
        self.pending: list = []
        self.size = 0

    def start(self) -> None:
        """Delete the loose copies of tiles already packed (a kill came between a pack's
        publication and those deletions), take the loose tiles left by earlier
        processes as pending, and pack them while there are enough."""
        self.tiles.refresh()
        packed = set(self.tiles.packed())
        loose = self.tiles.loose() & self.keys
        self._delete(sorted(loose & packed))
        if not self.max_tiles:
            return
        for key in sorted(loose - packed):
            self.add(key)

    def add(self, key: str) -> None:
        """Note that ``key``'s tile was published; pack the pending ones once there are
        ``max_tiles`` of them or ``max_bytes``. A tile over an eighth of ``max_bytes``
        stays a file of its own: a run of such tiles has few (a 60,000-image result of
        27 GiB in 8 MiB tiles is 3,400 files) and copying them would double its writes."""
        if key not in self.keys or not self.max_tiles:
            return
        try:
            size = tile_path(self.tiles.dir, key).stat().st_size
        except OSError:
            return
        if size > self.max_bytes // 8:
            return
        self.pending.append(key)
        self.size += size
        if len(self.pending) >= self.max_tiles or self.size >= self.max_bytes:
            self.pack()

    def pack(self) -> Optional[Path]:
        """Pack the pending tiles that verify (whole, of this run); delete them once the
        pack is published. A tile that fails stays loose, for assembly to quarantine."""
        blobs, runs = [], set()
        for key in sorted(set(self.pending)):
            try:
                data = read_loose(self.tiles.dir, key)
                attrs = unseal(data)[1]
            except (SealError, OSError):
                continue
            if text(attrs.get("key")) == key and text(attrs.get("run")) in self.ids:
                blobs.append((key, data))
                runs.add(text(attrs.get("run")))
        self.pending, self.size = [], 0
        if not blobs:
            return None
        path = write_pack(self.tiles.dir, self.run, blobs, runs)
        self._delete([key for key, _ in blobs])
        return path

    def _delete(self, keys) -> None:
        if not keys:
            return
        try:
            for key in keys:
                try:
                    os.unlink(tile_path(self.tiles.dir, key))
                except FileNotFoundError:
                    pass
            fsync_dir(self.tiles.dir)
        except OSError as exc:
            raise storage_error(exc, self.tiles.dir) from None


def planned_tile_files(tile_bytes, max_tiles: int = PACK_TILES,
                       max_bytes: int = PACK_BYTES) -> tuple:
    """``(loose tiles, packs)`` that one process's :class:`Packer` leaves of tiles of
    these sizes, published in this order (what ``kernelcli estimate`` plans)."""
    loose = packs = pending = size = 0
    for b in tile_bytes:
        if not max_tiles or b > max_bytes // 8:
            loose += 1
            continue
        pending, size = pending + 1, size + b
        if pending >= max_tiles or size >= max_bytes:
            packs, pending, size = packs + 1, 0, 0
    return loose + pending, packs
