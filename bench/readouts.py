"""Readouts: one pass with four heads against four separate runs of the truncated nets.

A depth-12 conv+relu network (12 blocks of conv 3x3 SAME + relu: 24 body layers) with a
global_avg_pool + dense head read out after 3, 6, 9 and 12 blocks (``after: [6, 12,
18, 24]``), on float32 ``(N, 16, 16, 3)`` standard-normal inputs, NNGP and NTK, through
``kernelcli.run.kernel_matrix`` (compute's route: planner, per-input pass, blocks).
Compilation is timed apart (first call) from the best of ``--reps`` warm calls; the
readouts are checked against the separate runs.

    .venv/bin/python bench/readouts.py            # N=16, 2 reps
    .venv/bin/python bench/readouts.py --n 24 --reps 3
"""

from __future__ import annotations

import argparse
import os
import time

from kernelcli.run import configure_host_devices

configure_host_devices()  # before jax starts: one CPU device per core, as the CLI

import numpy as np  # noqa: E402

from kernelcli.config import check_architecture, parse_architecture  # noqa: E402
from kernelcli.kernels import build_kernel_fn  # noqa: E402
from kernelcli.run import kernel_matrix  # noqa: E402

BLOCKS = 12
AFTER_BLOCKS = (3, 6, 9, 12)
CONV = {"conv": {"filter": 3, "padding": "SAME", "W_std": 1.4142135623730951,
                 "b_std": 0.05, "width": 1}}
HEAD = ["global_avg_pool", {"dense": {"W_std": 1.0}}]


def timed(kfn, x, reps: int):
    t = time.perf_counter()
    out = kernel_matrix(kfn, x, None)
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        out = kernel_matrix(kfn, x, None)
        best = min(best, time.perf_counter() - t)
    return out, first, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal(
        (args.n, args.size, args.size, 3)).astype(np.float32)
    after = [2 * b for b in AFTER_BLOCKS]
    arch = parse_architecture({"layers": [CONV, "relu"] * BLOCKS,
                               "readouts": {"head": HEAD, "after": after}})
    check_architecture(arch, x.shape[1:])
    print(f"N={args.n}, inputs {x.shape[1:]}, float32, nngp+ntk; body {BLOCKS} x (conv, relu),"
          f" head global_avg_pool + dense after {after} body layers; load average "
          f"{os.getloadavg()[0]:.1f} at start, {os.cpu_count()} CPUs")
    one, c_one, t_one = timed(build_kernel_fn(arch, x.shape[1:]), x, args.reps)
    rows = [("one pass, 4 readouts", c_one, t_one)]
    c_sep = t_sep = 0.0
    worst = 0.0
    for a in after:
        out, c, t = timed(build_kernel_fn(arch.truncated(a), x.shape[1:]), x, args.reps)
        rows.append((f"separate, {a} body layers + head", c, t))
        c_sep += c
        t_sep += t
        for kind in ("nngp", "ntk"):
            ref = out[kind]
            worst = max(worst, float(np.max(np.abs(one[f"{kind}_d{a}"] - ref))
                                     / np.max(np.abs(ref))))
    rows.append(("separate, sum of 4", c_sep, t_sep))
    print("| route | first call s (compile + run) | warm call s (best of "
          f"{args.reps}) |\n|---|---|---|")
    for name, c, t in rows:
        print(f"| {name} | {c:.2f} | {t:.2f} |")
    print(f"warm ratio separate / one pass: {t_sep / t_one:.2f}x; first-call ratio "
          f"{c_sep / c_one:.2f}x; layers per pair {sum(after) + len(HEAD) * 4} separate vs "
          f"{after[-1] + len(HEAD) * 4} one pass ({(sum(after) + 8) / (after[-1] + 8):.2f}x)")
    print(f"max relative difference of a readout from its separate run: {worst:.1e}; "
          f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
