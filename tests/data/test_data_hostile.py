"""Hostile input arrays: values a file holds that would make a kernel wrong are refused
with one DataError line naming the file, the key, the row, the value and what is
accepted; none gives a traceback or a kernel computed from values not in the file.

Here: huge finite values (per kernel.dtype), bad labels, preprocessing that overflows
or blows a test set up, long-double inputs. Hostile file structures (HDF5 virtual
datasets, external storage, links, damaged chunks, lying .npy/.npz headers) are in
test_data_hostile_files.py; the CLI refusing both is in test_data_hostile_cli.py. The
helpers ``refused``, ``opened_and_read`` and ``h5`` are shared with both.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from kernelcli.data import (
    INPUT_BOUNDS,
    MAX_LABEL,
    Preprocess,
    check_finite,
    fingerprint,
    fit_preprocess,
    load_labels,
    open_array,
)
from kernelcli.errors import DataError

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
    from kernelcli.data import _value_checks as _values  # its batch, made small

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
