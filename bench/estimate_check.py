"""``estimate --time`` against the measured wall time of the same ``compute``, as fresh
processes on this machine, compilation cache off for both (a first run).

    python bench/estimate_check.py [--cases demo_digits,demo_digits_fc,cnn5_gap,fc2]
    python bench/estimate_check.py --cases demo_digits --limit 500 --load 2

``demo_*``: the shipped configs on the digits (600 and 1200 rows, or ``--limit``); the
bench cases: their configs on ``cases.make_inputs`` at the whole-process table's N.
``--load K`` runs K busy processes (``while True: pass``) beside both, as a machine
shared with other work is. Prints a markdown table: estimate, its parts, the measured
wall time and CPU time of ``compute``, the ratio, and the load average (1 minute)
before each of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from cases import make_inputs  # noqa: E402
from whole import clean_env, write_config  # noqa: E402

BENCH_N = {"cnn5_gap": 16, "cnn5_flatten": 400, "fc2": 2000}
PARTS = ("startup_seconds", "compile_seconds", "stats_seconds", "pairs_seconds",
         "writes_seconds")


def _config(case: str, scratch: Path, limit=None) -> Path:
    if case in BENCH_N:
        np.save(scratch / "x.npy", make_inputs(BENCH_N[case]))
        return write_config(case, scratch / "x.npy", scratch / f"{case}.yaml")
    doc = yaml.safe_load((ROOT / "configs" / f"{case}.yaml").read_text())
    doc["data"]["x1"] = str(ROOT / "configs" / "data" / "digits.npz")
    for key in ("labels", "test", "test_labels"):
        if doc["data"].get(key):
            doc["data"][key] = str(ROOT / "configs" / "data" / "digits.npz")
    if limit is not None:
        doc["data"]["limit"] = limit
    doc["output"] = {"run_dir": str(scratch / "run")}
    path = scratch / f"{case}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="demo_digits,demo_digits_fc,cnn5_gap,cnn5_flatten,fc2")
    p.add_argument("--limit", type=int, help="data.limit of the demo_* configs")
    p.add_argument("--load", type=int, default=0,
                   help="busy processes run beside the estimate and the compute")
    a = p.parse_args(argv)
    exe = str(Path(sys.executable).parent / "kernelcli")
    env = clean_env(KERNELCLI_CACHE_DIR="off")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(a.load)]
    print(f"busy processes beside each: {a.load}")
    print("| config | estimate s | start-up / compile / per-input / pairs / writes s | "
          "measured s | compute CPU s | estimate / measured | load before estimate, "
          "compute |")
    print("|---|---|---|---|---|---|---|")
    try:
        for case in a.cases.split(","):
            _case(case, exe, env, a.limit)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _case(case: str, exe: str, env: dict, limit) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=f"kc-est-{case}-"))
    try:
        cfg = _config(case, scratch, limit)
        loads = [os.getloadavg()[0]]
        r = subprocess.run([exe, "estimate", str(cfg), "--memory", "--time", "--json"],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            raise SystemExit(f"{case}: estimate failed: {r.stderr.strip()}")
        est = json.loads(r.stdout)
        run = scratch / "run-measured"
        loads.append(os.getloadavg()[0])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run([exe, "compute", str(cfg), "--run-dir", str(run), "--quiet"],
                           capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if r.returncode:
            raise SystemExit(f"{case}: compute failed: {r.stderr.strip()}")
        parts = " / ".join(f"{est[k]:.2f}" for k in PARTS)
        print(f"| {case} | {est['seconds_estimate']:.2f} | {parts} | {wall:.2f} | "
              f"{cpu:.2f} | {est['seconds_estimate'] / wall:.2f} | "
              f"{loads[0]:.1f}, {loads[1]:.1f} |", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
