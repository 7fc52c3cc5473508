"""What a node's loss costs a Ray run: the wall time of the same ``kernelcli compute
--executor ray`` with and without the loss of a node halfway.

The cluster is tests/helpers_ray_cluster.py's: a head and one more node, one CPU each,
on 127.0.0.1 in this machine. Each repetition runs the same configuration twice, in
fresh ``kernelcli`` processes, after one untimed run that fills JAX's compilation
cache: once on the healthy cluster, once with the second node SIGKILLed (every
process of it) when half the tiles are written and its kernel actor is in the middle
of a tile; the node is added back after that run. ``N`` 8x8x1 images through a 3x3
conv, ReLU, global average pool and dense readout, ``--block`` rows per block. Prints
one markdown table: median wall time of each, the blocks requeued, and whether every
result is bit-identical to a local run::

    python bench/ray_node_loss.py                  # N = 128, block 4: 528 tiles, 3 reps
    python bench/ray_node_loss.py --n 64 --reps 1  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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
CLUSTER = Path(__file__).resolve().parent.parent / "tests" / "helpers_ray_cluster.py"
NET = [{"conv": {"filter": [3, 3], "padding": "SAME", "W_std": 1.4142135623730951,
                 "b_std": 0.1}}, "relu", "global_avg_pool", {"dense": {"W_std": 1.0}}]


class Cluster:
    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, str(CLUSTER)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.address = json.loads(self.proc.stdout.readline())["address"]

    def cmd(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        while True:
            text = self.proc.stdout.readline()
            if not text or text.startswith("{"):
                return json.loads(text)

    def close(self) -> None:
        try:
            self.cmd("quit")
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def kernels(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in ("nngp", "ntk")}


def tiles(run_dir: Path) -> int:
    try:
        return sum(1 for name in os.listdir(run_dir / "tiles") if name.endswith(".h5"))
    except FileNotFoundError:
        return 0


def run(cluster: Cluster, env: dict, config: Path, run_dir: Path, blocks: int,
        kill: bool) -> tuple[float, int, str]:
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(KERNELCLI), "compute", str(config), "--run-dir", str(run_dir),
                             "--executor", "ray", "--address", cluster.address, "--quiet"],
                            env=env, stderr=subprocess.PIPE, text=True)
    if kill:
        while proc.poll() is None and tiles(run_dir) < blocks // 2:
            time.sleep(0.005)
        if not cluster.cmd("kill busy")["busy"]:
            print("note: the node's actor was not seen computing", file=sys.stderr)
    err = proc.communicate()[1]
    seconds = time.perf_counter() - t0
    if kill:
        cluster.cmd("add")
    if proc.returncode != 0:
        raise SystemExit(f"compute failed:\n{err[-3000:]}")
    try:
        requeued = json.loads((run_dir / "shards" / "ray.json").read_text())["requeued"]
    except (OSError, ValueError, KeyError):
        requeued = 0
    return seconds, requeued, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kc-ray-loss-"))
    ray_tmp = tempfile.mkdtemp(prefix="kb", dir="/tmp")  # short: Ray's socket paths
    env = dict(os.environ, HOME=str(folder), RAY_TMPDIR=ray_tmp, KERNELCLI_PACK_TILES="0",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
               KERNELCLI_CACHE_DIR=str(folder / "cache"))
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE", "XLA_FLAGS"):
        env.pop(key, None)
    x = np.random.default_rng(0).standard_normal((args.n, 8, 8, 1)).astype(np.float32)
    np.save(folder / "x.npy", x)
    config = folder / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "loss", "data": {"x1": "x.npy"}, "architecture": {"layers": NET},
        "compute": {"block": args.block}, "output": {"run_dir": "run", "keep_tiles": True}},
        sort_keys=False))
    local = subprocess.run([str(KERNELCLI), "compute", str(config), "--run-dir",
                            str(folder / "local"), "--quiet"], env=env, capture_output=True,
                           text=True)
    if local.returncode != 0:
        raise SystemExit(local.stderr)
    want = kernels(folder / "local" / "kernels.h5")
    blocks = json.loads((folder / "local" / "manifest.json").read_text())["plan"]["blocks_total"]
    cluster = Cluster(env)
    times: dict = {False: [], True: []}
    requeued, same = [], True
    try:
        run(cluster, env, config, folder / "ray", blocks, kill=False)  # fills the cache
        for _ in range(args.reps):
            for kill in (False, True):
                seconds, n, _err = run(cluster, env, config, folder / "ray", blocks, kill)
                times[kill].append(seconds)
                if kill:
                    requeued.append(n)
                got = kernels(folder / "ray" / "kernels.h5")
                same = same and all(np.array_equal(got[k], want[k]) for k in want)
    finally:
        cluster.close()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    healthy, lost = statistics.median(times[False]), statistics.median(times[True])
    print(f"N = {args.n}, block {args.block}: {blocks} tiles; {args.reps} reps; "
          f"{os.cpu_count()} cores")
    print()
    print("| run | wall s (median) | runs | blocks requeued | bit-identical to local |")
    print("|---|---|---|---|---|")
    print(f"| two nodes, healthy | {healthy:.2f} | {' '.join(f'{t:.2f}' for t in times[False])}"
          f" | - | {'yes' if same else 'NO'} |")
    print(f"| second node SIGKILLed halfway | {lost:.2f} | "
          f"{' '.join(f'{t:.2f}' for t in times[True])} | "
          f"{' '.join(map(str, requeued))} | {'yes' if same else 'NO'} |")
    print()
    print(f"cost of the node's loss: {lost - healthy:+.2f} s ({lost / healthy - 1:+.0%})")


if __name__ == "__main__":
    main()
