"""Side by side per-pair times of two checkouts' engines, alternating.

    python bench/engine_ab.py OLD_ROOT NEW_ROOT [--cases cnn1_gap,cnn5_gap,cnn5_flatten]
        [--dtypes float32,float64] [--rounds 3]

Each round runs ``bench/kc_case.py --mode tri`` (``kernel_matrix(kfn, x)``: compute's
route less the store, on 2 host devices) once per case, dtype and checkout, in fresh
processes with ``PYTHONPATH`` set to the checkout's root, old and new in turn, so a
neighbour's load falls on both alike. Per case and dtype it prints the best time per
pair of the triangle of each checkout (best over rounds of the best of ``kc_case``'s
reps), wall and the process's CPU time, and new/old; with two dtypes, a last row per
case gives the second's time over the first's for each checkout. A round runs every
dtype and checkout of a case in turn, so on a machine shared with other work the
ratios come from runs interleaved within seconds of each other: read those.

``--variant LABEL:VAR=VALUE[;VAR=VALUE]`` (repeated) adds settings of the process
environment measured on NEW beside OLD and NEW, in the same rounds, e.g. the host
device set-up (``--variant "1dev:XLA_FLAGS=--xla_force_host_platform_device_count=1"``);
each gets its own column pair and its ratio to old. ``--library``: every process
leaves jax's one CPU device (``kc_case --library``), as a library user's does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
N = {"cnn1_gap": 16, "cnn5_gap": 6, "cnn21_gap": 3, "myrtle5": 8,
     "cnn5_flatten": 96, "cnn21_flatten": 24, "fc2": 1000}


def one(root: Path, case: str, dtype: str, reps: int, extra=None, library=False) -> tuple:
    """Best (wall, CPU) seconds per pair of one ``kc_case`` process on the checkout at
    ``root``, with ``extra`` environment variables."""
    env = {**os.environ, "PYTHONPATH": str(root), "KERNELCLI_CACHE_DIR": "off",
           **(extra or {})}
    out = subprocess.run([sys.executable, str(BENCH / "kc_case.py"), case, "--n",
                          str(N[case]), "--mode", "tri", "--dtype", dtype,
                          "--reps", str(reps)] + ["--library"] * library,
                         env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return min(got["seconds"]) / got["entries"], min(got["cpu_seconds"]) / got["entries"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--cases", default="cnn1_gap,cnn5_gap,cnn5_flatten")
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--library", action="store_true",
                   help="kc_case --library: jax's one CPU device, as a library user's")
    p.add_argument("--variant", action="append", default=[],
                   help="LABEL:VAR=VALUE[;VAR=VALUE]: NEW with these environment settings")
    a = p.parse_args(argv)
    dtypes = a.dtypes.split(",")
    runs = [("old", a.old, None), ("new", a.new, None)] + [
        (label, a.new, dict(kv.split("=", 1) for kv in settings.split(";") if kv))
        for label, settings in (v.split(":", 1) for v in a.variant)]
    if a.variant:
        return compare(a, dtypes, runs)
    print("| case | N | dtype | old ms / pair | new ms / pair | new/old "
          "| old CPU ms / pair | new CPU ms / pair | new/old (CPU) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for case in a.cases.split(","):
        best = measure(a, case, dtypes, runs)
        for dtype in dtypes:
            (o, oc), (n, nc) = ([v * 1e3 for v in best[t, dtype]] for t in ("old", "new"))
            print(f"| {case} | {N[case]} | {dtype} | {o:.3g} | {n:.3g} | {n / o:.2f} "
                  f"| {oc:.3g} | {nc:.3g} | {nc / oc:.2f} |", flush=True)
        if len(dtypes) == 2:
            r = {t: [x / y for x, y in zip(best[t, dtypes[1]], best[t, dtypes[0]])]
                 for t in ("old", "new")}
            print(f"| {case} | {N[case]} | {dtypes[1]} / {dtypes[0]} | {r['old'][0]:.2f} "
                  f"| {r['new'][0]:.2f} | | {r['old'][1]:.2f} | {r['new'][1]:.2f} | |",
                  flush=True)


def measure(a, case: str, dtypes, runs) -> dict:
    """``{(label, dtype): [wall, CPU]}`` best seconds per pair over the rounds, every
    run of a round in turn."""
    best = {(t, d): [float("inf")] * 2 for t, _, _ in runs for d in dtypes}
    for _ in range(a.rounds):
        for dtype in dtypes:
            for tag, root, extra in runs:
                got = one(root, case, dtype, a.reps, extra, a.library)
                best[tag, dtype] = [min(b, g) for b, g in zip(best[tag, dtype], got)]
    return best


def compare(a, dtypes, runs) -> None:
    """The table with variants: per run, ms per pair wall / CPU, and each over old's."""
    labels = [t for t, _, _ in runs]
    print("| case | N | dtype | " + " | ".join(f"{t} ms / pair (CPU)" for t in labels)
          + " | " + " | ".join(f"{t}/old (CPU)" for t in labels[1:]) + " |")
    print("|---|---:|---|" + "---:|" * (2 * len(labels) - 1))
    for case in a.cases.split(","):
        best = measure(a, case, dtypes, runs)
        for dtype in dtypes:
            o, oc = best["old", dtype]
            cells = [f"{w * 1e3:.3g} ({c * 1e3:.3g})" for w, c in (best[t, dtype] for t in labels)]
            ratios = [f"{best[t, dtype][0] / o:.2f} ({best[t, dtype][1] / oc:.2f})"
                      for t in labels[1:]]
            print(f"| {case} | {N[case]} | {dtype} | " + " | ".join(cells + ratios) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
