"""Landmarks: how Nystrom regression (``data.landmarks: M``) approaches the full kernel.

For a configuration with labels and a test set, each ``M`` is one landmark run
(``kernelcli compute`` of a copy with ``data.landmarks: M``) and its
``kernelcli predict``; then the full kernel's run and predict. The table gives per
route the pair evaluations, compute and predict wall time and the test accuracy of
each kind at the ridge chosen on the training set (5-fold CV for landmarks,
leave-one-out or CV for the full kernel, as ``predict`` chooses). Every step is a
``kernelcli`` subprocess.

    .venv/bin/python bench/landmarks.py --out /tmp/lm            # the digits CNN demo
    .venv/bin/python bench/landmarks.py --config configs/demo_digits_fc.yaml --out /tmp/lmfc
    .venv/bin/python bench/landmarks.py --synthetic 20000 --landmarks 500,1000,2000,4000 \\
        --out /tmp/lm20k                           # bench/scale.py's teacher data, FC kernel

``--no-full`` skips the full kernel (where it does not fit). ``--solvers
cholesky,cg`` predicts each landmark run once per ``--solver`` value (on a landmark
run: the direct Nystrom solve, Falkon), each row with its wall and CPU time, peak
resident memory of the predict process and the load average before and after:

    .venv/bin/python bench/landmarks.py --synthetic 20000 --landmarks 4000 --no-full \
        --solvers cholesky,cg --out /tmp/falkon
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KELI = [sys.executable, "-m", "kernelcli"]


def _absolute(doc: dict, base: Path) -> dict:
    data = dict(doc["data"])
    for key in ("x1", "x2", "labels", "test", "test_labels"):
        if data.get(key) is not None:
            data[key] = str((base / data[key]).resolve())
    return {**doc, "data": data}


def _run(args: list, usage: dict = None) -> tuple:
    """``(wall s, stdout)`` of one kernelcli process; ``usage`` (when given) gets its
    CPU seconds, peak RSS (MiB, from wait4) and the 1-minute load average before and
    after."""
    load = os.getloadavg()[0]
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(KELI + [str(a) for a in args], stdout=out, stderr=err)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        text, error = out.read(), err.read()
    if proc.returncode != 0:
        sys.exit(f"kernelcli {' '.join(map(str, args))} failed ({proc.returncode}): "
                 f"{error.strip().splitlines()[-1:]}")
    if usage is not None:
        usage.update(cpu_s=ru.ru_utime + ru.ru_stime, rss_mib=ru.ru_maxrss / 1024,
                     load=[load, os.getloadavg()[0]])
    return wall, text


def route(doc: dict, out: Path, name: str, landmarks, solvers=("auto",)) -> list:
    """One row per predict ``--solver`` value of one run (computed once)."""
    doc = {**doc, "name": name, "data": {**doc["data"]},
           "kernel": {**doc.get("kernel", {}), "test_diagonal": False},
           "output": {"run_dir": str(out / name)}}
    if landmarks is not None:
        doc["data"]["landmarks"] = landmarks
    cfg = out / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    compute_s, _ = _run(["compute", cfg, "--quiet", "--overwrite"])
    manifest = json.loads((out / name / "manifest.json").read_text())
    rows = []
    for solver in solvers:
        usage = {}
        predict_s, text = _run(["predict", out / name, "--json", "--solver", solver], usage)
        res = json.loads(text)
        rows.append({"route": "full kernel" if landmarks is None else f"M = {landmarks:,}",
                     "pairs": manifest["plan"]["pairs_total"], "compute_s": compute_s,
                     "predict_s": predict_s, **usage, "solver": res["solver"],
                     "ridge": {k: v["selected_ridge"] for k, v in res["selected"].items()},
                     "accuracy": {k: v["test_accuracy"] for k, v in res["selected"].items()}})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs/demo_digits_predict.yaml")
    p.add_argument("--synthetic", type=int, default=None, help="bench/scale.py's data, N rows")
    p.add_argument("--landmarks", default="25,50,100,200,400,all")
    p.add_argument("--solvers", default="auto", help="predict --solver values, e.g. cholesky,cg")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-full", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.synthetic:
        sys.path.insert(0, str(ROOT / "bench"))
        import scale

        npz, cfg = a.out / "data.npz", a.out / "scale.yaml"
        scale.data(npz, a.synthetic, a.synthetic // 10)
        scale.config(cfg, npz, a.out / "scale")
        a.config = cfg
    doc = _absolute(yaml.safe_load(a.config.read_text()), a.config.parent)
    n = doc["data"].get("limit") or a.synthetic
    sizes = [n if m == "all" else int(m) for m in a.landmarks.split(",")]
    solvers = a.solvers.split(",")
    rows = [r for m in sizes for r in route(doc, a.out, f"lm{m}", m, solvers)]
    if not a.no_full:
        rows += route(doc, a.out, "full", None)
    kinds = list(rows[0]["accuracy"])
    print("| route | pairs | compute | solver | predict wall | CPU | peak RSS | load | "
          + " | ".join(f"{k} test accuracy (ridge)" for k in kinds) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(kinds))
    for r in rows:
        print(f"| {r['route']} | {r['pairs']:,} | {r['compute_s']:.0f} s | {r['solver']} | "
              f"{r['predict_s']:.0f} s | {r['cpu_s']:.0f} s | {r['rss_mib']:,.0f} MiB | "
              f"{r['load'][0]:.1f}-{r['load'][1]:.1f} | " + " | ".join(
                  f"{r['accuracy'][k]:.2%} ({r['ridge'][k]:g})" for k in kinds) + " |")
    (a.out / "landmarks.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
