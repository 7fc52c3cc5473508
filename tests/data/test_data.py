"""kernelcli.data against real files written in every accepted format."""

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from kernelcli.data import check_finite, check_pair, fingerprint, open_array
from kernelcli.errors import DataError, UsageError

DIGITS = Path(__file__).resolve().parents[2] / "configs" / "data" / "digits.npz"


def images(n=6, h=4, w=3, c=2, dtype=np.float32):
    return (np.arange(n * h * w * c) % 251).reshape(n, h, w, c).astype(dtype) / 7


def save(path, arr, key="x"):
    """Write ``arr`` to ``path`` in the format its suffix names; return (path, key or None)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, arr)
        return path, None
    if path.suffix == ".npz":
        np.savez_compressed(path, **{key: arr, "y": np.arange(len(arr))})
    else:
        with h5py.File(path, "w") as f:
            f[key] = arr
            f["labels/y"] = np.arange(len(arr))
    return path, key


FORMATS = ["a.npy", "a.npz", "a.h5", "a.hdf5"]


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_reads_the_same_rows(tmp_path, name):
    x = images()
    with open_array(*save(tmp_path / name, x)) as src:
        assert src.shape == (6, 4, 3, 2) and src.n == 6 and src.example_shape == (4, 3, 2)
        assert src.dtype == np.float32
        np.testing.assert_array_equal(src.read(0, 6), x)
        np.testing.assert_array_equal(src.read(2, 5), x[2:5])
        assert src.read(3, 3).shape == (0, 4, 3, 2)


@pytest.mark.parametrize("name", FORMATS)
def test_nchw_source_is_transposed_to_nhwc_on_read(tmp_path, name):
    x = images()
    with open_array(*save(tmp_path / name, x.transpose(0, 3, 1, 2)), layout="NCHW") as src:
        assert src.shape == x.shape
        np.testing.assert_array_equal(src.read(1, 4), x[1:4])
        np.testing.assert_array_equal(src.take([5, 0]), x[[5, 0]])


def test_read_returns_contiguous_arrays_of_the_asked_float_dtype(tmp_path):
    x = images()
    with open_array(*save(tmp_path / "a.npy", x.transpose(0, 3, 1, 2)), layout="NCHW") as src:
        out = src.read(0, 4)
        assert out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable
        assert src.read(0, 4, dtype="float64").dtype == np.float64
        with pytest.raises(ValueError, match="float dtype"):
            src.read(0, 4, dtype="int32")
        with pytest.raises(ValueError, match="outside"):
            src.read(0, 7)


def test_uint8_images_are_cast_without_rescaling(tmp_path):
    x = np.array([0, 1, 128, 255], dtype=np.uint8).reshape(1, 2, 2, 1)
    with open_array(*save(tmp_path / "u.npz", x)) as src:
        assert src.dtype == np.uint8
        np.testing.assert_array_equal(src.read(0, 1), [[[[0.0], [1.0]], [[128.0], [255.0]]]])


@pytest.mark.parametrize("name", FORMATS)
def test_rank2_rows_keep_shape_n_by_d(tmp_path, name):
    x = np.arange(20, dtype=np.float64).reshape(5, 4)
    with open_array(*save(tmp_path / name, x)) as src:
        assert src.shape == (5, 4) and src.example_shape == (4,)
        np.testing.assert_array_equal(src.read(1, 3, dtype="float64"), x[1:3])


@pytest.mark.parametrize("name", FORMATS)
def test_limit_uses_only_the_first_rows(tmp_path, name):
    x = images()
    with open_array(*save(tmp_path / name, x), limit=4) as src:
        assert src.shape == (4, 4, 3, 2)
        np.testing.assert_array_equal(src.read(0, 4), x[:4])
        with pytest.raises(ValueError):
            src.read(0, 5)


@pytest.mark.parametrize("name", ["a.npy", "a.h5"])
def test_take_returns_rows_in_the_asked_order_with_repeats(tmp_path, name):
    x = images(n=10)
    with open_array(*save(tmp_path / name, x)) as src:
        idx = [7, 2, 3, 9, 2, 0, 8]
        np.testing.assert_array_equal(src.take(idx), x[idx])
        assert src.take([]).shape == (0, 4, 3, 2)
        with pytest.raises(ValueError, match="row indices"):
            src.take([10])


def test_npy_source_is_memory_mapped(tmp_path):
    x = images(n=50)
    with open_array(*save(tmp_path / "a.npy", x)) as src:
        assert src.memory_mapped
        assert isinstance(src._raw, np.memmap)
        parts = [src.read(i, min(i + 7, 50)) for i in range(0, 50, 7)]
        np.testing.assert_array_equal(np.concatenate(parts), x)
        parts[0][:] = -1  # a read is a copy: the mapped file is untouched
        np.testing.assert_array_equal(src.read(0, 7), x[:7])


def test_npz_member_is_loaded_only_when_first_read(tmp_path):
    with open_array(*save(tmp_path / "a.npz", images())) as src:
        assert src._raw is None and src.shape == (6, 4, 3, 2) and not src.memory_mapped
        src.read(0, 2)
        loaded = src._raw
        src.read(2, 4)
        assert loaded is not None and src._raw is loaded


def test_closed_source_refuses_to_read(tmp_path):
    src = open_array(*save(tmp_path / "a.h5", images()))
    src.close()
    with pytest.raises(ValueError, match="closed"):
        src.read(0, 1)
    src.close()  # closing twice is harmless


# --- errors: each names the key, the file, the value and what is accepted ---

def error(path, key=None, **kw):
    with pytest.raises(DataError) as info:
        open_array(path, key, **kw)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2
    return str(info.value)


def test_unknown_suffix_lists_the_accepted_ones(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("1,2\n")
    assert error(p) == f"data.x1: {p} has suffix '.csv'; accepted: .npy, .npz, .h5, .hdf5"


def test_missing_file_and_directory_are_named(tmp_path):
    p = tmp_path / "nope.npy"
    assert error(p) == f"data.x1: {p} does not exist; give the path to a .npy, .npz, .h5, .hdf5 file"
    d = tmp_path / "dir.h5"
    d.mkdir()
    assert error(d, "x") == f"data.x1: {d} is not a file; give the path to a .npy, .npz, .h5, .hdf5 file"


@pytest.mark.parametrize("name", ["train.npz", "train.h5"])
def test_key_not_found_lists_the_keys_present(tmp_path, name):
    p, _ = save(tmp_path / name, images())
    present = "x, y" if name.endswith(".npz") else "labels/y, x"
    assert error(p, "images") == f"data.key: 'images' not found in {p}; keys present: {present}"
    assert error(p, "images", what="data.x2").startswith("data.x2_key: 'images' not found")


@pytest.mark.parametrize("name, kind", [("train.npz", ".npz"), ("train.h5", ".h5")])
def test_missing_key_for_a_multi_array_file_lists_the_choices(tmp_path, name, kind):
    p, _ = save(tmp_path / name, images())
    present = "x, y" if kind == ".npz" else "labels/y, x"
    assert error(p) == (f"data.key: not set, but {p} is a {kind} file that can hold several "
                        f"arrays; set data.key to one of: {present}")


def test_key_for_npy_is_refused(tmp_path):
    p, _ = save(tmp_path / "x.npy", images())
    assert error(p, "x", what="data.x2") == (
        f"data.x2_key: 'x' is only used for .npz and .h5 files; {p} is a .npy file "
        "holding one array: remove data.x2_key")


def test_h5_group_is_not_a_dataset(tmp_path):
    p, _ = save(tmp_path / "x.h5", images())
    assert error(p, "labels") == (f"data.key: 'labels' in {p} is a group, not a dataset; "
                                  "datasets present: labels/y, x")


def test_object_arrays_are_refused(tmp_path):
    p = tmp_path / "o.npy"
    np.save(p, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    assert error(p) == (f"data.x1: {p} holds Python objects (dtype object), which are not read "
                        "for safety; accepted: a numeric array (bool, integer or float)")
    q = tmp_path / "o.npz"
    np.savez(q, x=np.array([[1, "a"]], dtype=object))
    assert error(q, "x").startswith(f"data.x1: {q} ['x'] holds Python objects (dtype object)")


@pytest.mark.parametrize("arr, shown", [(np.array([["ab", "c"]]), "<U2"),
                                        (np.ones((2, 3), np.complex64), "complex64")])
def test_non_numeric_dtypes_are_refused(tmp_path, arr, shown):
    p = tmp_path / "s.npy"
    np.save(p, arr)
    assert error(p) == (f"data.x1: {p} has dtype {shown}, which is not numeric; "
                        "accepted: a numeric array (bool, integer or float)")


@pytest.mark.parametrize("shape", [(4,), (1, 2, 3, 4, 5, 6)])
def test_rank_other_than_2_to_5_is_refused(tmp_path, shape):
    p, k = save(tmp_path / "r.h5", np.zeros(shape, np.float32))
    assert error(p, k) == (f"data.x1: {p} ['x'] holds an array of shape {shape} (rank {len(shape)}); "
                           "accepted: rank 2 rows (N, D), rank 3 sequences (N, L, C), rank 4 "
                           "images (N, H, W, C) or rank 5 volumes (N, D, H, W, C)")


def test_empty_arrays_and_nchw_rows_are_refused(tmp_path):
    p, _ = save(tmp_path / "e.npy", np.zeros((0, 4, 4, 1), np.float32))
    assert error(p) == (f"data.x1: {p} holds an empty array of shape (0, 4, 4, 1); "
                        "accepted: at least one example with every dimension at least 1")
    q, _ = save(tmp_path / "r.npy", np.zeros((3, 5), np.float32))
    assert error(q, layout="NCHW") == (f"data.layout: 'NCHW' needs rank 4 images, but data.x1 {q} "
                                       "has shape (3, 5); use NHWC (the default) for rank 2 rows")
    assert error(q, layout="CHW") == ("data.layout: 'CHW' is not a layout; accepted: NHWC, "
                                      "NCHW, NLC, NCL, NDHWC, NCDHW")


def test_limit_beyond_the_rows_or_not_positive_is_refused(tmp_path):
    p, _ = save(tmp_path / "x.npy", images(n=120))
    assert error(p, limit=500) == (f"data.limit (=500) exceeds the 120 rows of data.x1 {p}; "
                                   "use at most 120, or null for all rows")
    assert error(p, limit=0) == ("data.limit: 0 is not a positive integer; accepted: a row count "
                                 "of at least 1, or null for all rows")


@pytest.mark.parametrize("name, kind", [("bad.npy", ".npy"), ("bad.npz", ".npz"), ("bad.h5", "HDF5")])
def test_unreadable_files_are_named(tmp_path, name, kind):
    p = tmp_path / name
    p.write_bytes(b"this is not an array file")
    assert error(p, None if kind == ".npy" else "x").startswith(
        f"data.x1: {p} is not a readable {kind} file (")


# --- checks ---

@pytest.mark.parametrize("value, word", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_check_finite_names_the_first_bad_row(tmp_path, value, word):
    x = images(n=20)
    x[13, 1, 1, 0] = value
    x[17, 0, 0, 1] = np.nan
    p, _ = save(tmp_path / "x.npy", x)
    with open_array(p) as src:
        with pytest.raises(DataError) as info:
            check_finite(src, "data.x1", batch=4)
    assert str(info.value) == f"data.x1: row 13 of {p} contains {word}; every value must be finite"


def test_check_finite_passes_finite_and_integer_data_and_respects_limit(tmp_path):
    x = images(n=10)
    x[8] = np.nan
    with open_array(*save(tmp_path / "x.h5", x), limit=8) as src:
        check_finite(src, batch=3)
    with open_array(*save(tmp_path / "u.npy", np.full((3, 2, 2, 1), 255, np.uint8))) as src:
        check_finite(src, "data.x2")


def test_check_finite_flags_values_that_overflow_the_kernel_dtype(tmp_path):
    x = np.ones((4, 3), np.float64)
    x[2, 1] = 1e300
    p, _ = save(tmp_path / "big.npy", x)
    with open_array(p) as src:
        check_finite(src)  # finite as stored
        with pytest.raises(DataError) as info:
            check_finite(src, dtype="float32")
    assert str(info.value) == (f"data.x1: row 2 of {p} holds a value of magnitude 1e+300, too "
                               "large for kernel.dtype float32; accepted: |x| <= 1e+15 (larger "
                               "inputs overflow the kernel's sums of squares); rescale the data")


def test_check_pair_requires_equal_example_shapes(tmp_path):
    p, _ = save(tmp_path / "a.npy", images(h=4))
    q, _ = save(tmp_path / "b.npy", images(h=5))
    with open_array(p) as a, open_array(q, what="data.x2") as b, open_array(p, what="data.x2") as c:
        check_pair(a, c)
        with pytest.raises(DataError) as info:
            check_pair(a, b)
    assert str(info.value) == (f"data.x2: examples of {q} have shape (5, 3, 2), but those of data.x1 "
                               f"({p}) have shape (4, 3, 2); both sets must have the same example shape")


# --- fingerprint ---

def test_fingerprint_depends_on_content_not_format_layout_or_path(tmp_path):
    x = images(n=9)
    prints = set()
    for name in FORMATS + ["moved/elsewhere.npy"]:
        with open_array(*save(tmp_path / name, x)) as src:
            prints.add(fingerprint(src))
            prints.add(fingerprint(src, batch_bytes=1))
    with open_array(*save(tmp_path / "t.npy", x.transpose(0, 3, 1, 2)), layout="NCHW") as src:
        prints.add(fingerprint(src))
    with h5py.File(tmp_path / "be.h5", "w") as f:
        f["x"] = x.astype(">f4")
    with open_array(tmp_path / "be.h5", "x") as src:
        prints.add(fingerprint(src))
    assert len(prints) == 1 and len(prints.pop()) == 64


def test_fingerprint_changes_with_one_value_dtype_shape_or_limit(tmp_path):
    x = images(n=9)
    y = x.copy()
    y[4, 2, 1, 0] += 1
    variants = [x, y, x.astype(np.float64), x.reshape(9, 3, 4, 2)]
    prints = []
    for i, arr in enumerate(variants):
        with open_array(*save(tmp_path / f"v{i}.npy", arr)) as src:
            prints.append(fingerprint(src))
    with open_array(tmp_path / "v0.npy", limit=8) as src:
        prints.append(fingerprint(src))
    with open_array(*save(tmp_path / "first8.npy", x[:8])) as src:
        assert fingerprint(src) == prints[-1]
    assert len(set(prints)) == len(prints)


# --- the shipped demo data set and the package boundary ---

def test_demo_digits_are_1797_uint8_images_with_labels():
    with open_array(DIGITS, "x") as src:
        assert src.shape == (1797, 8, 8, 1) and src.dtype == np.uint8
        x = src.read(0, src.n)
        assert x.min() == 0 and x.max() == 16
        assert fingerprint(src) == "28972c1c7ac69610dd4c4fe97ca3294c41418c027c8e0de84cccffefd5b27c02"
    with np.load(DIGITS) as z:
        assert z["y"].dtype == np.int64 and z["y"].shape == (1797,)
        assert set(np.unique(z["y"])) == set(range(10))


def test_data_package_imports_neither_jax_nor_click():
    code = "import sys, kernelcli.data; print(sorted({'jax', 'click'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"



def test_an_npz_training_file_with_a_key_and_npy_second_files_go_together(tmp_path):
    """``key`` is the default array name of ``x2`` and ``test`` only where those files
    have names: a ``.npy`` second file needs none (an explicit null is the same)."""
    from helpers_cli import images, invoke, write_config

    np.savez(tmp_path / "train.npz", x=images(6, seed=1))
    np.save(tmp_path / "other.npy", images(4, seed=2))
    cfg = write_config(tmp_path, "c", x1="train.npz", key="x", x2="other.npy")
    result = invoke("estimate", cfg, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # the 6 rows of train.npz's "x" against the 4 of other.npy
    assert (report["n1"], report["n2"], report["n_test"]) == (6, 4, 0)
    assert report["symmetric"] is False and report["pairs_total"] == 6 * 4
    text = (tmp_path / "c.yaml").read_text().replace("x2: other.npy", "test: other.npy\n  test_key: null")
    (tmp_path / "t.yaml").write_text(text)
    result = invoke("estimate", tmp_path / "t.yaml", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # the train kernel and the 4 test rows against it
    assert (report["n1"], report["n2"], report["n_test"]) == (6, 6, 4)
    assert report["symmetric"] is True and report["pairs_total"] == 6 * 7 // 2 + 4 * 6
