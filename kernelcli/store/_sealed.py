"""Sealed HDF5 files: small HDF5 files whose every byte is checked before h5py reads it.

A tile, or the test diagonal, is built as an HDF5 image in memory (h5py's ``core``
driver, nothing touches the disk) and written behind a 512-byte header::

    kernelcli sealed HDF5 1\\n
    length <bytes of the HDF5 image>\\n
    sha256 <hex digest of the HDF5 image>\\n
    (NUL padding to 512 bytes)
    <the HDF5 image>

Why this way:

* Disk full, quota, EIO: the bytes reach the disk through one ``write`` of plain
  Python, whose errors are raised, never through HDF5's own file driver, whose
  errors at close are only printed ("Exception ignored ...") and whose half-closed
  files have crashed the interpreter at exit. The temporary file is read back and
  compared with the image before it is renamed into place: what is published is
  what was computed, or nothing is.
* A flipped bit anywhere (data, HDF5 metadata, attributes) changes the digest, so
  a damaged file is named as damaged before h5py parses a byte of it; h5py never
  sees unverified input from a run directory.
* HDF5 looks for its signature at offsets 0, 512, 1024, ..., so a sealed file is
  still an ordinary HDF5 file to h5py, ``h5dump`` or HDFView.

Every dataset also carries its own ``sha256`` attribute (of its C-order bytes), the
convention ``kernels.h5`` uses too, so a dataset copied out of a file keeps a way to
be checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import os
from pathlib import Path

import h5py
import numpy as np

from .._untrusted import open_untrusted
from ._atomic import atomic_path

MAGIC = b"kernelcli sealed HDF5 1\n"
HEADER = 512
MAX_BYTES = 1 << 32  # a tile of a 16384-edge block of two float64 kinds is 4 GiB
_names = itertools.count()


class SealError(Exception):
    """A sealed file is not what was sealed; the message says how (no path in it)."""


def digest(array: np.ndarray) -> str:
    """sha256 of ``array``'s C-order bytes: the checksum kernelcli stores per dataset."""
    return hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()


def seal(datasets: dict, attrs: dict) -> bytes:
    """The sealed bytes of an HDF5 file holding ``datasets`` (name -> array) and ``attrs``."""
    f = h5py.File(f"kernelcli-sealed-{os.getpid()}-{next(_names)}", "w", driver="core",
                  backing_store=False)
    try:
        for name, array in datasets.items():
            array = np.ascontiguousarray(array)
            f.create_dataset(name, data=array).attrs["sha256"] = digest(array)
        for name, value in attrs.items():
            f.attrs[name] = value
        f.flush()
        image = f.id.get_file_image()
    finally:
        f.close()
    head = MAGIC + b"length %d\nsha256 %s\n" % (len(image), hashlib.sha256(image).hexdigest().encode())
    return head.ljust(HEADER, b"\0") + image


def unseal(data: bytes) -> tuple[dict, dict]:
    """``(datasets, attrs)`` of sealed ``data``; :class:`SealError` if any byte differs."""
    head, image = data[:HEADER], data[HEADER:]
    if not head.startswith(MAGIC):
        raise SealError("it is not a kernelcli file (no sealed-HDF5 header)")
    lines = head[len(MAGIC):].rstrip(b"\0").split(b"\n")
    fields = dict(line.split(b" ", 1) for line in lines if b" " in line)
    length, checksum = fields.get(b"length", b""), fields.get(b"sha256", b"")
    if not length.isdigit() or int(length) != len(image):
        raise SealError(f"it is truncated or padded ({len(image)} bytes after the header, "
                        f"the header says {length.decode(errors='replace')[:20]})")
    if hashlib.sha256(image).hexdigest().encode() != checksum:
        raise SealError("its checksum does not match its content")
    try:
        with h5py.File(io.BytesIO(image), "r") as f:
            attrs = {k: f.attrs[k] for k in f.attrs}
            datasets = {}
            for name in f:
                if not isinstance(f[name], h5py.Dataset):
                    raise SealError(f"{name!r} is not a dataset")
                datasets[name] = f[name][...]
                if f[name].attrs.get("sha256") != digest(datasets[name]):
                    raise SealError(f"dataset {name!r} does not match its sha256 attribute")
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        # the digest matched, so these bytes are what kernelcli wrote: only a forged
        # file gets here
        raise SealError(f"its HDF5 content is unreadable ({exc})") from None
    return datasets, attrs


def write_sealed(path: Path, datasets: dict, attrs: dict) -> Path:
    """Publish a sealed file at ``path``: written, fsynced, read back and compared, renamed.

    Any OS error (disk full, quota, EIO) leaves nothing under ``path`` and comes out as
    the kernelcli error of :func:`storage_error`.
    """
    path = Path(path)
    data = seal(datasets, attrs)
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if tmp.read_bytes() != data:  # what the file system returns is what will be read
            raise OSError(5, "the file read back differs from what was written", str(tmp))
    return path


def read_sealed(path: Path, within=None, max_bytes=None) -> tuple[dict, dict]:
    """``(datasets, attrs)`` of the sealed file at ``path``.

    :class:`SealError` when it is damaged, truncated, not sealed or too large;
    ``OSError`` (``FileNotFoundError`` included) when it cannot be read;
    :class:`~._untrusted.UntrustedFileError` when it is not a regular file inside
    ``within`` (default: its own folder), or larger than ``max_bytes`` (the bound its
    plan implies, :func:`~._run_manifest.bytes_bound`; nothing of it read).
    """
    path = Path(path)
    # a FIFO, device, outside link or a file larger than its plan allows: refused, not read
    fd = open_untrusted(path, within, max_bytes)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_BYTES + HEADER:
            raise SealError(f"it is {size} bytes, more than any kernelcli file of this kind")
        data = f.read(size + 1)  # no more than it holds (and it is within every bound)
    return unseal(data)


@contextlib.contextmanager
def h5_written_whole(path: Path):
    """Yield an h5py file that lives in memory; on a clean exit its image is published at
    ``path`` by plain writes (atomic, fsynced): HDF5's own file driver never meets a full
    disk. For outputs small enough to hold in memory (``predictions.h5``)."""
    from ._atomic import write_bytes_atomic

    f = h5py.File(f"kernelcli-image-{os.getpid()}-{next(_names)}", "w", driver="core",
                  backing_store=False)
    try:
        yield f
        f.flush()
        image = f.id.get_file_image()
    finally:
        f.close()
    write_bytes_atomic(Path(path), image)
