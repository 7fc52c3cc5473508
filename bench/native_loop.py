"""The native engine's plane loop alone, float32 against float64: what sets float64's
price.

    python bench/native_loop.py [--reps 20000] [--variant x86-64-v3]

Builds a small driver around ``kernelcli/kernels/native/map.h``'s ``ChainPlane`` (the
loop every chain and diagonal chain spends its time in: the 3 x 3 window of both kinds,
the ABReLU map with its angle, the store) with the library's own compiler flags for one
variant (default: the best this CPU runs; any this CPU runs can be timed, so an AVX-512
machine times the AVX2 library's loop too), and times it on one 32 x 32 plane held in L1
(both kinds, NTK parameterization, bias), per dtype, in nanoseconds per entry. Beside the
loop as it is, variants of the sources that are wrong on purpose and timed only: the
angle's division made a multiply; its square root dropped; both; and one vector in
flight per iteration instead of ``vec.h``'s ``kInFlight``. Where ``objdump`` is on
``PATH`` it also counts the vector instructions per entry of each dtype's loop body.

What it answers: where a variant's loop spends its time (the divider and square-root
unit, the latency of the angle's chain that the vectors in flight hide, or the count of
instructions), and which ``kInFlight`` suits a CPU.
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
  std::vector<T> scratch(ScratchEntries(n, dd));
  std::mt19937 g(1);
  std::uniform_real_distribution<double> U(0.2, 1.0);
  for (auto& v : t) v = T(U(g));
  for (auto& v : u) v = T(U(g));
  Unit<T> unit(false, true, 2.0, 0.01, 1.0, 0.0, 1.0);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto s = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      ChainPlane<T, true, false, false, false>(unit, n, dd, t.data(), t.data() + plane,
          t.data() + 2 * plane, u.data(), u.data() + plane, u.data() + 2 * plane,
          roots.data(), keep.data(), on.data(), ot.data(), scratch.data());
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    best = std::min(best, sec / reps / n * 1e9);
  }
  return best;
}
int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20000;
  double f = run<float>(reps), d = run<double>(reps);
  printf("%.4f %.4f %d %d\n", f, d, Vec<float>::kInFlight * Vec<float>::kLanes,
         Vec<double>::kInFlight * Vec<double>::kLanes);
}
"""

SCALAR_DIV = [("double r = num / den;", "double r = num * den;"),
              ("float t = small / big;", "float t = small * big;"),
              ("small[k] / big[k]", "small[k] * big[k]"),
              ("r[k] = num / den;", "r[k] = num * den;")]
NO_SQRT = [("T sq = std::sqrt(d > 0 ? d : T(0));", "T sq = (d > 0 ? d : T(0));"),
           ("sq[k] = Sqrt(d > 0 ? d : zero);", "sq[k] = (d > 0 ? d : zero);")]
ONE_IN_FLIGHT = [("kInFlight = kVecBytes == 64 ? 6 : 2;", "kInFlight = 1;"),
                 ("kInFlight = 6;", "kInFlight = 1;")]

# name -> [(text in map.h or vec.h, its replacement)]
VARIANTS = {
    "as built": [],
    "no division": SCALAR_DIV,
    "no square root": NO_SQRT,
    "neither": SCALAR_DIV + NO_SQRT,
    "one vector in flight": ONE_IN_FLIGHT,
}


def loop_instructions(binary: Path, dtype: str):
    """Vector instructions in the vectorised loop body of ``ChainPlane<dtype, ...>``:
    the instructions between the loop's backward jump and its target (the longest such
    span in the function)."""
    if shutil.which("objdump") is None:
        return None
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    body = text.split(f"ChainPlane<{dtype}, true, false, false, false>", 1)[1]
    body = body.split("\n\n", 1)[0]
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


def build(folder: Path, name: str, changes, variant: str) -> Path:
    sub = folder / name.replace(" ", "_")
    sub.mkdir()
    texts = {f.name: f.read_text() for f in recipe.source_files() if f.suffix != ".cc"}
    for old, new in changes:
        hits = [f for f, text in texts.items() if old in text]
        if not hits:
            raise SystemExit(f"the sources no longer have {old!r}: update "
                             f"{Path(__file__).name}")
        for f in hits:
            texts[f] = texts[f].replace(old, new)
    for f, text in texts.items():
        (sub / f).write_text(text)
    (sub / "drv.cc").write_text(DRIVER)
    out = sub / "drv"
    cxx = _native_build.compiler()
    flags = (*recipe.FLAGS, *recipe.variant_flags(variant))
    subprocess.run([cxx, *flags, "-isystem", jax.ffi.include_dir(), "-I", str(sub),
                    str(sub / "drv.cc"), "-o", str(out)], check=True, capture_output=True)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20000)
    p.add_argument("--variant", default=None, choices=recipe.cpu_variants(),
                   help="the library variant whose flags build the loop (default: the best "
                        "this CPU runs)")
    a = p.parse_args(argv)
    variant = a.variant or recipe.cpu_variants()[0]
    print(f"ChainPlane on one 32 x 32 plane (both kinds), {a.reps} passes, best of 3; "
          f"ns per entry; the {variant} library's flags")
    print("\n| sources | float32 ns | float64 ns | float64 / float32 | vector instructions "
          "per entry, float32 / float64 |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="native-loop-") as tmp:
        for name, changes in VARIANTS.items():
            binary = build(Path(tmp), name, changes, variant)
            out = subprocess.run([str(binary), str(a.reps)], capture_output=True, text=True,
                                 check=True).stdout.split()
            f32, f64 = map(float, out[:2])
            per = [int(x) for x in out[2:]]  # entries per loop iteration
            counts = [loop_instructions(binary, t) for t in ("float", "double")]
            shown = ("-" if None in counts else
                     f"{counts[0] / per[0]:.2f} / {counts[1] / per[1]:.2f}")
            print(f"| {name} | {f32:.3f} | {f64:.3f} | {f64 / f32:.2f} | {shown} |",
                  flush=True)


if __name__ == "__main__":
    main()
