"""Open, validate and fingerprint the data a run configuration names.

Nothing here holds a whole data set in memory: ``.npy`` files are memory-mapped,
HDF5 datasets read by slices, and every check streams rows.

A run has up to three sets: the rows ``x1``, either a second set ``x2`` (the
rectangle ``K(x1, x2)``) or a test set ``test`` (the training kernel
``K(x1, x1)`` plus ``K(test, x1)``). A run grown by ``kernelcli extend --append``
has more training rows after ``x1``: its training set is ``x1`` followed by each
appended file (``appended``). The executor sees two row sources:
``rows`` (the training rows, followed by ``test`` when there is one) and ``columns``
(``x2``, else ``rows``), with the preprocessing applied as rows are read.

A landmark run (``data.landmarks``, :mod:`._landmark_rows`) is a rectangle: its rows are
the training rows, the test rows and the landmarks ``Z``, its columns ``Z``; the
planner sees ``n1 = N + T + M`` rows, ``n2 = M`` columns and no test rows of its own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..config import RunConfig, check_architecture
from ..data import (
    ArraySource,
    ConcatRows,
    PatchSettings,
    Preprocess,
    Preprocessed,
    RowSource,
    SliceableRows,
    check_finite,
    check_pair,
    fingerprint,
    fit_preprocess,
    input_bound,
    load_labels,
    open_array,
)
from ._landmark_rows import FINGERPRINT_KEY, LandmarkRows, choose_landmarks, landmarks_fingerprint


@dataclass
class Inputs:
    """The opened data of a run. ``x2`` is ``None`` for a symmetric run; ``test``
    ``None`` without a test set. ``labels`` / ``test_labels``: (n,) int64 or None."""

    x1: ArraySource
    x2: Optional[ArraySource]
    test: Optional[ArraySource] = None
    labels: Optional[np.ndarray] = None
    test_labels: Optional[np.ndarray] = None
    preprocess: Optional[Preprocess] = None
    appended: tuple = ()  # ArraySources of `kernelcli extend --append`, after x1
    landmarks: Optional[np.ndarray] = None  # rows of x1 (data.landmarks), sorted

    @property
    def symmetric(self) -> bool:
        return self.x2 is None and self.landmarks is None

    @property
    def n1(self) -> int:
        """The rows of the plan: the training rows (a landmark run: all of its rows)."""
        n = self.x1.n + sum(a.n for a in self.appended)
        if self.landmarks is not None:
            n += (0 if self.test is None else self.test.n) + self.landmarks.size
        return n

    @property
    def example_shape(self) -> tuple[int, ...]:
        """An example's shape as the kernel reads it (preprocessed)."""
        if self.preprocess is None:
            return tuple(self.x1.example_shape)
        return tuple(self.preprocess.output_shape)

    @property
    def n2(self) -> int:
        if self.landmarks is not None:
            return int(self.landmarks.size)
        return self.n1 if self.x2 is None else self.x2.n

    @property
    def n_test(self) -> int:
        """The plan's test rows (a landmark run has its test rows among ``n1``)."""
        return 0 if self.test is None or self.landmarks is not None else self.test.n

    def _view(self, src: RowSource) -> RowSource:
        return src if self.preprocess is None else Preprocessed(src, self.preprocess)

    @property
    def rows(self) -> RowSource:
        """Block rows: the training rows then ``test`` (``n1 + n_test`` rows),
        preprocessed."""
        parts = [self._view(s) for s in (self.x1, *self.appended, self.test) if s is not None]
        if self.landmarks is not None:
            parts.append(self.columns)
        return parts[0] if len(parts) == 1 else ConcatRows(parts)

    @property
    def columns(self) -> RowSource:
        """Block columns: ``x2`` (preprocessed), the landmarks, or, for a symmetric run,
        ``rows``."""
        if self.landmarks is not None:
            return self._view(LandmarkRows(self.x1, self.landmarks))
        return self.rows if self.x2 is None else self._view(self.x2)

    def fingerprints(self, stop=None) -> dict:
        """The data's fingerprints; a requested ``stop`` is honoured between batches."""
        out = {"x1": fingerprint(self.x1, stop=stop)}
        if self.x2 is not None:
            out["x2"] = fingerprint(self.x2, stop=stop)
        if self.test is not None:
            out["test"] = fingerprint(self.test, stop=stop)
        if self.appended:
            h = hashlib.sha256(b"kernelcli-appended-v1\n")
            for src in self.appended:
                h.update(f"{fingerprint(src, stop=stop)}\n".encode())
            out["append"] = h.hexdigest()
        if self.labels is not None or self.test_labels is not None:
            out["labels"] = labels_fingerprint(self.labels, self.test_labels)
        if self.preprocess is not None:
            out["preprocess"] = self.preprocess.fingerprint()
        if self.landmarks is not None:
            out[FINGERPRINT_KEY] = landmarks_fingerprint(self.landmarks, self.x1.n)
        return out

    def close(self) -> None:
        for src in (self.x1, self.x2, self.test, *self.appended):
            if src is not None:
                src.close()


def labels_fingerprint(labels, test_labels) -> str:
    h = hashlib.sha256(b"kernelcli-labels-v1\n")
    for name, y in (("labels", labels), ("test_labels", test_labels)):
        h.update(f"{name}={None if y is None else len(y)}\n".encode())
        if y is not None:
            h.update(np.ascontiguousarray(y, dtype="<i8").data)
    return h.hexdigest()


def open_inputs(cfg: RunConfig, check_values: bool = True,
                preprocess: Optional[Preprocess] = None, fit: bool = True,
                appends=(), stop=None) -> Inputs:
    """Open ``data.x1`` (and ``data.x2`` or ``data.test``, and the labels), check
    shapes against the architecture and, with ``check_values``, that every value is
    finite and small enough not to overflow the kernel in ``kernel.dtype``
    (:data:`~kernelcli.data.INPUT_BOUNDS`). With ``data.preprocess`` the raw values
    are computed on in float64 (so that is their bound) and the preprocessed values
    are what must fit ``kernel.dtype``. A requested ``stop`` is honoured between the
    checked batches (a data set of 10**9 rows takes a while).

    ``data.preprocess``: ``preprocess`` (a fitted one, e.g. read back from a run
    directory) is used as given; otherwise, with ``fit``, it is fitted on ``x1``;
    without ``fit`` (``estimate``) ``random_patches`` maps rows with a stand-in of the
    fit's shapes and cost (:meth:`~kernelcli.data.Preprocess.stand_in`), the other kinds
    not at all.

    ``appends``: the training rows ``kernelcli extend --append`` added, as the
    manifest records them (``x``, ``key``, ``labels``, ``labels_key``), in order.
    """
    d = cfg.data
    opened = []
    # What a compressed input may unpack to: the run's memory (data._unpack).
    bounds = dict(max_bytes=cfg.compute.memory, stop=stop)
    try:
        x1 = open_array(d.x1, d.key, layout=d.layout, limit=d.limit, what="data.x1", **bounds)
        opened.append(x1)
        x2 = test = None
        if d.x2 is not None:
            x2 = open_array(d.x2, _key(d.x2, d.x2_key, d.key),
                            layout=d.layout, limit=None, what="data.x2", **bounds)
            opened.append(x2)
            check_pair(x1, x2)
        if d.test is not None:
            test = open_array(d.test, _key(d.test, d.test_key, d.key),
                              layout=d.layout, limit=d.test_limit, what="data.test", **bounds)
            opened.append(test)
            check_pair(x1, test)
        appended = []
        for rec in appends:
            src = open_array(Path(rec["x"]), _key(Path(rec["x"]), rec.get("key"), d.key),
                             layout=d.layout, limit=None, what="--append", **bounds)
            opened.append(src)
            appended.append(src)
            check_pair(x1, src)
        check_architecture(cfg.architecture, preprocessed_shape(cfg, x1.example_shape))
        landmarks = None
        if d.landmarks is not None:
            landmarks = choose_landmarks(x1.n, d.landmarks)
        largest = {}
        if check_values:
            raw_dtype = "float64" if d.preprocess is not None else cfg.kernel.dtype
            for src in opened:
                largest[src.what] = check_finite(src, dtype=raw_dtype, stop=stop)
        labels = test_labels = None
        if d.has_labels:
            labels = load_labels(d.labels or d.x1, d.labels_key, limit=d.limit, n=x1.n,
                                 what="data.labels_key" if d.labels is None else "data.labels")
            parts = [labels] + [_appended_labels(rec, src)
                                for rec, src in zip(appends, appended, strict=True)]
            labels = np.concatenate(parts) if appended else labels
        if test is not None and (d.test_labels is not None or d.test_labels_key is not None):
            assert d.test is not None  # test was opened from it
            test_labels = load_labels(d.test_labels or d.test, d.test_labels_key,
                                      limit=d.test_limit, n=test.n,
                                      what="data.test_labels_key" if d.test_labels is None
                                      else "data.test_labels")
        settings = patch_settings(cfg)
        if d.preprocess is not None and preprocess is None and fit:
            p = d.preprocess
            preprocess = fit_preprocess(SliceableRows(x1), p.kind,
                                        zca_reg=p.zca_reg if p.kind != "standardize" else None,
                                        per_image=p.per_image, patches=settings)
        elif d.preprocess is not None and preprocess is None and settings is not None:
            assert d.preprocess.zca_reg is not None  # random_patches: filled in by the loader
            preprocess = Preprocess.stand_in(x1.example_shape, settings, d.preprocess.zca_reg)
        if check_values and preprocess is not None:
            for src in opened:
                check_preprocessed(src, preprocess, largest[src.what], cfg.kernel.dtype)
    except BaseException:
        for src in opened:
            src.close()
        raise
    return Inputs(x1, x2, test, labels, test_labels, preprocess, tuple(appended), landmarks)


def patch_settings(cfg: RunConfig) -> Optional[PatchSettings]:
    """``data.preprocess: {kind: random_patches, ...}``'s settings (None for any other)."""
    p = cfg.data.preprocess
    if p is None or p.kind != "random_patches":
        return None
    assert None not in (p.count, p.size, p.seed, p.bias, p.pool, p.stride, p.split)
    return PatchSettings(count=int(p.count or 0), size=int(p.size or 0), seed=int(p.seed or 0),
                         bias=float(p.bias or 0.0), pool=int(p.pool or 0),
                         stride=int(p.stride or 0), split=bool(p.split))


def preprocessed_shape(cfg: RunConfig, shape) -> tuple[int, ...]:
    """An example's shape after ``data.preprocess`` (only random patches change it);
    ConfigError naming the ``data.preprocess`` key when the images cannot take it."""
    settings = patch_settings(cfg)
    if settings is None:
        return tuple(shape)
    why = settings.problem(shape)
    if why is not None:
        from ..errors import ConfigError

        raise ConfigError(f"data.preprocess.{why}")
    return settings.output_shape(shape)


def _appended_labels(rec: dict, src) -> np.ndarray:
    """The labels of an appended file (``--append-labels`` / ``--append-labels-key``)."""
    where = rec.get("labels") or rec["x"]
    what = "--append-labels" if rec.get("labels") else "--append-labels-key"
    return load_labels(Path(where), rec.get("labels_key"), limit=None, n=src.n, what=what)


def _key(path: Path, own: Optional[str], default: Optional[str]) -> Optional[str]:
    """The array name of a second file (``x2``, ``test``): its own key, else ``data.key``
    -- but only for a file that has names (a ``.npy`` holds one array, so an ``.npz``
    training file with ``key: x`` and a ``.npy`` test file go together)."""
    if own is not None:
        return own
    return None if Path(path).suffix.lower() == ".npy" else default


def check_preprocess_file(path: Path, expected: str) -> Preprocess:
    """The fitted preprocessing stored at ``path``, checked against its fingerprint."""
    pp = Preprocess.load(path)
    if pp.fingerprint() != expected:
        from ..errors import RunDirError

        raise RunDirError.naming(f"{path} does not hold the preprocessing this run was fitted "
                                 f"with (fingerprint differs); start afresh with <<overwrite>>")
    return pp


_CHECK_BATCH_BYTES = 64 * 2**20


def check_preprocessed(src: ArraySource, preprocess: Preprocess, largest: float,
                       dtype: str) -> None:
    """The preprocessed rows of ``src`` must fit ``dtype``'s input bound. The bound of
    the outputs from the largest raw magnitude usually settles it at no cost; only
    when it does not are the rows streamed through the preprocessing (which then
    names the first row too large)."""
    if preprocess.output_bound(largest) <= input_bound(dtype):
        return
    view = Preprocessed(src, preprocess)
    # as many rows as their raw or their preprocessed values fit in the batch
    features = max(int(np.prod(src.example_shape)), int(np.prod(view.example_shape)))
    step = max(1, _CHECK_BATCH_BYTES // (8 * max(1, features)))
    for start in range(0, src.n, step):
        view.read(start, min(start + step, src.n), dtype=dtype)


def input_paths(cfg: RunConfig) -> dict:
    """The files a run reads, by configuration key (``data.x1``, ...); ``None`` for
    those it has not. What kernelcli must never write, move or delete."""
    d = cfg.data
    return {"data.x1": d.x1, "data.x2": d.x2, "data.test": d.test, "data.labels": d.labels,
            "data.test_labels": d.test_labels}
