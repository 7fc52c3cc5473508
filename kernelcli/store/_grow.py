"""What ``kernelcli extend`` does to a run directory beyond a run's own writes: replace
the manifest by the grown run's, delete files the grown run does not keep, and set
aside the test tiles that move to other keys (``tiles/carry-<new key>.h5``, out of the
set of completed tiles) to be written again as the grown run's own. A mixin of
:class:`~kernelcli.store.RunStore` (``run_dir``, ``tiles_dir``, ``write_tile``, ...).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ._atomic import fsync_dir, storage_error
from ._manifest import encode_manifest, write_manifest
from ._sealed import SealError, read_sealed
from ._lineage import superseded
from ._tiles import tile_path

_CARRIED = re.compile(r"^carry-(r\d{5}c\d{5})\.h5$")
_SHARD_MARKER = re.compile(r"^(\d+)of(\d+)\.json$")


class Growing:
    """The grown run's writes (see the module docstring)."""

    def grow(self, manifest: dict, side_files: Optional[dict] = None) -> None:
        """Replace the manifest of this (existing) run by ``manifest``: the run becomes
        another one, with another identity (``kernelcli extend``). ``side_files`` are
        written first; the replacement itself is one atomic rename."""
        data = encode_manifest(manifest)
        self._write_side_files(side_files)
        write_manifest(self.run_dir, data)
        from ._store import _decoded

        self._manifest = _decoded(data)

    def set_aside(self, key: str, new_key: str) -> bool:
        """Rename the tile of ``key`` to ``tiles/carry-<new_key>.h5``, out of the set of
        completed tiles (``kernelcli extend``: a test tile that moves to another block);
        whether there was one. :meth:`take_carried` reads it back."""
        try:
            os.replace(tile_path(self.tiles_dir, key), self._carry_path(new_key))
            fsync_dir(self.tiles_dir)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(exc, self.tiles_dir) from None
        return True

    def carried(self) -> list:
        """The keys of the tiles set aside by :meth:`set_aside`."""
        try:
            names = os.listdir(self.tiles_dir)
        except OSError:
            return []
        return sorted(m[1] for m in map(_CARRIED.match, names) if m is not None)

    def take_carried(self, new_key: str, block, run: str, attrs: dict) -> bool:
        """Write the tile set aside for ``new_key`` as ``block``'s tile of this run, when
        it is whole and carries ``run`` and the block coordinates ``attrs``; remove it
        either way. Whether a tile was written."""
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
            self.write_tile(block, datasets)
        self._unlink(path)
        return ok

    def drop_carried(self, new_key: str) -> None:
        self._unlink(self._carry_path(new_key))

    def _carry_path(self, key: str) -> Path:
        return self.tiles_dir / f"carry-{tile_path(self.tiles_dir, key).name}"

    def remove_tile(self, key: str) -> None:
        """Delete the tile of ``key`` (a block the run no longer keeps)."""
        self._unlink(tile_path(self.tiles_dir, key))

    def side_files(self) -> list:
        """Names of the side files present (see the module docstring)."""
        return self._side_entries()

    def remove_side_file(self, name: str) -> None:
        self._unlink(self.side_path(name))

    def remove_shard_markers(self) -> None:
        """Forget which processes of a job array ran (the run they ran is superseded)."""
        if self.shards_dir.is_dir() and not self.shards_dir.is_symlink():
            for entry in os.listdir(self.shards_dir):
                if _SHARD_MARKER.match(entry):
                    self._unlink(self.shards_dir / entry)

    def _unlink(self, path: Path) -> None:
        try:
            os.unlink(path)
            fsync_dir(path.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, path) from None

    def superseded(self) -> list:
        """Files of the run this one grew from (``kernelcli extend``) still in the run
        directory: its ``kernels.h5`` and ``test_diag.h5`` (:mod:`._lineage`)."""
        return superseded(self.run_dir, self.manifest, ("kernels.h5", "test_diag.h5"))

    def drop_superseded(self) -> None:
        """Delete the files :meth:`superseded` lists: they are not this run's."""
        for path in self.superseded():
            self._unlink(path)
