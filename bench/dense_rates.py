"""The dense routes' kernels at one size: numpy's ``cholesky`` against the in-place
LAPACK ``dpotrf`` the Cholesky route calls, the leave-one-out diagonal by the earlier
substitution in slabs against LAPACK's ``dtrtri``, ``eigh`` (the eigen route), and the
float64 matrix product for scale; wall and CPU seconds, multiply-adds per second.

    .venv/bin/python bench/dense_rates.py 12000
"""

from __future__ import annotations

import os
import sys
import time

from kernelcli._blas import choose_blas_core

choose_blas_core()  # before numpy loads: the kernels the CLI gets
import numpy as np  # noqa: E402

from kernelcli.solvers._cholesky import factor_in_place  # noqa: E402  # what the route runs
from kernelcli.solvers._selection import inverse_diagonal  # noqa: E402


def slab_inverse_diagonal(chol: np.ndarray, step: int = 256) -> np.ndarray:
    """The earlier leave-one-out diagonal: forward substitution by slabs of columns."""
    n = chol.shape[0]
    inv = {i0: np.linalg.inv(chol[i0:i0 + step, i0:i0 + step]) for i0 in range(0, n, step)}
    out = np.zeros(n)
    for j0 in range(0, n, step):
        j1 = min(j0 + step, n)
        x = np.zeros((n - j0, j1 - j0))
        x[:j1 - j0] = inv[j0]
        for i0 in range(j1, n, step):
            i1 = min(i0 + step, n)
            x[i0 - j0:i1 - j0] = -inv[i0] @ (chol[i0:i1, j0:i0] @ x[:i0 - j0])
        out[j0:j1] = np.einsum("ij,ij->j", x, x)
    return out


def timed(name: str, call, madds: float):
    t, c = time.perf_counter(), time.process_time()
    out = call()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"| {name} | {wall:.2f} | {cpu:.2f} | {madds / wall / 1e9:.0f} | "
          f"{os.getloadavg()[0]:.1f} |", flush=True)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, 400))
    k = a @ a.T / 400
    k[np.diag_indices(n)] += 1e-3
    print(f"n = {n:,}\n\n| step | wall s | CPU s | G multiply-adds/s | load |\n"
          "|---|---:|---:|---:|---:|")
    x = rng.standard_normal((n, n))
    timed("numpy float64 matrix product", lambda: x @ x, n ** 3)
    numpy_factor = timed("numpy cholesky", lambda: np.linalg.cholesky(k), n ** 3 / 6)

    def in_place():
        w = np.array(k)
        factor_in_place(w)
        return w

    ours = timed("dpotrf in place (the route's)", in_place, n ** 3 / 6)
    print(f"\nfactors agree to {np.abs(ours - numpy_factor).max() / np.abs(ours).max():.1e}\n")
    old = timed("inverse diagonal, slabs (earlier)", lambda: slab_inverse_diagonal(ours),
                n ** 3 / 6)
    new = timed("inverse diagonal, dtrtri (the route's)", lambda: inverse_diagonal(ours),
                n ** 3 / 6)
    print(f"\ndiagonals agree to {np.abs(old - new).max() / new.max():.1e}")
    if n <= 8000:
        timed("eigh (n^3 multiply-adds as the unit)", lambda: np.linalg.eigh(k), n ** 3)


if __name__ == "__main__":
    main()
