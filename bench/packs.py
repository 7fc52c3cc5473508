"""Tile packs: files and wall time of a compute with many tiles,
packing on and off.

Each (setting, repetition) is a fresh ``kernelcli compute`` process on the same
inputs: ``N`` 8x8x2 images, a flattened dense ReLU network, ``--block`` rows per
block (so many small tiles; the per-tile costs are what packing adds to or saves),
alternating the settings, after one untimed run that fills JAX's compilation cache.
``KERNELCLI_PACK_TILES`` is the setting: ``0`` writes one file per tile (earlier
versions' layout), the default packs them by 512. Prints one markdown table: wall
time (median), files in the run directory, and whether the kernels are
bit-identical to packing off::

    python bench/packs.py                      # N = 400, block 4: 5,050 tiles, 3 reps
    python bench/packs.py --n 200 --reps 1     # a quick look
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import yaml

KERNELCLI = Path(sys.executable).with_name("kernelcli")
NET = ["flatten", {"dense": {"W_std": 1.5, "b_std": 0.05}}, "relu", {"dense": {"W_std": 1.5}}]


def run(folder: Path, setting: str) -> tuple[float, int, dict]:
    run_dir = folder / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if setting:
        env["KERNELCLI_PACK_TILES"] = setting
    else:
        env.pop("KERNELCLI_PACK_TILES", None)
    t = time.perf_counter()
    subprocess.run([str(KERNELCLI), "compute", str(folder / "c.yaml"), "--quiet"], env=env,
                   check=True)
    wall = time.perf_counter() - t
    files = sum(len(names) for _, _, names in os.walk(run_dir))
    with h5py.File(run_dir / "kernels.h5", "r") as f:
        kernels = {k: f[k][...] for k in ("nngp", "ntk")}
    return wall, files, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = -(-args.n // args.block)
    tiles = rows * (rows + 1) // 2
    settings = {"packing off (0)": "0", "packs of 512 (default)": "", "packs of 64": "64"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rng = np.random.default_rng(0)
        np.save(folder / "x.npy", rng.standard_normal((args.n, 8, 8, 2)).astype(np.float32))
        doc = {"name": "packs", "data": {"x1": "x.npy"}, "architecture": {"layers": NET},
               "compute": {"block": args.block}, "output": {"run_dir": "run"}}
        (folder / "c.yaml").write_text(yaml.safe_dump(doc))
        run(folder, "0")  # untimed: the first process compiles (JAX's persistent cache)
        walls = {name: [] for name in settings}
        files, kernels = {}, {}
        for _ in range(args.reps):
            for name, setting in settings.items():
                wall, files[name], kernels[name] = run(folder, setting)
                walls[name].append(wall)
    ref = kernels["packing off (0)"]
    print(f"compute of N = {args.n}, block {args.block}: {tiles:,} tiles, "
          f"{args.reps} rep(s), median wall time\n")
    print("| setting | wall (s) | files in the run directory | kernels bit-identical |")
    print("|---|---|---|---|")
    for name in settings:
        same = all(np.array_equal(kernels[name][k], ref[k]) for k in ref)
        print(f"| {name} | {statistics.median(walls[name]):.1f} | {files[name]:,} | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
