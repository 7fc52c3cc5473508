"""The native engine's plane loop alone, float32 against float64: what sets float64's
price.

    python bench/native_loop.py [--reps 20000]

Builds a small driver around ``kernelcli/kernels/native/map.h``'s ``ChainPlane`` (the
loop every chain and diagonal chain spends its time in: the 3 x 3 window of both kinds,
the ABReLU map with its angle, the store) with the library's own compiler flags, and
times it on one 32 x 32 plane held in L1 (both kinds, NTK parameterization, bias), per
dtype, in nanoseconds per entry. Beside the loop as it is, variants of ``map.h`` that
are wrong on purpose and timed only: the angle's division made a multiply; its square
root dropped; both; the float64 angle's degree-10 polynomial evaluated by Estrin's scheme
(a shorter dependency chain). Where ``objdump`` is on ``PATH`` it also counts the vector
instructions in each dtype's loop body (one iteration: 16 float32 or 8 float64 entries).

What it answers: if float64 costs more than twice float32 per entry (its lanes are half
as many), whether the excess is the divider and square-root unit, the latency of the
polynomial, or the count of instructions.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kernelcli.kernels import _native_build  # noqa: E402
from kernelcli.kernels import _native_recipe as recipe  # noqa: E402

MAP_H = ROOT / "kernelcli" / "kernels" / "native" / "map.h"

DRIVER = r"""
#include "map.h"
#include <chrono>
#include <cstdio>
#include <random>
template <typename T> double run(int reps) {
  const int64_t W = 32, Wq = W + 2, n = W * Wq, dd = Wq + 1, plane = (W + 2) * Wq + 3;
  std::vector<T> t(3 * plane), u(3 * plane), roots(n, T(1.2)), keep(n, T(1)), on(n), ot(n);
  std::mt19937 g(1);
  std::uniform_real_distribution<double> U(0.2, 1.0);
  for (auto& v : t) v = T(U(g));
  for (auto& v : u) v = T(U(g));
  Unit<T> unit(false, true, 2.0, 0.01, 1.0, 0.0, 1.0);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto s = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      ChainPlane<T, true, false, false>(unit, n, dd, t.data(), t.data() + plane,
          t.data() + 2 * plane, u.data(), u.data() + plane, u.data() + 2 * plane,
          roots.data(), keep.data(), on.data(), ot.data());
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    best = std::min(best, sec / reps / n * 1e9);
  }
  return best;
}
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20000;
  double f = run<float>(reps), d = run<double>(reps);
  printf("%.4f %.4f\n", f, d);
}
"""

HORNER64 = """  double p = kAt64[10];
  for (int i = 9; i >= 0; --i) p = p * z + kAt64[i];"""
ESTRIN64 = """  const double* c = kAt64;
  double z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
  double p = ((c[0] + c[1] * z) + (c[2] + c[3] * z) * z2) +
             ((c[4] + c[5] * z) + (c[6] + c[7] * z) * z2) * z4 +
             ((c[8] + c[9] * z) + c[10] * z2) * z8;"""

# name -> [(text in map.h, its replacement)]
VARIANTS = {
    "as built": [],
    "no division": [("double r = num / den;", "double r = num * den;"),
                    ("float t = small / big;", "float t = small * big;")],
    "no square root": [("T sq = std::sqrt(d > 0 ? d : T(0));", "T sq = (d > 0 ? d : T(0));")],
    "neither": [("double r = num / den;", "double r = num * den;"),
                ("float t = small / big;", "float t = small * big;"),
                ("T sq = std::sqrt(d > 0 ? d : T(0));", "T sq = (d > 0 ? d : T(0));")],
    "float64 polynomial by Estrin": [(HORNER64, ESTRIN64)],
}


def loop_instructions(binary: Path, dtype: str):
    """Vector instructions in the vectorised loop body of ``ChainPlane<dtype, ...>``:
    the instructions between the loop's backward jump and its target (the longest such
    span in the function)."""
    if shutil.which("objdump") is None:
        return None
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    body = text.split(f"ChainPlane<{dtype}, true, false, false>", 1)[1].split("\n\n", 1)[0]
    lines = [ln for ln in body.splitlines() if re.match(r"\s+[0-9a-f]+:", ln)]
    addr = [int(ln.split(":")[0], 16) for ln in lines]
    best = 0
    for k, ln in enumerate(lines):
        m = re.search(r"\tj\w+\s+([0-9a-f]+)", ln)
        if m and int(m.group(1), 16) < addr[k]:
            start = addr.index(int(m.group(1), 16)) if int(m.group(1), 16) in addr else k
            span = [x for x in lines[start:k + 1] if "mm" in x]
            best = max(best, len(span))
    return best


def build(folder: Path, name: str, changes) -> Path:
    text = MAP_H.read_text()
    for old, new in changes:
        if old not in text:
            raise SystemExit(f"map.h no longer has {old!r}: update {Path(__file__).name}")
        text = text.replace(old, new)
    sub = folder / name.replace(" ", "_")
    sub.mkdir()
    (sub / "map.h").write_text(text)
    (sub / "drv.cc").write_text(DRIVER)
    out = sub / "drv"
    cxx = _native_build.compiler()
    flags = (*recipe.FLAGS, *recipe.variant_flags(recipe.cpu_variants()[0]))
    subprocess.run([cxx, *flags, "-isystem", jax.ffi.include_dir(), "-I", str(sub),
                    str(sub / "drv.cc"), "-o", str(out)], check=True, capture_output=True)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20000)
    a = p.parse_args(argv)
    print(f"ChainPlane on one 32 x 32 plane (both kinds), {a.reps} passes, best of 3; "
          f"ns per entry")
    print("\n| map.h | float32 ns | float64 ns | float64 / float32 | vector instructions "
          "per loop iteration, float32 / float64 |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="native-loop-") as tmp:
        for name, changes in VARIANTS.items():
            binary = build(Path(tmp), name, changes)
            out = subprocess.run([str(binary), str(a.reps)], capture_output=True, text=True,
                                 check=True).stdout.split()
            f32, f64 = map(float, out)
            counts = [loop_instructions(binary, t) for t in ("float", "double")]
            shown = "-" if None in counts else f"{counts[0]} / {counts[1]}"
            print(f"| {name} | {f32:.3f} | {f64:.3f} | {f64 / f32:.2f} | {shown} |",
                  flush=True)


if __name__ == "__main__":
    main()
