"""Whole-process table: ``kernelcli compute CONFIG`` against a neural-tangents script
(bench/nt_whole.py) that writes the same symmetric matrix from the same inputs.

    bench/run.sh --whole [--quick] [--n N] [--reps R] [--whole-cases cnn5_gap]
    python bench/whole.py [--quick] [--n N] [--reps R] [--cases ...]   # standalone

Per case: the inputs are written once as a .npy file (``cases.make_inputs``), a
kernelcli config is the case's yaml with ``data.x1`` pointing at it; then, per
rep and alternating so that load drifts hit both tools alike, three fresh
processes: kernelcli on a start-up-sized copy (N=2), kernelcli at N, the NT
script at N. Each process is timed from outside (wall clock around the whole
process, peak RSS from ``/usr/bin/time -v``); best rep reported.

Start-up + compilation: kernelcli prints no timings, so its share is the wall
time of the same config at N=2 (start-up, planning, compilation and 3 pair
evaluations) and its compute is total minus that, labelled so. The NT script
compiles ahead of time and times its one call itself, so its start-up + compile
is its wall time minus that call and the write. The compilation cache is off for
kernelcli in the timed runs (NT has none): each starts with a fresh cache folder that
holds only the native engine's library, built once per case before the reps, untimed (as
on a machine after its first native run); one more kernelcli run with a primed cache
shows what a repeated run costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import KINDS, case_config, make_inputs  # noqa: E402

NT_PYTHON = os.environ.get("NT_PYTHON", str(BENCH / ".venv-nt" / "bin" / "python"))
KC_PYTHON = os.environ.get("KC_PYTHON", sys.executable)
# name -> (N for the table, N for --quick). N large enough that computing, not
# start-up, dominates both processes (pooling nets >= 16, flatten >= 400).
WHOLE = {"cnn1_gap": (16, 3), "cnn5_gap": (16, 3), "cnn5_flatten": (400, 16)}
TARGETS = {"cnn5_gap": 10.0, "cnn5_flatten": 3.0}  # whole-process NT/kc asked for
STARTUP_N = 2
GNU_TIME = "/usr/bin/time"


def kc_executable() -> str:
    exe = Path(KC_PYTHON).parent / "kernelcli"
    if not exe.exists():
        raise SystemExit(f"no kernelcli beside KC_PYTHON={KC_PYTHON} ({exe})")
    return str(exe)


def clean_env(**extra) -> dict:
    """The environment of a timed process: no shared jax compilation cache (a
    user-set one would let either tool skip compiling), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env.update(extra)
    return env


def timed(cmd: list, env: dict, timeout: float, scratch: Path) -> dict:
    """Run ``cmd`` as its own process: wall seconds, peak RSS bytes, exit status.

    Peak RSS comes from GNU time's wait4 of its own child: ``ru_maxrss`` of a child
    of *this* process would start at this process's peak (Python spawns with
    vfork, and exec keeps the old address space's high-water mark)."""
    rss_file = scratch / "time.txt"
    use_time = os.access(GNU_TIME, os.X_OK)
    full = [GNU_TIME, "-v", "-o", str(rss_file), *cmd] if use_time else cmd
    t0 = time.perf_counter()
    try:
        p = subprocess.run(full, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    if p.returncode:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {p.returncode}: {tail[:200]}"}
    rss = None
    if use_time:
        for line in rss_file.read_text().splitlines():
            if "Maximum resident set size" in line:
                rss = int(line.split()[-1]) * 1024
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return {"wall_s": wall, "peak_rss": rss, **(json.loads(lines[-1]) if lines else {})}


def write_config(case: str, inputs: Path, path: Path) -> Path:
    """The case's config with ``data.x1`` = ``inputs``, run dir under the scratch folder."""
    cfg = case_config(case)
    cfg["data"]["x1"] = str(inputs)
    cfg["output"]["run_dir"] = str(path.parent / f"run-{path.stem}")
    cfg["compute"]["memory"] = "auto"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def kc_run(cfg: Path, run_dir: Path, scratch: Path, timeout: float, cache=None) -> dict:
    """``kernelcli compute`` timed; ``cache``: its cache folder, or ``None``: a fresh
    one holding only the native engine's library kept in ``scratch / "library"`` (as a
    machine has it after its first native run: the build is once per machine, not per
    run), so XLA compiles every program."""
    shutil.rmtree(run_dir, ignore_errors=True)  # a finished run would be refused
    if cache is None:
        cache = scratch / "cold"
        shutil.rmtree(cache, ignore_errors=True)
        kept = scratch / "library" / "kernelcli-native"
        if kept.exists():
            shutil.copytree(kept, cache / "kernelcli-native")
    return timed([kc_executable(), "compute", str(cfg), "--run-dir", str(run_dir)],
                 clean_env(KERNELCLI_CACHE_DIR=str(cache)), timeout, scratch)


def rel_diff(kc_dir: Path, nt_npy: Path):
    """``max|kc-nt| / max|nt|`` per kind (nngp, ntk), or None if either is missing."""
    import h5py  # the project venv's dependency

    if not (kc_dir / "kernels.h5").exists() or not nt_npy.exists():
        return None
    nt = np.load(nt_npy).astype(np.float64)
    with h5py.File(kc_dir / "kernels.h5", "r") as f:
        kc = [np.asarray(f[k], dtype=np.float64) for k in KINDS]
    return [float(np.abs(kc[i] - nt[i]).max() / np.abs(nt[i]).max()) for i in range(len(KINDS))]


def run_case(case: str, n: int, reps: int, timeout: float, log=print) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix=f"kc-whole-{case}-"))
    try:
        np.save(scratch / "x.npy", make_inputs(n))
        np.save(scratch / "x_start.npy", make_inputs(STARTUP_N))
        cfg = write_config(case, scratch / "x.npy", scratch / "main.yaml")
        cfg0 = write_config(case, scratch / "x_start.npy", scratch / "start.yaml")
        run, run0, nt_out = scratch / "run", scratch / "run0", scratch / "nt.npy"
        nt_cmd = [NT_PYTHON, str(BENCH / "nt_whole.py"), case, str(scratch / "x.npy"), str(nt_out)]
        r = {"n": n, "reps": reps, "kc_start": [], "kc": [], "nt": []}
        # untimed: builds the native engine's library where the engine takes it (kc_run)
        kc_run(cfg0, run0, scratch, timeout, cache=scratch / "library")
        t_start = time.perf_counter()
        for rep in range(reps):
            for tag, fn in (("kc_start", lambda: kc_run(cfg0, run0, scratch, timeout)),
                            ("kc", lambda: kc_run(cfg, run, scratch, timeout)),
                            ("nt", lambda: timed(nt_cmd, clean_env(), timeout, scratch))):
                r[tag].append(fn())
                got = r[tag][-1]
                log(f"[{time.perf_counter() - t_start:6.0f} s] whole {case} N={n} rep {rep} "
                    f"{tag}: {got.get('error') or round(got['wall_s'], 2)} s")
        r["diff"] = rel_diff(run, nt_out)
        # A repeated run of the same config: the first fills the cache, the second is timed.
        kc_run(cfg, run, scratch, timeout, cache=scratch / "cache")
        r["kc_warm"] = kc_run(cfg, run, scratch, timeout, cache=scratch / "cache")
        return r
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def summarise(r: dict) -> dict:
    """Best (least wall time) of each kind of process, and the derived split."""
    ok = lambda runs: [x for x in runs if "error" not in x]  # noqa: E731
    kc, kc0 = ok(r["kc"]), ok(r["kc_start"])
    nt = [x for x in ok(r["nt"]) if "compute_s" in x]  # its JSON line holds the split
    s = {"n": r["n"]}
    if kc and kc0:
        s["kc_total"] = min(x["wall_s"] for x in kc)
        s["kc_start"] = min(x["wall_s"] for x in kc0)
        # None when the difference is not positive (N too small to tell from noise)
        s["kc_compute"] = s["kc_total"] - s["kc_start"] if s["kc_total"] > s["kc_start"] else None
        s["kc_rss"] = max(x["peak_rss"] or 0 for x in kc) or None
    if nt:
        b = min(nt, key=lambda x: x["wall_s"])
        s["nt_total"], s["nt_compute"] = b["wall_s"], b["compute_s"] + b["write_s"]
        s["nt_start"], s["nt_compile"] = s["nt_total"] - s["nt_compute"], b["compile_s"]
        s["nt_rss"] = max(x["peak_rss"] or 0 for x in nt) or None
    warm = r.get("kc_warm", {})
    s["kc_warm"] = None if "error" in warm else warm.get("wall_s")
    return s


def f(v, spec=".3g", unit=""):
    if v is None:
        return "-"
    return f"{v:.0f}{unit}" if spec == ".3g" and abs(v) >= 1000 else f"{v:{spec}}{unit}"


def div(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def report(results: dict, load: tuple) -> str:
    out = ["## Whole process: `kernelcli compute CONFIG` vs a neural-tangents script "
           "(same inputs, one symmetric matrix to disk)", "",
           f"Load average {load[0]:.1f} at start, {load[1]:.1f} at end. Fresh processes, "
           "alternating kernelcli / NT per rep, best rep; kernelcli's compilation cache off, "
           "its native library built before the reps (\"warm cache\": a repeated run). "
           "kernelcli start-up + compile = wall time of the "
           f"same config at N={STARTUP_N} (includes its {STARTUP_N * (STARTUP_N + 1) // 2} "
           "pairs), its compute = total minus that; NT's split is the script's own "
           "(ahead-of-time compile, then one timed call + write). kernelcli computes the "
           "N(N+1)/2 lower-triangle entries, NT all N*N.", "",
           "| case | N | kc total s | kc start-up+compile s | kc warm-cache total s "
           "| NT total s | NT start-up+compile s (compile) | whole-process NT/kc "
           "| target | compute-only NT/kc | per-entry NT/kc | kc ms/entry | NT ms/entry "
           "| kc peak RSS | NT peak RSS | max rel diff nngp / ntk |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    gib = lambda b: None if not b else b / 2**30  # noqa: E731
    for case, r in results.items():
        s = summarise(r)
        n = s["n"]
        kc_e, nt_e = n * (n + 1) // 2, n * n
        whole = div(s.get("nt_total"), s.get("kc_total"))
        kc_ms = div(1e3 * (s.get("kc_compute") or 0), kc_e) or None
        nt_ms = div(1e3 * (s.get("nt_compute") or 0), nt_e) or None
        target = TARGETS.get(case)
        # the targets hold at the table's N, where computing dominates, not at --quick N
        met = ("" if whole is None or target is None else " (n/a at this N)"
               if n < WHOLE[case][0] else " met" if whole >= target else " missed")
        diff = r.get("diff")
        out.append(
            f"| {case} | {n} | {f(s.get('kc_total'))} | {f(s.get('kc_start'))} "
            f"| {f(s.get('kc_warm'))} | {f(s.get('nt_total'))} "
            f"| {f(s.get('nt_start'))} ({f(s.get('nt_compile'))}) | {f(whole, '.2f', 'x')} "
            f"| {'-' if target is None else f'>= {target:g}x'}{met} "
            f"| {f(div(s.get('nt_compute'), s.get('kc_compute')), '.2f', 'x')} "
            f"| {f(div(nt_ms, kc_ms), '.2f', 'x')} | {f(kc_ms)} | {f(nt_ms)} "
            f"| {f(gib(s.get('kc_rss')), '.2f', ' GiB')} | {f(gib(s.get('nt_rss')), '.2f', ' GiB')} "
            f"| {'-' if diff is None else ' / '.join(f'{d:.1e}' for d in diff)} |")
    errors = [f"- {case} {tag} rep {i}: {x['error']}" for case, r in results.items()
              for tag in ("kc_start", "kc", "nt") for i, x in enumerate(r[tag]) if "error" in x]
    errors += [f"- {case} kc_warm: {r['kc_warm']['error']}" for case, r in results.items()
               if "error" in r.get("kc_warm", {})]
    out += ["", "A compute-only ratio near N=2 is noise (kernelcli's compute is a difference "
            "of two short runs). Max rel diff of order 1e-4 is NT's own float32 error, not "
            "kernelcli's (bench/README.md, `--ref64`). Peak RSS: GNU time's maximum resident set size of each "
            "process, jax runtime included."]
    if errors:
        out += ["", "Failed whole-process runs:", *errors]
    return "\n".join(out) + "\n"


def run_all(cases, n=None, quick=False, reps=2, timeout=900.0, log=print):
    """Measure ``cases``; return (raw results, markdown section)."""
    load0 = os.getloadavg()[0]
    results = {c: run_case(c, n or WHOLE[c][1 if quick else 0], reps, timeout, log)
               for c in cases}
    return results, report(results, (load0, os.getloadavg()[0]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(WHOLE), help=f"subset of {', '.join(WHOLE)}")
    p.add_argument("--quick", action="store_true", help="tiny N, one rep: a smoke test")
    p.add_argument("--n", type=int, default=None, help="override every case's N")
    p.add_argument("--reps", type=int, default=None, help="alternating reps (2; quick 1)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per process")
    a = p.parse_args(argv)
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in WHOLE]
    if bad:
        p.error(f"unknown whole-process case(s) {', '.join(bad)}; known: {', '.join(WHOLE)}")
    _, text = run_all(cases, a.n, a.quick, a.reps or (1 if a.quick else 2), a.timeout,
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    print(text)


if __name__ == "__main__":
    main()
