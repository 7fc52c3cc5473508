"""What a run directory owns: only what kernelcli wrote there.

kernelcli writes, replaces and deletes a file of a run directory only when it is
kernelcli's: named as the store names its files (:mod:`._run_files`, :mod:`._tiles`,
:mod:`._markers`, the temporary names of :mod:`._atomic`) *and* shown to be this run's
where the file can say so (a tile, ``test_diag.h5`` and ``kernels.h5`` carry the run
identity; a side file is the one the manifest names). So:

* a folder is taken as a new run directory only when it is empty or holds nothing but
  what a start of the same run left (a killed ``compute`` writes its side files just
  before the manifest: they are accepted when byte-identical to what this start would
  write); anything else is the user's, and the folder is refused (:func:`check_new`);
* ``--overwrite`` deletes only the files :func:`owned_files` lists, and refuses, before
  deleting anything, a file under one of kernelcli's names that is not this run's;
* the folders ``tiles/``, ``shards/`` and ``quarantine/`` must be real folders of this
  run directory: a link would make two runs share one, and a ``resume`` or ``clean`` of
  one would move or delete the other's files (:func:`check_folders`);
* the run directory's own path is checked before anything touches it
  (:func:`check_path`).

The run's inputs (data files) are never among kernelcli's files: a configuration
that puts one where kernelcli writes is refused by the caller, which knows the inputs
(:func:`input_clash`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional

import h5py

from ..errors import RunDirError
from ._atomic import _TMP
from ._lineage import ancestors
from ._lock import LOCK
from ._manifest_file import CHECKSUM, MANIFEST
from ._manifest_schema import labels_file_of
from ._markers import PROCESS_RECORD
from ._packs import PACK, pack_run
from ._result_file import ResultFile
from ._run_files import (
    PREDICTIONS,
    QUARANTINE,
    RESULT,
    SHARDS,
    TEST_DIAG,
    TILES,
    is_side_file,
    preprocess_name,
)
from ._sealed import SealError, read_sealed

FOLDERS = (TILES, SHARDS, QUARANTINE)
_NAME_MAX = 255     # bytes in one file name (Linux, macOS)
_PATH_MAX = 4096    # bytes in a path the OS accepts
_ROOM = 64          # the longest name kernelcli adds below the run directory (a tmp tile)
_TILE = re.compile(r"^(carry-)?r\d{5}c\d{5}\.h5$|^pack-r\d{5}c\d{5}-r\d{5}c\d{5}\.pack$")
_QUARANTINED = re.compile(r"^(r\d{5}c\d{5}\.h5|carry-r\d{5}c\d{5}\.h5|kernels\.h5|"
                          r"pack-r\d{5}c\d{5}-r\d{5}c\d{5}\.pack|"
                          r"test_diag\.h5)\.\d{8}T\d{6}(\.\d+)?$")
_TILES_REMOVED = "tiles_removed.json"


def check_path(run_dir, what: str) -> None:
    """Refuse a run directory kernelcli could not or must not own (exit 2): the root of
    the file system, or a path too long for the OS. ``what`` names where it came from
    (``<<run_dir>>``, ``output.run_dir``, ``name``)."""
    path = Path(run_dir)
    raw = os.fsencode(str(path))
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > _NAME_MAX or len(os.fsencode(os.path.abspath(path))) > _PATH_MAX - _ROOM:
        shown = str(path) if len(str(path)) <= 60 else str(path)[:57] + "..."
        raise RunDirError.naming(
            f"{what}: the run directory {shown!r} is too long ({longest} bytes in one "
            f"name, {len(raw)} in all); expected names of at most {_NAME_MAX} bytes and a "
            f"path under {_PATH_MAX - _ROOM} bytes")
    if os.path.realpath(path) == os.path.realpath(os.sep) or not raw:
        raise RunDirError.naming(
            f"{what}: {str(path)!r} is the root of the file system; expected a folder of "
            f"its own for the run (e.g. runs/NAME)")


def check_folders(run_dir) -> None:
    """Refuse a run directory whose ``tiles/``, ``shards/`` or ``quarantine/`` is a
    link or not a folder: a run's folders are its own."""
    for name in FOLDERS:
        path = Path(run_dir) / name
        if path.is_symlink():
            raise RunDirError(
                f"{path} is a symbolic link (to {os.readlink(path)}): a run directory's "
                f"{name}/ is its own, never shared with another run; replace the link by "
                f"the folder it points to, or start the run afresh in an empty folder")
        if os.path.lexists(path) and not path.is_dir():
            raise RunDirError(f"{path} is not a folder: it is not kernelcli's; move it away")


def check_new(run_dir, side_files: Optional[dict] = None) -> None:
    """Refuse ``run_dir`` as a new run directory (no manifest yet) unless it is empty or
    holds only what a start of this same run left; exit 2 naming the folder and one
    file that is not kernelcli's. ``side_files`` (name -> the bytes this start writes):
    ``None`` while they are not known yet (a check before the data is read), when
    files under their names pass until the check that knows them."""
    foreign = _foreign_in_new(Path(run_dir), side_files)
    if foreign is not None:
        raise RunDirError.naming(
            f"{run_dir} holds files that are not kernelcli's (e.g. {foreign}) and is not a "
            f"kernelcli run; kernelcli only creates a run in an empty folder (or one that "
            f"already holds a run): choose another <<run_dir>>")


def _foreign_in_new(run_dir: Path, side_files: Optional[dict]) -> Optional[str]:
    try:
        entries = sorted(os.listdir(run_dir))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for name in entries:
        path = run_dir / name
        if name == LOCK or (_TMP.match(name) and path.is_file()):
            continue
        if name in FOLDERS and path.is_dir() and not path.is_symlink():
            inner = [n for n in os.listdir(path) if not _TMP.match(n)]
            if not inner:
                continue
            return f"{name}/{sorted(inner)[0]}"
        if side_files is None and is_side_file(name):
            continue
        if side_files is not None and name in side_files and _same_bytes(path, side_files[name]):
            continue
        return name
    return None


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def stored_identity(run_dir) -> Optional[tuple]:
    """``(manifest, identity)`` of a ``manifest.json`` written by kernelcli, even a
    damaged one whose JSON still reads (its stored checksum is the identity its files
    carry); ``None`` when there is no manifest or it is not kernelcli's."""
    path = Path(run_dir) / MANIFEST
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 64 << 20:
            return None
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get(CHECKSUM), str):
        return None  # every manifest kernelcli writes carries its checksum
    identity = data.pop(CHECKSUM)
    return data, identity


def owned_files(run_dir, side_files: Optional[dict] = None) -> list:
    """Every file of the run in ``run_dir`` that ``--overwrite`` may delete, folders
    after their contents; :class:`RunDirError` (before anything is deleted) when a
    file under one of kernelcli's names is not this run's."""
    run_dir = Path(run_dir)
    check_folders(run_dir)
    found = stored_identity(run_dir)
    if found is None:
        check_new(run_dir, side_files)  # not a run: an empty folder, or a killed start's
        return []
    manifest, identity = found
    ids = run_ids(manifest, identity)
    fingerprints = manifest.get("data_fingerprints")
    fingerprints = fingerprints if isinstance(fingerprints, dict) else {}
    names = {_TILES_REMOVED}
    if "labels" in fingerprints:  # a run without labels wrote no labels file
        names.add(labels_file_of(manifest))
    if isinstance(fingerprints.get("preprocess"), str):
        names.add(preprocess_name(fingerprints["preprocess"]))
    out = []
    for name in sorted(os.listdir(run_dir)):
        path = run_dir / name
        if _TMP.match(name) and path.is_file():
            out.append(path)
        elif name == RESULT:
            _require(ResultFile(path).run_identity() in ids, path, "is not this run's result")
            out.append(path)
        elif name == PREDICTIONS:
            _require(is_predictions(path), path, "is not a predictions file kernelcli wrote")
            out.append(path)
        elif name == TEST_DIAG:
            _require(_sealed_run(path) in ids, path, "is not this run's test diagonal")
            out.append(path)
        elif is_side_file(name):
            _require(name in names and path.is_file() and not path.is_symlink(), path,
                     "is not a file this run wrote (its manifest does not name it)")
            out.append(path)
    out += _owned_in(run_dir / TILES, ids, _TILE, "a tile of this run")
    out += _owned_in(run_dir / SHARDS, ids, PROCESS_RECORD, "a process record")
    out += _owned_in(run_dir / QUARANTINE, ids, _QUARANTINED, "a file kernelcli moved there")
    out.append(run_dir / MANIFEST)  # last: until it goes, the run is there to overwrite
    return out


def _owned_in(folder: Path, ids: set, pattern, what: str) -> list:
    """kernelcli's files in ``folder`` (a tile must carry one of ``ids``); files under
    other names are the user's and stay, and so does the folder then."""
    if not folder.is_dir():
        return []
    out, foreign = [], False
    for name in sorted(os.listdir(folder)):
        path = folder / name
        if _TMP.match(name) and path.is_file():
            out.append(path)
        elif pattern.match(name) and path.is_file() and not path.is_symlink():
            if pattern is _TILE:
                _require(_sealed_run(path, ids) in ids, path, f"is not {what} (it carries "
                         f"another run identity, or none): run directories cannot share "
                         f"folders")
            out.append(path)
        else:
            foreign = True
    return out if foreign else out + [folder]


def run_ids(manifest: dict, identity: str) -> set:
    """The identities whose files a run may hold: its own, those of the runs it grew
    from (``lineage``) and the one it was extended from (``extend.previous``: a killed
    extend leaves that run's tiles until the grown run takes them over)."""
    previous = (manifest.get("extend") or {}).get("previous")
    return {identity} | ancestors(manifest) | ({previous} if isinstance(previous, str) else set())


def check_tiles_own(paths, ids: set) -> list:
    """Refuse (exit 2, before anything is moved or deleted) a tile among ``paths`` that
    is whole but carries a run identity not in ``ids``: a tile of another run, so its
    folder is shared with (or copied from) another run directory. A damaged tile says
    nothing about whose it is and passes (it is handled as damaged); the paths of such
    tiles are returned, so that nothing deletes a file it cannot prove its own."""
    unproven = []
    for path in paths:
        run = _sealed_run(path, ids)
        if run is None:
            unproven.append(path)
        elif run not in ids:
            what = "tile pack" if PACK.match(Path(path).name) else "tile"
            raise RunDirError(
                f"{path} is a {what} of another run (run identity {run[:12]}...), not of "
                f"this one: run directories cannot share folders, so nothing was moved or "
                f"deleted; move that {what} (or the whole {Path(path).parent.name}/ folder) "
                f"back to its own run directory")
    return unproven


def is_predictions(path: Path) -> bool:
    """Whether ``path`` is the HDF5 file ``kernelcli predict`` writes (it records the
    ridge convention it used; a file of the user's does not)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with h5py.File(path, "r") as f:
            return "ridge_convention" in f.attrs and "solver" in f.attrs
    except (OSError, ValueError, RuntimeError, TypeError, KeyError):
        return False


def _sealed_run(path: Path, ids=()) -> Optional[str]:
    """The run identity a whole tile, pack or test diagonal carries (else ``None``); of
    a pack, one of ``ids`` when its tiles carry it (:func:`pack_run`)."""
    if PACK.match(Path(path).name):
        return pack_run(path, ids)
    try:
        run = read_sealed(path)[1].get("run")
    except (SealError, OSError, ValueError, KeyError, TypeError):
        return None
    return run.decode(errors="replace") if isinstance(run, bytes) else run


def _require(ok: bool, path: Path, what: str) -> None:
    if not ok:
        raise RunDirError(f"{path} {what}; kernelcli deletes only its own files, so nothing "
                          f"was deleted: move it away, or choose another run directory")


def input_clash(run_dir, inputs: dict) -> Optional[tuple]:
    """``(what, path, kernelcli's path)`` for the first input (``{key: path}``) that is
    a path kernelcli writes in ``run_dir`` (a file under its names, or anything in its
    folders); ``None`` when none is."""
    base = os.path.realpath(run_dir)
    for what, path in inputs.items():
        if path is None:
            continue
        real = os.path.realpath(path)
        if os.path.dirname(real) == base:
            name = os.path.basename(real)
            if name in (MANIFEST, RESULT, LOCK, _TILES_REMOVED) or is_side_file(name):
                return what, Path(path), Path(run_dir) / name
        for folder in FOLDERS:
            inside = os.path.join(base, folder)
            if real == inside or real.startswith(inside + os.sep):
                return what, Path(path), Path(run_dir) / folder
    return None


def remove_owned(paths) -> None:
    """Delete ``paths`` (:func:`owned_files`: kernelcli's own), the result first (never a
    result without a run), folders once emptied, the manifest last."""
    for path in sorted(paths, key=lambda p: p.name != RESULT):
        if path.is_dir() and not path.is_symlink():
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
