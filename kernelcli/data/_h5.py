"""Opening one dataset of an HDF5 file that may be hostile.

HDF5 can make a dataset read values that are not in the file without any error:
a virtual dataset (VDS) whose source file is missing, or whose mappings do not
cover it, reads the fill value; external raw storage past the end of its file
reads zeros. So before a dataset is accepted, every place its values come from
is checked to exist and be complete. Source paths are resolved the way HDF5 does,
conservatively: a source is looked for where HDF5 looks first, and refused if
the first file found there is not the right one (HDF5 might fall back further,
but then it would read something other than what was checked).

Every h5py failure of a lookup (KeyError, OSError, ValueError, RuntimeError,
TypeError: broken soft links, external links to files that are not HDF5,
unsupported types) becomes a one-line :class:`DataError` naming the key and file.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from pathlib import Path
from typing import Optional

import h5py
import numpy as np
from h5py import h5d, h5p, h5s, h5z

from .. import _env
from ..errors import DataError
from ._unpack import array_bytes, check_unpacked

H5_ERRORS = (KeyError, OSError, ValueError, RuntimeError, TypeError, AttributeError)
_MAX_DEPTH = 4          # virtual datasets built on virtual datasets, at most this deep
_MAX_LISTED = 20        # dataset names shown in a message
_UNLIMITED = 2**64 - 1  # H5F_UNLIMITED: an external segment that runs to the end of its file


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's text on one line (messages must never span lines)."""
    raw = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # no KeyError quotes
    text = " ".join(str(raw).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _name(name: str) -> str:
    """A name as shown in a listing: as is, or quoted when it holds odd characters."""
    return name if name.isprintable() and ", " not in name else repr(name)


def names(f: h5py.File, most: int) -> list[str]:
    """At most ``most`` names of the datasets reachable through hard links, sorted."""
    found: list[str] = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            found.append(name)
        return True if len(found) >= most else None  # a true value stops the visit
    try:
        f.visititems(visit)
    except H5_ERRORS:
        pass
    return sorted(found)


def listing(f: h5py.File) -> str:
    """The datasets reachable through hard links, for "keys present" messages."""
    names: list[str] = []
    try:
        f.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
    except H5_ERRORS as exc:
        return f"(the file's groups cannot be listed: {one_line(exc)})"
    return listed(sorted(names))


def listed(names) -> str:
    """``a, b, c`` for a message: odd names quoted, at most 20 shown (a hostile file may
    hold millions)."""
    names = list(names)
    shown = ", ".join(_name(n) for n in names[:_MAX_LISTED]) or "(none)"
    more = len(names) - _MAX_LISTED
    return shown + (f", ... ({more} more)" if more > 0 else "")


def open_file(path: Path, what: str) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except H5_ERRORS as exc:
        raise DataError(f"{what}: {path} is not a readable HDF5 file ({one_line(exc)})") from None


def lookup(f: h5py.File, key: str, path: Path, key_name: str) -> h5py.Dataset:
    """``f[key]`` as a dataset whose values all come from existing files, or DataError."""
    try:
        link = f.get(key, getlink=True)
    except H5_ERRORS:
        link = ...  # "/" and some broken paths have no link info: let f[key] decide
    if link is None:
        raise DataError(f"{key_name}: {key!r} not found in {path}; keys present: {listing(f)}")
    try:
        obj = f[key]
    except H5_ERRORS as exc:
        reason = one_line(exc)
        if isinstance(link, h5py.SoftLink):
            raise DataError(f"{key_name}: {key!r} in {path} is a soft link to {link.path!r}, "
                            "which does not resolve; accepted: the name of a dataset in the "
                            "file") from None
        if isinstance(link, h5py.ExternalLink):
            raise DataError(f"{key_name}: {key!r} in {path} is an external link to "
                            f"{link.path!r} in {link.filename!r}, which cannot be opened "
                            f"({reason}); accepted: a link to a dataset of a readable HDF5 "
                            "file") from None
        raise DataError(f"{key_name}: {key!r} in {path} cannot be opened ({reason})") from None
    if not isinstance(obj, h5py.Dataset):
        kind = "a group" if isinstance(obj, h5py.Group) else "a named datatype"
        raise DataError(f"{key_name}: {key!r} in {path} is {kind}, not a dataset; "
                        f"datasets present: {listing(f)}")
    check_storage(obj, key, key_name)
    return obj


def _file_of(dset: h5py.Dataset) -> Path:
    return Path(dset.file.filename)


def check_storage(dset: h5py.Dataset, key: str, key_name: str, depth: int = 0,
                  seen: tuple[tuple[str, str], ...] = ()) -> None:
    """Refuse ``dset`` unless every value it reads comes from an existing, complete file,
    and its compression filters are available (else every read fails)."""
    path = _file_of(dset)
    where = f"{key!r} in {path}"
    try:
        dcpl = dset.id.get_create_plist()
        filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
        missing = [(code, name) for code, _, _, name in filters if not h5z.filter_avail(code)]
        external = dset.external
        virtual = dset.is_virtual
    except H5_ERRORS as exc:
        raise DataError(f"{key_name}: the storage of {where} cannot be inspected "
                        f"({one_line(exc)})") from None
    if missing:
        code, name = missing[0]
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        shown = f"id {code} ({name!r})" if name else f"id {code}"
        raise DataError(f"{key_name}: {where} is stored with HDF5 filter {shown}, which is not "
                        "available here; accepted: a dataset stored plainly or with gzip, lzf, "
                        "szip or shuffle (or install the filter's plugin)")
    if external:
        _check_external(dset, external, where, key_name)
    if virtual:
        _check_virtual(dset, dcpl, key, where, key_name, depth,
                       seen + ((os.path.realpath(path), dset.name),))


def _prefixed(prefix: str, origin: Path, name: str) -> Path:
    """``prefix/name`` with HDF5's ``${ORIGIN}`` (the folder of the file) expanded."""
    return Path(prefix.replace("${ORIGIN}", str(origin))) / name


def _check_external(dset, segments, where: str, key_name: str) -> None:
    # HDF5 resolves a relative external file name against HDF5_EXTFILE_PREFIX when
    # set, else against the working directory (not the file's folder). A file
    # shorter than its segment reads as zeros, without an error.
    origin = _file_of(dset).parent
    prefix = _env.get("HDF5_EXTFILE_PREFIX")
    needed = int(dset.size) * dset.dtype.itemsize
    for name, offset, size in segments:
        if needed <= 0:
            break
        name = os.fsdecode(name)
        if os.path.isabs(name):
            p = Path(name)
        else:
            p = _prefixed(prefix, origin, name) if prefix else Path.cwd() / name
        take = needed if size == _UNLIMITED else min(int(size), needed)
        if not p.is_file() or not os.access(p, os.R_OK):
            state = "is not a readable regular file" if p.exists() else "does not exist"
            raise DataError(f"{key_name}: {where} keeps its values in the external file "
                            f"{name!r}, which {state} (looked for {p}); accepted: external "
                            "storage whose every file exists")
        length = p.stat().st_size
        if length < int(offset) + take:
            raise DataError(f"{key_name}: {where} needs bytes {offset}..{int(offset) + take} of "
                            f"its external file {p}, which holds only {length} bytes (the rest "
                            "would read as zeros); accepted: complete external files")
        needed -= take
    if needed > 0:
        raise DataError(f"{key_name}: the external storage of {where} is {needed} bytes short "
                        "of the dataset's size; accepted: external files covering every value")


def _unescape(pattern: str) -> Optional[str]:
    """A VDS source name with ``%%`` as ``%``; None for printf-style patterns (``%b``)."""
    if re.search("%[^%]|%$", pattern.replace("%%", "")):
        return None
    return pattern.replace("%%", "%")


def _vds_candidates(fname: str, origin: Path) -> list[Path]:
    # HDF5's order for a relative source file name: each folder of HDF5_VDS_PREFIX,
    # then the folder of the virtual dataset's file, then the working directory.
    if os.path.isabs(fname):
        return [Path(fname)]
    prefix = _env.get("HDF5_VDS_PREFIX")
    out = [_prefixed(p, origin, fname) for p in prefix.split(":") if p] if prefix else []
    out += [origin / fname, Path.cwd() / fname]
    return [p for i, p in enumerate(out) if p not in out[:i]]


def _check_virtual(dset, dcpl, key, where, key_name, depth, seen) -> None:
    if depth >= _MAX_DEPTH:
        raise DataError(f"{key_name}: {where} is a virtual dataset nested more than "
                        f"{_MAX_DEPTH} deep; accepted: virtual datasets of plain datasets")
    origin = _file_of(dset).parent
    try:
        count = dcpl.get_virtual_count()
        maps = [(dcpl.get_virtual_filename(i), dcpl.get_virtual_dsetname(i),
                 dcpl.get_virtual_vspace(i), dcpl.get_virtual_srcspace(i)) for i in range(count)]
        points = [int(vspace.get_select_npoints()) for _, _, vspace, _ in maps]
    except H5_ERRORS as exc:
        raise DataError(f"{key_name}: the mappings of the virtual dataset {where} cannot be read "
                        f"({one_line(exc)}); accepted: virtual datasets of fixed size") from None
    for (fname, dname, _, srcspace), npoints in zip(maps, points, strict=True):
        f_name, d_name = _unescape(fname), _unescape(dname)
        if f_name is None or d_name is None:
            raise DataError(f"{key_name}: the virtual dataset {where} names its sources by the "
                            f"pattern {fname!r} [{dname!r}], which is not read; accepted: "
                            "sources named by file and dataset")
        _check_source(dset, f_name, d_name, srcspace, npoints, origin, where, key_name,
                      depth, seen)
    if sum(points) < dset.size:
        raise DataError(f"{key_name}: the virtual dataset {where} maps only {sum(points)} of its "
                        f"{dset.size} values to source datasets (the rest would read as the "
                        "fill value); accepted: virtual datasets whose sources cover every value")


def _check_source(dset, fname, dname, srcspace, npoints, origin, where, key_name, depth,
                  seen) -> None:
    source = f"source {dname!r} in {fname!r}"
    opened = None
    if fname == ".":
        src_file, shown = dset.file, _file_of(dset)
    else:
        candidates = _vds_candidates(fname, origin)
        found = [p for p in candidates if p.exists()]
        if not found:
            raise DataError(f"{key_name}: the virtual dataset {where} reads its {source}, which "
                            f"does not exist (looked for {', '.join(map(str, candidates))}); "
                            "accepted: virtual datasets whose every source file exists")
        shown = found[0]
        if not shown.is_file() or not os.access(shown, os.R_OK):
            raise DataError(f"{key_name}: the virtual dataset {where} reads its {source}, but "
                            f"{shown} is not a readable file")
        try:
            opened = src_file = h5py.File(shown, "r")
        except H5_ERRORS as exc:
            raise DataError(f"{key_name}: the virtual dataset {where} reads its {source}, but "
                            f"{shown} is not a readable HDF5 file ({one_line(exc)})") from None
    try:
        try:
            link = src_file.get(dname, getlink=True)
            src = src_file[dname] if link is not None else None
        except H5_ERRORS:
            src = None
        if not isinstance(src, h5py.Dataset):
            raise DataError(f"{key_name}: the virtual dataset {where} reads its {source}, but "
                            f"{shown} holds no dataset {dname!r}; accepted: virtual datasets "
                            "whose every source dataset exists")
        if (os.path.realpath(shown), src.name) in seen:
            raise DataError(f"{key_name}: the virtual dataset {where} reads itself (through "
                            f"{source}); accepted: virtual datasets of other datasets")
        _check_extent(src, srcspace, npoints, where, source, key_name)
        check_storage(src, dname, key_name, depth + 1, seen)
    finally:
        if opened is not None:
            opened.close()


def _check_extent(src, srcspace, npoints, where, source, key_name) -> None:
    """The source's selection must lie inside the source as it is now (HDF5 reads the
    fill value for any part past its end)."""
    shape = tuple(src.shape or ())
    try:
        kind = srcspace.get_select_type()
        if kind == h5s.SEL_ALL:
            ok = int(np.prod(shape)) == npoints
        elif kind in (h5s.SEL_HYPERSLABS, h5s.SEL_POINTS):
            _, hi = srcspace.get_select_bounds()
            ok = len(hi) == len(shape) and all(h < s for h, s in zip(hi, shape, strict=True))
        else:
            ok = False
    except H5_ERRORS:
        ok = False
    if not ok:
        raise DataError(f"{key_name}: the virtual dataset {where} maps values from outside its "
                        f"{source} of shape {shape} (they would read as the fill value); "
                        "accepted: mappings inside their source datasets")


def bounded(dset: h5py.Dataset, path: Path, key: str, what: str, bound: int) -> h5py.Dataset:
    """``dset``, refused if it is compressed (has filters) and declares more than
    ``bound`` bytes unpacked (the dataset or one chunk), else reopened with a chunk cache
    that holds a row of chunks (``_unpack`` says why): HDF5 decompresses a chunk that
    does not fit its cache (1 MiB by default) again for every slice read of it."""
    try:
        dcpl = dset.id.get_create_plist()
        if dcpl.get_nfilters() == 0 or dset.chunks is None:
            return dset
        shape, chunks = tuple(dset.shape), tuple(dset.chunks)
    except H5_ERRORS as exc:
        raise DataError(f"{what}: the storage of {key!r} in {path} cannot be inspected "
                        f"({one_line(exc)})") from None
    check_unpacked(path, key, what, array_bytes(shape, dset.dtype), bound,
                   f"shape {shape} of {dset.dtype}")
    chunk = array_bytes(chunks, dset.dtype)
    check_unpacked(path, key, what, chunk, bound, f"chunks of shape {chunks}")
    per_row = math.prod(-(-s // c) for s, c in zip(shape[1:], chunks[1:], strict=True))
    nbytes = min(bound, max(chunk * per_row, 2**20))
    dapl = h5p.create(h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(min(2**24, max(521, 10 * per_row)), nbytes, 1.0)
    # An open dataset keeps the cache it was opened with (a second open shares it).
    fid, name = dset.file.id, dset.name.encode()
    try:
        dset.id._close()
        return h5py.Dataset(h5d.open(fid, name, dapl))
    except H5_ERRORS as exc:
        raise DataError(f"{what}: {key!r} in {path} cannot be opened again with a chunk cache "
                        f"({one_line(exc)})") from None


def first_rows(dset: h5py.Dataset, rows: int, stop=None):
    """A loader of ``dset``'s first ``rows`` rows that unpacks only them, or None where
    it does not apply: for a dataset deflated alone (gzip, no other filter) in chunks
    spanning whole rows, a chunk's first ``k`` rows are the first bytes of its stream,
    so each chunk is inflated only that far (HDF5 inflates a chunk whole for any value
    in it: a few megabytes of gzip may hold a chunk of gigabytes)."""
    try:
        dcpl = dset.id.get_create_plist()
        chunks, shape = dset.chunks, tuple(dset.shape)
        if chunks is None or tuple(chunks[1:]) != shape[1:] or dcpl.get_nfilters() != 1 \
                or dcpl.get_filter(0)[0] != h5z.FILTER_DEFLATE:
            return None
    except H5_ERRORS:  # the usual route says what is wrong
        return None
    row_bytes, dtype = math.prod(shape[1:]) * dset.dtype.itemsize, dset.dtype

    def load() -> np.ndarray:
        out = np.empty((rows,) + shape[1:], dtype)
        for r0 in range(0, rows, chunks[0]):
            if stop is not None:
                stop.check()
            k = min(chunks[0], rows - r0)
            corner = (r0,) + (0,) * (len(shape) - 1)
            if dset.id.get_chunk_info_by_coord(corner).byte_offset is None:
                out[r0:r0 + k] = dset[r0:r0 + k]  # never written: the fill value
                continue
            mask, raw = dset.id.read_direct_chunk(corner)
            need = k * row_bytes
            data = raw[:need] if mask & 1 else zlib.decompressobj().decompress(raw, need)
            if len(data) < need:
                raise EOFError(f"chunk at row {r0} holds {len(data)} bytes, {need} expected")
            out[r0:r0 + k] = np.frombuffer(data, dtype).reshape((k,) + shape[1:])
        return out
    return load
