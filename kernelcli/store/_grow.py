"""What ``kernelcli extend`` does to a run directory beyond a run's own writes: delete
files the grown run does not keep, and set aside the test tiles that move to other
keys (``tiles/carry-<new key>.h5``, out of the set of completed tiles) to be written
again as the grown run's own. A pack holding a tile that moves or goes is unpacked
first (:mod:`._packs`): both work on single tiles. The replacement of the manifest
itself is the store's (:meth:`~kernelcli.store.RunStore.grow`).

:class:`Growth` is a helper the store holds (``store.growth``): it uses the store's
public paths and writes only. It deletes only the run's own files (:mod:`._ownership`):
a tile that carries another run's identity is refused, a ``predictions.h5`` that
``predict`` did not write and a labels file the run it grew from did not name stay.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ._atomic import fsync_dir, storage_error
from ._lineage import superseded
from ._manifest_schema import labels_file_of
from ._markers import PROCESS_RECORD
from ._ownership import check_tiles_own, is_predictions, run_ids
from ._sealed import SealError, read_sealed
from ._tiles import tile_path

_CARRIED = re.compile(r"^carry-(r\d{5}c\d{5})\.h5$")


def unlink(path: Path) -> None:
    """Delete ``path`` durably; a file already gone is fine."""
    try:
        os.unlink(path)
        fsync_dir(path.parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(exc, path) from None


class Growth:
    """The grown run's file operations on ``store`` (see the module docstring)."""

    def __init__(self, store):
        self.store = store
        self.labels_before = None  # the labels file of the run before grow(), if any

    def before_switch(self, manifest: dict) -> None:
        """Note what the run about to be replaced (``manifest``) owns beside its tiles."""
        fingerprints = manifest.get("data_fingerprints")
        if isinstance(fingerprints, dict) and "labels" in fingerprints:
            self.labels_before = labels_file_of(manifest)

    def set_aside(self, key: str, new_key: str) -> bool:
        """Rename the tile of ``key`` to ``tiles/carry-<new_key>.h5``, out of the set of
        completed tiles (``kernelcli extend``: a test tile that moves to another block);
        whether there was one. :meth:`take_carried` reads it back."""
        tiles_dir = self.store.tiles_dir
        self._unpack(key)
        check_tiles_own([tile_path(tiles_dir, key)], run_ids(self.store.manifest,
                                                             self.store.run_id))
        try:
            os.replace(tile_path(tiles_dir, key), self._carry_path(new_key))
            fsync_dir(tiles_dir)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(exc, tiles_dir) from None
        return True

    def carried(self) -> list:
        """The keys of the tiles set aside by :meth:`set_aside`."""
        try:
            names = os.listdir(self.store.tiles_dir)
        except OSError:
            return []
        return sorted(m[1] for m in map(_CARRIED.match, names) if m is not None)

    def take_carried(self, new_key: str, block, run: Optional[str], attrs: dict) -> bool:
        """Write the tile set aside for ``new_key`` as ``block``'s tile of this run, when
        it is whole and carries ``run`` (``None``: none does) and the block coordinates
        ``attrs``; remove it either way. Whether a tile was written."""
        path = self._carry_path(new_key)
        try:
            datasets, found = read_sealed(path)
        except (SealError, OSError):
            datasets = None
        run_found = found.get("run") if datasets is not None else None
        if isinstance(run_found, bytes):
            run_found = run_found.decode(errors="replace")
        ok = datasets is not None and run_found == run and all(
            int(found.get(k, -1)) == v for k, v in attrs.items())
        if ok:
            self.store.write_tile(block, datasets)
        unlink(path)
        return ok

    def drop_carried(self, new_key: str) -> None:
        unlink(self._carry_path(new_key))

    def _carry_path(self, key: str) -> Path:
        tiles_dir = self.store.tiles_dir
        return tiles_dir / f"carry-{tile_path(tiles_dir, key).name}"

    def remove_tile(self, key: str) -> None:
        """Delete the tile of ``key`` (a block the run no longer keeps); RunDirError when
        it is a whole tile of another run (nothing is deleted)."""
        path = tile_path(self.store.tiles_dir, key)
        self._unpack(key)
        check_tiles_own([path], run_ids(self.store.manifest, self.store.run_id))
        unlink(path)

    def _unpack(self, key: str) -> None:
        """A packed tile of ``key`` made loose again, with the rest of its pack (the pack
        is deleted once they are all written): extend moves and deletes single tiles."""
        tiles = self.store.tiles
        if not tile_path(tiles.dir, key).is_file():
            pack = tiles.find(key)
            if pack is not None:
                check_tiles_own([pack.path], run_ids(self.store.manifest, self.store.run_id))
                tiles.unpack(pack)
                tiles.remove_pack(pack)

    def remove_side_file(self, name: str) -> None:
        """Delete the side file ``name`` when it is the run's own (a labels file: the one
        the run before the switch named; ``predictions.h5``: one ``predict`` wrote)."""
        path = self.store.side_path(name)
        if name.startswith("labels") and name != self.labels_before:
            return
        if name == "predictions.h5" and not is_predictions(path):
            return
        unlink(path)

    def remove_shard_markers(self) -> None:
        """Forget which processes of a job array ran, and what a Ray driver saw (the run
        they ran is superseded)."""
        shards_dir = self.store.shards_dir
        if shards_dir.is_dir() and not shards_dir.is_symlink():
            for entry in os.listdir(shards_dir):
                if PROCESS_RECORD.match(entry):
                    unlink(shards_dir / entry)

    def superseded(self) -> list:
        """Files of the run this one grew from (``kernelcli extend``) still in the run
        directory: its ``kernels.h5`` and ``test_diag.h5`` (:mod:`._lineage`)."""
        return superseded(self.store.run_dir, self.store.manifest,
                          ("kernels.h5", "test_diag.h5"))

    def drop_superseded(self) -> None:
        """Delete the files :meth:`superseded` lists: they are not this run's."""
        for path in self.superseded():
            unlink(path)
