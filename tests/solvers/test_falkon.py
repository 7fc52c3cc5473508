"""Falkon (``predict --solver cg`` on a landmark run): the direct Nystrom solve's
answers from preconditioned CG on the M x M system, in memory that does not grow
with the number of training rows."""

from __future__ import annotations

import re
import tracemalloc

import numpy as np

from kernelcli.solvers import (
    choose_landmark_solver,
    falkon_memory_bytes,
    falkon_weights,
    fold_sums,
    nystrom_map,
    nystrom_weights,
)

RIDGES = [1e-3, 1e-1]


def _kernel(a, b):
    return np.exp(-((a[:, None] - b[None]) ** 2).sum(-1) / (2 * a.shape[1]))


def _problem(n, m=30, t=20, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n + t, 6))
    z = np.sort(rng.choice(n, m, replace=False))
    return x, z, np.eye(3)[rng.integers(0, 3, n)]


def _bands(x, z, n, rows=64):
    """Views of ``K(X, Z)``, computed here beforehand (nothing allocated per band)."""
    k_nm = _kernel(x[:n], x[z])

    def bands():
        for s in range(0, n, rows):
            yield s, k_nm[s:s + rows]
    return bands


def test_falkon_gives_the_direct_solves_predictions_for_every_ridge_and_fold():
    n, ridges = 400, [1e-6, 1e-3, 1e-1, 1.0]
    x, z, y = _problem(n)
    k_mm, k_tm = _kernel(x[z], x[z]), _kernel(x[n:], x[z])
    sol = falkon_weights(k_mm, _bands(x, z, n), y, ridges, "nngp", 5)
    nmap = nystrom_map(k_mm)
    direct = nystrom_weights(nmap, *fold_sums(nmap, _bands(x, z, n)(), y, 5), ridges,
                             "nngp", n)
    for ridge in ridges:
        assert sol.weights[ridge].shape == (6, len(z), 3)
        for f in range(6):
            ref = nmap.features(k_tm) @ direct[ridge][f]
            np.testing.assert_allclose(k_tm @ sol.weights[ridge][f], ref, rtol=0,
                                       atol=1e-6 * np.abs(ref).max())


def test_falkons_memory_does_not_grow_with_the_training_rows():
    peaks = []
    for n in (100, 500, 4000):  # the first call: numpy's one-time allocations
        x, z, y = _problem(n, m=40)
        bands, k_mm = _bands(x, z, n), _kernel(x[z], x[z])
        tracemalloc.start()
        falkon_weights(k_mm, bands, y, RIDGES, "nngp", 5)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    band = 64 * 40 * 8
    assert peaks[2] <= falkon_memory_bytes(40, 3, len(RIDGES), 5, band)
    assert peaks[2] - peaks[1] < band  # K(X, Z) and the targets are the caller's


def test_auto_takes_falkon_when_the_rectangle_does_not_fit():
    assert choose_landmark_solver(200_000, 1_000, "auto", 8 * 200_000 * 1_000) == "direct"
    assert choose_landmark_solver(200_000, 1_000, "auto", 8 * 200_000 * 1_000 - 1) == "falkon"
    assert choose_landmark_solver(10, 5, "cg") == "falkon"
    assert choose_landmark_solver(10, 5, "cholesky") == "direct"


def test_a_ridge_that_does_not_converge_gets_its_message_and_the_others_their_weights():
    x, z, y = _problem(200, m=12)
    z = np.r_[z, z[:4]]  # duplicate landmarks: K(Z, Z) singular, a floor under the residual
    sol = falkon_weights(_kernel(x[z], x[z]), _bands(x, z, 200), y, [1e-4, 1.0], "ntk", 5,
                         maxiter=80)
    assert re.fullmatch(
        r"Falkon on the ntk kernel \(ridge 0\.0001\) stopped after 8\d passes over K\(X, Z\) "
        r"at relative residual \d\.\d\de-0[5-8] > 1e-08; use a larger <<ridges>> value, or "
        r"<<solver>> cholesky \(the direct solve, which drops the null space of K\(Z, Z\)\)",
        sol.weights[1e-4])
    assert sol.weights[1.0].shape == (6, 16, 3)
