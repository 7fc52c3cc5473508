"""Side by side per-pair times of two checkouts' engines, alternating (issue 26).

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


def one(root: Path, case: str, dtype: str, reps: int) -> tuple:
    """Best (wall, CPU) seconds per pair of one ``kc_case`` process on the checkout at
    ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "KERNELCLI_CACHE_DIR": "off"}
    out = subprocess.run([sys.executable, str(BENCH / "kc_case.py"), case, "--n",
                          str(N[case]), "--mode", "tri", "--dtype", dtype,
                          "--reps", str(reps)],
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
    a = p.parse_args(argv)
    dtypes = a.dtypes.split(",")
    print("| case | N | dtype | old ms / pair | new ms / pair | new/old "
          "| old CPU ms / pair | new CPU ms / pair | new/old (CPU) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for case in a.cases.split(","):
        best = {(t, d): [float("inf")] * 2 for t in ("old", "new") for d in dtypes}
        for _ in range(a.rounds):
            for dtype in dtypes:
                for tag, root in (("old", a.old), ("new", a.new)):
                    got = one(root, case, dtype, a.reps)
                    best[tag, dtype] = [min(b, g) for b, g in zip(best[tag, dtype], got)]
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


if __name__ == "__main__":
    main()
