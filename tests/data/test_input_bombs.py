"""Compression bombs: compressed inputs declaring more than the run's memory are refused
before anything is unpacked; a zip entry's stream is read only to its declared size.

The bombs are real files, small on disk: an HDF5 dataset with gzip and a huge shape
of which one chunk is written, and .npz files built by hand (a crafted .npy header
and a deflate stream of zeros made of one compressed block repeated).
"""

from __future__ import annotations

import io
import math
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers_cli import FLATTEN_NET, run_cli, run_measured, write_config
from kernelcli.data import fingerprint, open_array
from kernelcli.errors import DataError, Interrupted
from kernelcli.run import Stop

_MIB = 2**20


def npy_header(shape, descr="<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def deflated_zeros(head: bytes, zero_mib: int) -> bytes:
    """A raw deflate stream of ``head`` then ``zero_mib`` MiB of zeros: one full-flushed
    block of a MiB of zeros compresses to the same bytes each time, so it is repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(_MIB)) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(bytes(_MIB)) + c.flush(zlib.Z_FULL_FLUSH)
    assert block == again
    return first + block * zero_mib + c.flush()


def write_npz(path: Path, name: str, stream: bytes, crc: int, file_size: int) -> Path:
    """A zip of one deflated member ``name`` whose central directory declares
    ``file_size`` uncompressed bytes (zip64 when it does not fit 32 bits)."""
    raw, big = name.encode(), file_size >= 0xFFFFFFFF
    extra = struct.pack("<HHQ", 1, 8, file_size) if big else b""
    usize = 0xFFFFFFFF if big else file_size
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 8, 0, 33, crc, len(stream),
                        usize, len(raw), len(extra)) + raw + extra
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 8, 0, 33, crc,
                          len(stream), usize, len(raw), len(extra), 0, 0, 0, 0, 0) + raw + extra
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central),
                      len(local) + len(stream), 0)
    path.write_bytes(local + stream + central + end)
    return path


def npz_bomb(path: Path, shape, zero_mib: int) -> Path:
    """An honest bomb: the member holds what its header and zip entry declare."""
    head = npy_header(shape)
    data = int(np.prod(shape)) * 8
    crc = zlib.crc32(head)
    for _ in range(zero_mib if data <= 2**30 else 0):  # a TiB is never read: no CRC needed
        crc = zlib.crc32(bytes(_MIB), crc)
    return write_npz(path, "x.npy", deflated_zeros(head, zero_mib), crc, len(head) + data)


def h5_bomb(path: Path, shape=(2**20, 2**20), chunks=(64, 4096)) -> Path:
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=shape, dtype="float32", chunks=chunks,
                             compression="gzip")
        d[:chunks[0], :chunks[1]] = 1.0  # one chunk written; the file stays small
    return path


def test_npz_declaring_a_tebibyte_is_refused_before_unpacking(tmp_path):
    # The header says (2**27, 1024) float64 (1 TiB), the zip entry as much; the stream
    # holds a MiB.
    path = npz_bomb(tmp_path / "x.npz", (2**27, 1024), zero_mib=1)
    assert path.stat().st_size < 64 * 1024
    with pytest.raises(DataError) as e:
        open_array(path, "x", max_bytes=2**30)
    assert str(e.value) == (
        f"data.x1: {path} ['x'] is compressed and declares {2**40} bytes unpacked "
        "(shape (134217728, 1024) of float64), more than the 1073741824 bytes of memory the "
        "run may use; accepted: a compressed array within compute.memory (the host's free "
        "memory when it is auto), or the same array uncompressed (.npy or an HDF5 dataset "
        "without filters), which is read by slices")
    with pytest.raises(DataError, match="declares 1099511627776 bytes unpacked"):
        open_array(path, "x")  # by default the bound is the host's free memory


def test_npz_within_a_header_but_beyond_the_bound_is_refused(tmp_path):
    path = npz_bomb(tmp_path / "x.npz", (64, 2**18), zero_mib=128)  # 128 MiB
    assert path.stat().st_size < _MIB
    with pytest.raises(DataError, match=r"declares 134217728 bytes unpacked \(shape "
                                        r"\(64, 262144\) of float64\), more than the 67108864"):
        open_array(path, "x", max_bytes=64 * _MIB)
    with open_array(path, "x", max_bytes=256 * _MIB) as src:  # within it: read
        assert not src.read(60, 64, dtype="float64").any()


def test_a_zip_entry_longer_than_it_declares_is_read_to_its_declared_size(tmp_path):
    # The header and the zip entry declare (10, 100) float64; the stream holds 1 GiB.
    head = npy_header((10, 100))
    crc = zlib.crc32(bytes(8000), zlib.crc32(head))
    path = write_npz(tmp_path / "x.npz", "x.npy", deflated_zeros(head, 1024), crc,
                     len(head) + 8000)
    with open_array(path, "x", max_bytes=_MIB) as src:
        np.testing.assert_array_equal(src.read(0, 10, dtype="float64"), np.zeros((10, 100)))


def test_unpacking_a_member_honours_stop(tmp_path):
    path = npz_bomb(tmp_path / "x.npz", (8, 2**19), zero_mib=32)
    stop = Stop()
    with open_array(path, "x", stop=stop) as src:
        stop.request()
        with pytest.raises(Interrupted):
            src.read(0, 1)


def test_fingerprinting_honours_stop(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 3)))
    stop = Stop()
    stop.request()
    with open_array(tmp_path / "x.npy") as src, pytest.raises(Interrupted):
        fingerprint(src, stop=stop)


def test_h5_declaring_four_tebibytes_is_refused(tmp_path):
    path = h5_bomb(tmp_path / "x.h5")
    assert path.stat().st_size < _MIB
    with pytest.raises(DataError, match=r"declares 4398046511104 bytes unpacked \(shape "
                                        r"\(1048576, 1048576\) of float32\), more than"):
        open_array(path, "x", max_bytes=2**30)


def test_h5_chunk_beyond_the_bound_is_refused(tmp_path):
    path = h5_bomb(tmp_path / "x.h5", shape=(64, 2**16), chunks=(64, 2**16))  # one 16 MiB chunk
    with pytest.raises(DataError, match=r"declares 16777216 bytes unpacked \(shape"):
        open_array(path, "x", max_bytes=8 * _MIB)


def test_h5_chunk_cache_holds_a_row_of_chunks(tmp_path):
    # Chunks across the columns: every slice of rows reads every chunk of its rows. A
    # cache smaller than a row of chunks decompresses each again for every slice.
    path = h5_bomb(tmp_path / "x.h5", shape=(256, 2**16), chunks=(256, 2**12))  # 16 x 4 MiB
    with open_array(path, "x", max_bytes=2**30) as src:
        _, nbytes, _ = src._raw.id.get_access_plist().get_chunk_cache()
        assert nbytes >= 64 * _MIB
        assert src.read(0, 2)[0, :4].tolist() == [1.0] * 4


@pytest.mark.parametrize("bomb", ["x.h5", "x.npz"])
def test_cli_refuses_a_bomb_with_one_line(tmp_path, bomb):
    path = (h5_bomb if bomb == "x.h5" else
            lambda p: npz_bomb(p, (2**27, 1024), zero_mib=1))(tmp_path / bomb)
    cfg = write_config(tmp_path, x1=path, key="x", layers=FLATTEN_NET,
                       compute={"memory": "1GiB"})
    r = run_cli("compute", str(cfg), cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "is compressed and declares" in lines[0], r.stderr
    assert "more than the 1073741824 bytes" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


_LIMIT_READ = """
import resource, sys
from kernelcli.data import open_array
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))  # 1 GiB: the member is 2 GiB
with open_array(sys.argv[1], "x", limit=64, max_bytes=2**40) as src:
    block = src.read(0, 64)
print(block.shape, block.sum())
"""


@pytest.mark.parametrize("fortran", [False, True])
def test_npz_member_is_unpacked_only_to_the_rows_kept(tmp_path, fortran):
    # A 2 MB file whose member declares and holds 2 GiB of zeros: with a limit, only its
    # first rows are unpacked (C order: its first bytes; Fortran order: each column's
    # first values, streamed piece by piece), under an address-space limit of 1 GiB.
    shape = (2**14, 2**14)
    path = npz_bomb(tmp_path / "x.npz", shape, zero_mib=2048)
    if fortran:  # the same member under a Fortran-order header of the same length
        data = path.read_bytes().replace(b"'fortran_order': False", b"'fortran_order': True ")
        path.write_bytes(data)
    assert path.stat().st_size < 3 * _MIB
    r = subprocess.run([sys.executable, "-c", _LIMIT_READ, str(path)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(64,", "16384)", "0.0"]


def test_npz_rows_kept_beyond_the_bound_are_refused(tmp_path):
    path = npz_bomb(tmp_path / "x.npz", (64, 2**18), zero_mib=128)  # 2 MiB a row
    with pytest.raises(DataError, match=r"declares 8388608 bytes unpacked \(the first 4 rows "
                                        r"of shape \(64, 262144\) of float64\), more than the "
                                        r"4194304 bytes"):
        open_array(path, "x", limit=4, max_bytes=4 * _MIB)
    with open_array(path, "x", limit=2, max_bytes=4 * _MIB) as src:
        assert src.shape == (2, 2**18) and not src.read(0, 2).any()


def test_npz_entry_declaring_more_than_its_header_is_refused(tmp_path):
    head = npy_header((10, 100))
    crc = zlib.crc32(bytes(_MIB), zlib.crc32(head))
    path = write_npz(tmp_path / "x.npz", "x.npy", deflated_zeros(head, 1), crc,
                     len(head) + _MIB)
    with pytest.raises(DataError) as e:
        open_array(path, "x")
    assert str(e.value) == (
        f"data.x1: {path} ['x'] has a zip entry declaring {_MIB} bytes of data, but its "
        "header's shape (10, 100) of float64 needs 8000; accepted: a member whose size and "
        "header agree (as numpy.savez writes them)")


def test_cli_reads_the_rows_of_a_limit_from_a_bomb_quickly(tmp_path):
    # The 2 GiB member of a 2 MB file: the run unpacks 64 rows (8 MiB), not the member.
    path = npz_bomb(tmp_path / "x.npz", (2**14, 2**14), zero_mib=2048)
    cfg = write_config(tmp_path, x1=path, key="x", limit=64,
                       layers=[{"dense": {"W_std": 1.0, "b_std": 0.1}}])
    start = time.monotonic()
    # measured from a small helper: a child forked by this test process starts with its
    # resident set (gigabytes after another bomb test here), and ru_maxrss counts it
    peak, _ = run_measured(["compute", cfg], cwd=tmp_path)
    assert time.monotonic() - start < 60  # only a hang: the member inflates in seconds
    assert peak < 1.5 * 2**30  # the member alone is 2 GiB; the run takes about 0.3
    with h5py.File(tmp_path / "run" / "kernels.h5") as f:
        np.testing.assert_allclose(f["nngp"][...], np.full((64, 64), 0.01), rtol=1e-6)


def h5_one_chunk_bomb(path: Path, shape=(2**15, 2**14)) -> Path:
    """A gzip dataset of one chunk of 2 GiB of zeros (float32), its stream written
    directly: a zlib header, the repeated deflate blocks, the checksum."""
    adler = 1
    for _ in range(math.prod(shape) * 4 // _MIB):
        adler = zlib.adler32(bytes(_MIB), adler)
    stream = b"\x78\xda" + deflated_zeros(b"", math.prod(shape) * 4 // _MIB)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=shape, dtype="float32", chunks=shape,
                             compression="gzip")
        d.id.write_direct_chunk((0, 0), stream + struct.pack(">I", adler))
    return path


def test_h5_deflated_chunk_is_unpacked_only_to_the_rows_kept(tmp_path):
    path = h5_one_chunk_bomb(tmp_path / "x.h5")
    assert path.stat().st_size < 3 * _MIB
    r = subprocess.run([sys.executable, "-c", _LIMIT_READ, str(path)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(64,", "16384)", "0.0"]
    with pytest.raises(DataError, match=r"declares 4194304 bytes unpacked \(the first 64 "
                                        r"rows of shape \(32768, 16384\) of float32\)"):
        open_array(path, "x", limit=64, max_bytes=_MIB)
