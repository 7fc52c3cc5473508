"""Nystrom kernel ridge regression from the kernel's columns at ``M`` landmarks.

With landmarks ``Z`` (rows of the training set ``X``, ``N`` rows), the Nystrom
approximation of the training kernel is ``K~ = K_nm K_mm^+ K_mn``. Kernel ridge
regression with ``K~`` in place of ``K`` (Williams and Seeger 2001; the estimator
Falkon solves, Rudi et al. 2017) predicts ``k_tm beta`` with

    beta = (K_mn K_nm + reg K_mm)^{-1} K_mn Y,

never forming anything ``N x N``. It is solved here in its feature form: with
``K_mm = U diag(s) U^T`` (eigenvalues below ``M eps s_max`` dropped, the
pseudo-inverse), ``phi(x) = k_xm U s^{-1/2}`` gives ``K~ = Phi Phi^T``, so the
weights are ``w = (Phi^T Phi + reg I)^{-1} Phi^T Y`` -- an ``r x r`` system
(``r <= M``) whose conditioning is bounded by the ridge, unlike the normal
equations above, whose squared kernel loses half the digits of float64.

The ridge keeps the meaning it has for the full kernel: ``reg = ridge *
trace(K)/N``, with ``trace(K)/N`` estimated by the landmarks' mean diagonal
``trace(K_mm)/M`` (they are a uniform draw of the training rows). With ``M = N``
the landmarks are the training set and the predictions are the full kernel's.

The ridge is chosen as the CG solve chooses it: k-fold cross-validation on the
training rows (row ``i`` in fold ``i mod k``), every ridge and fold from one
pass over ``K_nm`` that accumulates each fold's ``Phi_f^T Phi_f`` and
``Phi_f^T Y_f``, and per fold and ridge one ``r x r`` solve. The feature map is the
landmarks' for every fold (a fold's held-out rows may be landmarks: their inputs,
never their labels, shape the map).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ._messages import not_pd_message, smallest_eigenvalue


@dataclass(frozen=True)
class NystromMap:
    """``phi(x) = k_xm @ projection``; ``scale``: ``trace(K_mm) / M``."""

    projection: np.ndarray  # (M, r) float64
    scale: float

    @property
    def rank(self) -> int:
        return int(self.projection.shape[1])

    def features(self, k_rows: np.ndarray) -> np.ndarray:
        """``phi`` of rows of ``K(., Z)`` (float64, ``(n, r)``)."""
        return np.asarray(k_rows, dtype=np.float64) @ self.projection


def nystrom_map(k_mm: np.ndarray) -> NystromMap:
    """The feature map of the landmarks' kernel ``K(Z, Z)`` (symmetrised in float64)."""
    k = np.asarray(k_mm, dtype=np.float64)
    k = (k + k.T) / 2
    s, u = np.linalg.eigh(k)
    top = float(s[-1]) if s.size else 0.0
    keep = s > max(top, 0.0) * k.shape[0] * np.finfo(np.float64).eps
    if top <= 0 or not keep.any():
        raise ValueError("K(Z, Z) has no positive eigenvalue: the landmarks' kernel is zero")
    return NystromMap(u[:, keep] / np.sqrt(s[keep]), float(np.trace(k)) / k.shape[0])


def fold_sums(nmap: NystromMap, bands: Iterable, y: np.ndarray, folds: int) -> tuple:
    """``(G, B)``: per fold ``Phi_f^T Phi_f`` ``(k, r, r)`` and ``Phi_f^T Y_f``
    ``(k, r, C)``, from ``bands`` of ``(first row, rows of K(X, Z))``."""
    r, c = nmap.rank, y.shape[1]
    gram = np.zeros((folds, r, r))
    rhs = np.zeros((folds, r, c))
    for start, rows in bands:
        phi = nmap.features(rows)
        fold = (start + np.arange(phi.shape[0])) % folds
        for f in range(folds):
            p = phi[fold == f]
            gram[f] += p.T @ p
            rhs[f] += p.T @ y[start:start + phi.shape[0]][fold == f]
    return gram, rhs


def nystrom_weights(nmap: NystromMap, gram: np.ndarray, rhs: np.ndarray, ridges,
                    kind: str, n: int) -> dict:
    """Per ridge ``(k + 1, r, C)`` weights -- fold ``f`` trained without fold ``f``,
    the last on every row -- or the not-positive-definite message (where
    ``Phi^T Phi + reg I`` has no Cholesky factor: a zero ridge on a singular Gram).
    A Cholesky check and an LU solve per fold and ridge: together a tenth of one
    ``eigh`` of the Gram at ``M = 2,000`` on this machine, so cheaper for any
    sweep of a handful of ridges."""
    total_g, total_b = gram.sum(axis=0), rhs.sum(axis=0)
    systems = [(total_g - gram[f], total_b - rhs[f]) for f in range(gram.shape[0])]
    systems.append((total_g, total_b))
    eye = np.eye(nmap.rank)
    out: dict = {}  # ridge -> weights, or the message
    for ridge in ridges:
        reg = ridge * nmap.scale
        weights = []
        for g, b in systems:
            a = (g + g.T) / 2 + reg * eye
            try:
                np.linalg.cholesky(a)
            except np.linalg.LinAlgError:
                out[ridge] = not_pd_message(kind, ridge, True, reg, n,
                                            f"Nystrom, rank {nmap.rank}",
                                            smallest_eigenvalue((g + g.T) / 2), nmap.scale)
                break
            weights.append(np.linalg.solve(a, b))
        else:
            out[ridge] = np.stack(weights)
    return out


def nystrom_memory_bytes(m: int, classes: int, folds: int, band_bytes: int) -> int:
    """Float64 bytes of the solve: the map, per fold its Gram and system, the
    weights of one ridge, a band of ``K(X, Z)`` and its features."""
    return 8 * (2 * m * m + 2 * (folds + 1) * m * m + (folds + 1) * m * classes) \
        + 3 * band_bytes
