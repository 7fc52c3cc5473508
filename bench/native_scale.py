"""The native engine at users' sizes: `kernelcli compute` of a pooling net on N images by
each engine on CPUs (auto: native; cpu), end to end, and the two kernels compared.

A cheap pooling kernel (the seed's network, one 3 x 3 convolution + relu + global
average pool + dense, on 8 x 8 x 3 images: a pair's covariance is 64 x 64) reaches
N = 10,000 (50 million pairs) in minutes. Each plan is a `kernelcli compute`
subprocess (``compute.engine: auto``, which takes ``native`` here, and ``cpu``); per run
the table gives wall and CPU seconds, the children's peak resident memory, the plan its
manifest records and the steady cost per pair; then `kernelcli verify` of each run and
the largest difference between the two kernels, relative to the largest entry.

    .venv/bin/python bench/native_scale.py --n 10000 --out /tmp/native_scale
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from scale import step  # noqa: E402 - bench/ is the script's folder

ENGINES = ("auto", "cpu")


def config(path: Path, images: Path, run_dir: Path, engine: str, side: int) -> None:
    path.write_text(
        f"name: native_scale\n"
        f"data:\n  x1: {images}\n"
        f"architecture:\n  layers:\n"
        f"    - conv: {{filter: [3, 3], padding: SAME, W_std: 1.4142135623730951, b_std: 0.1}}\n"
        f"    - relu\n    - global_avg_pool\n    - dense: {{W_std: 1.0, b_std: 0.0}}\n"
        f"kernel:\n  kinds: [nngp, ntk]\n  dtype: float32\n"
        f"compute:\n  engine: {engine}\n"
        f"output:\n  run_dir: {run_dir}\n")


def largest_difference(a: Path, b: Path, rows: int = 1000) -> dict:
    import h5py

    out = {}
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        for kind in ("nngp", "ntk"):
            worst = scale = 0.0
            for s in range(0, fa[kind].shape[0], rows):
                x, y = fa[kind][s:s + rows], fb[kind][s:s + rows]
                worst = max(worst, float(np.abs(x - y).max()))
                scale = max(scale, float(np.abs(y).max()))
            out[kind] = worst / scale
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--side", type=int, default=8, help="image height and width")
    ap.add_argument("--out", type=Path, default=Path("/tmp/native_scale"))
    args = ap.parse_args()
    out = args.out / f"{args.n}x{args.side}"
    out.mkdir(parents=True, exist_ok=True)
    images = out / "x.npy"
    if not images.exists():
        rng = np.random.default_rng(0)
        np.save(images, rng.standard_normal((args.n, args.side, args.side, 3)).astype(np.float32))
    pairs = args.n * (args.n + 1) // 2
    print(f"N={args.n:,} ({pairs:,} pairs), {args.side}x{args.side}x3, "
          f"load {os.getloadavg()[0]:.2f}")
    print("| step | wall s | CPU s | peak RSS GiB | exit | disk GB | files | load after |\n"
          "|---|---|---|---|---|---|---|---|")
    rows: list = []
    runs = {}
    for engine in ENGINES:
        run_dir = out / f"run_{engine}"
        cfg = out / f"{engine}.yaml"
        config(cfg, images, run_dir, engine, args.side)
        if not (run_dir / "kernels.h5").exists():
            step(f"compute (engine: {engine})", ["compute", str(cfg)], run_dir, rows)
        step(f"verify ({engine})", ["verify", str(run_dir)], run_dir, rows)
        runs[engine] = run_dir
    for (name, wall, cpu, *_), engine in zip(rows[::2], ENGINES):
        manifest = json.loads((runs[engine] / "manifest.json").read_text())
        print(f"  {name}: plan {manifest['plan']['engine']}, {wall / pairs * 1e6:.2f} us "
              f"per pair wall, {cpu / pairs * 1e6:.2f} CPU-us per pair")
    if len(rows) >= 4:
        ratio = rows[2][1] / rows[0][1]
        print(f"  cpu / native wall: {ratio:.2f}")
    diff = largest_difference(runs["auto"] / "kernels.h5", runs["cpu"] / "kernels.h5")
    print("  largest difference / largest entry: " +
          ", ".join(f"{k} {v:.1e}" for k, v in diff.items()))
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
