"""The time per pair of the configurations docs/time.md quotes, measured in one run, and
what it comes to for 10,000 and 50,000 images on this machine's cores.

    python bench/time_per_pair.py [--reps 2] [--out bench/out/time_per_pair.json]

Each configuration (``configs/seed_gap.yaml``, ``seed_flatten.yaml``, ``myrtle5.yaml``,
``myrtle10.yaml``: their architecture, kinds and dtype, with the default engine,
``compute.engine: auto``) in a fresh process with one host device per core, as
``kernelcli compute`` runs: ``kernel_matrix(kfn, x)`` (compute's route less the store)
on N random 32 x 32 x 3 images, N small enough for a call of a few seconds and large
enough that the per-input pass is a few percent of it; one warm-up call (compilation),
then ``--reps`` timed calls. Per call: wall seconds and the process's CPU seconds (all
its threads). A machine shared with other work moves the wall time, not the CPU time,
so the extrapolation is the CPU time per pair over the cores (what the cores deliver
when the run has them to itself), and the wall time is shown beside it with the load
average (1 minute) before and after each process. Prints a markdown table (docs/time.md's
CPU columns) and writes the numbers as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
INPUT_SHAPE = (32, 32, 3)
# config, the network in words, N: a call of 1-3 s at the rates of 2026-12-07
CONFIGS = (("seed_gap", "1 conv + ReLU + global average pooling", 48),
           ("seed_flatten", "1 conv + ReLU + flatten", 1024),
           ("myrtle5", "Myrtle-5", 40),
           ("myrtle10", "Myrtle-10", 32))
SIZES = (10_000, 50_000)


def one(config: str, n: int, reps: int) -> dict:
    """Time ``config`` on ``n`` images in this process: one JSON-able dict."""
    from kernelcli.run import configure_host_devices

    configure_host_devices()  # one XLA host device per core, as `kernelcli compute`
    import jax
    import numpy as np

    from kernelcli.config import load_config
    from kernelcli.kernels import build_kernel_fn, resolve_engine
    from kernelcli.run import kernel_matrix

    cfg = load_config(ROOT / "configs" / f"{config}.yaml")
    engine = resolve_engine(cfg.compute.engine, jax.devices()[0].platform,
                            cfg.architecture.layers, INPUT_SHAPE)
    kfn = build_kernel_fn(cfg.architecture, input_shape=INPUT_SHAPE,
                          kinds=cfg.kernel.kinds, dtype=cfg.kernel.dtype, engine=engine)
    x = np.random.default_rng(0).standard_normal((n, *INPUT_SHAPE)).astype(cfg.kernel.dtype)
    t = time.perf_counter()
    kernel_matrix(kfn, x)
    warmup = time.perf_counter() - t
    walls, cpus = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        kernel_matrix(kfn, x)  # host arrays out: synchronised
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return {"config": config, "n": n, "engine": engine, "dtype": cfg.kernel.dtype,
            "kinds": list(cfg.kernel.kinds), "devices": len(jax.devices()),
            "pairs": n * (n + 1) // 2, "warmup_seconds": warmup, "seconds": walls,
            "cpu_seconds": cpus}


def duration(seconds: float) -> str:
    """About how long, in the unit a reader wants."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 1.5 * size:
            value = seconds / size
            return f"about {value:.0f} {unit}" if value >= 10 else f"about {value:.1f} {unit}"
    return f"about {seconds:.0f} s"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--configs", default=",".join(c for c, _, _ in CONFIGS))
    p.add_argument("--out", default=str(BENCH / "out" / "time_per_pair.json"))
    p.add_argument("--one", nargs=2, metavar=("CONFIG", "N"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.reps)))
        return
    cores = len(os.sched_getaffinity(0))
    rows = []
    wanted = a.configs.split(",")
    for config, network, n in CONFIGS:
        if config not in wanted:
            continue
        before = os.getloadavg()[0]
        r = subprocess.run([sys.executable, __file__, "--one", config, str(n), "--reps",
                            str(a.reps)], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{config}: {r.stderr.strip()[-2000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row.update(network=network, load_before=before, load_after=os.getloadavg()[0],
                   cores=cores)
        pairs = row["pairs"]
        row["wall_ms_per_pair"] = min(row["seconds"]) / pairs * 1e3
        row["cpu_ms_per_pair"] = min(row["cpu_seconds"]) / pairs * 1e3
        # the cores to itself: CPU time per pair over the cores it runs on
        row["ms_per_pair_on_cores"] = row["cpu_ms_per_pair"] / min(cores, row["devices"])
        row["seconds_for"] = {str(m): m * (m + 1) // 2 * row["ms_per_pair_on_cores"] / 1e3
                              for m in SIZES}
        rows.append(row)
        print(f"{config}: {json.dumps(row)}", file=sys.stderr, flush=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = {"measured": stamp, "cores": cores, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"measured {stamp} on {cores} cores")
    print(f"| config | network | N | engine | wall ms / pair | CPU ms / pair | ms per pair on "
          f"{cores} cores | {' | '.join(f'{m:,} images' for m in SIZES)} | load before, after |")
    print("|---|---|---:|---|---:|---:|---:|" + "---:|" * len(SIZES) + "---|")
    for r in rows:
        times = " | ".join(duration(r["seconds_for"][str(m)]) for m in SIZES)
        print(f"| `configs/{r['config']}.yaml` | {r['network']} | {r['n']} | {r['engine']} | "
              f"{r['wall_ms_per_pair']:.4g} | {r['cpu_ms_per_pair']:.4g} | "
              f"{r['ms_per_pair_on_cores']:.4g} | {times} | {r['load_before']:.1f}, "
              f"{r['load_after']:.1f} |")


if __name__ == "__main__":
    main()
