"""Input preprocessing fitted on the training set only: standardisation and ZCA (numpy only).

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

Memory: the fit holds one batch and the (d, d) float64 moment (75 MiB at
d = 3072); ``apply`` holds its output and one batch.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ..errors import DataError, UsageError

KINDS = ("standardize", "zca")
_VERSION = "kernelcli-preprocess-v1"
_BATCH_BYTES = 64 * 2**20  # float64 bytes of one batch of rows


def _batches(x, n_features: int):
    """Yield ``(start, stop, rows (stop - start, ...) float64)``, checking finiteness."""
    step = max(1, _BATCH_BYTES // (8 * max(1, n_features)))
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
    ``mean``, ``std`` (C,) for ``standardize``; ``whitening`` (d, d) for ``zca``."""

    kind: str
    feature_shape: Tuple[int, ...]
    mean: Optional[np.ndarray] = None
    std: Optional[np.ndarray] = None
    whitening: Optional[np.ndarray] = None
    zca_reg: Optional[float] = None
    per_image: bool = True

    @property
    def n_features(self) -> int:
        return int(np.prod(self.feature_shape))

    def apply(self, x, dtype=np.float64) -> np.ndarray:
        """``x`` (m, *feature_shape) -> preprocessed array of the same shape, in ``dtype``."""
        shape = tuple(np.shape(x))
        if shape[1:] != self.feature_shape:
            raise DataError(f"examples of shape {shape[1:]} cannot be preprocessed with a "
                            f"preprocessing fitted on examples of shape {self.feature_shape}")
        out = np.empty(shape, dtype=dtype)
        for start, stop, rows in _batches(x, self.n_features):
            if self.kind == "standardize":
                out[start:stop] = (rows - self.mean) / self.std
            else:
                flat = rows.reshape(stop - start, -1)
                if self.per_image:
                    flat = _layer_norm(flat)
                out[start:stop] = (flat @ self.whitening).reshape(rows.shape)
        return out

    def to_bytes(self) -> bytes:
        """The fitted preprocessing as ``.npz`` bytes (plain arrays, no pickle)."""
        import io

        arrays = {"kind": np.array(self.kind), "feature_shape": np.array(self.feature_shape),
                  "per_image": np.array(self.per_image)}
        if self.zca_reg is not None:
            arrays["zca_reg"] = np.array(self.zca_reg)
        for name in ("mean", "std", "whitening"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def load(cls, path) -> "Preprocess":
        """Read what :meth:`to_bytes` wrote (``DataError`` naming ``path`` if unreadable)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                get = lambda name: z[name] if name in z.files else None  # noqa: E731
                reg = get("zca_reg")
                return cls(kind=str(z["kind"]), feature_shape=tuple(int(v) for v in
                                                                    z["feature_shape"]),
                           mean=get("mean"), std=get("std"), whitening=get("whitening"),
                           zca_reg=None if reg is None else float(reg),
                           per_image=bool(z["per_image"]))
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{path}: cannot read the run's fitted preprocessing ({exc}); "
                            "start the run afresh with --overwrite") from None

    def fingerprint(self) -> str:
        """sha256 hex digest of the kind, settings and fitted parameters (for the run's)."""
        h = hashlib.sha256()
        h.update(f"{_VERSION}\nkind={self.kind}\nshape={self.feature_shape}\n"
                 f"zca_reg={self.zca_reg!r}\nper_image={self.per_image}\n".encode())
        for name in ("mean", "std", "whitening"):
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
    return Preprocess("standardize", tuple(x.shape[1:]), mean=mean,
                      std=np.where(std > 0, std, 1.0))


def _fit_zca(x, n_features: int, zca_reg: float, per_image: bool) -> Preprocess:
    moment = np.zeros((n_features, n_features))
    for _, _, rows in _batches(x, n_features):
        flat = rows.reshape(rows.shape[0], -1)
        if per_image:
            flat = _layer_norm(flat)
        moment += flat.T @ flat
    moment /= x.shape[0]
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
    return Preprocess("zca", tuple(x.shape[1:]), whitening=whitening, zca_reg=float(zca_reg),
                      per_image=per_image)


def fit_preprocess(x_train, kind: str, *, zca_reg: Optional[float] = None,
                   per_image: bool = True) -> Preprocess:
    """Fit ``kind`` (``standardize`` | ``zca``) on ``x_train`` (n, H, W, C) or (n, D).

    ``zca_reg`` (required for ``zca``, > 0): the regularisation strength relative
    to the mean eigenvalue. ``per_image`` (``zca`` only): per-example centring and
    unit norm first. Any array with row slicing works (numpy memmap, h5py dataset).
    """
    if kind not in KINDS:
        raise UsageError(f"preprocess: {kind!r} is not accepted; accepted: {', '.join(KINDS)}")
    shape = tuple(np.shape(x_train))
    if len(shape) not in (2, 4) or 0 in shape:
        raise DataError(f"the training examples must be (n, H, W, C) images or (n, D) vectors, "
                        f"got shape {shape}")
    n_features = int(np.prod(shape[1:]))
    if kind == "standardize":
        if zca_reg is not None:
            raise UsageError(f"zca_reg: {zca_reg!r} is only used with preprocess: zca")
        return _fit_standardize(x_train, n_features)
    try:
        reg = float(zca_reg)
    except (TypeError, ValueError):
        reg = math.nan
    if not math.isfinite(reg) or reg <= 0 or isinstance(zca_reg, bool):
        raise UsageError(f"zca_reg: {zca_reg!r} is not accepted; preprocess: zca needs a "
                         "finite number > 0 (e.g. 0.1)")
    return _fit_zca(x_train, n_features, reg, per_image)
