"""Preprocessing fitted on the training set only; ZCA against the reference code's formula."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcli.data import (
    _preprocess,  # its batch size, made small to stream in batches
    fit_preprocess,
)
from kernelcli.errors import DataError, UsageError


def images(n, seed=0, shape=(6, 5, 3)):
    """(n, *shape) images whose channels have different offsets and scales."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + shape)
    return x * np.array([1.0, 5.0, 0.1]) + np.array([10.0, -3.0, 0.5])


def reference_zca(x_train, x, zca_reg, layer_norm=True):
    """The reference code's ZCA (Lee et al. 2020 / KIP), written out with SVD."""
    def ln(a):
        a = a.reshape(a.shape[0], -1)
        if layer_norm:
            a = a - a.mean(axis=1, keepdims=True)
            a = a / np.linalg.norm(a, axis=1, keepdims=True)
        return a
    xt = ln(x_train)
    cov = xt.T @ xt / xt.shape[0]
    u, s, _ = np.linalg.svd(cov + zca_reg * np.trace(cov) / cov.shape[0] * np.eye(len(cov)))
    inv = s ** -0.5
    if xt.shape[0] < xt.shape[1]:
        inv[xt.shape[0]:] = 1.0
    return (ln(x) @ (u * inv) @ u.T).reshape(x.shape)


def test_standardize_gives_zero_mean_unit_variance_per_channel_on_train():
    x = images(40)
    z = fit_preprocess(x, "standardize").apply(x)
    assert z.shape == x.shape and z.dtype == np.float64
    np.testing.assert_allclose(z.mean(axis=(0, 1, 2)), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(axis=(0, 1, 2)), 1.0, rtol=1e-12)
    v = images(30).reshape(30, -1)  # (n, D) vectors: every feature is a channel
    zv = fit_preprocess(v, "standardize").apply(v)
    np.testing.assert_allclose(zv.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(zv.std(axis=0), 1.0, rtol=1e-12)


def test_test_set_is_transformed_with_the_training_statistics():
    train, test = images(40, seed=0), images(10, seed=1) + 2.0
    p = fit_preprocess(train, "standardize")
    expected = (test - train.mean(axis=(0, 1, 2))) / train.std(axis=(0, 1, 2))
    np.testing.assert_allclose(p.apply(test), expected, rtol=1e-12)
    assert not np.allclose(p.apply(test).mean(axis=(0, 1, 2)), 0.0, atol=0.1)
    z = fit_preprocess(train, "zca", zca_reg=0.1)
    np.testing.assert_allclose(z.apply(test), reference_zca(train, test, 0.1), atol=1e-10)


def test_batched_fit_equals_one_batch(monkeypatch):
    x = images(50)
    whole_std = fit_preprocess(x, "standardize")
    whole_zca = fit_preprocess(x, "zca", zca_reg=1e-2)
    monkeypatch.setattr(_preprocess, "_BATCH_BYTES", 3 * 90 * 8)  # 3 images per batch
    std = fit_preprocess(x, "standardize")
    np.testing.assert_allclose(std.mean, whole_std.mean, rtol=1e-12)
    np.testing.assert_allclose(std.std, whole_std.std, rtol=1e-12)
    np.testing.assert_allclose(fit_preprocess(x, "zca", zca_reg=1e-2).whitening,
                               whole_zca.whitening, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(std.apply(x), whole_std.apply(x), rtol=1e-12, atol=1e-12)


def test_integer_memmap_images_are_accepted(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).integers(0, 256, (20, 4, 4, 3), dtype=np.uint8))
    x = np.load(path, mmap_mode="r")
    z = fit_preprocess(x, "standardize").apply(x, dtype=np.float32)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z.mean(axis=(0, 1, 2)), 0.0, atol=1e-5)


def test_constant_channel_becomes_zero_not_nan():
    x = images(10)
    x[..., 1] = 7.0
    z = fit_preprocess(x, "standardize").apply(x)
    assert np.all(z[..., 1] == 0.0) and np.isfinite(z).all()


def test_zca_whitened_train_has_identity_second_moment():
    x = images(400, shape=(4, 4, 3))  # n = 400 > d = 48
    z = fit_preprocess(x, "zca", zca_reg=1e-10, per_image=False).apply(x).reshape(400, -1)
    np.testing.assert_allclose(z.T @ z / 400, np.eye(48), atol=1e-6)
    # per-image centring removes the all-ones direction; everything else is white
    z = fit_preprocess(x, "zca", zca_reg=1e-10).apply(x).reshape(400, -1)
    np.testing.assert_allclose(z.T @ z / 400, np.eye(48) - np.full((48, 48), 1 / 48), atol=1e-6)


@pytest.mark.parametrize("n", [12, 200])  # n < d = 90 (rank control) and n > d
@pytest.mark.parametrize("per_image", [True, False])
def test_zca_equals_the_reference_formula(n, per_image):
    x = images(n)
    p = fit_preprocess(x, "zca", zca_reg=0.1, per_image=per_image)
    np.testing.assert_allclose(p.apply(x), reference_zca(x, x, 0.1, per_image), atol=1e-9)


def test_fingerprint_follows_the_parameters():
    x = images(30)
    a = fit_preprocess(x, "zca", zca_reg=0.1)
    assert a.fingerprint() == fit_preprocess(x, "zca", zca_reg=0.1).fingerprint()
    assert a.fingerprint() != fit_preprocess(x, "zca", zca_reg=0.01).fingerprint()
    assert a.fingerprint() != fit_preprocess(x, "zca", zca_reg=0.1, per_image=False).fingerprint()
    assert a.fingerprint() != fit_preprocess(x + 1e-9, "zca", zca_reg=0.1).fingerprint()
    s = fit_preprocess(x, "standardize")
    assert s.fingerprint() != a.fingerprint() and len(s.fingerprint()) == 64


def test_mistakes_are_named():
    x = images(10)
    with pytest.raises(UsageError, match="preprocess: 'pca' is not accepted"):
        fit_preprocess(x, "pca")
    for bad in (None, 0.0, -1.0, float("inf"), "0.1x"):
        with pytest.raises(UsageError, match="zca_reg"):
            fit_preprocess(x, "zca", zca_reg=bad)
    with pytest.raises(UsageError, match="zca_reg: 0.1 is only used with preprocess: zca"):
        fit_preprocess(x, "standardize", zca_reg=0.1)
    with pytest.raises(DataError, match=r"\(5, 6, 3\).*\(6, 5, 3\)"):
        fit_preprocess(x, "standardize").apply(np.zeros((2, 5, 6, 3)))
    bad = x.copy()
    bad[7, 0, 0, 0] = np.nan
    with pytest.raises(DataError, match="row 7"):
        fit_preprocess(bad, "standardize")
    with pytest.raises(DataError, match=r"\(n, H, W, C\)"):
        fit_preprocess(np.zeros((3, 2, 2, 2, 2, 1)), "zca", zca_reg=0.1)  # 4 spatial axes
