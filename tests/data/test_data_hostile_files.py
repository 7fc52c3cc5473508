"""Hostile input files: each is refused at open (or at the first read of a damaged
part) with one DataError line naming the file, the key, the value and what is
accepted; none gives a traceback or a kernel computed from values not in the file.

Every file here is real, written in tmp_path: HDF5 virtual datasets with deleted
sources, external storage and links, odd keys, an unavailable filter, a corrupted
compressed chunk, truncated or lying .npy/.npz headers, labels looked up in such
files. Hostile values are in test_data_hostile.py.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_data_hostile import h5, opened_and_read, refused

from kernelcli.data import check_finite, load_labels, open_array

# --------------------------------------------------------------------- HDF5 virtual datasets

def make_vds(folder: Path, rows=4, source_rows=4, name="v.h5", source="src.h5", mapped=None):
    with h5py.File(folder / source, "w") as f:
        f["x"] = np.arange(source_rows * 3, dtype="f4").reshape(source_rows, 3)
    layout = h5py.VirtualLayout((rows, 3), "f4")
    n = rows if mapped is None else mapped
    layout[:n] = h5py.VirtualSource(source, "x", shape=(source_rows, 3))[:n]
    with h5py.File(folder / name, "w") as f:
        f.create_virtual_dataset("x", layout, fillvalue=-7)
    return folder / name


def test_complete_virtual_dataset_is_read(tmp_path, monkeypatch):
    p = make_vds(tmp_path)
    monkeypatch.chdir("/")  # sources are found beside the file, not in the working directory
    _, x = opened_and_read(p, "x")
    np.testing.assert_array_equal(x, np.arange(12).reshape(4, 3))


def test_virtual_dataset_with_a_deleted_source_is_refused(tmp_path, monkeypatch):
    p = make_vds(tmp_path)
    os.remove(tmp_path / "src.h5")
    monkeypatch.chdir(tmp_path / "..")
    monkeypatch.delenv("HDF5_VDS_PREFIX", raising=False)
    assert refused(open_array, p, "x") == (
        f"data.key: the virtual dataset 'x' in {p} reads its source 'x' in 'src.h5', which "
        f"does not exist (looked for {tmp_path / 'src.h5'}, {Path.cwd() / 'src.h5'}); "
        "accepted: virtual datasets whose every source file exists")


def test_virtual_dataset_whose_source_is_not_hdf5_or_lacks_the_dataset(tmp_path):
    p = make_vds(tmp_path)
    (tmp_path / "src.h5").write_text("plain text")
    assert refused(open_array, p, "x").startswith(
        f"data.key: the virtual dataset 'x' in {p} reads its source 'x' in 'src.h5', but "
        f"{tmp_path / 'src.h5'} is not a readable HDF5 file (")
    h5(tmp_path / "src.h5", other=np.ones((4, 3), "f4"))
    assert refused(open_array, p, "x") == (
        f"data.key: the virtual dataset 'x' in {p} reads its source 'x' in 'src.h5', but "
        f"{tmp_path / 'src.h5'} holds no dataset 'x'; accepted: virtual datasets whose every "
        "source dataset exists")


def test_virtual_dataset_reading_past_its_source_or_partly_unmapped(tmp_path):
    p = make_vds(tmp_path)
    h5(tmp_path / "src.h5", x=np.ones((2, 3), "f4"))  # the source shrank
    assert refused(open_array, p, "x") == (
        f"data.key: the virtual dataset 'x' in {p} maps values from outside its source 'x' in "
        "'src.h5' of shape (2, 3) (they would read as the fill value); accepted: mappings "
        "inside their source datasets")
    q = make_vds(tmp_path, name="half.h5", mapped=2)
    assert refused(open_array, q, "x") == (
        f"data.key: the virtual dataset 'x' in {q} maps only 6 of its 12 values to source "
        "datasets (the rest would read as the fill value); accepted: virtual datasets whose "
        "sources cover every value")


def test_virtual_dataset_in_the_same_file(tmp_path):
    layout = h5py.VirtualLayout((2, 3), "f4")
    layout[:] = h5py.VirtualSource(".", "base", shape=(2, 3))
    with h5py.File(p := tmp_path / "same.h5", "w") as f:
        f["base"] = np.full((2, 3), 5, "f4")
        f.create_virtual_dataset("x", layout, fillvalue=-7)
        layout2 = h5py.VirtualLayout((2, 3), "f4")
        layout2[:] = h5py.VirtualSource(".", "gone", shape=(2, 3))
        f.create_virtual_dataset("y", layout2, fillvalue=-7)
    assert (opened_and_read(p, "x")[1] == 5).all()
    assert refused(open_array, p, "y") == (
        f"data.key: the virtual dataset 'y' in {p} reads its source 'gone' in '.', but {p} "
        "holds no dataset 'gone'; accepted: virtual datasets whose every source dataset exists")


def test_labels_from_a_broken_virtual_dataset_are_refused(tmp_path):
    p = make_vds(tmp_path)
    os.remove(tmp_path / "src.h5")
    assert refused(load_labels, p, "x", limit=None, n=4, what="data.labels").startswith(
        f"data.labels_key: the virtual dataset 'x' in {p} reads its source 'x' in 'src.h5', "
        "which does not exist")


# --------------------------------------------------------------------- HDF5 external storage

def make_external(folder: Path, nbytes=48):
    (folder / "raw.bin").write_bytes(np.arange(12, dtype="f4").tobytes()[:nbytes])
    with h5py.File(folder / "e.h5", "w") as f:
        f.create_dataset("x", (4, 3), "f4", external=[("raw.bin", 0, 48)])
    return folder / "e.h5"


def test_external_storage_is_read_when_complete(tmp_path, monkeypatch):
    monkeypatch.delenv("HDF5_EXTFILE_PREFIX", raising=False)
    p = make_external(tmp_path)
    monkeypatch.chdir(tmp_path)  # HDF5 resolves external raw files in the working directory
    np.testing.assert_array_equal(opened_and_read(p, "x")[1], np.arange(12).reshape(4, 3))


def test_external_storage_missing_or_short_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("HDF5_EXTFILE_PREFIX", raising=False)
    p = make_external(tmp_path, nbytes=20)
    monkeypatch.chdir(tmp_path)
    assert refused(open_array, p, "x") == (
        f"data.key: 'x' in {p} needs bytes 0..48 of its external file {tmp_path / 'raw.bin'}, "
        "which holds only 20 bytes (the rest would read as zeros); accepted: complete external "
        "files")
    os.remove(tmp_path / "raw.bin")
    assert refused(open_array, p, "x") == (
        f"data.key: 'x' in {p} keeps its values in the external file 'raw.bin', which does not "
        f"exist (looked for {tmp_path / 'raw.bin'}); accepted: external storage whose every "
        "file exists")


# --------------------------------------------------------------------- links and odd keys

@pytest.fixture
def linked(tmp_path):
    (tmp_path / "notes.txt").write_text("not an HDF5 file")
    h5(tmp_path / "other.h5", images=np.ones((3, 2), "f4"))
    with h5py.File(p := tmp_path / "links.h5", "w") as f:
        f["x"] = np.ones((3, 2), "f4")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["to_text"] = h5py.ExternalLink("notes.txt", "/x")
        f["to_missing"] = h5py.ExternalLink("missing.h5", "/x")
        f["alias"] = h5py.SoftLink("/x")
        f["elsewhere"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/images")
        f.create_group("grp")
        f["text"] = np.array([b"ab", b"cd"])
        f["record"] = np.zeros((3, 2), dtype=[("a", "f4"), ("b", "i4")])
        f["strings"] = np.array(["a", "bb"], dtype=h5py.string_dtype())
        f["scalar"] = 3.0
        f.create_dataset("empty", data=h5py.Empty("f4"))
    return p


LISTED = "empty, record, scalar, strings, text, x"


def test_dangling_soft_link_is_named(linked):
    assert refused(open_array, linked, "dangling") == (
        f"data.key: 'dangling' in {linked} is a soft link to '/nowhere', which does not "
        "resolve; accepted: the name of a dataset in the file")


@pytest.mark.parametrize("key, target, reason", [
    ("to_text", "notes.txt", "file signature not found"),
    ("to_missing", "missing.h5", "can't open file"),
])
def test_external_link_to_a_foreign_or_missing_file_is_named(linked, key, target, reason):
    msg = refused(open_array, linked, key)
    assert msg.startswith(f"data.key: {key!r} in {linked} is an external link to '/x' in "
                          f"{target!r}, which cannot be opened (")
    assert reason in msg and msg.endswith("); accepted: a link to a dataset of a readable "
                                          "HDF5 file")


def test_good_links_are_followed(linked):
    assert opened_and_read(linked, "alias")[1].shape == (3, 2)
    assert opened_and_read(linked, "elsewhere")[1].shape == (3, 2)


@pytest.mark.parametrize("key", ["grp", "/"])
def test_a_group_is_not_a_dataset(linked, key):
    assert refused(open_array, linked, key) == (
        f"data.key: {key!r} in {linked} is a group, not a dataset; datasets present: {LISTED}")


@pytest.mark.parametrize("key, expected", [
    ("text", "has dtype |S2, which is not numeric; accepted: a numeric array (bool, integer or "
             "float)"),
    ("record", "has dtype [('a', '<f4'), ('b', '<i4')], which is not numeric; accepted: a "
               "numeric array (bool, integer or float)"),
    ("strings", "holds Python objects (dtype object), which are not read for safety; accepted: "
                "a numeric array (bool, integer or float)"),
    ("scalar", "holds an array of shape () (rank 0); accepted: rank 2 rows (N, D), rank 3 "
               "sequences (N, L, C), rank 4 images (N, H, W, C) or rank 5 volumes "
               "(N, D, H, W, C)"),
    ("empty", "holds an array of shape () (rank 0); accepted: rank 2 rows (N, D), rank 3 "
              "sequences (N, L, C), rank 4 images (N, H, W, C) or rank 5 volumes "
              "(N, D, H, W, C)"),
])
def test_non_numeric_and_0d_datasets_are_refused(linked, key, expected):
    assert refused(open_array, linked, key) == f"data.x1: {linked} [{key!r}] {expected}"


@pytest.mark.parametrize("key", ["nope", "dangling/x", ""])
def test_keys_that_do_not_exist(linked, key):
    assert refused(open_array, linked, key) == (
        f"data.key: {key!r} not found in {linked}; keys present: {LISTED}")


def test_unavailable_compression_filter_is_refused_at_open(tmp_path):
    with h5py.File(p := tmp_path / "f.h5", "w") as f:
        f.create_dataset("x", (4, 3), "f4", chunks=(2, 3), compression=32001,
                         allow_unknown_filter=True)
    assert refused(open_array, p, "x") == (
        f"data.key: 'x' in {p} is stored with HDF5 filter id 32001, which is not available "
        "here; accepted: a dataset stored plainly or with gzip, lzf, szip or shuffle (or "
        "install the filter's plugin)")


def test_corrupted_chunk_is_a_data_error_naming_the_rows(tmp_path):
    x = np.random.default_rng(0).standard_normal((40, 8)).astype("f4")
    with h5py.File(p := tmp_path / "c.h5", "w") as f:
        info = f.create_dataset("x", data=x, chunks=(10, 8), compression="gzip").id \
            .get_chunk_info(1)
    data = bytearray(p.read_bytes())
    data[info.byte_offset:info.byte_offset + info.size] = b"\x55" * info.size
    p.write_bytes(bytes(data))
    with open_array(p, "x") as src:
        np.testing.assert_array_equal(src.read(0, 10), x[:10])  # intact chunks still read
        msg = refused(check_finite, src, batch=4)
    assert msg.startswith(f"data.x1: rows 8..11 of {p} ['x'] cannot be read (")
    assert msg.endswith("); the file is damaged or truncated")


# --------------------------------------------------------------------- .npy and .npz

def npy_bytes(shape, descr="<f4", data=b""):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue() + data


def test_truncated_npy_is_refused(tmp_path):
    np.save(p := tmp_path / "t.npy", np.ones((100, 8), "f4"))
    p.write_bytes(p.read_bytes()[:128 + 1000])
    assert refused(open_array, p) == (
        f"data.x1: {p} is truncated or its header is wrong: shape (100, 8) of float32 needs "
        "3200 bytes of data, the file holds 1000; accepted: a complete .npy array")


def test_npy_header_claiming_a_huge_or_negative_shape(tmp_path):
    (p := tmp_path / "h.npy").write_bytes(npy_bytes((2**62, 2**62), data=b"\0" * 64))
    assert refused(open_array, p) == (
        f"data.x1: {p} is truncated or its header is wrong: shape (4611686018427387904, "
        "4611686018427387904) of float32 needs 85070591730234615865843651857942052864 bytes "
        "of data, the file holds 64; accepted: a complete .npy array")
    (q := tmp_path / "n.npy").write_bytes(npy_bytes((-1, 4), data=b"\0" * 64))
    assert refused(open_array, q) == (
        f"data.x1: {q} has a header claiming shape (-1, 4), with a negative size; accepted: a "
        "complete .npy array")


def test_npz_object_array_is_a_clean_error(tmp_path):
    np.savez(p := tmp_path / "o.npz", x=np.array([[1, None]], dtype=object))
    assert refused(open_array, p, "x") == (
        f"data.x1: {p} ['x'] holds Python objects (dtype object), which are not read for "
        "safety; accepted: a numeric array (bool, integer or float)")
    assert refused(load_labels, p, "x", limit=None, n=1, what="data.labels").startswith(
        f"data.labels: {p} ['x'] holds Python objects")


def test_npz_member_whose_header_claims_more_than_it_holds(tmp_path):
    with zipfile.ZipFile(p := tmp_path / "lie.npz", "w") as z:
        z.writestr("x.npy", npy_bytes((2**40, 4), data=b"\0" * 64))
    assert refused(open_array, p, "x") == (
        f"data.x1: {p} ['x'] is truncated or its header is wrong: shape (1099511627776, 4) of "
        "float32 needs 17592186044416 bytes of data, the file holds 64; accepted: a complete "
        ".npz member array")


def test_npz_member_with_a_bad_checksum_fails_as_data_error(tmp_path):
    with zipfile.ZipFile(p := tmp_path / "crc.npz", "w") as z:  # stored, not compressed
        z.writestr("x.npy", npy_bytes((5000, 4), data=b"\0" * 80000))
    data = bytearray(p.read_bytes())
    data[data.find(b"\0" * 80000) + 79000] = 1  # past what reading the header buffers
    p.write_bytes(bytes(data))
    with open_array(p, "x") as src:  # the header is intact
        msg = refused(check_finite, src)
    assert msg.startswith(f"data.x1: rows 0..1023 of {p} ['x'] cannot be read (Bad CRC-32")
    assert msg.endswith("); the file is damaged or truncated")


def test_label_lookups_in_hostile_files(tmp_path, linked):
    assert refused(load_labels, linked, "dangling", limit=None, n=3,
                   what="data.labels_key") == (
        f"data.labels_key: 'dangling' in {linked} is a soft link to '/nowhere', which does not "
        "resolve; accepted: the name of a dataset in the file")
    assert refused(load_labels, linked, "scalar", limit=None, n=3, what="data.labels_key") == (
        f"data.labels_key: 'scalar' in {linked} has shape () and dtype float64; expected a 1-D "
        "array of integer class labels")
    (q := tmp_path / "y.npy").write_bytes(npy_bytes((10**12,), descr="<i8", data=b"\0" * 80))
    assert refused(load_labels, q, None, limit=None, n=10, what="data.labels") == (
        f"data.labels: {q} is truncated or its header is wrong: shape (1000000000000,) of int64 "
        "needs 8000000000000 bytes of data, the file holds 80; accepted: a complete .npy array")
