"""Scale: compute, verify and predict at N = 20,000 (or 50,000) end to end, by the CLI.

A cheap kernel (a fully connected net, fc layers only) on synthetic data: ``N``
training and ``N // 10`` test points in 64 dimensions whose 10 labels come from a
fixed random teacher (a two-layer net), so the test accuracy means something. Each
step is a ``kernelcli`` subprocess; per step the table gives wall and CPU time, the peak
resident memory of the children (``ru_maxrss``, the largest child so far), the
exit status, and the run directory's disk use and file count after it. The load
average at the start and end is printed too (the machine may be shared).

    .venv/bin/python bench/scale.py --n 20000 --out /tmp/scale20k
    .venv/bin/python bench/scale.py --n 20000 --solvers cg,cholesky --ridge 1e-2

``--solvers``: the predict runs, each ``kernelcli predict --solver S`` (default
``default``: ``kernelcli predict RUN`` with no options, as a user runs it; ``auto``,
``cholesky``, ``eigen``, ``cg`` name the route). Results (the CLI's JSON) are written
next to the run directory; ``--compare FILE`` compares every run's predictions with a
``predictions.h5`` kept from another run (e.g. the Cholesky route's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kernelcli._blas import choose_blas_core

choose_blas_core()  # before numpy loads: --passes times the kernels the CLI gets
import numpy as np  # noqa: E402

from kernelcli.run import configure_host_devices  # noqa: E402

configure_host_devices()  # before jax starts: --passes runs on the CLI's devices

DIM, CLASSES = 64, 10


def data(path: Path, n: int, m: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n + m, DIM)).astype(np.float32)
    w1 = rng.standard_normal((DIM, 256)) / np.sqrt(DIM)
    w2 = rng.standard_normal((256, CLASSES)) / 16
    y = np.argmax(np.maximum(x @ w1, 0) @ w2, axis=1).astype(np.int64)
    np.savez(path, x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])


def config(path: Path, npz: Path, run_dir: Path) -> None:
    dense = "    - dense: {W_std: 1.4142135623730951, b_std: 0.1}\n"
    path.write_text(
        f"name: scale\n"
        f"data:\n  x1: {npz}\n  key: x_train\n  labels_key: y_train\n"
        f"  test: {npz}\n  test_key: x_test\n  test_labels_key: y_test\n"
        f"architecture:\n  layers:\n{dense}    - relu\n{dense}    - relu\n{dense}"
        f"kernel:\n  kinds: [nngp, ntk]\n  dtype: float32\n"
        f"output:\n  run_dir: {run_dir}\n")


def disk(run_dir: Path) -> tuple:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def step(name: str, args: list, run_dir: Path, rows: list, env=None) -> subprocess.CompletedProcess:
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([str(Path(sys.executable).with_name("kernelcli")), *args],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = after.ru_maxrss / 2**20  # KiB -> GiB
    # CPU seconds (user + system) of the step: what it costs, whatever else loads the cores
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    size, count = disk(run_dir) if run_dir.exists() else (0, 0)
    rows.append((name, wall, cpu, rss, proc.returncode, size / 1e9, count))
    print(f"| {name} | {wall:.0f} | {cpu:.0f} | {rss:.2f} | {proc.returncode} | "
          f"{size / 1e9:.2f} | {count:,} | {os.getloadavg()[0]:.1f} |", flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr, flush=True)
    return proc


def sequential_pass(op, v, dtype) -> np.ndarray:
    """The pass before the lanes: one block of 256 MiB of float64
    read, then multiplied, in turn, in this thread."""
    from kernelcli.solvers._operator import aligned_empty, block_product
    from kernelcli.store import ResultFile

    n1, n2 = op.shape
    rows = max(1, 256 * 2**20 // (8 * n2))
    v = np.asarray(v, dtype=dtype)
    vt, out = np.ascontiguousarray(v.T), np.empty((n1, v.shape[1]))
    buf = aligned_empty((rows, n2), dtype)
    with ResultFile(op.path).kernel(op.dataset) as ds:
        for s in range(0, n1, rows):
            e = min(s + rows, n1)
            ds.read_direct(buf, np.s_[s:e], np.s_[0:e - s])
            out[s:e] = block_product(buf[:e - s], vt)
    return out


def passes(run_dir: Path, kind: str = "nngp", columns: int = 300, reps: int = 3) -> None:
    """Passes over the stored kernel with ``columns`` right-hand sides (the default
    sweep's 5 ridges x (1 + 5 folds) x 10 classes), float64 (``matmul``) and float32
    (``matmul32``, CG's inner steps), the sequential pass before the lanes and the two
    lanes of now alternating ``reps`` times in this process: wall and CPU seconds (every
    thread), medians, and the load at each."""
    from kernelcli.solvers import H5KernelOperator

    op = H5KernelOperator(run_dir / "kernels.h5", kind)
    v = np.random.default_rng(0).standard_normal((op.shape[1], columns))
    flops = 2.0 * op.shape[0] * op.shape[1] * columns
    runs = {
        ("matmul", "sequential"): lambda: sequential_pass(op, v, np.float64),
        ("matmul", "lanes"): lambda: op.matmul(v),
        ("matmul32", "sequential"): lambda: sequential_pass(op, v, np.float32),
        ("matmul32", "lanes"): lambda: op.matmul32(v),
    }
    times: dict = {key: [] for key in runs}
    for _ in range(reps):
        for key, run in runs.items():
            t, c = time.perf_counter(), time.process_time()
            run()
            times[key].append((time.perf_counter() - t, time.process_time() - c))
            print(f"  {key[0]} {key[1]}: {times[key][-1][0]:.2f} s wall, "
                  f"{times[key][-1][1]:.2f} CPU-s, load {os.getloadavg()[0]:.2f}", flush=True)
    for (name, how), got in times.items():
        wall, cpu = np.median([w for w, _ in got]), np.median([c for _, c in got])
        print(f"  one pass, {columns} columns, {name}, {how}: {wall:.2f} s wall "
              f"({flops / wall / 1e9:.0f} GFLOP/s), {cpu:.2f} CPU-s (median of {reps})",
              flush=True)


def compare(out: Path, solvers: list) -> None:
    """The largest relative difference of every ridge's test predictions between solvers."""
    files = [out / f"predictions_{s}.h5" for s in solvers]
    if len(files) < 2 or not all(f.exists() for f in files):
        return
    compare_files(files[0], files[1])


def compare_files(first: Path, second: Path) -> None:
    """The largest difference of every kind's and ridge's test means between two
    ``predictions.h5``, relative to the largest mean."""
    import h5py

    with h5py.File(first, "r") as a, h5py.File(second, "r") as b:
        worst = 0.0

        def visit(name, obj):
            nonlocal worst
            if isinstance(obj, h5py.Dataset) and name.endswith("mean") and name in b:
                x, y = obj[...], b[name][...]
                worst = max(worst, float(np.abs(x - y).max() / np.abs(y).max()))
        a.visititems(visit)
    print(f"  predictions {first.name} vs {second}: max relative difference {worst:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=Path("/tmp/kernelcli_scale"))
    ap.add_argument("--solvers", default="default")
    ap.add_argument("--compare", type=Path, default=None,
                    help="a predictions.h5 to compare every run's predictions with")
    ap.add_argument("--ridge", default=None, help="predict's --ridge (default: its sweep)")
    ap.add_argument("--kind", default=None, help="predict's --kind (default: every kind)")
    ap.add_argument("--passes", action="store_true",
                    help="time float64 and float32 passes over the NNGP kernel first, "
                         "sequential (before the lanes) against the lanes, interleaved")
    ap.add_argument("--passes-only", action="store_true",
                    help="--passes on an existing run directory, and nothing else")
    args = ap.parse_args()
    if args.passes_only:  # reads the run directory, writes nothing
        print(f"load {os.getloadavg()[0]:.2f}")
        passes(args.out / str(args.n) / "run")
        print(f"load {os.getloadavg()[0]:.2f}")
        return
    out = args.out / str(args.n)
    out.mkdir(parents=True, exist_ok=True)
    npz, cfg, run_dir = out / "data.npz", out / "scale.yaml", out / "run"
    if not npz.exists():
        data(npz, args.n, args.n // 10)
    config(cfg, npz, run_dir)
    print(f"N={args.n:,} test={args.n // 10:,} load {os.getloadavg()[0]:.2f}")
    print("| step | wall s | CPU s | peak RSS GiB | exit | disk GB | files | load after |\n"
          "|---|---|---|---|---|---|---|---|")
    rows: list = []
    if not (run_dir / "kernels.h5").exists():
        step("compute", ["compute", str(cfg)], run_dir, rows)
    step("verify", ["verify", str(run_dir)], run_dir, rows)
    if args.passes:
        passes(run_dir)
    for solver in args.solvers.split(","):
        extra = (["--ridge", args.ridge] if args.ridge else []) + \
                (["--kind", args.kind] if args.kind else [])
        chosen = [] if solver == "default" else ["--solver", solver]
        proc = step(f"predict {' '.join(chosen) or '(no options)'}",
                    ["predict", str(run_dir), *chosen, "--json", *extra], run_dir, rows)
        (out / f"predict_{solver}.log").write_text(proc.stderr)  # CG's progress lines
        if proc.returncode == 0:
            (out / f"predict_{solver}.json").write_text(proc.stdout)
            shutil.copyfile(run_dir / "predictions.h5", out / f"predictions_{solver}.h5")
            result = json.loads(proc.stdout)
            for kind, c in result["selected"].items():
                print(f"  {solver} ({result['solver']}) {kind}: ridge {c['selected_ridge']:g}, "
                      f"test accuracy {c['test_accuracy']}, held-out accuracy "
                      f"{c['loo_accuracy']}", flush=True)
            if args.compare is not None:
                compare_files(out / f"predictions_{solver}.h5", args.compare)
    compare(out, args.solvers.split(","))
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
