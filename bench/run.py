"""neural-tangents 0.6.5 vs kernelcli on identical float32 inputs: one markdown report.

    bench/run.sh [--cases cnn5_gap,fc2] [--quick] [--reps 2]

Each measurement is a fresh subprocess (so its peak RSS is its own), run per
case in the order neural-tangents, kernelcli rectangle, kernelcli triangle;
each makes one warm-up call and then ``--reps`` timed calls, of which the best
is reported. Table 4 (bench/whole.py; alone with ``--whole``) times whole
``kernelcli compute`` processes against a neural-tangents script. The report goes to stdout and to ``--report`` (default
``bench/out/latest.md``; the raw measurements beside it as ``.json``).

Table 1 compares the same N*N entries (NT ``kernel_fn(x1)``, kernelcli
``matrix(x1, x1_copy)``); table 2 the whole symmetric matrix (NT's square
against kernelcli's triangle). The cost model (see ``traffic``) gives the bytes
each kernel entry must move and its elementwise operations; the achieved
bandwidth fraction is ``(bytes per entry / kc seconds per entry) / copy BW``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import CASES, INPUT_SHAPE, case_config  # noqa: E402
from whole import WHOLE  # noqa: E402
from whole import run_all as run_whole  # noqa: E402

NT_PYTHON = os.environ.get("NT_PYTHON", str(BENCH / ".venv-nt" / "bin" / "python"))
KC_PYTHON = os.environ.get("KC_PYTHON", sys.executable)
ARRAYS, F32 = 2, 4  # nngp and ntk arrays, float32


def copy_bandwidth(mib: int = 512, tries: int = 5) -> float:
    """Bytes per second of a numpy copy of a ``mib`` MiB array (read + write), best of ``tries``."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    nbytes = src.nbytes
    del src, dst  # give the 1 GiB back before any measurement is spawned
    return 2 * nbytes / best


JAX_BW = """
import time, jax, jax.numpy as jnp
x = jnp.ones(({mib} * 2**20 // 4,), jnp.float32)
f = jax.jit(lambda a: a + 1.0)
f(x).block_until_ready()
best = float("inf")
for _ in range({tries}):
    t0 = time.perf_counter(); f(x).block_until_ready(); best = min(best, time.perf_counter() - t0)
print(2 * x.nbytes / best)
"""


def jax_bandwidth(mib: int = 512, tries: int = 10) -> float:
    """Bytes per second of ``x + 1`` on jax's default device (read + write), in a subprocess."""
    code = JAX_BW.format(mib=mib, tries=tries)
    return float(subprocess.run([KC_PYTHON, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split()[-1])


def expand(items):
    """The config's layer list as ``(name, params)`` pairs, ``repeat`` unrolled."""
    for item in items:
        name, params = (item, {}) if isinstance(item, str) else next(iter(item.items()))
        params = params or {}
        if name == "repeat":
            for _ in range(params["times"]):
                yield from expand(params["layers"])
        else:
            yield name, params


def traffic(case: str):
    """Cost model per kernel entry: ``(bytes moved, elementwise ops)``.

    One entry (a pair of inputs) carries one covariance per array (nngp, ntk):
    ``(H*W)**2`` elements in nets that pool (every spatial pair is needed),
    ``H*W`` in flatten-only conv nets (the diagonal), 1 once flat. Every layer
    reads its input and writes its output of each array once (float32); its ops
    are output elements x taps (filter area, pool window area squared, or the
    whole input for global pooling / flatten). The input layer reads both images
    and does one dot product per output element (length C, or D for fc nets).
    """
    cfg = case_config(case)
    layers = list(expand(cfg["architecture"]["layers"]))
    full = any(n in ("avg_pool", "global_avg_pool") for n, _ in layers)
    (h, w, c), spatial = INPUT_SHAPE, True
    size = lambda: ((h * w) ** 2 if full else h * w) if spatial else 1  # noqa: E731
    if layers[0][0] == "flatten":  # fc net: D-length dot products
        spatial, layers = False, layers[1:]
        nbytes, ops = 2 * h * w * c * F32, h * w * c
    else:
        nbytes, ops = 2 * h * w * c * F32, size() * c
    for name, p in layers:
        e_in, taps = size(), 1
        if name == "conv":
            fh, fw = p.get("filter", [3, 3])
            taps = fh * fw
        elif name == "avg_pool":
            (wh, ww) = p.get("window", [2, 2])
            (sh, sw) = p.get("strides") or (wh, ww)
            h, w, taps = (h - wh) // sh + 1, (w - ww) // sw + 1, (wh * ww) ** 2
        elif name in ("global_avg_pool", "flatten"):
            taps, spatial = e_in, False
        nbytes += ARRAYS * (e_in + size()) * F32
        ops += ARRAYS * size() * taps
    return nbytes, ops


def measure(python: str, script: str, case: str, n: int, reps: int, out: Path, timeout: float,
            extra=()):
    cmd = [python, str(BENCH / script), case, "--n", str(n), "--reps", str(reps),
           "--out", str(out), *extra]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {p.returncode}: {tail[:200]}"}
    res = json.loads(lines[-1])
    res["wall_s"], res["kernels"] = time.perf_counter() - t0, str(out)
    return res


def runtime_floor(python: str, extra=()) -> dict:
    """Peak RSS of a bare jax process in that interpreter (bench/baseline.py)."""
    p = subprocess.run([python, str(BENCH / "baseline.py"), *extra], capture_output=True,
                       text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"error": f"exit {p.returncode}"}
    return json.loads(lines[-1])


def rel_diff(a: dict, b: dict) -> str:
    """``max|a-b| / max|b|`` for nngp and ntk, b the neural-tangents result."""
    if "error" in a or "error" in b:
        return "-"
    x, y = np.load(a["kernels"]).astype(np.float64), np.load(b["kernels"]).astype(np.float64)
    return " / ".join(f"{np.abs(x[k] - y[k]).max() / np.abs(y[k]).max():.1e}" for k in range(2))


def best(r: dict):
    return None if "error" in r else min(r["seconds"])


def fmt(v, spec=".3g", unit=""):
    if v is None:
        return "-"
    return f"{v:.0f}{unit}" if spec == ".3g" and abs(v) >= 1000 else f"{v:{spec}}{unit}"


def gib(r: dict):
    return None if "error" in r else r["peak_rss"] / 2**30


def mem(r: dict) -> str:
    """Peak host RSS, and the device's peak bytes in use where jax tracks them (GPU)."""
    dev = None if "error" in r else r.get("device_peak")
    return fmt(gib(r), ".2f", " GiB") + ("" if dev is None else f" (dev {dev / 2**30:.2f} GiB)")


def above(r: dict, floor: dict):
    """GiB of peak RSS above the interpreter's bare-jax floor."""
    g = gib(r)
    return None if g is None or "error" in floor else g - floor["peak_rss"] / 2**30


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def report(results: dict, bw: float, args) -> str:
    out = [f"# kernelcli vs neural-tangents 0.6.5 ({datetime.datetime.now():%Y-%m-%d %H:%M})", "",
           f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs "
           f"(load average {args.load0:.1f} at start, {os.getloadavg()[0]:.1f} at end: other "
           "processes skew timings); "
           f"{'jax x+1 on ' + args.platform if args.bw == 'jax' else 'numpy copy'} bandwidth "
           f"{bw / 1e9:.1f} GB/s (read + write, 512 MiB, best of several). "
           f"float32 inputs `(N, 32, 32, 3)`, seed 0; best of {args.reps} timed calls after one "
           "warm-up; each measurement its own process.", "",
           "## Same N*N entries: NT `kernel_fn(x1)` vs kernelcli `kernel_matrix(kfn, x1, x1_copy)`", "",
           "| case | N | NT ms/entry | kc ms/entry | speed-up | NT peak RSS | kc peak RSS "
           "| RSS kc/NT | above jax floor NT / kc | max rel diff nngp / ntk | model MB/entry "
           "| model elem ops/entry | kc GB/s (model) | kc fraction of copy BW |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    floor_nt, floor_kc = args.floors["nt"], args.floors["kc"]
    for case, r in results.items():
        nt, kc = r["nt"], r["rect"]
        nbytes, ops = traffic(case)
        ms = {k: None if best(v) is None else 1e3 * best(v) / v["entries"]
              for k, v in (("nt", nt), ("kc", kc))}
        kc_bw = None if ms["kc"] is None else nbytes / (ms["kc"] / 1e3)
        out.append(
            f"| {case} | {r['n']} | {fmt(ms['nt'])} | {fmt(ms['kc'])} "
            f"| {fmt(ratio(ms['nt'], ms['kc']), '.2f', 'x')} | {mem(nt)} | {mem(kc)} "
            f"| {fmt(ratio(gib(kc), gib(nt)), '.2f')} "
            f"| {fmt(above(nt, floor_nt), '.2f')} / {fmt(above(kc, floor_kc), '.2f')} GiB "
            f"| {rel_diff(kc, nt)} | {nbytes / 1e6:.3g} | {ops:.3g} "
            f"| {fmt(None if kc_bw is None else kc_bw / 1e9, '.2f')} "
            f"| {fmt(ratio(kc_bw, bw), '.1%')} |")
    out += ["", "## Whole symmetric N x N matrix: NT square vs kernelcli triangle `kernel_matrix(kfn, x1)`", "",
            "| case | N | NT s | kc triangle s | speed-up | kc triangle peak RSS "
            "| max rel diff nngp / ntk | first call s (compile): NT / kc triangle |",
            "|---|---|---|---|---|---|---|---|"]
    first = lambda r: None if "error" in r else r["warmup_s"]  # noqa: E731
    for case, r in results.items():
        nt, tri = best(r["nt"]), best(r["tri"])
        out.append(f"| {case} | {r['n']} | {fmt(nt)} | {fmt(tri)} "
                   f"| {fmt(ratio(nt, tri), '.2f', 'x')} | {mem(r['tri'])} "
                   f"| {rel_diff(r['tri'], r['nt'])} "
                   f"| {fmt(first(r['nt']))} / {fmt(first(r['tri']))} |")
    out += ["", "## Memory per pair in flight: XLA's compiled peak of one pair call over the "
            "live covariances", "",
            "| case | pairs in flight (chunk) | live covariances | outputs + temporaries "
            "| ratio | block inputs + variances (N rows, shared) |", "|---|---|---|---|---|---|"]
    for case, r in results.items():
        m = r.get("memory", {})
        if "error" in m or m.get("ratio") is None:
            out.append(f"| {case} | - | - | - | {m.get('error', 'one Gram matrix per block')} "
                       "| - |")
            continue
        out.append(f"| {case} | {m['chunk']} | {m['live'] / 2**20:.2f} MiB "
                   f"| {m['pairs'] / 2**20:.2f} MiB | {m['ratio']:.2f} "
                   f"| {m['arguments'] / 2**20:.2f} MiB |")
    if args.ref64:
        out += ["", "## Accuracy against neural-tangents in float64 (same inputs), nngp / ntk", "",
                "| case | N | NT float32 | kc rectangle | kc triangle |", "|---|---|---|---|---|"]
        for case, r in results.items():
            out.append(f"| {case} | {r['n']} | " + " | ".join(
                rel_diff(r[k], r["nt64"]) for k in ("nt", "rect", "tri")) + " |")
    errors = [f"- {case} {k}: {v['error']}" for case, r in results.items()
              for k, v in r.items() if isinstance(v, dict) and "error" in v]
    out += ["", "Model: bytes and elementwise ops one kernel entry must move/do (see "
            "`traffic` in bench/run.py); for fc2 it counts both D-vectors per entry, which "
            "a matrix product reuses, so its fraction can pass 100%. Peak RSS is each "
            "process's VmHWM, jax runtime included; \"above jax floor\" subtracts the peak "
            "of a bare jax process (import, one tiny jitted call) of the same interpreter: "
            + ", ".join(f"{k} {v.get('jax', '?')} "
                        f"{fmt(None if 'error' in v else v['peak_rss'] / 2**30, '.2f', ' GiB')}"
                        for k, v in (("neural-tangents' jax", args.floors["nt"]),
                                     ("kernelcli's jax", args.floors["kc"])))
            + " (kernelcli's with one host device per core)."]
    if errors:
        out += ["", "Failed measurements:", *errors]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"comma-separated subset of: {', '.join(CASES)}")
    p.add_argument("--quick", action="store_true", help="small N and one rep: a smoke test")
    p.add_argument("--reps", type=int, default=None, help="timed calls per measurement (2)")
    p.add_argument("--n", type=int, default=None, help="override every case's N")
    p.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    p.add_argument("--report", type=Path, default=None,
                   help="markdown output (raw JSON beside it, .json); default "
                        "bench/out/latest.md, with --whole bench/out/whole.md")
    p.add_argument("--skip-nt", action="store_true", help="kernelcli only (no NT venv)")
    p.add_argument("--ref64", action="store_true",
                   help="also run NT in float64 and report each result's error against it")
    p.add_argument("--bw", choices=("numpy", "jax"), default="numpy",
                   help="bandwidth reference: host numpy copy, or x+1 on jax's device (GPU)")
    p.add_argument("--whole", action="store_true",
                   help="only the whole-process table (bench/whole.py); --n then sets its N")
    p.add_argument("--skip-whole", action="store_true",
                   help="leave the whole-process table out of the full run")
    p.add_argument("--whole-cases", default=",".join(WHOLE),
                   help=f"whole-process cases, subset of: {', '.join(WHOLE)}")
    p.add_argument("--whole-n", type=int, default=None, help="override the whole-process N")
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    whole_cases = [c.strip() for c in args.whole_cases.split(",") if c.strip()]
    unknown += [c for c in whole_cases if c not in WHOLE]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)} "
                f"(whole-process: {', '.join(WHOLE)})")
    args.reps = args.reps or (1 if args.quick else 2)
    # --whole alone must not replace the full report
    args.report = args.report or BENCH / "out" / ("whole.md" if args.whole else "latest.md")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.whole:
        return write_report(*run_whole(whole_cases, args.whole_n or args.n, args.quick,
                                       args.reps, args.timeout, log), args,
                            title="# kernelcli vs neural-tangents 0.6.5: whole process "
                                  f"({datetime.datetime.now():%Y-%m-%d %H:%M}), "
                                  f"{os.cpu_count()} CPUs\n\n")

    outdir = BENCH / "out"
    (outdir / "kernels").mkdir(parents=True, exist_ok=True)
    args.load0 = os.getloadavg()[0]
    bw = jax_bandwidth() if args.bw == "jax" else copy_bandwidth()
    args.platform = os.environ.get("JAX_PLATFORMS") or "default device"
    print(f"{args.bw} bandwidth {bw / 1e9:.1f} GB/s", file=sys.stderr)
    args.floors = {
        "nt": {"error": "skipped"} if args.skip_nt else runtime_floor(NT_PYTHON),
        "kc": runtime_floor(KC_PYTHON, ("--host-devices", str(len(os.sched_getaffinity(0))))),
    }
    results, t_start = {}, time.perf_counter()
    for case in cases:
        n = args.n or CASES[case][1 if args.quick else 0]
        r = results[case] = {"n": n}
        kout = lambda tag: outdir / "kernels" / f"{case}_{tag}.npy"  # noqa: E731
        jobs = [("nt", NT_PYTHON, "nt_case.py", ()),
                ("rect", KC_PYTHON, "kc_case.py", ("--mode", "rect")),
                ("tri", KC_PYTHON, "kc_case.py", ("--mode", "tri"))]
        if args.ref64:
            jobs.append(("nt64", NT_PYTHON, "nt_case.py", ("--x64",)))
        jobs.append(("memory", KC_PYTHON, "kc_case.py", ("--mode", "memory")))
        for tag, py, script, extra in jobs:
            if tag.startswith("nt") and args.skip_nt:
                r[tag] = {"error": "skipped (--skip-nt)"}
                continue
            r[tag] = measure(py, script, case, n, args.reps, kout(tag), args.timeout, extra)
            print(f"[{time.perf_counter() - t_start:6.0f} s] {case} N={n} {tag}: "
                  f"{r[tag].get('error') or r[tag].get('seconds', r[tag].get('ratio'))}",
                  file=sys.stderr, flush=True)
    raw = {"bandwidth": bw, "bw": args.bw, "floors": args.floors, "results": results}
    text = report(results, bw, args)
    if not (args.skip_whole or args.skip_nt):  # the whole-process table needs NT
        raw["whole"], whole_text = run_whole(whole_cases, args.whole_n, args.quick, args.reps,
                                             args.timeout, log)
        text += "\n" + whole_text
    write_report(raw, text, args)


def write_report(raw, text: str, args, title: str = "") -> None:
    """Print the report and write it to ``args.report`` (raw measurements beside it)."""
    text = title + text
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    args.report.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    print(text)


if __name__ == "__main__":
    main()
