"""Random-patch features (Coates, Lee & Ng 2011; Coates & Ng 2011), the input layer
that Li et al. 2019 ("Enhanced Convolutional Neural Tangent Kernels") put in front of
a CNN-GP: ``count`` patches sampled from the training images become the filters of
one fixed convolution, whose thresholded responses, average pooled, are the feature
maps the kernel's network reads. numpy only.

The recipe (docs/config-reference.md, ``data.preprocess``, says where it follows which paper):

1. Sampling (seeded, :func:`numpy.random.default_rng`): ``max(count, WHITEN_PATCHES)``
   patches of ``size x size x C``, each at a uniformly drawn training image and
   position (every position where the patch fits); the first ``count`` are the
   filters, all of them fit the whitening.
2. Normalisation of every patch, sampled or read later: centred over its
   ``size * size * C`` values and scaled to unit L2 norm (a constant patch stays 0).
3. ZCA on the normalised sampled patches: mean ``M`` (d,), covariance ``S`` (d, d),
   ``W = U diag((s + eps)^-1/2) U^T`` with ``S = U diag(s) U^T`` and
   ``eps = zca_reg * trace(S) / d`` (relative to the mean eigenvalue, as ``zca``).
4. Filters ``f_k = W (p_k - M) / |W (p_k - M)|`` (unit norm, so a response of a
   whitened patch has about unit variance whatever the data's scale).
5. Features at every position where a patch fits (stride 1, no padding): with
   ``z_k = f_k . W (p - M)``, ``relu(z_k - bias)`` and, with ``split``, also
   ``relu(-z_k - bias)`` (Coates & Ng's sign split): ``count`` or ``2 * count``
   channels.
6. Average pooling over ``pool x pool`` windows every ``stride`` pixels (windows that
   fit; ``pool: 1`` keeps every position).

Every image is mapped on its own (its own matrix products), so an image's features
are the same bits whatever rows it is read with: a resumed run reads what an
uninterrupted one did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import DataError

# Patches sampled to fit the whitening (the filters are the first `count` of them):
# as many as the reference code of Shankar et al. 2020 samples; Coates et al. took 400,000.
WHITEN_PATCHES = 100_000


@dataclass(frozen=True)
class PatchSettings:
    """What ``data.preprocess: {kind: random_patches}`` fixes before any data is read."""

    count: int     # patches sampled as filters
    size: int      # patch edge (pixels)
    seed: int      # of the sampling
    bias: float    # threshold of the responses
    pool: int      # average-pooling window edge (1: none)
    stride: int    # pooling stride
    split: bool    # relu(z - b) and relu(-z - b), else relu(z - b) alone

    @property
    def channels(self) -> int:
        return self.count * (2 if self.split else 1)

    def describe(self) -> str:
        """The settings as the fingerprint hashes them."""
        return (f"count={self.count}\nsize={self.size}\nseed={self.seed}\n"
                f"bias={self.bias!r}\npool={self.pool}\nstride={self.stride}\n"
                f"split={self.split}\n")

    def problem(self, shape) -> Optional[str]:
        """Why examples of ``shape`` (H, W, C) cannot be mapped, or None; the message
        starts with the ``data.preprocess`` key at fault."""
        shape = tuple(shape)
        if len(shape) != 3:
            return (f"kind: random_patches needs images (n, H, W, C); the examples have "
                    f"shape {shape}")
        h, w, _ = shape
        if self.size > min(h, w):
            return (f"size: {self.size} is larger than the {h} x {w} images; expected a "
                    f"size from 1 to {min(h, w)}")
        out = h - self.size + 1, w - self.size + 1
        if self.pool > min(out):
            return (f"pool: {self.pool} is larger than the {out[0]} x {out[1]} feature maps "
                    f"that patches of size {self.size} give; expected a pool from 1 to "
                    f"{min(out)}")
        return None

    def output_shape(self, shape) -> tuple[int, int, int]:
        """The feature maps' shape ``(H', W', channels)`` of examples of ``shape``."""
        why = self.problem(shape)
        if why is not None:
            raise DataError(f"data.preprocess.{why}")
        h, w = (int(s) - self.size + 1 for s in tuple(shape)[:2])
        return ((h - self.pool) // self.stride + 1, (w - self.pool) // self.stride + 1,
                self.channels)

    def row_bytes(self, shape) -> int:
        """float64 bytes that mapping one image of ``shape`` holds at once."""
        h, w, c = (int(s) for s in shape)
        positions = (h - self.size + 1) * (w - self.size + 1)
        return 8 * (h * w * c + positions * (2 * self.size * self.size * c + 2 * self.channels))

    def fit_bytes(self, shape) -> int:
        """float64 bytes the fit holds besides its batch of rows: the sampled positions,
        the filters, the (d, d) moments and their eigenvectors."""
        d = self.size * self.size * int(shape[-1])
        sampled = max(self.count, WHITEN_PATCHES)
        return 8 * (3 * sampled + self.count * d + 4 * d * d + d)


def patches_of(image: np.ndarray, size: int) -> np.ndarray:
    """Every ``size x size`` patch of ``image`` (H, W, C), flattened in (row, column,
    channel) order: ``(H', W', size * size * C)``."""
    win = np.lib.stride_tricks.sliding_window_view(image, (size, size), axis=(0, 1))
    # (H', W', C, size, size) -> (H', W', size, size, C)
    return np.ascontiguousarray(win.transpose(0, 1, 3, 4, 2)).reshape(
        win.shape[0], win.shape[1], -1)


def normalise(p: np.ndarray) -> np.ndarray:
    """Each patch (last axis) centred and scaled to unit L2 norm; a constant one is 0."""
    p = p - p.mean(axis=-1, keepdims=True)
    norms = np.sqrt((p * p).sum(axis=-1, keepdims=True))
    return p / np.where(norms > 0, norms, 1.0)


def sample_positions(n: int, shape, settings: PatchSettings) -> np.ndarray:
    """(m, 3) int64: image, row and column of each sampled patch, in sampling order."""
    h, w = (int(s) - settings.size + 1 for s in tuple(shape)[:2])
    rng = np.random.default_rng(settings.seed)
    m = max(settings.count, WHITEN_PATCHES)
    return np.stack([rng.integers(0, n, m), rng.integers(0, h, m), rng.integers(0, w, m)],
                    axis=1)


def fit_patches(batches, n: int, shape, settings: PatchSettings, zca_reg: float):
    """``(mean, whitening, filters)`` from the training rows, streamed as ``batches``
    (``(start, stop, rows)`` in order, as :func:`~._preprocess._batches` yields them)."""
    d = settings.size * settings.size * int(shape[-1])
    where = sample_positions(n, shape, settings)
    order = np.argsort(where[:, 0], kind="stable")
    filters = np.zeros((settings.count, d))
    total, moment = np.zeros(d), np.zeros((d, d))
    lo = 0
    for start, stop, rows in batches:
        hi = int(np.searchsorted(where[order, 0], stop, side="left"))
        picked = order[lo:hi]
        lo = hi
        if not picked.size:
            continue
        i, r, c = where[picked, 0] - start, where[picked, 1], where[picked, 2]
        win = np.lib.stride_tricks.sliding_window_view(rows, (settings.size, settings.size),
                                                       axis=(1, 2))
        p = normalise(win[i, r, c].transpose(0, 2, 3, 1).reshape(picked.size, d))
        total += p.sum(axis=0)
        moment += p.T @ p
        first = picked < settings.count
        filters[picked[first]] = p[first]
    m = where.shape[0]
    mean = total / m
    cov = moment / m - np.outer(mean, mean)
    cov = (cov + cov.T) / 2
    eps = zca_reg * np.trace(cov) / d
    if not eps > 0:
        raise DataError("data.preprocess: every sampled training patch is constant (all "
                        "its values equal), so random_patches has nothing to whiten; check "
                        "the training images (data.x1)")
    s, u = np.linalg.eigh(cov + eps * np.eye(d))
    whitening = (u * np.maximum(s, eps) ** -0.5) @ u.T
    f = (filters - mean) @ whitening
    norms = np.sqrt((f * f).sum(axis=1, keepdims=True))
    return mean, whitening, f / np.where(norms > 0, norms, 1.0)


def apply_patches(rows: np.ndarray, settings: PatchSettings, mean: np.ndarray,
                  whitening: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """The feature maps of ``rows`` (m, H, W, C) float64: (m, H'', W'', channels)."""
    out_shape = settings.output_shape(rows.shape[1:])
    out = np.empty((rows.shape[0],) + out_shape)
    # z = f . W (p - M) = p . G - f . W M with G = W f^T: one product per image
    g = whitening @ filters.T
    offset = mean @ g
    k = settings.count
    for i in range(rows.shape[0]):
        p = normalise(patches_of(rows[i], settings.size))
        h, w, d = p.shape
        z = p.reshape(h * w, d) @ g  # one 2-D product: numpy's stacked 3-D one is slower
        z -= offset
        feats = np.empty((h * w, settings.channels))
        np.maximum(z - settings.bias, 0.0, out=feats[:, :k])
        if settings.split:
            np.maximum(-z - settings.bias, 0.0, out=feats[:, k:])
        out[i] = _pool(feats.reshape(h, w, -1), settings.pool, settings.stride)
    return out


def _pool(maps: np.ndarray, pool: int, stride: int) -> np.ndarray:
    """Average of every ``pool x pool`` window of ``maps`` (H, W, K) that fits, every
    ``stride`` pixels."""
    if pool == 1 and stride == 1:
        return maps
    win = np.lib.stride_tricks.sliding_window_view(maps, (pool, pool), axis=(0, 1))
    return win[::stride, ::stride].mean(axis=(-2, -1))


def largest_response(mean: np.ndarray, whitening: np.ndarray, filters: np.ndarray) -> float:
    """The largest ``|z_k|`` any patch can give: ``z_k = p . g_k - M . g_k`` with ``g =
    W f^T`` and a normalised patch (``|p| <= 1``), so ``|z_k| <= |g_k| + |M . g_k|``. A
    bias at or above it leaves every feature 0 for every image, whatever the data."""
    g = whitening @ filters.T
    return float(np.max(np.sqrt((g * g).sum(axis=0)) + np.abs(mean @ g)))


def output_bound(mean: np.ndarray, whitening: np.ndarray) -> float:
    """An upper bound of every feature: ``|z| <= |W|_2 |p - M| <= |W|_2 (1 + |M|)`` for a
    unit-norm filter and a normalised patch (|p| <= 1); thresholding and averaging only
    shrink it."""
    return float(np.linalg.norm(whitening, 2)) * (1.0 + float(np.linalg.norm(mean)))


def stand_in(shape, settings: PatchSettings):
    """``(mean, whitening, filters)`` of the right shapes without reading any data (zero
    mean, no whitening, seeded random unit filters): what ``estimate`` maps rows with,
    to measure the cost of the real mapping. Never stored."""
    d = settings.size * settings.size * int(shape[-1])
    f = np.random.default_rng(settings.seed).standard_normal((settings.count, d))
    f /= np.sqrt((f * f).sum(axis=1, keepdims=True))
    return np.zeros(d), np.eye(d), f


def fitted_arrays(shape, size: int, count: int) -> dict:
    """The fit's float64 arrays, name -> shape, for examples of ``shape``, patches of
    ``size`` and ``count`` filters: their mean, their whitening, the whitened filters."""
    d = size * size * int(shape[-1])
    return {"mean": (d,), "whitening": (d, d), "filters": (count, d)}


def patches_file_bytes(shape, settings: PatchSettings) -> int:
    """Bytes (at most) of the run directory's fitted ``random_patches`` file (``.npz``: the
    float64 arrays of :func:`fitted_arrays`, and a little of their names and settings)."""
    arrays = fitted_arrays(shape, settings.size, settings.count)
    return 8 * sum(int(np.prod(s)) for s in arrays.values()) + 4096
