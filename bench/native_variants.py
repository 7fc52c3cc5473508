"""The native engine's speed by library: the installed package's variants (each alone, as
a CPU with only its features would load it) against an older checkout's library built
at first use (``-march=native`` before the library shipped in the package), in fresh
processes alternating, on the same inputs; and whether every variant gives the same
bits.

    python bench/native_variants.py --old /work/wt/base40 [--cases cnn1_gap,cnn5_flatten]
        [--n 128] [--reps 2] [--rounds 2]

``--old``: the root of a checkout whose ``kernelcli`` builds its library at first use
(run under this venv's python with ``PYTHONPATH`` set to it; its library is built once
into a cache of its own before the timings). Prints a markdown table: per case and
library, the best seconds per call of ``bench/kc_case.py --mode tri`` (float32) over
all rounds, the ratio to the old library, and whether the kernels equal the best
variant's bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from kernelcli.kernels import _native_recipe as recipe  # noqa: E402


def one_variant(scratch: Path, variant: str) -> Path:
    """A copy of the package whose record lists ``variant`` only."""
    root = scratch / f"pkg-{variant}"
    shutil.copytree(ROOT / "kernelcli", root / "kernelcli",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "kernelcli" / "kernels" / "native" / recipe.RECORD
    rec = json.loads(path.read_text())
    rec["libraries"] = {variant: rec["libraries"][variant]}
    path.write_text(json.dumps(rec))
    return root


def timed(root: Path, cache: Path, case: str, n: int, reps: int, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), "KERNELCLI_CACHE_DIR": str(cache)}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(BENCH / "kc_case.py"), case, "--n", str(n),
                           "--reps", str(reps), "--mode", "tri", "--engine", "native",
                           "--out", str(out)], env=env, capture_output=True, text=True,
                          cwd=root)
    if proc.returncode != 0:
        raise SystemExit(f"{case} {root}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True)
    p.add_argument("--cases", default="cnn1_gap,cnn5_flatten")
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="kc-variants-"))
    try:
        roots = {"old": a.old.resolve()}
        roots.update({v: one_variant(scratch, v) for v in recipe.cpu_variants()})
        print("| case | N | library | s per call | / old | bits as the best variant's |")
        print("|---|---|---|---|---|---|")
        for case in a.cases.split(","):
            best: dict = {}
            for r in range(a.rounds + 1):  # round 0 builds the old library, untimed
                for tag, root in roots.items():
                    out = scratch / f"{case}-{tag}.npy"
                    got = timed(root, scratch / f"cache-{tag}", case, a.n, a.reps, out)
                    if r:
                        best[tag] = min(best.get(tag, float("inf")), min(got["seconds"]))
            first = np.load(scratch / f"{case}-{recipe.cpu_variants()[0]}.npy")
            for tag in roots:
                same = np.array_equal(np.load(scratch / f"{case}-{tag}.npy"), first)
                print(f"| {case} | {a.n} | {tag} | {best[tag]:.3f} | "
                      f"{best[tag] / best['old']:.3f} | {'yes' if same else 'no'} |",
                      flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
