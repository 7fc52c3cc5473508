"""Input preprocessing fitted on the training set only: standardisation, ZCA and random-patch
features (numpy only).

``fit_preprocess`` reads the training rows in batches (a memory-mapped uint8
array is fine) and returns a frozen ``Preprocess``; ``apply`` maps any set,
training or test, with those training statistics.

* ``standardize``: per channel (the last axis; every feature of ``(n, D)``
  vectors), ``(x - mean) / std`` with the training mean and population std
  over all other axes. A constant channel (std 0) is divided by 1.
* ``zca``: the convention of the reference code of Lee et al. 2020 ("Finite
  versus infinite neural networks") and Nguyen et al. 2021 (KIP), so that
  their regularisation strengths mean the same here. Each example is flattened
  to ``d = H*W*C`` features; with ``per_image`` (default) it is centred over its
  own features and scaled to unit L2 norm (their "layer norm"; an all-constant
  example stays zero). Then, with the *uncentred* training second moment
  ``M = X^T X / n`` (d, d) and ``M + eps I = U diag(s) U^T``,
  ``eps = zca_reg * trace(M) / d``, the whitening is ``W = U diag(s^-1/2) U^T``
  and ``x -> x W``. When ``n < d`` only the top ``n`` eigen-directions are
  whitened (the rest get factor 1: "rank control"). There is no per-feature
  centring, exactly as in the reference.
* ``random_patches``: a fixed first convolution whose filters are whitened patches
  sampled from the training images (Coates et al. 2011, as Li et al. 2019 use it):
  examples (H, W, C) become feature maps (H', W', count or 2 count); the recipe is
  :mod:`._patches`'s.

Memory: the fit holds one batch and the (d, d) float64 moment (75 MiB at
d = 3072); ``apply`` holds its output and one batch (for ``random_patches`` a batch is
as many images as their patches and responses fit in, at least one).

Nothing non-finite passes unnoticed: the fitted parameters must be finite (huge
inputs can overflow the float64 sums of squares), every output batch of
``apply`` is checked to be finite and within the kernel's input bound
(:data:`~kernelcli.data._value_checks.INPUT_BOUNDS`), and :meth:`Preprocess.output_bound`
bounds the outputs without a pass over the data.
"""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .._untrusted import open_untrusted
from ..errors import DataError, UsageError
from . import _patches
from ._patches import PatchSettings
from ._value_checks import INPUT_BOUNDS

KINDS = ("standardize", "zca", "random_patches")
_VERSION = "kernelcli-preprocess-v1"
# The largest fitted file read back: a ZCA of 16,384 features (its float64 whitening is
# 2 GiB) and more than any random_patches fit; a larger file is not one kernelcli wrote
MAX_FILE_BYTES = 2**31 + 2**20
_BATCH_BYTES = 64 * 2**20  # float64 bytes of one batch of rows
# A channel whose training std is below this fraction of its mean is constant up
# to the rounding of the mean (0.1 three times has a float64 "std" of 1e-17), and
# is divided by 1 like an exactly constant one: dividing by the rounding noise
# would blow any test value that differs from the constant up past every bound.
_CONSTANT_STD = 1e-12


def _batches(x, n_features: int, row_bytes: int = 0):
    """Yield ``(start, stop, rows (stop - start, ...) float64)``, checking finiteness;
    a batch holds ``_BATCH_BYTES`` of float64 rows, or of ``row_bytes`` per row."""
    step = max(1, _BATCH_BYTES // max(1, row_bytes or 8 * n_features))
    for start in range(0, x.shape[0], step):
        rows = np.asarray(x[start:start + step], dtype=np.float64)
        bad = ~np.isfinite(rows.reshape(rows.shape[0], -1)).all(axis=1)
        if bad.any():
            raise DataError(f"row {start + int(np.argmax(bad))} of the data to preprocess holds "
                            "a non-finite value; every value must be finite")
        yield start, start + rows.shape[0], rows


def _layer_norm(flat: np.ndarray) -> np.ndarray:
    """Centre each row (n, d) over its features and scale it to unit L2 norm."""
    flat = flat - flat.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(flat, axis=1, keepdims=True)
    return flat / np.where(norms > 0, norms, 1.0)


@dataclass(frozen=True, eq=False)
class Preprocess:
    """A fitted preprocessing. Shapes: ``feature_shape`` is ``x.shape[1:]`` of the training set;
    ``mean``, ``std`` (C,) for ``standardize``; ``whitening`` (d, d) for ``zca``; for
    ``random_patches`` (d = size * size * C) ``mean`` (d,), ``whitening`` (d, d) and
    ``filters`` (count, d), with ``patches`` its settings."""

    kind: str
    feature_shape: tuple[int, ...]
    mean: Optional[np.ndarray] = None
    std: Optional[np.ndarray] = None
    whitening: Optional[np.ndarray] = None
    zca_reg: Optional[float] = None
    per_image: bool = True
    patches: Optional[PatchSettings] = None
    filters: Optional[np.ndarray] = None

    @property
    def n_features(self) -> int:
        return int(np.prod(self.feature_shape))

    @property
    def output_shape(self) -> tuple[int, ...]:
        """An example's shape after :meth:`apply` (``feature_shape`` but for
        ``random_patches``, whose feature maps are (H', W', channels))."""
        if self.patches is None:
            return self.feature_shape
        return self.patches.output_shape(self.feature_shape)

    @classmethod
    def stand_in(cls, feature_shape, patches: PatchSettings, zca_reg: float) -> Preprocess:
        """A ``random_patches`` mapping of the fitted one's shapes and cost, made without
        reading data: what ``estimate`` (which fits nothing) reads rows through."""
        mean, whitening, filters = _patches.stand_in(feature_shape, patches)
        return cls("random_patches", tuple(feature_shape), mean=mean, whitening=whitening,
                   zca_reg=zca_reg, patches=patches, filters=filters)

    def apply(self, x, dtype=np.float64, *, where: str = "the preprocessed data",
              row0: int = 0) -> np.ndarray:
        """``x`` (m, *feature_shape) -> preprocessed array of the same shape, in ``dtype``.

        Raises :class:`DataError` for an output row that is not finite or, for a float32
        or float64 ``dtype``, exceeds the kernel's input bound; the message starts with
        ``where`` and counts rows from ``row0``.
        """
        shape = tuple(np.shape(x))
        if shape[1:] != self.feature_shape:
            raise DataError(f"examples of shape {shape[1:]} cannot be preprocessed with a "
                            f"preprocessing fitted on examples of shape {self.feature_shape}")
        dtype = np.dtype(dtype)
        bound = INPUT_BOUNDS.get(dtype.name, math.inf)
        out = np.empty(shape[:1] + self.output_shape, dtype=dtype)
        row_bytes = 0 if self.patches is None else self.patches.row_bytes(self.feature_shape)
        for start, stop, rows in _batches(x, self.n_features, row_bytes):
            if self.kind == "standardize":
                result = (rows - self.mean) / self.std
            elif self.patches is not None:
                assert self.mean is not None and self.whitening is not None  # _problem()
                assert self.filters is not None
                result = _patches.apply_patches(rows, self.patches, self.mean, self.whitening,
                                                self.filters)
            else:
                flat = rows.reshape(stop - start, -1)
                if self.per_image:
                    flat = _layer_norm(flat)
                result = (flat @ self.whitening).reshape(rows.shape)
            mags = np.abs(result.reshape(stop - start, -1)).max(axis=1, initial=0.0)
            over = ~(mags <= bound)  # NaN compares False: caught too
            if over.any():
                i = int(np.argmax(over))
                raise DataError(f"{where}: row {row0 + start + i} after {self.kind} "
                                f"preprocessing holds a value of magnitude {mags[i]:.4g}; "
                                f"accepted for kernel.dtype {dtype.name}: finite, |x| <= "
                                f"{bound:.0e} (a near-constant training channel or direction "
                                "scales it up)")
            out[start:stop] = result
        return out

    def apply_bytes(self, rows: int) -> int:
        """Bytes :meth:`apply` holds mapping ``rows`` rows besides its output: their
        float64 copy and one batch's work."""
        row = self.patches.row_bytes(self.feature_shape) if self.patches else 8 * self.n_features
        return 8 * rows * self.n_features + min(rows, max(1, _BATCH_BYTES // row)) * row

    def fit_bytes(self, rows: int) -> int:
        """Bytes a fit on ``rows`` training rows holds: one batch and its statistics
        (the ``random_patches`` kind's; the others' (d, d) moments at most)."""
        batch = min(rows, max(1, _BATCH_BYTES // (8 * self.n_features))) * 8 * self.n_features
        if self.patches is not None:
            return batch + self.patches.fit_bytes(self.feature_shape)
        return batch + 3 * 8 * self.n_features ** 2

    def output_bound(self, max_abs: float) -> float:
        """An upper bound of ``|apply(x)|`` over every ``x`` with ``|x| <= max_abs``,
        without reading ``x``: ``(max_abs + max|mean|) / min(std)`` for ``standardize``;
        for ``zca`` the largest column norm of the whitening times the rows' largest
        L2 norm (1 after the per-image unit norm, else ``sqrt(d) * max_abs``); for
        ``random_patches`` one that holds for any input (every patch is normalised)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if self.patches is not None:
                assert self.mean is not None and self.whitening is not None  # _problem()
                bound = _patches.output_bound(self.mean, self.whitening)
            elif self.kind == "standardize":
                assert self.mean is not None and self.std is not None  # _problem() saw them
                bound = (max_abs + float(np.abs(self.mean).max())) / float(self.std.min())
            else:
                assert self.whitening is not None  # _problem() saw it
                col = float(np.sqrt((self.whitening ** 2).sum(axis=0)).max())
                norm = 1.0 if self.per_image else math.sqrt(self.n_features) * max_abs
                bound = col * norm
        return bound * (1 + 1e-6) if math.isfinite(bound) else math.inf

    def to_bytes(self) -> bytes:
        """The fitted preprocessing as ``.npz`` bytes (plain arrays, no pickle)."""
        import io

        arrays: dict[str, Any] = {"kind": np.array(self.kind), "feature_shape": np.array(self.feature_shape),
                                  "per_image": np.array(self.per_image)}
        if self.zca_reg is not None:
            arrays["zca_reg"] = np.array(self.zca_reg)
        if self.patches is not None:
            p = self.patches
            arrays["patch_settings"] = np.array([p.count, p.size, p.seed, p.pool, p.stride,
                                                 int(p.split)], dtype=np.int64)
            arrays["patch_bias"] = np.array(p.bias)
        for name in ("mean", "std", "whitening", "filters"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def load(cls, path) -> Preprocess:
        """Read what :meth:`to_bytes` wrote (``DataError`` naming ``path`` if unreadable),
        through the one descriptor the untrusted-file gate opened: a FIFO or a device in
        its place is refused at once (an ``open`` by name would wait for a writer, and a
        batch system's SIGTERM would not end it), a file over :data:`MAX_FILE_BYTES`
        unread."""
        try:
            with os.fdopen(open_untrusted(path, max_bytes=MAX_FILE_BYTES), "rb") as f, \
                    np.load(f, allow_pickle=False) as z:
                get = lambda name: z[name] if name in z.files else None  # noqa: E731
                reg = get("zca_reg")
                pp = cls(kind=str(z["kind"]), feature_shape=tuple(int(v) for v in
                                                                  z["feature_shape"]),
                         mean=get("mean"), std=get("std"), whitening=get("whitening"),
                         zca_reg=None if reg is None else float(reg),
                         per_image=bool(z["per_image"]), filters=get("filters"),
                         patches=_settings(get("patch_settings"), get("patch_bias")))
            problem = pp._problem()
        except (OSError, ValueError, KeyError, TypeError, EOFError, RuntimeError,
                zipfile.BadZipFile, zlib.error) as exc:
            problem = " ".join(str(exc).split())[:200]
        if problem:
            raise DataError.naming(f"{path}: cannot read the run's fitted preprocessing "
                                   f"({problem}); start the run afresh with <<overwrite>>")
        return pp

    def _problem(self) -> Optional[str]:
        """What makes this (read back) preprocessing unusable, or None."""
        if self.kind not in KINDS:
            return f"kind {self.kind!r}"
        if self.kind == "random_patches":
            return self._patches_problem()
        d = self.n_features
        c = (self.feature_shape[-1],) if self.feature_shape else (0,)
        wants: dict[str, dict[str, tuple[int, ...]]] = {
            "standardize": {"mean": c, "std": c}, "zca": {"whitening": (d, d)}}
        want = wants[self.kind]
        for name, shape in want.items():
            a = getattr(self, name)
            if a is None or a.shape != shape or a.dtype.kind != "f":
                return f"{name} is not a float array of shape {shape}"
            if not np.isfinite(a).all():
                return f"{name} is not finite"
        std = self.std  # not None for standardize: checked above
        if self.kind == "standardize" and not np.all(np.asarray(std) > 0):
            return "std is not positive"
        return None

    def _patches_problem(self) -> Optional[str]:
        p = self.patches
        if p is None:
            return "patch_settings are missing"
        why = p.problem(self.feature_shape)
        if why is not None:
            return why
        d = p.size * p.size * self.feature_shape[-1]
        for name, shape in (("mean", (d,)), ("whitening", (d, d)), ("filters", (p.count, d))):
            a = getattr(self, name)
            if a is None or a.shape != shape or a.dtype.kind != "f":
                return f"{name} is not a float array of shape {shape}"
            if not np.isfinite(a).all():
                return f"{name} is not finite"
        return None

    def fingerprint(self) -> str:
        """sha256 hex digest of the kind, settings and fitted parameters (for the run's)."""
        h = hashlib.sha256()
        h.update(f"{_VERSION}\nkind={self.kind}\nshape={self.feature_shape}\n"
                 f"zca_reg={self.zca_reg!r}\nper_image={self.per_image}\n".encode())
        names = ["mean", "std", "whitening"]
        if self.patches is not None:  # only then: the other kinds keep their fingerprints
            h.update(self.patches.describe().encode())
            names.append("filters")
        for name in names:
            a = getattr(self, name)
            h.update(f"{name}=".encode())
            if a is not None:
                h.update(np.ascontiguousarray(a, dtype="<f8").data)
        return h.hexdigest()


def _fit_standardize(x, n_features: int) -> Preprocess:
    channels = x.shape[-1]
    count, mean, m2 = 0, np.zeros(channels), np.zeros(channels)
    for _, _, rows in _batches(x, n_features):
        r = rows.reshape(-1, channels)
        b_mean, b_m2 = r.mean(axis=0), ((r - r.mean(axis=0)) ** 2).sum(axis=0)
        total = count + r.shape[0]
        delta = b_mean - mean  # Chan et al.'s pairwise merge: stable in one pass
        mean = mean + delta * r.shape[0] / total
        m2 = m2 + b_m2 + delta**2 * count * r.shape[0] / total
        count = total
    std = np.sqrt(m2 / count)
    _require_finite("standardize", mean=mean, std=std)
    constant = std <= _CONSTANT_STD * np.abs(mean)
    return Preprocess("standardize", tuple(x.shape[1:]), mean=mean,
                      std=np.where((std > 0) & ~constant, std, 1.0))


def _require_finite(kind: str, **params) -> None:
    """Huge (finite) training values can overflow the float64 sums of a fit."""
    for name, a in params.items():
        if not np.isfinite(a).all():
            raise DataError(f"data.preprocess: fitting {kind} on the training rows (data.x1) "
                            f"gives a non-finite {name}: their values are too large for "
                            "float64 sums of squares; rescale the data")


def _fit_zca(x, n_features: int, zca_reg: float, per_image: bool) -> Preprocess:
    moment = np.zeros((n_features, n_features))
    for _, _, rows in _batches(x, n_features):
        flat = rows.reshape(rows.shape[0], -1)
        if per_image:
            flat = _layer_norm(flat)
        moment += flat.T @ flat
    moment /= x.shape[0]
    _require_finite("zca", **{"second moment": moment})
    eps = zca_reg * np.trace(moment) / n_features
    s, u = np.linalg.eigh(moment + eps * np.eye(n_features))
    s, u = s[::-1], u[:, ::-1]  # descending, as the reference's SVD
    if s[-1] <= 0:
        raise DataError(f"zca_reg: {zca_reg!r} leaves the training second moment singular "
                        "(all examples zero?); give a larger zca_reg (e.g. 0.1)")
    inv_sqrt = s ** -0.5
    if x.shape[0] < n_features:
        inv_sqrt[x.shape[0]:] = 1.0
    whitening = (u * inv_sqrt) @ u.T
    _require_finite("zca", whitening=whitening)
    return Preprocess("zca", tuple(x.shape[1:]), whitening=whitening, zca_reg=float(zca_reg),
                      per_image=per_image)


def _settings(values, bias) -> Optional[PatchSettings]:
    """The :class:`PatchSettings` :meth:`Preprocess.to_bytes` wrote (None if none)."""
    if values is None or bias is None:
        return None
    count, size, seed, pool, stride, split = (int(v) for v in values)
    return PatchSettings(count=count, size=size, seed=seed, bias=float(bias), pool=pool,
                         stride=stride, split=bool(split))


def fit_preprocess(x_train, kind: str, *, zca_reg: Optional[float] = None,
                   per_image: bool = True,
                   patches: Optional[PatchSettings] = None) -> Preprocess:
    """Fit ``kind`` (``standardize`` | ``zca`` | ``random_patches``) on ``x_train``
    (n, H, W, C) or (n, D) (or (n, L, C), (n, D, H, W, C): channels last, 1 to 3
    spatial axes; ``random_patches``: images (n, H, W, C) only).

    ``zca_reg`` (required for ``zca`` and ``random_patches``, > 0): the regularisation
    strength relative to the mean eigenvalue. ``per_image`` (``zca`` only): per-example
    centring and unit norm first. ``patches`` (``random_patches`` only): its settings.
    Any array with row slicing works (numpy memmap, h5py dataset).
    """
    if kind not in KINDS:
        raise UsageError(f"preprocess: {kind!r} is not accepted; accepted: {', '.join(KINDS)}")
    shape = tuple(np.shape(x_train))
    if len(shape) not in (2, 3, 4, 5) or 0 in shape:
        raise DataError(f"the training examples must be (n, H, W, C) images, (n, L, C) "
                        f"sequences, (n, D, H, W, C) volumes or (n, D) vectors, got shape "
                        f"{shape}")
    n_features = int(np.prod(shape[1:]))
    if kind == "standardize":
        if zca_reg is not None:
            raise UsageError(f"zca_reg: {zca_reg!r} is only used with preprocess: zca")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked for, below
            return _fit_standardize(x_train, n_features)
    try:
        reg = math.nan if zca_reg is None else float(zca_reg)
    except (TypeError, ValueError):
        reg = math.nan
    if not math.isfinite(reg) or reg <= 0 or isinstance(zca_reg, bool):
        raise UsageError(f"zca_reg: {zca_reg!r} is not accepted; preprocess: {kind} needs a "
                         "finite number > 0 (e.g. 0.1)")
    if kind == "random_patches":
        return _fit_patches(x_train, reg, patches)
    with np.errstate(over="ignore", invalid="ignore"):
        return _fit_zca(x_train, n_features, reg, per_image)


def _fit_patches(x, zca_reg: float, patches: Optional[PatchSettings]) -> Preprocess:
    if patches is None:
        raise UsageError("preprocess: random_patches needs its settings (patches=)")
    shape = tuple(x.shape[1:])
    why = patches.problem(shape)
    if why is not None:
        raise DataError(f"data.preprocess.{why}")
    n_features = int(np.prod(shape))
    with np.errstate(over="ignore", invalid="ignore"):
        mean, whitening, filters = _patches.fit_patches(
            _batches(x, n_features), x.shape[0], shape, patches, zca_reg)
    _require_finite("random_patches", mean=mean, whitening=whitening, filters=filters)
    largest = _patches.largest_response(mean, whitening, filters)
    if patches.bias >= largest:  # every feature 0 for every image: one kernel value
        raise DataError(f"data.preprocess.bias: {patches.bias!r} leaves every random_patches "
                        f"feature at 0 for every image (no patch responds to these filters "
                        f"above {largest:.4g}), so every pair would have the same kernel; "
                        f"expected a bias below {largest:.4g}")
    return Preprocess("random_patches", shape, mean=mean, whitening=whitening,
                      zca_reg=float(zca_reg), patches=patches, filters=filters)
