"""The run directory: a store in which a file's existence is the progress record.

The layout and why it is so are argued in the package docstring
(:mod:`kernelcli.store`). :class:`RunStore` owns the run's files; what ``kernelcli
extend`` does beyond a run's own writes is its helper :class:`~._grow.Growth`
(``store.growth``), the test rows' diagonal is :class:`~._diagonal.DiagonalFile`
(``store.test_diag``), and ``kernels.h5`` is read through :class:`~._result.ResultFile`
(``store.result()``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..errors import KernelcliError, RunDirError
from ._assembly import assemble as _assemble
from ._assembly import check_tiles
from ._atomic import fsync_dir, remove_stale_tmp, storage_error, write_bytes_atomic
from ._cleanup import forget_tiles_removed, remove_tiles, tiles_removed
from ._grow import Growth
from ._lineage import accepted_runs
from ._lock import check_still_here, run_lock
from ._manifest_file import (
    MANIFEST,
    create_manifest,
    decoded_manifest,
    encode_manifest,
    manifest_id,
    read_manifest,
    write_manifest,
)
from ._manifest_schema import Manifest, labels_file_of
from ._markers import mark_ray, mark_shard, ray_record, shard_markers
from ._ownership import (
    check_folders,
    check_new,
    check_path,
    check_tiles_own,
    owned_files,
    remove_owned,
    run_ids,
)
from ._packer import Packer
from ._packs import PACK_TILES, TileSet, quarantine_tiles
from ._result_file import ResultFile
from ._run_files import (
    QUARANTINE,
    RESULT,
    SHARDS,
    TILES,
    is_side_file,
    move_to_quarantine,
    read_npz,
)
from ._test_diagonal import DiagonalFile
from ._tiles import write_tile as _write_tile

# An .npz's bytes beyond its arrays' values: each member's .npy and zip headers, the
# zip's directory (a few hundred bytes per member; labels files hold two)
_NPZ_SLACK = 4096

class RunStore:
    """The files of one run, under ``run_dir``.

    ``RunStore(run_dir)`` touches nothing; use :meth:`create` for a new run and
    :meth:`open` for an existing one.
    """

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self._manifest = None
        self._checked = None
        self.growth = Growth(self)  # kernelcli extend's file operations
        self.test_diag = DiagonalFile(self)  # test_diag.h5
        self.tiles = TileSet(self.tiles_dir, self._owners)  # the one reader of its tiles

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
    def run_manifest(self) -> Manifest:
        """The manifest checked as a kernelcli run's (:class:`Manifest`); DamagedFileError
        naming what is wrong otherwise."""
        if self._checked is None or self._checked.data is not self.manifest:
            self._checked = Manifest.check(self.manifest, self.run_dir)
        return self._checked

    def _owners(self):  # the identities of the packs that are this run's (:class:`TileSet`)
        return None if self._manifest is None else run_ids(self._manifest, self.run_id)

    @property
    def run_id(self) -> str:
        """The run's identity: its manifest's checksum (carried by every tile and result)."""
        return manifest_id(self.manifest)

    def result(self) -> ResultFile:
        """``kernels.h5``, to be read (whether it exists is :attr:`finished`), no larger
        than its plan implies (no bound while the manifest does not check)."""
        try:
            bound = self.run_manifest.result_bytes()
        except (KernelcliError, OSError):
            bound = None
        return ResultFile(self.result_path, bound)

    def result_problem(self, full: bool = True, values: bool = False):
        """``None`` when ``kernels.h5`` is this run's and whole; else what is wrong, in
        words. ``full=False`` checks identity and structure without reading the data;
        ``values`` also checks what the manifest says it holds: every dataset of its
        shapes and dtype, finite, the training kernels exactly symmetric with a positive
        diagonal when the plan is (what must hold before anything relies on
        ``kernels.h5`` alone)."""
        if not self.finished:
            return "it does not exist"
        problem = self.result().problem(self.run_id, full=full)
        if problem is None and values:
            m = self.run_manifest
            problem = self.result().values_problem(
                m.result_shapes(), m.dtype, m.kinds if m.geometry.symmetric else ())
        return problem

    def quarantine(self, path: Path) -> Path:
        """Move ``path`` (a file of this run that failed verification) to ``quarantine/``;
        its new path. Never deletes: the file may be evidence of a failing disk."""
        return move_to_quarantine(self.run_dir / QUARANTINE, path)

    def quarantine_tiles(self, blocks) -> list:
        """Move the tiles of ``blocks`` (which failed verification) to ``quarantine/``,
        so a resume recomputes them; their new paths. A pack holding one is moved
        whole, after its other tiles are unpacked (loose again, verified)."""
        return quarantine_tiles(self.tiles, blocks, self.quarantine)

    def damaged_packs(self) -> list:
        """``[(path, what is wrong)]`` of the packs whose index fails its checks (their
        tiles are not counted as done)."""
        return self.tiles.damaged_packs()

    def quarantine_damaged_packs(self) -> list:
        """Move the packs :meth:`damaged_packs` lists to ``quarantine/`` (a resume
        computes their tiles again); their new paths."""
        moved = [self.quarantine(path) for path, _ in self.damaged_packs()]
        self.tiles.refresh()
        return moved

    def packer(self, blocks, max_tiles: Optional[int] = None) -> Packer:
        """The packer of the tiles of ``blocks`` (this process's share of the run), its
        leftovers from earlier processes already packed (:mod:`._packs`); damaged packs
        are moved to quarantine first. ``max_tiles``: tiles per pack (default
        ``PACK_TILES``; 0: no packing). A pack of another run is refused (exit 2) before
        anything is moved or deleted."""
        ids = run_ids(self.manifest, self.run_id)
        check_tiles_own([p.path for p in self.tiles.foreign()], ids)
        self.quarantine_damaged_packs()
        packer = Packer(self.tiles, self.run_id, ids, [b.key for b in blocks],
                        PACK_TILES if max_tiles is None else max_tiles)
        packer.start()
        return packer

    @classmethod
    def open(cls, run_dir) -> RunStore:
        """An existing run; :class:`RunDirError` if ``run_dir`` holds none.

        Temporary files left by killed writers are removed.
        """
        store = cls(run_dir)
        check_path(store.run_dir, "run directory")
        store._manifest = read_manifest(store.run_dir)
        check_folders(store.run_dir)  # before anything in them is read, moved or deleted
        for folder in (store.run_dir, store.tiles_dir):
            try:
                remove_stale_tmp(folder)
            except OSError:
                pass  # a read-only run can still be inspected; leftovers are ignored anyway
        return store

    def create(self, manifest: dict, overwrite: bool = False,
               side_files: Optional[dict] = None) -> RunStore:
        """Start a new run: make the folders and write ``manifest`` (a JSON object).

        ``side_files`` (name -> bytes; names as in the module docstring) are written
        atomically before the manifest, so a run that exists has them. Refuses a
        directory that already holds a run (or its result) unless ``overwrite``,
        which then removes only kernelcli's own files.
        """
        data = encode_manifest(manifest)
        run_dir = self.run_dir
        self._check_new_dir()
        if overwrite:
            doomed = owned_files(run_dir, side_files or {})  # refuses what is not ours
        else:
            doomed = []
            if os.path.lexists(run_dir / MANIFEST):
                raise RunDirError(
                    f"{run_dir} already holds a kernelcli run ({MANIFEST}); resume it, "
                    f"choose another run directory, or overwrite it")
            check_new(run_dir, side_files or {})
        try:
            remove_owned(doomed)
            self.tiles_dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(run_dir)
        except OSError as exc:
            raise storage_error(exc, run_dir) from None
        self._write_side_files(side_files)
        write_manifest(run_dir, data)  # last: a manifest means the run exists
        self._manifest = decoded_manifest(data)  # exactly what open() will read back
        return self

    def create_or_join(self, manifest: dict,
                       side_files: Optional[dict] = None) -> tuple[RunStore, bool]:
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
        self._check_new_dir()
        if not (run_dir / MANIFEST).exists():
            try:
                check_new(run_dir, side_files or {})
            except RunDirError:
                # A manifest is published before any tile, so tiles without one are
                # another process's run only if its manifest appeared meanwhile.
                if not (run_dir / MANIFEST).exists():
                    raise
            try:
                self.tiles_dir.mkdir(parents=True, exist_ok=True)
                fsync_dir(run_dir)
            except OSError as exc:
                raise storage_error(exc, run_dir) from None
            self._write_side_files(side_files)
            if create_manifest(run_dir, data):
                self._manifest = decoded_manifest(data)
                return self, True
        self._manifest = read_manifest(run_dir)
        check_folders(run_dir)
        _mkdir(self.tiles_dir)
        return self, False

    def grow(self, manifest: dict, side_files: Optional[dict] = None) -> None:
        """Replace the manifest of this (existing) run by ``manifest``: the run becomes
        another one, with another identity (``kernelcli extend``). ``side_files`` are
        written first; the replacement itself is one atomic rename."""
        data = encode_manifest(manifest)
        self.growth.before_switch(self.manifest)
        self._write_side_files(side_files)
        write_manifest(self.run_dir, data)
        self._manifest = decoded_manifest(data)

    def _write_side_files(self, side_files: Optional[dict]) -> None:
        for name, content in (side_files or {}).items():
            write_bytes_atomic(self.side_path(name), content)

    def side_path(self, name: str) -> Path:
        """Path of a side file (``labels.npz``, ``preprocess-<fp>.npz``, ...)."""
        if not is_side_file(name):
            raise ValueError(f"{name!r} is not a run directory side file")
        return self.run_dir / name

    @property
    def labels_path(self) -> Path:
        """The side file that holds the run's labels (``labels.npz``, or a grown run's)."""
        return self.side_path(labels_file_of(self.manifest))

    def read_labels(self) -> dict:
        """``{"labels": (n1,), "test_labels": (n_test,)}`` int64, those the run has (from
        the file the manifest names, ``labels.npz`` by default)."""
        fingerprints = self.manifest.get("data_fingerprints")
        if not isinstance(fingerprints, dict) or "labels" not in fingerprints:
            return {}  # a run without labels: a labels.npz there is someone else's
        path = self.labels_path
        # the manifest says the run has labels: a missing, foreign or damaged file is an
        # error, never a run without labels; int64 labels of every row bound its size
        plan = self.manifest.get("plan") or {}
        rows = sum(int(plan.get(k) or 0) for k in ("n1", "n_test"))
        return read_npz(path, max_bytes=8 * rows + _NPZ_SLACK)

    @property
    def shards_dir(self) -> Path:
        return self.run_dir / SHARDS

    def mark_shard(self, index: int, count: int, info: dict) -> Path:
        """Record that process ``index`` of a job array of ``count`` works on this run
        (``shards/<index>of<count>.json``, :mod:`._markers`)."""
        return mark_shard(self.shards_dir, index, count, info)

    def shard_markers(self) -> tuple[list[dict], list[str]]:
        """The shard records of this run, newest first, and those there but unreadable,
        ``"<path> (why)"`` (:mod:`._markers`)."""
        return shard_markers(self.shards_dir)

    def mark_ray(self, info: dict) -> Path:
        """Record what this Ray driver sees of its cluster (``shards/ray.json``)."""
        return mark_ray(self.shards_dir, info)

    def ray_record(self) -> Optional[dict]:
        """What the last Ray driver recorded of its cluster, or ``None``."""
        return ray_record(self.shards_dir)

    def done_keys(self) -> set[str]:
        """Keys of the blocks whose tile is complete (loose or packed)."""
        return self.tiles.keys()

    def has(self, key) -> bool:
        """Whether the tile of ``key`` (a key string or a block) is complete."""
        return self.tiles.has(getattr(key, "key", key))

    def write_tile(self, block, arrays: dict) -> Path:
        """Store ``arrays`` (kind -> values) as ``block``'s tile, atomically and durably.

        Values per kind: shape ``(r1 - r0, c1 - c0)``, or ``(n_pairs,)`` in the order of
        ``block.local_pairs()``; a diagonal block's upper triangle is mirrored.
        """
        check_still_here(self.run_dir)  # by path: the path must still be the locked one
        _mkdir(self.tiles_dir)
        return _write_tile(self.tiles_dir, block, arrays, self.run_id)

    def read_tile(self, block, kinds=None) -> dict:
        """``block``'s arrays, kind -> ``(r1 - r0, c1 - c0)``, verified (see :func:`read_tile`)."""
        return self.tiles.read(block, kinds, self.tile_runs(block))

    def tile_runs(self, block) -> tuple:
        """The run identities ``block``'s tile may carry (:mod:`._lineage`)."""
        return accepted_runs(self.manifest, self.run_id, block)

    def remove_tiles(self) -> tuple[int, int]:
        """Delete every tile, recording that they were removed: ``(tiles, bytes)``. The
        caller has verified ``kernels.h5`` (the tiles are its only other copy)."""
        return remove_tiles(self.run_dir, self.tiles, self.result().digests(),
                            run_ids(self.manifest, self.run_id))

    @property
    def tiles_removed(self) -> Optional[dict]:
        """The record of :meth:`remove_tiles` (``None``: the tiles were never removed)."""
        return tiles_removed(self.run_dir)

    def forget_tiles_removed(self) -> None:
        """Drop that record, when the tiles are computed again."""
        forget_tiles_removed(self.run_dir)

    def damaged_tiles(self, blocks, kinds) -> list:
        """``[(block, DamagedFileError)]`` for each existing tile of ``blocks`` that fails
        verification (reads every tile: the cost of reading the run once);
        :class:`RunDirError` when one is a whole tile of another run (nothing moves)."""
        ids = run_ids(self.manifest, self.run_id)
        check_tiles_own([p.path for p in self.tiles.foreign()], ids)  # before any is read
        damaged = check_tiles(self.tiles, blocks, kinds, self.tile_runs)
        check_tiles_own([self.tiles.where(b.key) for b, _ in damaged], ids)
        return damaged

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
        check_still_here(self.run_dir)
        extra = dict(self.read_labels())
        if n_test and test_diagonal:
            diag = self.test_diag.read(kinds)
            extra.update({f"{k}_test_diag": v.astype(dtype) for k, v in diag.items()})
        return _assemble(self.result_path, self.tiles, blocks, n1, n2, kinds, dtype,
                         symmetric, attrs, n_test=n_test, extra=extra, run=self.run_id,
                         tile_runs=self.tile_runs)

    def file_counts(self) -> dict:
        """``files`` in the run directory (every folder), ``tile_packs`` and
        ``tiles_loose`` (completed tiles in files of their own) among them."""
        files = sum(len(names) for _, _, names in os.walk(self.run_dir))
        return {"files": files, "tile_packs": len(self.tiles.packs()),
                "tiles_loose": len(self.tiles.loose())}

    def side_files(self) -> list[str]:
        """Names of the side files present (see the package docstring)."""
        try:
            return sorted(n for n in os.listdir(self.run_dir) if is_side_file(n))
        except OSError:
            return []

    def _check_new_dir(self) -> None:
        run_dir = self.run_dir
        check_path(run_dir, "run directory")
        if os.path.lexists(run_dir) and not run_dir.is_dir():
            raise RunDirError(f"run directory {run_dir} exists and is not a directory")
        check_folders(run_dir)

    def make_dir(self) -> None:
        """Create the run directory (and its parents) if it does not exist."""
        _mkdir(self.run_dir, parents=True)

    def lock(self, shared: bool = False):
        """The run directory's writer lock, held for a ``with`` block (:mod:`._lock`):
        every command that writes holds it; ``shared`` for a process of a job array."""
        check_path(self.run_dir, "run directory")
        return run_lock(self.run_dir, shared)


def _mkdir(path: Path, parents: bool = False) -> None:
    try:
        path.mkdir(parents=parents, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, path) from None
