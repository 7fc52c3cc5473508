"""Tile packs: many completed tiles in one file, ``tiles/pack-<first>-<last>.pack``.

A run of N examples has about (N / edge)^2 / 2 tiles; a 60,000-image run is planned
as ~450,000 of them, more small files than a cluster's parallel file system serves
well. So a writer *packs* the tiles it has published: once ``PACK_TILES`` of them (or
``PACK_BYTES``) are loose, they are copied into one pack and only then deleted.

A pack is the tiles' own sealed bytes (:mod:`._sealed`), one after another, behind a
512-byte header and an index::

    kernelcli tile pack 1\\n
    length <bytes of the index>\\n
    sha256 <hex digest of the index>\\n
    (NUL padding to 512 bytes)
    <index: JSON {"format": 1, "run": <identity>, "runs": [<its tiles' identities>],
                  "tiles": [[key, offset, length, sha256], ...]}>
    <the tiles' sealed bytes; offsets count from the end of the index>

Why this way:

* The tile is the unit of crash safety and stays so: each is still published alone,
  as it is computed. Packing only moves published tiles: the pack is written under a
  temporary name, fsynced, read back and compared byte for byte, renamed into place,
  and only then are the loose tiles deleted. A kill at any moment loses nothing: before
  the rename the loose tiles are whole, after it the pack is; between the rename and
  the deletions both are, with the same bytes, and readers take either (the next
  writer deletes the loose copy).
* A packed tile is bit-identical to the tile file it was: its own checksum, block
  and run identity travel with it and are checked when it is read, as a loose tile's
  are. The index has its own checksum and one per tile, so a flipped byte is named
  as a damaged pack index or a damaged tile *in* the pack; the healthy tiles of a
  pack with a damaged tile are unpacked before the pack goes to ``quarantine/``, so
  a resume recomputes only what was lost.
* Reading one tile reads the header, the index and that tile's bytes only (assembly
  reads the tiles of a band, and their mirrors, from many packs). No HDF5 writer
  touches the disk: the bytes go out through plain writes, as a tile's do. A pack
  is not itself an HDF5 file (hence ``.pack``); each tile in it is one, behind its
  sealed header, at the offset its index entry gives.
* Keys are unique within a run and a pack holds only loose tiles not packed
  already, so pack names (first and last key) never clash; the processes of a job
  array pack only the tiles of their own share, so they never write the same file.

:class:`TileSet` is the one reader of a run's tiles, loose and packed alike;
:class:`~._packer.Packer` the one writer of packs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .._untrusted import open_untrusted
from ..errors import ComputeError, DamagedFileError, RunDirError
from ._atomic import atomic_path, fsync_dir, storage_error
from ._sealed import HEADER, MAX_BYTES, SealError, unseal
from ._tiles import TileMissing, check_tile, done_keys, read_tile, tile_path

PACK = re.compile(r"^pack-(r\d{5}c\d{5})-(r\d{5}c\d{5})\.pack$")
MAGIC = b"kernelcli tile pack 1\n"
MAX_INDEX = 16 << 20     # 4096 entries of ~100 bytes need 0.4 MiB
PACK_TILES = 512         # a 60,000-image run (~450,000 tiles): ~900 packs
PACK_BYTES = 64 << 20    # and never much more than this in one file
_KEY = re.compile(r"r\d{5}c\d{5}")


@dataclass(frozen=True)
class Pack:
    """A pack's verified index: ``entries`` key -> (offset, length, sha256)."""

    path: Path
    run: str
    entries: dict
    runs: tuple = ()  # the identities its tiles carry (an extended run's: earlier ones too)


def read_index(path: Path, within=None) -> Pack:
    """The index of the pack at ``path``, checked against its checksum and the file's
    size; :class:`SealError` (no path in its message) when it is damaged."""
    fd = open_untrusted(path, within)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER)
        if not head.startswith(MAGIC):
            raise SealError("it is not a kernelcli tile pack (no pack header)")
        fields = dict(line.split(b" ", 1) for line in head[len(MAGIC):].rstrip(b"\0").split(b"\n")
                      if b" " in line)
        length, checksum = fields.get(b"length", b""), fields.get(b"sha256", b"")
        if not length.isdigit() or int(length) > MAX_INDEX or HEADER + int(length) > size:
            raise SealError("its header is damaged, or the file truncated")
        index = f.read(int(length))
    if hashlib.sha256(index).hexdigest().encode() != checksum:
        raise SealError("its index does not match its checksum")
    try:
        doc = json.loads(index)
        run, start, entries, end = str(doc["run"]), HEADER + len(index), {}, 0
        runs = tuple(str(r) for r in doc.get("runs", ()))
        for key, offset, nbytes, sha in doc["tiles"]:
            if (not _KEY.fullmatch(key) or type(offset) is not int or type(nbytes) is not int
                    or not 0 <= nbytes <= MAX_BYTES + HEADER or offset != end):
                raise ValueError(f"entry {key!r} is not a tile's")
            entries[key] = (start + offset, nbytes, str(sha))
            end = offset + nbytes
    except (ValueError, TypeError, KeyError) as exc:  # only a forged index gets here
        raise SealError(f"its index is unreadable ({exc})") from None
    if start + end != size:
        raise SealError(f"it is truncated or padded ({size} bytes, its index says {start + end})")
    return Pack(Path(path), run, entries, runs)


def read_blob(pack: Pack, key: str, within=None) -> bytes:
    """The sealed bytes of tile ``key`` in ``pack``, checked against the index."""
    offset, nbytes, sha = pack.entries[key]
    fd = open_untrusted(pack.path, within)
    try:
        data = os.pread(fd, nbytes, offset)
    finally:
        os.close(fd)
    if len(data) != nbytes or hashlib.sha256(data).hexdigest() != sha:
        raise SealError("its bytes do not match their checksum in the pack's index")
    return data


def pack_run(path: Path, ids=()) -> Optional[str]:
    """The run identity a whole pack carries (:func:`owner`); ``None`` when it is damaged
    or unreadable."""
    try:
        pack = read_index(path)
    except (SealError, OSError):
        return None
    return owner(pack, ids)


def owner(pack: Pack, ids=()) -> str:
    """The run identity ``pack`` carries, or the first of ``ids`` its tiles carry (a pack
    written before ``kernelcli extend`` holds tiles the grown run keeps)."""
    return next((r for r in pack.runs if r in ids and pack.run not in ids), pack.run)


def publish(path: Path, chunks) -> Path:
    """Write ``chunks`` (bytes) as the file ``path``: temporary name, fsync, read back and
    compared, rename (:mod:`._atomic`); nothing under ``path`` otherwise."""
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(tmp, "rb") as f:  # what the file system returns is what will be read
            if any(f.read(len(c)) != c for c in chunks) or f.read(1):
                raise OSError(5, "the file read back differs from what was written", str(tmp))
    return path


def write_pack(tiles_dir: Path, run: str, blobs: list, runs=()) -> Path:
    """Publish ``blobs`` (``[(key, sealed bytes)]``, keys ascending) as one pack of run
    ``run`` whose tiles carry the identities ``runs``."""
    entries, offset = [], 0
    for key, data in blobs:
        entries.append([key, offset, len(data), hashlib.sha256(data).hexdigest()])
        offset += len(data)
    index = json.dumps({"format": 1, "run": run, "runs": sorted(set(runs)), "tiles": entries},
                       separators=(",", ":")).encode()
    checksum = hashlib.sha256(index).hexdigest().encode()
    head = MAGIC + b"length %d\nsha256 %s\n" % (len(index), checksum)
    path = Path(tiles_dir) / f"pack-{blobs[0][0]}-{blobs[-1][0]}.pack"
    return publish(path, [head.ljust(HEADER, b"\0"), index] + [data for _, data in blobs])


class TileSet:
    """The completed tiles of a run, loose (``tiles/<key>.h5``) and packed: the one
    reader of both. Pack indexes are read once and kept while the pack is there
    (a published pack never changes). ``owners()``: the run identities whose packs
    are the run's (``None``: any); a pack of another run, copied into the folder, is
    never taken for the run's tiles (:meth:`foreign`), so nothing acts on its keys."""

    def __init__(self, tiles_dir: Path, owners=None):
        self.dir = Path(tiles_dir)
        self._owners = owners
        self._ids = None  # what owners() said at the last refresh
        self._packs: dict = {}  # name -> Pack, or the SealError text of a damaged one
        self._by_key: dict = {}  # key -> Pack, of the run's own packs in _packs

    def refresh(self) -> list:
        """List the folder; read the indexes of packs not seen before. Its names."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise RunDirError(f"cannot list {self.dir}: {exc.strerror or exc}") from None
        packs = {n for n in names if PACK.match(n)}
        ids = None if self._owners is None else self._owners()
        if packs != set(self._packs) or ids != self._ids:
            self._ids = ids
            for name in set(self._packs) - packs:
                del self._packs[name]
            for name in sorted(packs - set(self._packs)):
                try:
                    self._packs[name] = read_index(self.dir / name, self.dir)
                except FileNotFoundError:
                    continue
                except (SealError, OSError) as exc:
                    self._packs[name] = str(exc)
            self._by_key = {key: p for p in self._whole() if self._mine(p) for key in p.entries}
        return names

    def packs(self) -> list:
        """The whole packs (of another run too: :meth:`foreign`)."""
        self.refresh()
        return self._whole()

    def foreign(self) -> list:
        """The whole packs that carry a run identity not among ``owners()``: another
        run's. Their tiles are not counted, read or deleted."""
        self.refresh()
        return [p for p in self._whole() if not self._mine(p)]

    def shadowed(self) -> list:
        """``[(pack, keys)]``: the run's packs' keys whose tile is read from another file
        (a loose copy, or a pack sorting after it), so reading the run never reads them."""
        loose = self.loose()
        self.refresh()
        out = []
        for pack in filter(self._mine, self._whole()):
            keys = [k for k in sorted(pack.entries)
                    if k in loose or self._by_key.get(k) is not pack]
            if keys:
                out.append((pack, keys))
        return out

    def _whole(self) -> list:
        return [p for _, p in sorted(self._packs.items()) if isinstance(p, Pack)]

    def _mine(self, pack: Pack) -> bool:
        return self._ids is None or owner(pack, self._ids) in self._ids

    def damaged_packs(self) -> list:
        """``[(path, what is wrong)]`` of the packs whose index fails its checks."""
        self.refresh()
        return [(self.dir / n, p) for n, p in sorted(self._packs.items()) if isinstance(p, str)]

    def packed(self) -> dict:
        """key -> :class:`Pack` holding it (as of the last :meth:`refresh`)."""
        return dict(self._by_key)

    def loose(self) -> set:
        return done_keys(self.dir)

    def keys(self) -> set:
        """Keys of every completed tile, loose or packed. The loose tiles are listed
        first: a pack is published before its tiles are deleted, so a tile that another
        process packs meanwhile is in the packs listed after."""
        loose = self.loose()
        self.refresh()
        return loose | set(self.packed())

    def has(self, key: str) -> bool:
        if tile_path(self.dir, key).is_file():
            return True
        return self.find(key) is not None

    def find(self, key: str) -> Optional[Pack]:
        """The pack holding ``key`` (listing the folder again when none known does), or
        ``None``."""
        pack = self._by_key.get(key)
        if pack is None or not pack.path.is_file():
            self.refresh()
            pack = self._by_key.get(key)
        return pack

    def where(self, key: str) -> Path:
        """The file that holds ``key``'s tile: its own, else its pack."""
        path = tile_path(self.dir, key)
        pack = None if path.is_file() else self.find(key)
        return path if pack is None else pack.path

    def read(self, block, kinds=None, run="") -> dict:
        """``block``'s arrays, verified, from its own file or else its pack (a loose tile
        packed and deleted meanwhile by another process is found in its pack)."""
        try:
            return read_tile(self.dir, block, kinds, run)
        except TileMissing:
            pack = self.find(block.key)
            if pack is None:
                raise
        return self.read_packed(pack, block, kinds, run)

    def read_packed(self, pack: Pack, block, kinds=None, run="") -> dict:
        """``block``'s arrays, verified, from ``pack`` (which holds its key)."""
        name = f"{block.key} in pack {pack.path}"
        try:
            datasets, attrs = unseal(read_blob(pack, block.key, self.dir))
        except SealError as exc:
            raise DamagedFileError(f"tile {name} is damaged: {exc}") from None
        except FileNotFoundError:
            raise TileMissing(f"tile {name} is missing: the pack was removed") from None
        except OSError as exc:
            raise ComputeError(f"cannot read tile {name}: {exc.strerror or exc}") from None
        return check_tile(name, datasets, attrs, block, kinds, run)

    def unpack(self, pack: Pack, skip=()) -> list:
        """Write every tile of ``pack`` but ``skip`` (and those whose bytes fail their
        checksum) as loose tiles again; the keys written. The pack itself stays (the
        caller deletes or quarantines it once this returns)."""
        written = []
        for key in sorted(pack.entries):
            path = tile_path(self.dir, key)
            if key in skip or path.is_file():
                continue
            try:
                data = read_blob(pack, key, self.dir)
                unseal(data)
            except (SealError, OSError):
                continue  # damaged: it stays lost, and is computed again
            publish(path, [data])
            written.append(key)
        return written

    def remove_pack(self, pack: Pack) -> None:
        try:
            os.unlink(pack.path)
            fsync_dir(self.dir)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise storage_error(exc, pack.path) from None
        self.refresh()


def quarantine_tiles(tiles: TileSet, blocks, quarantine) -> list:
    """Move the tiles of ``blocks`` to quarantine (``quarantine(path)`` moves one file and
    gives its new path); the new paths. A pack holding one is moved whole, after its
    other tiles are unpacked, so only the damaged ones are computed again."""
    moved: list = []
    packs: dict[Path, tuple[Any, set]] = {}
    for b in blocks:
        path = tile_path(tiles.dir, b.key)
        pack = None if path.is_file() else tiles.find(b.key)
        if pack is None:
            moved.append(quarantine(path))
        else:
            packs.setdefault(pack.path, (pack, set()))[1].add(b.key)
    for pack, keys in packs.values():
        tiles.unpack(pack, skip=keys)
        moved.append(quarantine(pack.path))
    tiles.refresh()
    return moved


def read_loose(tiles_dir: Path, key: str) -> bytes:
    fd = open_untrusted(tile_path(tiles_dir, key), tiles_dir)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_BYTES + HEADER + 1)


def text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
