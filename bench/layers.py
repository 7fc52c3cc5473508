"""Per-entry time of each layer family, kernelcli against neural-tangents.

    bench/layers.py                      # every family, the table to stdout
    bench/layers.py --cases conv1d,parallel --reps 3

One case per layer family (elementwise kernels, locally connected and
transposed convolutions, sum pooling, parallel branches, 1-D and 3-D inputs),
each a small network with pooling or flatten on float32 standard-normal inputs.
Each case runs twice per rep in fresh processes, alternating tools so that load
drifts hit both: neural-tangents 0.6.5 (``bench/.venv-nt``, jitted
``kernel_fn(x, None, ('nngp', 'ntk'))``: the whole symmetric matrix in one
call) and kernelcli (the project venv, ``kernelcli.kernel_fn(...)(x)``: compute's
own route, the lower triangle of blocks mirrored). Each process makes one
warm-up call (compilation) and times one more; the table gives the best warm
call per tool as milliseconds per matrix entry (N^2 entries for both), their
ratio, and max |kc - nt| / max |nt| of the two kernels.

The networks are written once, as kernelcli YAML layer lists; the
neural-tangents side translates them with ``_stax_layer`` (bench code only, for
the names used here).
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

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
S2 = 1.4142135623730951
CONV = {"conv": {"filter": 3, "padding": "SAME", "W_std": S2, "b_std": 0.1}}
HEAD = [{"dense": {"W_std": 1.0, "b_std": 0.0}}]

# name -> (example shape, N, layers)
CASES = {
    "elementwise": ((16, 16, 3), 8, [
        CONV, {"sin": {"a": 1.0, "b": 1.0, "c": 0.3}}, CONV, {"gaussian": {"a": 1.0, "b": -1.0}},
        CONV, {"monomial": {"degree": 3}}, "global_avg_pool"] + HEAD),
    "conv_local": ((12, 12, 3), 256, [
        CONV, "relu", {"conv_local": {"filter": 3, "padding": "SAME", "W_std": S2}}, "relu",
        "flatten"] + HEAD),
    "conv_transpose": ((16, 16, 3), 8, [
        {"conv": {"filter": 3, "strides": 2, "padding": "SAME", "W_std": S2}}, "relu",
        {"conv_transpose": {"filter": 3, "strides": 2, "padding": "SAME", "W_std": S2}}, "relu",
        "global_avg_pool"] + HEAD),
    "sum_pool": ((16, 16, 3), 8, [
        CONV, "relu", {"sum_pool": {"window": 2}}, CONV, "relu",
        {"avg_pool": {"window": 3, "strides": 1, "padding": "SAME", "normalize_edges": True}},
        "global_sum_pool"] + HEAD),
    "parallel": ((16, 16, 3), 8, [
        CONV, "relu",
        {"parallel": {"branches": [[CONV, "relu", CONV], [{"conv": {"filter": 1, "W_std": 1.0}}]],
                      "merge": "sum"}},
        "relu", "global_avg_pool"] + HEAD),
    "conv1d": ((256, 4), 16, [
        {"conv": {"filter": 5, "padding": "SAME", "W_std": S2, "b_std": 0.1}}, "relu",
        {"conv": {"filter": 5, "padding": "SAME", "W_std": S2, "b_std": 0.1}}, "relu",
        "global_avg_pool"] + HEAD),
    "conv3d": ((8, 8, 8, 2), 8, [CONV, "relu", CONV, "relu", "global_avg_pool"] + HEAD),
}


def inputs(case: str) -> np.ndarray:
    shape, n, _ = CASES[case]
    return np.random.default_rng(0).standard_normal((n,) + shape).astype(np.float32)


# --- neural-tangents side (bench/.venv-nt) --------------------------------------------

def _stax_layer(stax, item, ndim):
    name, p = (item, {}) if isinstance(item, str) else next(iter(item.items()))
    p = dict(p)

    def tup(key, default):
        v = p.pop(key, default)
        return tuple(v) if isinstance(v, list) else (v,) * ndim

    if name in ("conv", "conv_local", "conv_transpose"):
        cls = {"conv": stax.Conv, "conv_local": stax.ConvLocal,
               "conv_transpose": stax.ConvTranspose}[name]
        return cls(1, tup("filter", 3), tup("strides", 1), p.get("padding", "SAME"),
                   W_std=p.get("W_std", 1.0), b_std=p.get("b_std", 0.0))
    if name == "dense":
        return stax.Dense(1, W_std=p.get("W_std", 1.0), b_std=p.get("b_std", 0.0))
    if name in ("avg_pool", "sum_pool"):
        window = tup("window", 2)
        kw = {"normalize_edges": p["normalize_edges"]} if "normalize_edges" in p else {}
        cls = stax.AvgPool if name == "avg_pool" else stax.SumPool
        return cls(window, tup("strides", window[0]), p.get("padding", "VALID"), **kw)
    if name == "parallel":
        fan_in = {"sum": stax.FanInSum(), "concat": stax.FanInConcat(axis=-1)}[p["merge"]]
        branches = [stax.serial(*[_stax_layer(stax, i, ndim) for i in b]) for b in p["branches"]]
        return stax.serial(stax.FanOut(len(branches)), stax.parallel(*branches), fan_in)
    simple = {"relu": stax.Relu, "global_avg_pool": stax.GlobalAvgPool,
              "global_sum_pool": stax.GlobalSumPool, "flatten": stax.Flatten,
              "sin": stax.Sin, "gaussian": stax.Gaussian, "monomial": stax.Monomial}
    return simple[name](**p)


def nt_main(case: str, out: str) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import types

    sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")
    import jax
    from neural_tangents import stax

    shape, _, layers = CASES[case]
    _, _, kernel_fn = stax.serial(*[_stax_layer(stax, i, len(shape) - 1) for i in layers])
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    x = jax.device_put(inputs(case))
    jax.block_until_ready(kernel_fn(x, None, ("nngp", "ntk")))
    t0 = time.perf_counter()
    k = jax.block_until_ready(kernel_fn(x, None, ("nngp", "ntk")))
    seconds = time.perf_counter() - t0
    np.save(out, np.stack([np.asarray(k.nngp), np.asarray(k.ntk)]))
    print(json.dumps({"seconds": seconds, "jax": jax.__version__}))


# --- kernelcli side (the project venv) ------------------------------------------------

def kc_main(case: str, out: str) -> None:
    from kernelcli.run import configure_host_devices

    configure_host_devices()  # one XLA host device per core, as `kernelcli compute` does
    import kernelcli

    _, _, layers = CASES[case]
    kfn = kernelcli.kernel_fn({"parameterization": "ntk", "layers": layers})
    x = inputs(case)
    kfn(x, get=("nngp", "ntk"), dtype="float32")
    t0 = time.perf_counter()
    nngp, ntk = kfn(x, get=("nngp", "ntk"), dtype="float32")
    seconds = time.perf_counter() - t0
    np.save(out, np.stack([nngp, ntk]))
    print(json.dumps({"seconds": seconds}))


# --- driver ---------------------------------------------------------------------------

def _run(python: str, tool: str, case: str, out: Path) -> float:
    cmd = [python, str(Path(__file__)), "--tool", tool, "--case", case, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{tool} {case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--tool", choices=("nt", "kc"), help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.tool:
        (nt_main if a.tool == "nt" else kc_main)(a.case, a.out)
        return
    nt_python = os.environ.get("NT_PYTHON", str(BENCH / ".venv-nt" / "bin" / "python"))
    kc_python = os.environ.get("KC_PYTHON", sys.executable)
    print("| family | input | N | neural-tangents ms/entry | kernelcli ms/entry | NT / kc "
          "| max rel. difference |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            shape, n, _ = CASES[case]
            best = {"nt": float("inf"), "kc": float("inf")}
            for _ in range(a.reps):
                for tool, python in (("nt", nt_python), ("kc", kc_python)):
                    best[tool] = min(best[tool],
                                     _run(python, tool, case, Path(tmp) / f"{tool}.npy"))
            nt, kc = (np.load(Path(tmp) / f"{t}.npy").astype(np.float64) for t in ("nt", "kc"))
            diff = max(np.max(np.abs(kc[i] - nt[i])) / np.max(np.abs(nt[i])) for i in range(2))
            ms = {t: 1e3 * s / (n * n) for t, s in best.items()}
            print(f"| {case} | {'x'.join(map(str, shape))} | {n} | {ms['nt']:.3f} | "
                  f"{ms['kc']:.3f} | {ms['nt'] / ms['kc']:.1f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
