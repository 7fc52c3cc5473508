"""Time one benchmark case with neural-tangents 0.6.5 (run inside bench/.venv-nt).

    bench/.venv-nt/bin/python bench/nt_case.py cnn5_gap --n 6 --reps 2 --out nt.npy

Builds the case's network with ``stax``, jits ``kernel_fn(x1, None, ('nngp',
'ntk'))`` (the whole symmetric N x N matrix in one call), makes one warm-up
call, times ``reps`` calls and prints one JSON line: case, n, seconds per call,
warm-up seconds, peak RSS in bytes. The kernels go to ``--out`` as a
``(2, N, N)`` float32 array (nngp, ntk). ``--x64`` computes in float64 instead
(on the same inputs, cast up): the accuracy reference of ``run.py --ref64``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# neural_tangents.experimental needs TensorFlow; stax does not use it.
sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from neural_tangents import stax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import CASES, device_peak_bytes, make_inputs, report, save_result  # noqa: E402

SQRT2 = float(np.sqrt(2.0))


def conv_relu(times):
    """``times`` x (3x3 SAME conv, W_std sqrt 2, b_std 0; ReLU)."""
    return [stax.Conv(1, (3, 3), padding="SAME", W_std=SQRT2, b_std=0.0), stax.Relu()] * times


def myrtle(depth=5):
    """neural-tangents' MyrtleNetwork (notebooks/myrtle_kernel_with_neural_tangents)."""
    factor = {5: [2, 1, 1], 7: [2, 2, 2], 10: [3, 3, 3]}[depth]
    pool = stax.AvgPool((2, 2), strides=(2, 2))
    return (conv_relu(factor[0]) + [pool] + conv_relu(factor[1]) + [pool]
            + conv_relu(factor[2]) + [pool] * 3 + [stax.Flatten(), stax.Dense(1, SQRT2, 0.0)])


def network(case):
    head = {"gap": [stax.GlobalAvgPool()], "flatten": [stax.Flatten()]}
    if case.startswith("cnn"):
        depth, pool = case[3:].split("_")
        # the seed's network (configs/seed_gap.yaml) reads out with W_std 1
        readout = 1.0 if case == "cnn1_gap" else SQRT2
        return stax.serial(*conv_relu(int(depth)), *head[pool], stax.Dense(1, readout, 0.0))
    if case == "myrtle5":
        return stax.serial(*myrtle(5))
    if case == "fc2":
        dense = lambda: stax.Dense(1, SQRT2, 0.1)  # noqa: E731
        return stax.serial(stax.Flatten(), dense(), stax.Relu(), dense(), stax.Relu(), dense())
    raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--n", type=int, default=None, help="number of inputs (default: the case's)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help=".npy path for the (2, N, N) kernels")
    p.add_argument("--x64", action="store_true", help="compute in float64")
    a = p.parse_args(argv)
    n = a.n or CASES[a.case][0]
    if a.x64:
        jax.config.update("jax_enable_x64", True)

    _, _, kernel_fn = network(a.case)
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    x1 = make_inputs(n, a.seed)
    x1 = jax.device_put(x1.astype(np.float64) if a.x64 else x1)

    t0 = time.perf_counter()
    out = kernel_fn(x1, None, ("nngp", "ntk"))
    jax.block_until_ready(out)
    warmup = time.perf_counter() - t0
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        out = jax.block_until_ready(kernel_fn(x1, None, ("nngp", "ntk")))
        times.append(time.perf_counter() - t0)
    if a.out:
        save_result(a.out, {"nngp": out.nngp, "ntk": out.ntk})
    report(tool="neural-tangents", case=a.case, n=n, entries=n * n, seconds=times,
           warmup_s=warmup, dtype=str(out.nngp.dtype), jax=jax.__version__,
           device=jax.devices()[0].platform, device_peak=device_peak_bytes(jax))


if __name__ == "__main__":
    main()
