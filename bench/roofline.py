"""How close the CPU engines run to what the machine can do, as one table.

    python bench/roofline.py [--cases cnn1_gap,cnn5_gap,...] [--dtypes float32,float64]
        [--old ROOT [--old-reps 1]]

For every bench case (``cases.CASES``, the seed's network ``cnn1_gap`` among them, and
``--cases li2019``: Li et al.'s recipe, its network on the 13 x 13 x 512 maps its random
patches make, both flips counted and evaluated; the mapping itself is not a pair's) and
dtype: the floating-point operations and bytes one pair of the triangle must cost,
counted from the layer list (``pair_flops`` below documents the count per layer); this
machine's limits, measured before and after the timings (the better kept) in fresh processes pinned to 1 and to all cores (a jitted
GEMM for the FMA rate; the copy bandwidth the better of a jitted ``x + 1`` and numpy's
copy over 256 MiB, read and write counted); and
kernelcli's measured time per pair on ``kernel_matrix(kfn, x)`` (``kc_case.py --mode
tri``: compute's route less the store). The roofline time of a pair is
``max(gram / R + elementwise / (R / 2), bytes / bandwidth)`` with R the GEMM's rate:
a GEMM counts an FMA as two operations, and the elementwise work (an add, a multiply,
a map's polynomial step) does one per lane at the same issue rate. "of limit" is the
roofline time over the measured time. ``--old ROOT`` times a second checkout too
(``PYTHONPATH=ROOT``, the same ``kc_case.py``), each row's old process just before its
new one, so the two columns come from one run.

Two byte counts: ``fused`` is what a pair must move if every layer's intermediate
stays in cache (its share of the inputs, the kernel entries out), ``streamed`` what it
moves when every layer reads and writes its covariances through memory
(``kernelcli.kernels.cost_model``'s per-layer bytes, which the accelerator engine does).
The roofline uses ``fused``: the covariances of a row of pairs fit a core's L2, so
only the arithmetic bounds a pair.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from math import prod
from pathlib import Path
from typing import Optional

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import (  # noqa: E402
    CASES,
    KINDS,
    RECIPES,
    case_augment,
    case_input_shape,
    config_path,
)

# Inputs per case for the timing: enough that a call's per-input pass (N inputs through
# the layers, about N pairs' work beside the N(N+1)/2 pairs of a tri call: a share of
# 2 / (N + 1)) and its per-call costs are a few percent of the call, as at the sizes
# users run (10,000 images and more). At N = 4, cnn21_gap's per-input pass added 40%
# of work the pair's count leaves out.
ROOF_N = {"cnn1_gap": 48, "cnn21_gap": 16, "cnn5_gap": 32, "myrtle5": 48,
          "cnn21_flatten": 256, "cnn5_flatten": 512, "fc2": 2000, **RECIPES}

# Floating-point operations per output entry of one kernel array (NNGP, or NTK), by
# layer. A window layer (conv, conv_transpose, conv_local, avg_pool, sum_pool) sums
# its window's joint shifts of the covariance, separably: (f - 1) adds per axis of
# filter size f, then a scale and a bias. A nonlinearity's arc-cosine or Gaussian
# map: the two variances' product, its square root and reciprocal, an angle (the
# fast atan2: a division and an odd polynomial of degree 11), its sine or cosine and
# the closed form, ~30 in all; the NTK's derivative map three more. A pool over the
# whole image or a flatten: one add per input entry. A dense layer: a scale and a
# bias (the NTK one more add).
POINTWISE_NNGP, POINTWISE_NTK = 30, 3
LAYER_NORM = 4


def pair_flops(kfn) -> tuple:
    """Operations one pair of ``kfn`` costs, from its layer list (branches included):
    ``(gram, elementwise)``, the input Gram's (a matrix product, at the FMA rate) and
    the rest (adds, multiplies and maps, one operation per vector lane)."""
    from kernelcli.config import branches, layer_shapes, layer_type
    from kernelcli.kernels._compose import full_needed

    arch = kfn.arch
    ntk = "ntk" in kfn.base_kinds
    spatial = len(kfn.input_shape) >= 2

    def entries(shape, full):
        n = prod(shape[:-1]) if spatial and len(shape) >= 2 else 1
        return n * n if full else n

    def window(layer) -> int:
        size = getattr(layer, "filter", None) or getattr(layer, "window", None) or ()
        size = (size,) if isinstance(size, int) else size
        return sum(f - 1 for f in size) + 2

    def walk(layers, in_shape, out_full) -> int:
        need = full_needed(layers, out_full)
        total = 0
        rows = layer_shapes(type(arch)(**{**arch.__dict__, "layers": tuple(layers),
                                          "readouts": None}), in_shape)
        for k, (layer, before, after) in enumerate(rows):
            t = layer_type(layer)
            n_in, n_out = entries(before, need[k]), entries(after, need[k + 1])
            held = branches(layer)
            if held:
                total += sum(walk(b, before, need[k + 1]) for b in held if b)
                total += (len(held) - 1) * n_out * (1 + ntk)
            elif t.reads_variances:
                total += n_out * (POINTWISE_NNGP + ntk * POINTWISE_NTK)
            elif t.name in ("global_avg_pool", "global_sum_pool", "flatten"):
                total += n_in * (1 + ntk)
            elif t.name == "dense":
                total += n_out * (2 + ntk * 3)
            elif t.name == "layer_norm":
                total += n_out * LAYER_NORM * (1 + ntk)
            elif t.name != "identity":
                total += n_out * window(layer) * (1 + ntk)
        return total

    layers = tuple(arch.layers)
    channels = kfn.input_shape[-1]
    first = entries(kfn.input_shape, full_needed(layers)[0])
    gram = 2 * channels * first if not kfn.flat_input else 2 * prod(kfn.input_shape)
    # with kernel.augment, a pair is one evaluation per flip (the other input flipped)
    evaluations = len(kfn.group)
    return evaluations * gram, evaluations * walk(layers, kfn.input_shape, False)


def counts(case: str, dtype: str, n: int) -> dict:
    from kernelcli.config import load_config
    from kernelcli.kernels import build_kernel_fn, cost_model

    cfg = load_config(config_path(case))
    shape = case_input_shape(case)
    kfn = build_kernel_fn(cfg.architecture, shape, KINDS, dtype, case_augment(case))
    item = kfn.dtype.itemsize
    streamed = cost_model(kfn, 1).bytes_per_pair
    # a tri call over n inputs reads each once for its n(n+1)/2 pairs
    fused = n * prod(shape) * item / (n * (n + 1) / 2) + len(KINDS) * item
    gram, elementwise = pair_flops(kfn)
    return {"gram_flops": gram, "elementwise_flops": elementwise, "fused_bytes": fused,
            "streamed_bytes": streamed}


_LIMITS = r"""
import json, time
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)

def best(call, reps=5):
    call()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times)

out = {}
for dtype in ("float32", "float64"):
    n = 2048
    a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), dtype)
    gemm = jax.jit(lambda a: a @ a)
    out[f"gemm_{dtype}"] = 2 * n ** 3 / best(lambda: gemm(a).block_until_ready())
x = jnp.zeros(2 ** 26, jnp.float32)
inc = jax.jit(lambda x: x + 1)
y, z = np.zeros(2 ** 26, np.float32), np.ones(2 ** 26, np.float32)
out["copy"] = 2 * x.nbytes / min(best(lambda: inc(x).block_until_ready()),
                                 best(lambda: np.copyto(y, z)))
print(json.dumps(out))
"""


def limits(cores: int) -> dict:
    """FMA rate and copy bandwidth of a fresh process pinned to ``cores`` cores."""
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cores])
    r = subprocess.run(["taskset", "-c", cpus, sys.executable, "-c", _LIMITS],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def measured(case: str, dtype: str, reps: int, root: Optional[str] = None) -> float:
    """kernelcli's seconds per pair of the triangle, best of ``reps`` warm calls, of the
    checkout at ``root`` (default: the one this process imports)."""
    n = ROOF_N[case] if case in ROOF_N else CASES[case][0]
    # the checkout first on the path, the rest of the path kept (where jax may come from)
    env = None if root is None else {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(root).resolve()), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, str(BENCH / "kc_case.py"), case, "--n", str(n),
                        "--reps", str(reps), "--mode", "tri", "--dtype", dtype],
                       capture_output=True, text=True, check=True, env=env)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return min(out["seconds"]) / out["entries"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--old", default=None, metavar="ROOT",
                   help="also time the checkout at ROOT, each row old then new in turn")
    p.add_argument("--old-reps", type=int, default=1,
                   help="warm calls of the old checkout (its calls take 3-10x longer)")
    a = p.parse_args(argv)
    ncores = len(os.sched_getaffinity(0))
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    # the limits before and after the timings, the better of each kept: a neighbour's
    # load during one measurement (a 2-core GEMM at half its rate, seen) would make
    # the roofline look near
    first = {c: limits(c) for c in sorted({1, ncores})}
    timed = []
    for case in a.cases.split(","):
        for dtype in a.dtypes.split(","):
            t_old = measured(case, dtype, a.old_reps, a.old) if a.old else None
            timed.append((case, dtype, t_old, measured(case, dtype, a.reps)))
            print(f"timed {case} {dtype}", file=sys.stderr, flush=True)
    last = {c: limits(c) for c in sorted({1, ncores})}
    lim = {c: {k: max(first[c][k], last[c][k]) for k in first[c]} for c in first}
    for c in first:
        for label, v in (("before", first[c]), ("after", last[c])):
            print(f"{c} core(s), {label}: GEMM float32 {v['gemm_float32'] / 1e9:.1f} GFLOP/s, "
                  f"float64 {v['gemm_float64'] / 1e9:.1f} GFLOP/s; copy {v['copy'] / 1e9:.1f} "
                  f"GB/s")
    peak = lim[ncores]
    print()
    before = (" old ms / pair | old of limit |", "---:|---:|") if a.old else ("", "")
    print(f"| case | dtype | MFLOP / pair | MB / pair fused / streamed | roofline ms / pair "
          f"({ncores} cores) |{before[0]} measured ms / pair | of limit | streamed bytes at "
          f"copy bandwidth, ms |")
    print(f"|---|---|---:|---:|---:|{before[1]}---:|---:|---:|")
    rows = []
    for case, dtype, t_old, t in timed:
        c = counts(case, dtype, ROOF_N[case] if case in ROOF_N else CASES[case][0])
        fma = peak[f"gemm_{dtype}"]
        roof = max(c["gram_flops"] / fma + c["elementwise_flops"] / (fma / 2),
                   c["fused_bytes"] / peak["copy"])
        rows.append({"case": case, "dtype": dtype, **c, "roofline_s": roof,
                     "measured_s": t, "old_measured_s": t_old})
        flops = c["gram_flops"] + c["elementwise_flops"]
        old_cells = f" {t_old * 1e3:.4f} | {roof / t_old:.0%} |" if a.old else ""
        print(f"| {case} | {dtype} | {flops / 1e6:,.2f} | "
              f"{c['fused_bytes'] / 1e6:.3f} / {c['streamed_bytes'] / 1e6:,.2f} | "
              f"{roof * 1e3:.4f} |{old_cells} {t * 1e3:.4f} | {roof / t:.0%} | "
              f"{c['streamed_bytes'] / peak['copy'] * 1e3:.4f} |")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    print(json.dumps({"limits": lim, "rows": rows}))


if __name__ == "__main__":
    main()
