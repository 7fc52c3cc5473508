"""Hostile input files: each is refused at open (or at the first read of a damaged
part) with one DataError line naming the file, the key, the value and what is
accepted; none gives a traceback or a kernel computed from values not in the file.

Every file here is real, written in tmp_path: HDF5 virtual datasets with deleted
sources, external storage and links, huge finite values, bad labels, truncated or
lying .npy/.npz headers, a corrupted compressed chunk.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from kernelcli.data import (INPUT_BOUNDS, MAX_LABEL, Preprocess, check_finite, fingerprint,
                            fit_preprocess, load_labels, open_array)
from kernelcli.errors import DataError

from helpers_cli import FLATTEN_NET, error_line, invoke, snapshot

F32_MSG = ("holds a value of magnitude {m}, too large for kernel.dtype {dt}; accepted: "
           "|x| <= {b} (larger inputs overflow the kernel's sums of squares); rescale the data")


def refused(fn, *args, **kw) -> str:
    with pytest.raises(DataError) as info:
        fn(*args, **kw)
    text = str(info.value)
    assert "\n" not in text and info.value.exit_code == 2
    return text


def opened_and_read(path, key=None, dtype="float32", **kw):
    """What a run does at open: open, check every value, fingerprint."""
    with open_array(path, key, **kw) as src:
        largest = check_finite(src, dtype=dtype)
        fingerprint(src)
        return largest, src.read(0, src.n, dtype="float64")


def h5(path, **datasets):
    with h5py.File(path, "w") as f:
        for k, v in datasets.items():
            f[k] = v
    return path


# --------------------------------------------------------------------- huge finite values

def test_bounds_are_documented_per_dtype():
    assert INPUT_BOUNDS == {"float32": 1e15, "float64": 1e150}
    # squares stay 8 orders of magnitude below each dtype's largest value
    assert INPUT_BOUNDS["float32"] ** 2 * 1e8 < np.finfo(np.float32).max
    assert INPUT_BOUNDS["float64"] ** 2 * 1e8 < np.finfo(np.float64).max


def test_huge_float32_values_are_refused_naming_the_row(tmp_path):
    x = np.ones((20, 4, 4, 1), np.float32)
    x[13, 2, 1, 0] = -3e20
    x[17] = 1e30
    np.save(p := tmp_path / "big.npy", x)
    with open_array(p) as src:
        msg = refused(check_finite, src, batch=4, dtype="float32")
    assert msg == f"data.x1: row 13 of {p} " + F32_MSG.format(m="3e+20", dt="float32", b="1e+15")
    # the same values are fine for a float64 kernel, and the largest magnitude comes back
    largest, _ = opened_and_read(p, dtype="float64")
    assert largest == pytest.approx(1e30, rel=1e-6)


def test_bound_itself_is_accepted(tmp_path):
    x = np.full((3, 5), 1e15, np.float64)
    np.save(p := tmp_path / "edge.npy", x)
    assert opened_and_read(p)[0] == 1e15


@pytest.mark.parametrize("dtype, value, shown", [
    ("int64", 2**62, "4.612e+18"),
    ("int64", -2**63, "9.223e+18"),   # no overflow taking |x| of the most negative int64
    ("uint64", 2**64 - 1, "1.845e+19"),
])
def test_huge_integers_are_measured_before_any_cast(tmp_path, dtype, value, shown):
    x = np.ones((6, 3), dtype)
    x[4, 2] = value
    p = h5(tmp_path / "ints.h5", x=x)
    msg = refused(opened_and_read, p, "x", what="data.x2")
    assert msg == f"data.x2: row 4 of {p} ['x'] " + F32_MSG.format(m=shown, dt="float32",
                                                                    b="1e+15")
    # no integer can exceed float64's bound: not read, the dtype's largest value comes back
    assert opened_and_read(p, "x", dtype="float64", what="data.x2")[0] >= abs(value)


def test_float64_kernel_has_its_own_bound(tmp_path):
    x = np.zeros((3, 2))
    x[1, 0] = 1e200
    np.save(p := tmp_path / "b.npy", x)
    msg = refused(opened_and_read, p, dtype="float64")
    assert msg == f"data.x1: row 1 of {p} " + F32_MSG.format(m="1e+200", dt="float64",
                                                             b="1e+150")


def test_the_first_offending_row_wins_whether_huge_or_nan(tmp_path):
    x = np.ones((8, 3), np.float32)
    x[2, 0] = 1e20
    x[5, 1] = np.nan
    np.save(p := tmp_path / "m.npy", x)
    with open_array(p) as src:
        assert refused(check_finite, src, dtype="float32").startswith(f"data.x1: row 2 of {p} "
                                                                      "holds a value")
        assert refused(check_finite, src) == (f"data.x1: row 5 of {p} contains NaN; every "
                                              "value must be finite")


def test_small_integers_are_not_even_read(tmp_path):
    np.save(p := tmp_path / "u8.npy", np.full((4, 2, 2, 1), 255, np.uint8))
    with open_array(p) as src:
        src._read_raw = None  # any read would fail
        assert check_finite(src, dtype="float32") == 255.0


def test_check_streams_bounded_batches(tmp_path, monkeypatch):
    from kernelcli.data import _values

    monkeypatch.setattr(_values, "_BATCH_BYTES", 3 * 12 * 8)  # 3 rows of 12 float64 a batch
    x = np.ones((10, 12), np.float32)
    x[7, 3] = 2e15
    np.save(p := tmp_path / "s.npy", x)
    reads = []
    with open_array(p) as src:
        raw = src._read_raw
        src._read_raw = lambda a, b: reads.append((a, b)) or raw(a, b)
        assert "row 7 of" in refused(check_finite, src, dtype="float32")
    assert reads == [(0, 3), (3, 6), (6, 9)]


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


# --------------------------------------------------------------------- labels

@pytest.mark.parametrize("y, row, shown", [
    (np.array([0, 3, -1, 2]), 2, "-1"),
    (np.array([0, 2**40, 1, 2]), 1, "1099511627776"),
    (np.array([0, MAX_LABEL + 1, 1, 2], np.int64), 1, "2147483648"),
    (np.array([0, 1, 2, 2**64 - 1], np.uint64), 3, "18446744073709551615"),
    (np.array([0.0, 1.0, np.nan, 2.0]), 2, "nan"),
    (np.array([0.0, 0.5, 1.0, 2.0]), 1, "0.5"),
    (np.array([0.0, np.inf, 1.0, 2.0]), 1, "inf"),
])
def test_bad_label_values_name_the_row(tmp_path, y, row, shown):
    np.savez(p := tmp_path / "d.npz", y=y)
    assert refused(load_labels, p, "y", limit=None, n=4, what="data.labels_key") == (
        f"data.labels_key: row {row} of {p} ['y'] holds label {shown}; accepted: integer class "
        "labels in 0..2147483647")


def test_bool_and_string_labels_are_refused(tmp_path):
    p = h5(tmp_path / "l.h5", b=np.array([True, False]), s=np.array([b"a", b"b"]))
    assert refused(load_labels, p, "b", limit=None, n=2, what="data.test_labels") == (
        f"data.test_labels: {p} ['b'] holds booleans (dtype bool), not class indices; "
        "accepted: integer class labels in 0..2147483647")
    assert refused(load_labels, p, "s", limit=None, n=2, what="data.test_labels") == (
        f"data.test_labels: {p} ['s'] has dtype |S1, which is not numeric; accepted: integer "
        "class labels in 0..2147483647 (integer or whole-number float dtype)")


def test_good_labels_integral_floats_and_limit(tmp_path):
    np.savez(p := tmp_path / "d.npz", y=np.array([2.0, 0.0, 1.0, float(MAX_LABEL)]),
             z=np.array([5, 1, 0, 3], np.uint8))
    y = load_labels(p, "y", limit=None, n=4, what="data.labels")
    assert y.dtype == np.int64 and y.tolist() == [2, 0, 1, MAX_LABEL]
    # only the rows used are checked and read
    assert load_labels(p, "y", limit=3, n=3, what="data.labels").tolist() == [2, 0, 1]
    assert load_labels(p, "z", limit=2, n=2, what="data.labels").tolist() == [5, 1]


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


# --------------------------------------------------------------------- preprocessing

def test_standardize_overflowing_float64_is_refused():
    x = np.random.default_rng(0).standard_normal((30, 4, 4, 2)) * 1e200
    assert refused(fit_preprocess, x, "standardize") == (
        "data.preprocess: fitting standardize on the training rows (data.x1) gives a non-finite "
        "std: their values are too large for float64 sums of squares; rescale the data")


def test_near_constant_channel_is_treated_as_constant():
    x = np.random.default_rng(0).standard_normal((30, 4, 4, 2))
    x[..., 0] = 0.1  # its float64 mean is 0.1 up to rounding: a "std" of ~1e-17
    p = fit_preprocess(x, "standardize")
    assert p.std[0] == 1.0
    test = x[:2].copy()
    test[0, 0, 0, 0] = 0.2
    assert np.abs(p.apply(test, np.float32)).max() < 10
    assert p.output_bound(1.0) < 1e3


def test_preprocessed_outputs_too_large_are_refused_with_the_row():
    train = np.random.default_rng(0).standard_normal((50, 2, 2, 2)) * 1e-140
    p = fit_preprocess(train, "zca", zca_reg=0.1, per_image=False)
    assert p.output_bound(1.0) > 1e15
    test = np.zeros((3, 2, 2, 2))
    test[2] = 1.0
    msg = refused(p.apply, test, np.float32, where="data.test: t.npy", row0=10)
    assert msg.startswith("data.test: t.npy: row 12 after zca preprocessing holds a value of "
                          "magnitude ")
    assert msg.endswith("; accepted for kernel.dtype float32: finite, |x| <= 1e+15 (a "
                        "near-constant training channel or direction scales it up)")
    assert np.isfinite(p.apply(test, np.float64)).all()  # float64's bound is far larger


def test_per_image_zca_output_bound_needs_no_data():
    train = np.random.default_rng(0).standard_normal((50, 2, 2, 2)) * 1e100
    p = fit_preprocess(train, "zca", zca_reg=0.1)
    assert p.output_bound(1e100) == p.output_bound(1.0) < 1e3


def test_damaged_stored_preprocessing_is_refused(tmp_path):
    x = np.random.default_rng(0).standard_normal((30, 3))
    good = fit_preprocess(x, "zca", zca_reg=0.1)
    bad = Preprocess("zca", good.feature_shape, whitening=np.full((3, 3), np.nan), zca_reg=0.1)
    (p := tmp_path / "pp.npz").write_bytes(bad.to_bytes())
    assert refused(Preprocess.load, p) == (  # the library's argument; the CLI says --overwrite
        f"{p}: cannot read the run's fitted preprocessing (whitening is not finite); start the "
        "run afresh with overwrite=")
    q = tmp_path / "pp2.npz"
    q.write_bytes(Preprocess("standardize", (3,), mean=np.zeros(2), std=np.ones(3)).to_bytes())
    assert "mean is not a float array of shape (3,)" in refused(Preprocess.load, q)


# --------------------------------------------------------------------- end to end

def write_run_config(folder: Path, data: dict, dtype="float32") -> Path:
    doc = {"name": "hostile", "data": data,
           "architecture": {"layers": FLATTEN_NET},
           "kernel": {"kinds": ["nngp", "ntk"], "dtype": dtype},
           "output": {"run_dir": str(folder / "runs" / "hostile")}}
    (cfg := folder / "hostile.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def assert_refused_by_cli(folder: Path, cfg: Path, message: str) -> None:
    before = snapshot(folder)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2, result.stderr
    line = error_line(result)
    assert line.startswith(f"Error: {message}"), line
    assert "Traceback" not in result.output
    assert not (folder / "runs").exists(), "a refused run must not create its run directory"
    assert snapshot(folder) == before


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_huge_float32_values(tmp_path):
    x = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype(np.float32)
    x[4, 1, 1, 1] = 1e20
    np.save(p := tmp_path / "x.npy", x)
    cfg = write_run_config(tmp_path, {"x1": str(p)})
    assert_refused_by_cli(tmp_path, cfg, f"data.x1: row 4 of {p} holds a value of magnitude "
                                         "1e+20, too large for kernel.dtype float32")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_a_virtual_dataset_with_a_deleted_source(tmp_path):
    with h5py.File(tmp_path / "part.h5", "w") as f:
        f["x"] = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype("f4")
    layout = h5py.VirtualLayout((6, 6, 6, 2), "f4")
    layout[:] = h5py.VirtualSource("part.h5", "x", shape=(6, 6, 6, 2))
    with h5py.File(p := tmp_path / "all.h5", "w") as f:
        f.create_virtual_dataset("x", layout, fillvalue=0)
    os.remove(tmp_path / "part.h5")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x"})
    assert_refused_by_cli(tmp_path, cfg, f"data.key: the virtual dataset 'x' in {p} reads its "
                                         "source 'x' in 'part.h5', which does not exist")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_bad_labels_and_dangling_links(tmp_path):
    x = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype("f4")
    with h5py.File(p := tmp_path / "d.h5", "w") as f:
        f["x"] = x
        f["y"] = np.array([0, 1, 2, 0.5, 1, 0])
        f["gone"] = h5py.SoftLink("/missing")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x", "labels_key": "y"})
    assert_refused_by_cli(tmp_path, cfg, f"data.labels_key: row 3 of {p} ['y'] holds label 0.5; "
                                         "accepted: integer class labels in 0..2147483647")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "gone"})
    assert_refused_by_cli(tmp_path, cfg, f"data.key: 'gone' in {p} is a soft link to "
                                         "'/missing', which does not resolve")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_preprocessing_that_blows_a_test_set_up(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(p := tmp_path / "d.npz", x_train=rng.standard_normal((12, 6, 6, 2)) * 1e-140,
             x_test=rng.standard_normal((5, 6, 6, 2)))
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x_train", "test": str(p),
                                      "test_key": "x_test",
                                      "preprocess": {"kind": "zca", "zca_reg": 0.1,
                                                     "per_image": False}})
    assert_refused_by_cli(tmp_path, cfg, f"data.test: {p} ['x_test']: row 0 after zca "
                                         "preprocessing holds a value of magnitude ")


def test_long_double_inputs_are_read_and_fingerprinted(tmp_path):
    """float128 (x86's long double) has no buffer in an explicit byte order: the
    fingerprint hashes its bytes, and the values are the float64 ones."""
    from kernelcli.data import open_array

    x = np.arange(18, dtype=np.longdouble).reshape(2, 3, 3, 1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x.astype(np.float64))
    long, plain = open_array(tmp_path / "x.npy"), open_array(tmp_path / "y.npy")
    assert fingerprint(long) != fingerprint(plain)  # another dtype, another array
    np.testing.assert_array_equal(long.read(0, 2, dtype="float64"), x.astype(np.float64))
