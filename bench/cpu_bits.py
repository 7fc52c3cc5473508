"""What decides a CPU computation's last bits, measured: each part kernelcli's kernels
meet, run under settings that differ in one thing at a time, compared bit for bit.

    python bench/cpu_bits.py [--qemu] [--out bench/out/cpu_bits.json]

* **XLA's code** (with the native library's): the golden-bits networks
  (``tests/kernels/test_native_bits.py --dump``) on this CPU uncapped, capped at each
  level (``KERNELCLI_CPU_LEVEL``), and with each native variant at one level.
* **The native library**: its variants at one level (the same bits, or a difference).
* **OpenBLAS's kernels**: float32 and float64 products (what preprocessing applies to
  every row) under each ``OPENBLAS_CORETYPE``.
* **numpy's own loops**: exp, log, arctan, sqrt, sums under ``NPY_DISABLE_CPU_FEATURES``
  against this CPU's dispatch.
* ``--qemu``: the truth of another CPU, by emulation: each level's networks in
  ``qemu-x86_64 -cpu <model>`` (``x86-64-v3``: Haswell, ``x86-64-v2``: Sandy Bridge, since jaxlib needs AVX), with
  ``/proc/cpuinfo`` replaced by that model's flags in a mount namespace of its own
  (``unshare -m``, root), so kernelcli's loader and levels see that CPU; compared with
  this CPU capped at the level. About 2 minutes a level (Debian's ``qemu-user``).

Prints one line per comparison: what differed (arrays, count of entries, largest
relative difference) or ``same bits``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BITS = ROOT / "tests" / "kernels" / "test_native_bits.py"
# a level -> the emulated CPU model that has exactly its features, and the flags it lacks
QEMU = {"x86-64-v3": ("Haswell", r"avx512\w*"),
        # jaxlib needs AVX: a v2 CPU that runs it is a Sandy Bridge (AVX, no AVX2 or FMA)
        "x86-64-v2": ("SandyBridge", r"avx2|avx512\w*|fma|bmi1|bmi2|f16c|movbe|abm")}
NUMPY_PROBE = """
import sys, numpy as np
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 192)); w = rng.standard_normal((192, 192))
out = {"dgemm": x @ w, "dgemm_row": x[:1] @ w, "sgemm": x.astype("f4") @ w.astype("f4"),
       "exp": np.exp(x), "log": np.log(np.abs(x)), "arctan": np.arctan(x),
       "sqrt": np.sqrt(np.abs(x)), "sum": x.sum(axis=1), "power": np.abs(x) ** -0.5}
np.savez(sys.argv[1], **out)
"""


def compare(a_path: Path, b_path: Path) -> str:
    def arrays(path):  # name (less its level) -> array
        with np.load(path) as f:
            return {re.sub(r"^x86-64-v\d/", "", k): f[k] for k in f.files if k != "identity"}

    a, b = arrays(a_path), arrays(b_path)
    assert set(a) == set(b), (sorted(a), sorted(b))
    diffs = []
    for k in sorted(a):
        if np.array_equal(a[k], b[k]):
            continue
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        rel = float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-300))
        diffs.append(f"{k} ({int(np.sum(a[k] != b[k]))} of {a[k].size}, {rel:.1e})")
    return "same bits" if not diffs else f"{len(diffs)} differ: " + "; ".join(diffs)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "OPENBLAS_CORETYPE", "KERNELCLI_CPU_LEVEL")}
    env.update({"KERNELCLI_CACHE_DIR": "off", "PYTHONPATH": str(ROOT), **extra})
    return env


def dump(out: Path, level: str, env: dict, prefix=()) -> None:
    cmd = [*prefix, sys.executable, str(BITS), "--dump", level, str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}")


def one_variant_package(tmp: Path, variant: str) -> Path:
    """A copy of the package whose record lists ``variant`` only."""
    root = tmp / f"pkg-{variant}"
    if not root.exists():
        shutil.copytree(ROOT / "kernelcli", root / "kernelcli",
                        ignore=shutil.ignore_patterns("__pycache__"))
        record = root / "kernelcli" / "kernels" / "native" / "native.json"
        rec = json.loads(record.read_text())
        rec["libraries"] = {variant: rec["libraries"][variant]}
        record.write_text(json.dumps(rec))
    return root


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qemu", action="store_true")
    p.add_argument("--levels", default=",".join(QEMU), help="the levels --qemu emulates")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "cpu_bits.json"))
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from kernelcli.kernels import _cpu_level, _native_recipe

    levels = _cpu_level.runnable()
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    print(f"CPU: {model}; levels it runs: {', '.join(levels)}")
    results = {"cpu": model, "levels": list(levels), "rows": []}

    def row(what: str, a_path: Path, b_path: Path) -> None:
        text = compare(a_path, b_path)
        print(f"- {what}: {text}")
        results["rows"].append({"what": what, "result": text})

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        base = levels[0]
        # XLA: uncapped against capped at each level (the best variant throughout)
        for level in levels:
            dump(tmp / f"{level}.npz", level, _env(KERNELCLI_CPU_LEVEL=level))
        for level in levels:
            row(f"XLA: {level} against {levels[0]} (best native variant)",
                tmp / f"{level}.npz", tmp / f"{base}.npz")
        # the native library: each variant at one level (the least, which every one runs)
        low = levels[-1]
        for variant in _native_recipe.cpu_variants():
            out = tmp / f"variant-{variant}.npz"
            dump(out, low, _env(KERNELCLI_CPU_LEVEL=low, PYTHONPATH=os.pathsep.join(
                [str(one_variant_package(tmp, variant)), str(ROOT)])))
            row(f"native variant {variant} against the best, at {low}", out,
                tmp / f"{low}.npz")
        # OpenBLAS's kernels and numpy's own loops
        probe = tmp / "probe.py"
        probe.write_text(NUMPY_PROBE)
        settings = {"Haswell": {"OPENBLAS_CORETYPE": "Haswell"},
                    "SkylakeX": {"OPENBLAS_CORETYPE": "SkylakeX"},
                    "Zen": {"OPENBLAS_CORETYPE": "Zen"},
                    "numpy at X86_V3": {"OPENBLAS_CORETYPE": "Haswell",
                                        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL "
                                                                    "AVX512_SPR"}}
        for name, extra in settings.items():
            subprocess.run([sys.executable, str(probe), str(tmp / f"np-{name}.npz")],
                           env=_env(**extra), check=True, capture_output=True)
        for name in ("SkylakeX", "Zen", "numpy at X86_V3"):
            row(f"numpy: {name} against Haswell", tmp / f"np-{name}.npz",
                tmp / "np-Haswell.npz")
        if a.qemu:
            for level in [lv for lv in QEMU if lv in levels and lv in a.levels.split(",")]:
                cpu, lacks = QEMU[level]
                info = tmp / f"cpuinfo-{level}"
                text = Path("/proc/cpuinfo").read_text()
                info.write_text(re.sub(r"(?m)^(flags\s*:.*)$",
                                       lambda m: re.sub(rf"\s(?:{lacks})(?=\s|$)", "",
                                                        m.group(1)), text))
                out = tmp / f"qemu-{level}.npz"
                env = _env(PYTHONPATH=os.pathsep.join(
                    [str(one_variant_package(tmp, level)), str(ROOT)]))
                script = (f"mount --bind {info} /proc/cpuinfo && exec qemu-x86_64 -cpu {cpu} "
                          f"{sys.executable} {BITS} --dump {level} {out}")
                proc = subprocess.run(["unshare", "-m", "sh", "-c", script], env=env,
                                      capture_output=True, text=True, timeout=3600)
                if proc.returncode != 0:
                    raise SystemExit(proc.stderr[-3000:])
                row(f"emulated {cpu} ({level}) against this CPU capped at {level}", out,
                    tmp / f"{level}.npz")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
