"""The seed network hand-fused in C beside kernelcli's route (issue 26 point 2).

    python bench/fused_c.py                 # check, then time at roofline's N (24)
    python bench/fused_c.py --rounds 3 --reps 5 --check-n 8
    python bench/fused_c.py --variant=-ffast-math      # also a build with these flags
    python bench/fused_c.py --layer 4                  # one conv + ReLU layer, 4 pairs

``bench/fused_c/seed.c`` computes cnn1_gap's NNGP and NTK per pair (conv, ReLU,
global average pool, dense) in one loop per pair that writes no covariance: the same
formulas as kernelcli (``kernels/_linear_spatial.channel_gram``, ``_fused``'s row
window, ``_nonlinear.abrelu``, ``_angle.atan2_nonneg``), float32 and float64. This
script compiles it with gcc into a temporary directory, loads it with ctypes, checks
it against ``kernel_matrix`` on the same images (max relative difference), then times
it per pair of the triangle on 1 and 2 threads (two Python threads, each calling the
C function on half the pairs; ctypes releases the GIL), alternating in the same run
with kernelcli's route (``kc_case.py --mode tri`` in a fresh process, as
``engine_ab.py``), and prints one markdown table with the fraction of
``roofline.py``'s limit. ``--layer`` times instead one conv + ReLU layer on full
covariances (``layer_pairs`` in the same file) against ``_fused.conv_pointwise``
jitted alone. A benchmark only: kernelcli does not use it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import CONFIGS, INPUT_SHAPE, KINDS, make_inputs  # noqa: E402
from roofline import ROOF_N, counts, limits  # noqa: E402

SOURCE = BENCH / "fused_c" / "seed.c"
CFLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno",
          "-shared", "-fPIC"]
CASE = "cnn1_gap"


def build(tmp: str, extra=(), name: str = "seed") -> ctypes.CDLL:
    lib = os.path.join(tmp, f"{name}.so")  # one name per build: dlopen keeps the first
    subprocess.run(["gcc", *CFLAGS, *extra, "-o", lib, str(SOURCE)], check=True)
    dll = ctypes.CDLL(lib)
    for sfx in ("f32", "f64"):
        fn = getattr(dll, f"layer_pairs_{sfx}")
        fn.restype = ctypes.c_int
        fn.argtypes = ([ctypes.c_void_p] * 2 + [ctypes.c_int] * 5 + [ctypes.c_void_p] * 2
                       + [ctypes.c_double] * 2 + [ctypes.c_void_p] * 2)
        fn = getattr(dll, f"seed_pairs_{sfx}")
        fn.restype = ctypes.c_int
        fn.argtypes = ([ctypes.c_void_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 2
                       + [ctypes.c_int] + [ctypes.c_double] * 4 + [ctypes.c_void_p] * 2)
    return dll


def network():
    """The conv's and the dense layer's constants from cnn1_gap.yaml (and a check that
    the layers are the ones seed.c computes)."""
    from kernelcli.config import load_config

    layers = load_config(CONFIGS / f"{CASE}.yaml").architecture.layers
    names = [type(layer).__name__ for layer in layers]
    conv, dense = layers[0], layers[-1]
    assert names[0] == "Conv" and names[-1] == "Dense" and len(layers) == 4, names
    assert conv.strides == (1, 1) and conv.filter[0] == conv.filter[1] and \
        conv.padding in ("SAME", "VALID"), conv
    sq = lambda b: 0.0 if b is None else b ** 2  # noqa: E731
    return dict(k=conv.filter[0], same=int(conv.padding == "SAME"),
                consts=(conv.W_std ** 2, sq(conv.b_std), dense.W_std ** 2, sq(dense.b_std)))


class Fused:
    def __init__(self, dll, x: np.ndarray, net: dict):
        self.x = np.ascontiguousarray(x)
        self.fn = getattr(dll, "seed_pairs_f32" if x.dtype == np.float32 else "seed_pairs_f64")
        self.net = net

    def pairs(self, pi: np.ndarray, pj: np.ndarray):
        pi, pj = (np.ascontiguousarray(a, np.int32) for a in (pi, pj))
        nngp, ntk = (np.empty(len(pi), self.x.dtype) for _ in range(2))
        n, h, w, c = self.x.shape
        rc = self.fn(self.x.ctypes.data, n, h, w, c, self.net["k"], self.net["same"],
                     pi.ctypes.data, pj.ctypes.data, len(pi), *self.net["consts"],
                     nngp.ctypes.data, ntk.ctypes.data)
        assert rc == 0, "seed.c: out of memory"
        return nngp, ntk

    def threaded(self, pi, pj, threads: int):
        parts = [(pi[t::threads], pj[t::threads]) for t in range(threads)]
        if threads == 1:
            return [self.pairs(*parts[0])]
        out = [None] * threads

        def run(t):
            out[t] = self.pairs(*parts[t])
        ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out


def triangle(n: int):
    i, j = np.tril_indices(n)
    return i.astype(np.int32), j.astype(np.int32)


def check(dll, net, n: int) -> dict:
    """Max relative difference to kernelcli's kernel_matrix on the same n images."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import kernel_matrix
    from kernelcli.config import load_config

    arch = load_config(CONFIGS / f"{CASE}.yaml").architecture
    out = {}
    for dtype in ("float32", "float64"):
        x = make_inputs(n).astype(dtype)
        kfn = build_kernel_fn(arch, input_shape=INPUT_SHAPE, kinds=KINDS, dtype=dtype)
        ref = kernel_matrix(kfn, x)
        i, j = triangle(n)
        got = Fused(dll, x, net).pairs(i, j)
        for kind, g in zip(KINDS, got):
            r = np.asarray(ref[kind], np.float64)[i, j]
            out[(dtype, kind)] = float(np.max(np.abs(g - r) / np.abs(r)))
    return out


def time_fused(f: Fused, pi, pj, threads: int, reps: int):
    """Best (wall, CPU) seconds per pair over ``reps`` calls (after one warm-up)."""
    f.threaded(pi, pj, threads)
    best = (np.inf, np.inf)
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        f.threaded(pi, pj, threads)
        t, c = time.perf_counter() - t0, time.process_time() - c0
        best = (min(best[0], t / len(pi)), min(best[1], c / len(pi)))
    return best


def time_kernelcli(dtype: str, n: int, reps: int):
    env = {**os.environ, "KERNELCLI_CACHE_DIR": "off"}
    r = subprocess.run([sys.executable, str(BENCH / "kc_case.py"), CASE, "--n", str(n),
                        "--mode", "tri", "--dtype", dtype, "--reps", str(reps)],
                       env=env, capture_output=True, text=True, check=True)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return min(got["seconds"]) / got["entries"], min(got["cpu_seconds"]) / got["entries"]


def layer(dll, net: dict, pairs: int, rounds: int, reps: int, dtypes) -> None:
    """One conv + ReLU layer on full covariances (the deeper pooling nets' per-layer
    block): ``layer_pairs`` in C (1 thread, and 2 threads on half the pairs each)
    against ``kernels._fused.conv_pointwise`` with ``abrelu`` compiled alone with the
    route's options, one pair per call as the route's chunk (XLA's own threads), on ``pairs`` pairs of real input covariances (``channel_gram``), the NTK
    twice the NNGP; max relative difference and best wall / CPU ms per pair."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from kernelcli.kernels._diagonal_conv import conv_mean
    from kernelcli.kernels._fused import conv_pointwise
    from kernelcli.kernels._linear_spatial import channel_gram
    from kernelcli.kernels._nonlinear import abrelu
    from kernelcli.kernels._state import State
    from kernelcli.kernels._xla import compiler_options
    from kernelcli.config import load_config

    conv = load_config(CONFIGS / f"{CASE}.yaml").architecture.layers[0]
    w2, b2 = net["consts"][:2]
    print("\n| dtype | layer route | threads | wall ms / pair | CPU ms / pair | max diff / max "
          "entry, NNGP / NTK |\n|---|---|---:|---:|---:|---:|")
    for dtype in dtypes:
        x = make_inputs(2 * pairs, 1).astype(dtype)
        x1, x2 = x[:pairs], x[pairs:]
        kn = np.asarray(channel_gram(jnp.asarray(x1), jnp.asarray(x2)))
        kt = 2 * kn
        v1, v2 = (np.asarray(w2 * conv_mean(jnp.asarray(np.mean(a * a, -1)), conv) + b2,
                             dtype) for a in (x1, x2))
        exact = dtype == "float64"

        def xla(kn, kt, v1, v2):
            st = State(nngp=kn, ntk=kt, full=True, spatial=True, channels=3)
            out = conv_pointwise(st, conv, lambda s, a, b: abrelu(s, a, b, 0.0, 1.0, exact),
                                 v1, v2, standard=False)
            return out.nngp, out.ntk
        # as the route compiles it (the classic emitter on full covariances) and calls it:
        # one pair per call (a 4 MiB covariance is over the 512 KiB chunk)
        args = [[jnp.asarray(a[i:i + 1]) for a in (kn, kt, v1, v2)] for i in range(pairs)]
        f = jax.jit(xla).lower(*args[0]).compile(compiler_options(True))
        ref = [np.concatenate(r) for r in zip(*[f(*a) for a in args])]
        fn = getattr(dll, "layer_pairs_f32" if dtype == "float32" else "layer_pairs_f64")

        def c_call(sl):
            on, ot = np.empty_like(kn[sl]), np.empty_like(kn[sl])
            parts = [np.ascontiguousarray(a[sl]) for a in (kn, kt, v1, v2)]
            rc = fn(parts[0].ctypes.data, parts[1].ctypes.data, len(parts[0]), 32, 32,
                    net["k"], net["same"], parts[2].ctypes.data, parts[3].ctypes.data,
                    w2, b2, on.ctypes.data, ot.ctypes.data)
            assert rc == 0, rc
            return on, ot

        got = c_call(slice(None))
        # against each array's largest entry: the NTK's kdot cancels near angle pi, where
        # an entry's own relative difference says only how close to zero it is
        errs = [float(np.max(np.abs(g - r)) / np.max(np.abs(r))) for g, r in zip(got, ref)]

        def two():
            half = pairs // 2  # contiguous halves: no copies of the inputs
            ts = [threading.Thread(target=c_call, args=(sl,))
                  for sl in (slice(0, half), slice(half, None))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        runs = {("kernelcli conv_pointwise (XLA)", "XLA"):
                lambda: [jax.block_until_ready(f(*a)) for a in args],
                ("fused C", 1): lambda: c_call(slice(None)), ("fused C", 2): two}
        best = {}
        for _ in range(rounds):
            for key, call in runs.items():
                call()
                for _ in range(reps):
                    t0, c0 = time.perf_counter(), time.process_time()
                    call()
                    w, c = (time.perf_counter() - t0) / pairs, (time.process_time() - c0) / pairs
                    old = best.get(key, (np.inf, np.inf))
                    best[key] = (min(old[0], w), min(old[1], c))
        for (route, threads), (w, c) in best.items():
            err = f"{errs[0]:.1e} / {errs[1]:.1e}" if route == "fused C" else "reference"
            print(f"| {dtype} | {route} | {threads} | {w * 1e3:.3f} | {c * 1e3:.3f} | {err} |",
                  flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=ROOF_N[CASE])
    p.add_argument("--check-n", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--variant", action="append", default=[], metavar="CFLAGS",
                   help="also check and time a build with these extra gcc flags "
                        "(e.g. '-ffast-math', '-DSEED_ONE_SQRT=1 -DSEED_RECIP_C=1')")
    p.add_argument("--layer", type=int, default=0, metavar="PAIRS",
                   help="instead: one conv + ReLU layer on full covariances of PAIRS "
                        "pairs, C against kernelcli's conv_pointwise jitted alone")
    a = p.parse_args(argv)
    dtypes = a.dtypes.split(",")
    net = network()
    if a.layer:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            layer(build(tmp), net, a.layer, a.rounds, a.reps, dtypes)
            print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        builds = {"": build(tmp)}
        for i, v in enumerate(a.variant):
            builds[v] = build(tmp, v.split(), f"variant{i}")
        print(f"gcc {' '.join(CFLAGS)}; load average at start: {os.getloadavg()[0]:.2f}",
              flush=True)
        for v, dll in builds.items():
            if not a.check_n:
                break
            for (dtype, kind), err in check(dll, net, a.check_n).items():
                print(f"check{' ' + v if v else ''} N={a.check_n} {dtype} {kind}: max "
                      f"relative difference to kernel_matrix {err:.2e}", flush=True)
        ncores = len(os.sched_getaffinity(0))
        lim = {c: limits(c) for c in sorted({1, ncores})}
        pi, pj = triangle(a.n)
        best = {}
        for r in range(a.rounds):
            for dtype in dtypes:
                x = make_inputs(a.n).astype(dtype)
                runs = {("kernelcli", ncores): lambda: time_kernelcli(dtype, a.n, a.reps)}
                for v, dll in builds.items():
                    f = Fused(dll, x, net)
                    for threads in sorted({1, ncores}):
                        runs[("fused C" + (f" {v}" if v else ""), threads)] = (
                            lambda f=f, t=threads: time_fused(f, pi, pj, t, a.reps))
                for key, call in runs.items():
                    w, c = call()
                    old = best.get((dtype,) + key, (np.inf, np.inf))
                    best[(dtype,) + key] = (min(old[0], w), min(old[1], c))
                    print(f"round {r} {dtype} {key[0]} {key[1]} thread(s): "
                          f"{w * 1e3:.4f} ms/pair wall, {c * 1e3:.4f} CPU", flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}\n")
    print("| dtype | route | threads | wall ms / pair | CPU ms / pair | roofline ms / pair "
          "(cores) | of roofline | kernelcli / this (wall) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for dtype in dtypes:
        cnt = counts(CASE, dtype, a.n)
        kc = best[(dtype, "kernelcli", ncores)][0]
        for (dt, route, threads), (w, c) in best.items():
            if dt != dtype:
                continue
            fma, copy = lim[threads][f"gemm_{dtype}"], lim[threads]["copy"]
            roof = max(cnt["gram_flops"] / fma + cnt["elementwise_flops"] / (fma / 2),
                       cnt["fused_bytes"] / copy)
            print(f"| {dtype} | {route} | {threads} | {w * 1e3:.4f} | {c * 1e3:.4f} | "
                  f"{roof * 1e3:.4f} ({threads}) | {roof / w:.0%} | {kc / w:.2f} |")
    print(json.dumps({"limits": lim, "best": {" ".join(map(str, k)): v
                                              for k, v in best.items()}}))


if __name__ == "__main__":
    main()
