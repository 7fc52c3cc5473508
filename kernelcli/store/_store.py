"""The run directory: a store in which a file's existence is the progress record.

Layout::

    <run_dir>/manifest.json        written once, atomically, when the run starts
    <run_dir>/tiles/<key>.h5       one per completed block (key = 'r00003c00001')
    <run_dir>/kernels.h5           the assembled result; its existence = finished
    <run_dir>/shards/<I>of<N>.json written by process I of a job array of N when it
                                   starts (who ran; status counts per shard from it)
    <run_dir>/labels.npz           with a configuration that names labels: the training
                                   (and test) labels, written before the manifest
                                   (``labels-<fp>.npz``, named by the manifest, for a
                                   run grown by ``kernelcli extend``)
    <run_dir>/preprocess-<fp>.npz  with data.preprocess: the fitted preprocessing, named
                                   by its fingerprint, written before the manifest
    <run_dir>/test_diag.h5         with kernel.test_diagonal: K(t, t) of every test row,
                                   written before the first tile is computed
    <run_dir>/quarantine/          files that failed verification, moved aside (never
                                   read again; a resume recomputes what they held)
    <run_dir>/tiles_removed.json   the tiles were deleted once kernels.h5 verified
                                   (:mod:`._cleanup`; ``kernelcli clean``)
    <run_dir>/tiles/carry-<key>.h5 a test tile that ``kernelcli extend`` moves to block
                                   ``key`` of the grown run (:mod:`._grow`)

Why this design (and not a journal plus one big HDF5 file):

* HDF5 is not crash-safe: a process killed while a large file is open for writing
  can leave the whole file unreadable, and with it every block already computed. A
  small file per block confines the damage of a kill to the block in flight.
* Each tile is written under a temporary name ``.<name>.<pid>.tmp`` in the same
  folder, fsynced, then ``os.replace``d and the folder fsynced (:mod:`._atomic`).
  So a tile under its final name is complete and durable, and the set of final
  names *is* the progress record. A separate journal could disagree with the tiles
  (written before a tile that never landed, or lost after one that did); there is
  nothing to disagree with here. ``resume`` recomputes exactly the missing keys.
* A kill mid-write leaves only a temporary file; it is ignored by every reader and
  removed the next time the run is opened (unless its writer is still alive).
* Keys are pure functions of block coordinates (like zarr chunk keys), so the
  manifest, which records the plan, fixes which files a run consists of.
* Existence says a tile was published whole; it does not say the bytes are still
  the ones published, or that they belong to this run. So every file is verifiable:
  the manifest carries its own checksum, which is the run's identity; tiles and the
  test diagonal are sealed files (:mod:`._sealed`: a checksum over every byte,
  checked before h5py parses them) that carry that identity and their block; and
  ``kernels.h5`` carries a checksum per dataset and the identity. Assembly verifies
  every tile it reads and moves one that fails to ``quarantine/``, so a resume
  recomputes it; the result is read back and checked before it is renamed into
  place.
* The result is assembled from the tiles into a temporary file and renamed, so
  ``kernels.h5`` either does not exist or is whole.
* Several processes may write one run directory at once (a job array on a shared
  file system, ``--shard I/N``) with no coordination beyond these files: the
  manifest is created exclusively (:meth:`RunStore.create_or_join`: exactly one
  process writes it, the others read it back and must agree), tiles and the result
  are renamed into place whole, so a block computed twice or a result assembled
  twice is harmless.

All writes stay inside ``run_dir``; ``overwrite`` removes only the names
above, never other files a user keeps there. OS errors become kernelcli errors that
name the path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DamagedFileError, QuarantinedError, RunDirError
from ._assemble import assemble as _assemble
from ._assemble import check_tiles, result_digests, verify_result
from ._cleanup import forget_tiles_removed, remove_tiles, tiles_removed
from ._grow import Growing
from ._lineage import accepted_runs
from ._atomic import fsync_dir, remove_stale_tmp, storage_error, write_bytes_atomic
from ._manifest import (CHECKSUM, MANIFEST, create_manifest, encode_manifest, manifest_id,
                        read_manifest, write_manifest)
from ._sealed import SealError, read_sealed, write_sealed
from ._tiles import done_keys as _done_keys
from ._tiles import read_tile as _read_tile
from ._tiles import tile_path
from ._tiles import write_tile as _write_tile

RESULT = "kernels.h5"
TILES = "tiles"
SHARDS = "shards"
LABELS = "labels.npz"
TEST_DIAG = "test_diag.h5"
PREDICTIONS = "predictions.h5"
QUARANTINE = "quarantine"
_SHARD_MARKER = re.compile(r"^(\d+)of(\d+)\.json$")
_SIDE_FILE = re.compile(r"^(labels\.npz|labels-[0-9a-f]{16}\.npz|preprocess-[0-9a-f]{16}\.npz|"
                        r"test_diag\.h5|predictions\.h5|tiles_removed\.json)$")


def labels_name(fingerprint: str) -> str:
    """The labels side file of an extended run, ``labels-<first 16 hex digits>.npz``:
    named by content, so the grown labels are written before the run switches to them
    and the labels of the run it grew from stay whole until then."""
    return f"labels-{fingerprint[:16]}.npz"


def preprocess_name(fingerprint: str) -> str:
    """The side file of a fitted preprocessing: ``preprocess-<first 16 hex digits>.npz``."""
    return f"preprocess-{fingerprint[:16]}.npz"


class RunStore(Growing):
    """The files of one run, under ``run_dir``.

    ``RunStore(run_dir)`` touches nothing; use :meth:`create` for a new run and
    :meth:`open` for an existing one.
    """

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self._manifest = None

    @property
    def tiles_dir(self) -> Path:
        return self.run_dir / TILES

    @property
    def result_path(self) -> Path:
        return self.run_dir / RESULT

    @property
    def finished(self) -> bool:
        """Whether the assembled result exists (it is renamed into place only when whole)."""
        return self.result_path.is_file()

    @property
    def manifest(self) -> dict:
        if self._manifest is None:
            self._manifest = read_manifest(self.run_dir)
        return self._manifest

    @property
    def run_id(self) -> str:
        """The run's identity: its manifest's checksum (carried by every tile and result)."""
        return manifest_id(self.manifest)

    def result_problem(self, full: bool = True):
        """``None`` when ``kernels.h5`` is this run's and whole; else what is wrong, in
        words. ``full=False`` checks identity and structure without reading the data."""
        if not self.finished:
            return "it does not exist"
        return verify_result(self.result_path, self.run_id, full=full)

    def quarantine(self, path: Path) -> Path:
        """Move ``path`` (a file of this run that failed verification) to ``quarantine/``;
        its new path. Never deletes: the file may be evidence of a failing disk."""
        folder = self.run_dir / QUARANTINE
        try:
            folder.mkdir(exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            for n in range(1000):
                target = folder / f"{Path(path).name}.{stamp}{'' if n == 0 else f'.{n}'}"
                if not os.path.lexists(target):
                    break
            os.replace(path, target)
            fsync_dir(folder)
            fsync_dir(Path(path).parent)
        except FileNotFoundError:  # another process moved it first
            return folder / Path(path).name
        except OSError as exc:
            raise storage_error(exc, folder) from None
        return target

    @classmethod
    def open(cls, run_dir) -> "RunStore":
        """An existing run; :class:`RunDirError` if ``run_dir`` holds none.

        Temporary files left by killed writers are removed.
        """
        store = cls(run_dir)
        store._manifest = read_manifest(store.run_dir)
        for folder in (store.run_dir, store.tiles_dir):
            try:
                remove_stale_tmp(folder)
            except OSError:
                pass  # a read-only run can still be inspected; leftovers are ignored anyway
        return store

    def create(self, manifest: dict, overwrite: bool = False,
               side_files: Optional[dict] = None) -> "RunStore":
        """Start a new run: make the folders and write ``manifest`` (a JSON object).

        ``side_files`` (name -> bytes; names as in the module docstring) are written
        atomically before the manifest, so a run that exists has them. Refuses a
        directory that already holds a run (or its result) unless ``overwrite``,
        which then removes only kernelcli's own files.
        """
        data = encode_manifest(manifest)
        run_dir = self.run_dir
        if run_dir.exists() and not run_dir.is_dir():
            raise RunDirError(f"run directory {run_dir} exists and is not a directory")
        owned = self._owned_entries()
        if owned and not overwrite:
            raise RunDirError(
                f"{run_dir} already holds a kernelcli run ({', '.join(owned)}); resume it, "
                f"choose another run directory, or overwrite it"
            )
        try:
            if overwrite:
                self._remove_owned()
            self.tiles_dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(run_dir)
        except OSError as exc:
            raise storage_error(exc, run_dir) from None
        self._write_side_files(side_files)
        write_manifest(run_dir, data)  # last: a manifest means the run exists
        self._manifest = _decoded(data)  # exactly what open() will read back
        return self

    def create_or_join(self, manifest: dict,
                       side_files: Optional[dict] = None) -> tuple["RunStore", bool]:
        """Start a new run, or join the one another process started at the same moment.

        Exactly one of several processes calling this at once (on one machine or on a
        shared file system) writes ``manifest``; it gets ``(store, True)``. The others,
        and any caller that finds a manifest already there, get ``(store, False)`` with
        ``store.manifest`` the manifest on disk, which the caller must compare with its
        own. Like :meth:`create`, refuses a directory that holds kernelcli files but no
        manifest (a result or tiles of an unknown run). ``side_files`` as for
        :meth:`create`: their names are content-addressed or their content the same
        for every process, so writing them before the race is harmless.
        """
        data = encode_manifest(manifest)
        run_dir = self.run_dir
        if run_dir.exists() and not run_dir.is_dir():
            raise RunDirError(f"run directory {run_dir} exists and is not a directory")
        if not (run_dir / MANIFEST).exists():
            owned = self._owned_entries()
            # A manifest is published before any tile, so tiles without one are another
            # process's run only if its manifest appeared meanwhile.
            if owned and not (run_dir / MANIFEST).exists():
                raise RunDirError(
                    f"{run_dir} already holds kernelcli files ({', '.join(owned)}) but no "
                    f"manifest.json; choose another run directory, or overwrite it"
                )
            try:
                self.tiles_dir.mkdir(parents=True, exist_ok=True)
                fsync_dir(run_dir)
            except OSError as exc:
                raise storage_error(exc, run_dir) from None
            self._write_side_files(side_files)
            if create_manifest(run_dir, data):
                self._manifest = _decoded(data)
                return self, True
        self._manifest = read_manifest(run_dir)
        try:
            self.tiles_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, self.tiles_dir) from None
        return self, False

    def _write_side_files(self, side_files: Optional[dict]) -> None:
        for name, content in (side_files or {}).items():
            if not _SIDE_FILE.match(name):
                raise ValueError(f"{name!r} is not a run directory side file")
            write_bytes_atomic(self.run_dir / name, content)

    def side_path(self, name: str) -> Path:
        """Path of a side file (``labels.npz``, ``preprocess-<fp>.npz``, ...)."""
        if not _SIDE_FILE.match(name):
            raise ValueError(f"{name!r} is not a run directory side file")
        return self.run_dir / name

    def has_test_diagonal(self) -> bool:
        return (self.run_dir / TEST_DIAG).is_file()

    def write_test_diagonal(self, arrays: dict) -> Path:
        """Store kind -> ``(n_test,)`` self-kernels of the test rows as a sealed file."""
        return write_sealed(self.run_dir / TEST_DIAG,
                            {k: np.asarray(v) for k, v in arrays.items()}, {"run": self.run_id})

    def test_diagonal_problem(self, kinds):
        """``None`` when ``test_diag.h5`` is this run's and whole; else what is wrong."""
        return self._test_diagonal(kinds)[1]

    def read_test_diagonal(self, kinds) -> dict:
        """The stored test diagonal, verified; a damaged one is moved to quarantine."""
        path = self.run_dir / TEST_DIAG
        datasets, problem = self._test_diagonal(kinds)
        if problem is not None:
            if not path.is_file():
                raise RunDirError(f"{problem}; resume the run to write it")
            moved = self.quarantine(path)
            raise QuarantinedError(f"{problem}; moved to {moved}: `kernelcli resume "
                                   f"{self.run_dir}` computes it again")
        return {k: datasets[k] for k in kinds}

    def _test_diagonal(self, kinds) -> tuple:
        """``(datasets, None)`` of a whole ``test_diag.h5`` of this run, else
        ``(None, what is wrong)``: one read serves the check and the values."""
        path = self.run_dir / TEST_DIAG
        try:
            datasets, attrs = read_sealed(path)
        except FileNotFoundError:
            return None, f"{path} has not been computed"
        except (SealError, OSError) as exc:
            return None, f"{path} is damaged: {exc}"
        if attrs.get("run") != self.run_id:
            return None, f"{path} was computed by another run"
        if any(k not in datasets for k in kinds):
            return None, f"{path} lacks one of {', '.join(kinds)}"
        return datasets, None

    def read_labels(self) -> dict:
        """``{"labels": (n1,), "test_labels": (n_test,)}`` int64, those the run has (from
        the file the manifest names, ``labels.npz`` by default)."""
        name = self.manifest.get("labels_file", LABELS)
        path = self.side_path(name if isinstance(name, str) else LABELS)
        if not path.is_file():
            return {}
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DamagedFileError(f"{path} is damaged or unreadable ({exc}); start the run "
                                   f"afresh with `kernelcli compute CONFIG --overwrite`") from None

    @property
    def shards_dir(self) -> Path:
        return self.run_dir / SHARDS

    def mark_shard(self, index: int, count: int, info: dict) -> Path:
        """Record that process ``index`` of a job array of ``count`` works on this run.

        ``shards/<index>of<count>.json`` (written atomically, rewritten on each start)
        holds ``info`` plus the host, pid and time; :meth:`shard_markers` reads them.
        """
        record = dict(info, index=int(index), count=int(count), host=socket.gethostname(),
                      pid=os.getpid(), started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        path = self.shards_dir / f"{int(index)}of{int(count)}.json"
        try:
            self.shards_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, self.shards_dir) from None
        write_bytes_atomic(path, (json.dumps(record, sort_keys=True) + "\n").encode())
        return path

    def shard_markers(self) -> list[dict]:
        """The shard records of this run (see :meth:`mark_shard`), newest first;
        each has at least ``index``, ``count`` and ``mtime``. Unreadable ones are
        skipped (a marker only says who ran; the tiles are the progress record)."""
        try:
            entries = list(os.scandir(self.shards_dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for entry in entries:
            match = _SHARD_MARKER.match(entry.name)
            if match is None:
                continue
            record = {}
            try:
                mtime = entry.stat().st_mtime
                with open(entry.path, encoding="utf-8") as f:
                    record = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(record, dict):
                record = {}
            record.update(index=int(match[1]), count=int(match[2]), mtime=mtime)
            out.append(record)
        out.sort(key=lambda r: (-r["mtime"], r["count"], r["index"]))
        return out

    def done_keys(self) -> set[str]:
        """Keys of the blocks whose tile is complete."""
        return _done_keys(self.tiles_dir)

    def has(self, key) -> bool:
        """Whether the tile of ``key`` (a key string or a block) is complete."""
        key = getattr(key, "key", key)
        return tile_path(self.tiles_dir, key).is_file()

    def write_tile(self, block, arrays: dict) -> Path:
        """Store ``arrays`` (kind -> values) as ``block``'s tile, atomically and durably.

        Values per kind: shape ``(r1 - r0, c1 - c0)``, or ``(n_pairs,)`` in the order of
        ``block.local_pairs()``; a diagonal block's upper triangle is mirrored.
        """
        try:
            self.tiles_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, self.tiles_dir) from None
        return _write_tile(self.tiles_dir, block, arrays, self.run_id)

    def read_tile(self, block, kinds=None) -> dict:
        """``block``'s arrays, kind -> ``(r1 - r0, c1 - c0)``, verified (see :func:`read_tile`)."""
        return _read_tile(self.tiles_dir, block, kinds, self.tile_runs(block))

    def tile_runs(self, block) -> tuple:
        """The run identities ``block``'s tile may carry (:mod:`._lineage`)."""
        return accepted_runs(self.manifest, self.run_id, block)

    def remove_tiles(self) -> tuple[int, int]:
        """Delete every tile, recording that they were removed: ``(tiles, bytes)``. The
        caller has verified ``kernels.h5`` (the tiles are its only other copy)."""
        return remove_tiles(self.run_dir, self.tiles_dir, result_digests(self.result_path))

    @property
    def tiles_removed(self) -> Optional[dict]:
        """The record of :meth:`remove_tiles` (``None``: the tiles were never removed)."""
        return tiles_removed(self.run_dir)

    def forget_tiles_removed(self) -> None:
        """Drop that record, when the tiles are computed again."""
        forget_tiles_removed(self.run_dir)

    def damaged_tiles(self, blocks, kinds) -> list:
        """``[(block, DamagedFileError)]`` for each existing tile of ``blocks`` that fails
        verification (reads every tile: the cost of reading the run once)."""
        return check_tiles(self.tiles_dir, blocks, kinds, self.tile_runs)

    def assemble(self, blocks, n1: int, n2: int, kinds, dtype, symmetric: bool,
                 attrs: dict, n_test: int = 0, test_diagonal: bool = False) -> Path:
        """Assemble all tiles into ``kernels.h5`` and return its path.

        Each kind becomes a dataset of shape ``(n1, n2)`` and ``dtype``; with
        ``n_test`` test rows also ``<kind>_test`` ``(n_test, n2)`` and, with
        ``test_diagonal``, ``<kind>_test_diag`` ``(n_test,)``; the run's labels
        become ``labels`` / ``test_labels``. ``attrs`` (``config``,
        ``kernelcli_version``, ``data_fingerprint``, ...) become file attributes,
        non-scalar values as JSON text.
        """
        extra = dict(self.read_labels())
        if n_test and test_diagonal:
            diag = self.read_test_diagonal(kinds)
            extra.update({f"{k}_test_diag": v.astype(dtype) for k, v in diag.items()})
        return _assemble(self.result_path, self.tiles_dir, blocks, n1, n2, kinds, dtype,
                         symmetric, attrs, n_test=n_test, extra=extra, run=self.run_id,
                         tile_runs=self.tile_runs)

    def _side_entries(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.run_dir) if _SIDE_FILE.match(n))
        except OSError:
            return []

    def _owned_entries(self) -> list[str]:
        owned = [name for name in (MANIFEST, RESULT) if os.path.lexists(self.run_dir / name)]
        if self.tiles_dir.is_symlink() or self.tiles_dir.is_file() or self.done_keys():
            owned.append(TILES + "/")
        return owned

    def _remove_owned(self) -> None:
        # the result first: never a result without a run
        for name in (RESULT, MANIFEST, *self._side_entries()):
            path = self.run_dir / name
            if os.path.lexists(path):
                os.unlink(path)
        for tiles in (self.tiles_dir, self.shards_dir, self.run_dir / QUARANTINE):
            if tiles.is_symlink() or tiles.is_file():
                os.unlink(tiles)  # never follow a link out of the run directory
            elif tiles.exists():
                shutil.rmtree(tiles)
        remove_stale_tmp(self.run_dir)


def _decoded(data: bytes) -> dict:
    manifest = json.loads(data)
    manifest.pop(CHECKSUM, None)
    return manifest
