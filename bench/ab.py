"""A/B of whole ``kernelcli compute`` processes between two installs (two checkouts),
alternating, to show that a change does not make the route users run slower or
larger. Same inputs and configs as bench/whole.py; compilation cache off.

    python bench/ab.py OLD_VENV NEW_VENV [--cases cnn5_gap,cnn5_flatten,fc2] [--reps 2]

Prints a markdown table: per case, best wall time and peak RSS of each install,
and the ratios new/old.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import make_inputs  # noqa: E402
from whole import clean_env, timed, write_config  # noqa: E402

N = {"cnn5_gap": 16, "cnn5_flatten": 400, "fc2": 2000}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path, help="venv of the old install")
    p.add_argument("new", type=Path, help="venv of the new install")
    p.add_argument("--cases", default=",".join(N))
    p.add_argument("--reps", type=int, default=2)
    a = p.parse_args(argv)
    exes = {"old": str(a.old / "bin" / "kernelcli"), "new": str(a.new / "bin" / "kernelcli")}
    print("| case | N | old s | new s | new/old time | old peak RSS | new peak RSS | new/old RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for case in a.cases.split(","):
        scratch = Path(tempfile.mkdtemp(prefix=f"kc-ab-{case}-"))
        try:
            np.save(scratch / "x.npy", make_inputs(N[case]))
            cfg = write_config(case, scratch / "x.npy", scratch / "c.yaml")
            got = {"old": [], "new": []}
            for _ in range(a.reps):
                for tag, exe in exes.items():
                    run = scratch / f"run-{tag}"
                    shutil.rmtree(run, ignore_errors=True)
                    r = timed([exe, "compute", str(cfg), "--run-dir", str(run), "--quiet"],
                              clean_env(KERNELCLI_CACHE_DIR="off"), 1800, scratch)
                    if "error" in r:
                        raise SystemExit(f"{case} {tag}: {r['error']}")
                    got[tag].append(r)
            best = {t: min(v, key=lambda r: r["wall_s"]) for t, v in got.items()}
            rss = {t: max(r["peak_rss"] or 0 for r in v) for t, v in got.items()}
            o, n = best["old"]["wall_s"], best["new"]["wall_s"]
            print(f"| {case} | {N[case]} | {o:.2f} | {n:.2f} | {n / o:.2f} | "
                  f"{rss['old'] / 2**30:.2f} GiB | {rss['new'] / 2**30:.2f} GiB | "
                  f"{rss['new'] / max(rss['old'], 1):.2f} |", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
