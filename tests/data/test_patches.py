"""Random-patch features (Coates et al. 2011, as Li et al. 2019 use them): the fit is the
seed's alone, the mapping is the recipe of kernelcli/data/_patches.py written out
pixel by pixel, an image's features are its own whatever rows it is read with, and
the fit survives its file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernelcli.data import (
    PatchSettings,
    Preprocess,
    _preprocess,  # its batch size, made small to stream in batches
    fit_preprocess,
    patches_file_bytes,
)
from kernelcli.errors import DataError, UsageError

SETTINGS = PatchSettings(count=6, size=3, seed=5, bias=0.25, pool=2, stride=1, split=True)


def images(n, seed=0, shape=(7, 6, 2)):
    return np.random.default_rng(seed).standard_normal((n,) + shape) * 3.0 + 1.0


def fit(x, settings=SETTINGS, zca_reg=0.1):
    return fit_preprocess(x, "random_patches", zca_reg=zca_reg, patches=settings)


def reference(x, pp: Preprocess):
    """The mapping written out: every patch normalised, whitened, against every filter,
    thresholded on both signs, average pooled."""
    s = pp.patches
    n, h, w, _ = x.shape
    oh, ow = h - s.size + 1, w - s.size + 1
    z = np.zeros((n, oh, ow, s.count))
    for i in range(n):
        for r in range(oh):
            for c in range(ow):
                p = x[i, r:r + s.size, c:c + s.size, :].reshape(-1)
                p = p - p.mean()
                p = p / np.linalg.norm(p)
                z[i, r, c] = pp.filters @ (pp.whitening @ (p - pp.mean))
    feats = np.concatenate([np.maximum(z - s.bias, 0), np.maximum(-z - s.bias, 0)], axis=-1)
    ph, pw = (oh - s.pool) // s.stride + 1, (ow - s.pool) // s.stride + 1
    out = np.zeros((n, ph, pw, feats.shape[-1]))
    for r in range(ph):
        for c in range(pw):
            r0, c0 = r * s.stride, c * s.stride
            out[:, r, c] = feats[:, r0:r0 + s.pool, c0:c0 + s.pool].mean(axis=(1, 2))
    return out


def test_features_are_the_recipe_written_out():
    x = images(9)
    pp = fit(x)
    assert pp.output_shape == (4, 3, 12)  # (7 - 3 + 1 - 2 + 1, 6 - 3 + 1 - 2 + 1, 2 * 6)
    np.testing.assert_allclose(pp.apply(x), reference(x, pp), atol=1e-12)
    test = images(4, seed=1) * 10.0  # another scale: every patch is normalised first
    np.testing.assert_allclose(pp.apply(test), reference(test, pp), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(pp.filters, axis=1), 1.0, rtol=1e-12)


def test_the_whitening_whitens_the_sampled_patches():
    """With a tiny regulariser the normalised patches, centred and whitened, have an
    identity covariance but for the all-ones direction that their centring removed."""
    x = images(50, shape=(8, 8, 1))
    s = dataclasses.replace(SETTINGS, size=2, count=3)
    pp = fit(x, s, zca_reg=1e-9)
    from kernelcli.data._patches import WHITEN_PATCHES, normalise, sample_positions

    where = sample_positions(50, x.shape[1:], s)
    assert where.shape == (WHITEN_PATCHES, 3)
    p = normalise(np.stack([x[i, r:r + 2, c:c + 2, 0].reshape(-1) for i, r, c in where]))
    white = (p - pp.mean) @ pp.whitening
    np.testing.assert_allclose(white.T @ white / len(p), np.eye(4) - np.full((4, 4), 0.25),
                               atol=1e-5)


def test_same_seed_same_bits_other_seed_other_fingerprint(monkeypatch):
    x = images(12)
    a, b = fit(x), fit(x)
    assert a.fingerprint() == b.fingerprint()
    for name in ("mean", "whitening", "filters"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    other = fit(x, dataclasses.replace(SETTINGS, seed=6))
    assert other.fingerprint() != a.fingerprint()
    assert not np.array_equal(other.filters, a.filters)
    for change in ({"bias": 0.5}, {"pool": 1}, {"stride": 2}, {"split": False}, {"count": 5}):
        assert fit(x, dataclasses.replace(SETTINGS, **change)).fingerprint() != a.fingerprint()
    assert fit(x, zca_reg=0.2).fingerprint() != a.fingerprint()
    # the fit streams the training rows in batches: three images a batch is the same fit
    monkeypatch.setattr(_preprocess, "_BATCH_BYTES", 3 * 7 * 6 * 2 * 8)
    c = fit(x)
    np.testing.assert_allclose(c.whitening, a.whitening, rtol=1e-9, atol=1e-9)
    assert np.array_equal(c.apply(x[:5]), fit(x).apply(x[:5]))


def test_an_image_maps_to_the_same_bits_whatever_rows_it_is_read_with(monkeypatch):
    x = images(10)
    pp = fit(x)
    whole = pp.apply(x, np.float32)
    assert whole.dtype == np.float32
    assert np.array_equal(pp.apply(x[3:8], np.float32), whole[3:8])
    monkeypatch.setattr(_preprocess, "_BATCH_BYTES", 1)  # one image a batch
    assert np.array_equal(pp.apply(x, np.float32), whole)


def test_the_fit_survives_its_file_and_a_damaged_one_is_named(tmp_path):
    x = images(8)
    pp = fit(x)
    path = tmp_path / "pp.npz"
    path.write_bytes(pp.to_bytes())
    assert path.stat().st_size <= patches_file_bytes(x.shape[1:], SETTINGS)
    back = Preprocess.load(path)
    assert back.patches == SETTINGS and back.fingerprint() == pp.fingerprint()
    assert np.array_equal(back.apply(x), pp.apply(x))
    arrays = dict(np.load(path))
    arrays["filters"] = arrays["filters"][:-1]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=r"bad.npz: cannot read the run's fitted "
                                        r"preprocessing \(filters is not a float array "
                                        r"of shape \(6, 18\)\)"):
        Preprocess.load(tmp_path / "bad.npz")


def test_the_output_bound_holds_for_any_input():
    x = images(10)
    pp = fit(x)
    wild = np.random.default_rng(3).standard_normal((6, 7, 6, 2)) * 1e6
    assert np.abs(pp.apply(wild)).max() <= pp.output_bound(1e6)
    assert pp.output_bound(1.0) == pp.output_bound(1e9)


def test_stand_in_has_the_fits_shapes_and_no_data():
    pp = Preprocess.stand_in((7, 6, 2), SETTINGS, 0.1)
    assert pp.output_shape == fit(images(5)).output_shape
    assert pp.apply(images(2)).shape == (2, 4, 3, 12)


def test_mistakes_are_named():
    x = images(6)
    with pytest.raises(UsageError, match="zca_reg: None is not accepted; preprocess: "
                                         "random_patches needs a finite number > 0"):
        fit_preprocess(x, "random_patches", patches=SETTINGS)
    with pytest.raises(UsageError, match="random_patches needs its settings"):
        fit_preprocess(x, "random_patches", zca_reg=0.1)
    with pytest.raises(DataError, match=r"data.preprocess.size: 8 is larger than the 7 x 6 "
                                        r"images; expected a size from 1 to 6"):
        fit(x, dataclasses.replace(SETTINGS, size=8))
    with pytest.raises(DataError, match=r"data.preprocess.pool: 5 is larger than the 5 x 4 "
                                        r"feature maps that patches of size 3 give; expected "
                                        r"a pool from 1 to 4"):
        fit(x, dataclasses.replace(SETTINGS, pool=5))
    with pytest.raises(DataError, match=r"data.preprocess.kind: random_patches needs images "
                                        r"\(n, H, W, C\); the examples have shape \(84,\)"):
        fit(x.reshape(6, -1))
    flat = np.ones((4, 7, 6, 2))
    with pytest.raises(DataError, match="every sampled training patch is constant"):
        fit(flat)
