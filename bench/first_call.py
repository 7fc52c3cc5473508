"""The first call of ``kernel_fn``, compilation included, kernelcli against neural-tangents
(issue 26 point 4).

    python bench/first_call.py [--n 8] [--depth 3] [--rounds 3]   # the driver (project venv)

The network: ``depth`` x (3x3 SAME conv, W_std sqrt 2, b_std 0; ReLU), flatten, dense,
on ``(n, 32, 32, 3)`` float32 inputs (``cases.make_inputs``). Each round runs, in fresh
processes and in turn, kernelcli's ``kernelcli.stax`` ``kernel_fn(x, None, ('nngp',
'ntk'))`` with its compilation cache off (``KERNELCLI_CACHE_DIR=off``, and JAX's
persistent cache off) and neural-tangents 0.6.5's ``jax.jit(kernel_fn)`` called the
same way (``bench/.venv-nt``, or ``NT_VENV``). Each worker prints its import seconds
and the first call's wall and CPU seconds (to the results on the host); the driver
prints the best of the rounds (by wall time) and the ratios. Neither tool has a warm cache here: this is what a user's
first call in a new process costs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SQRT2 = 2.0 ** 0.5


def worker(tool: str, n: int, depth: int) -> None:
    t0 = time.perf_counter()
    sys.path.insert(0, str(BENCH))
    from cases import make_inputs

    if tool == "nt":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        # neural_tangents.experimental needs TensorFlow; stax does not use it
        sys.modules["neural_tangents.experimental"] = types.ModuleType(
            "neural_tangents.experimental")
        import jax
        from neural_tangents import stax

        jax.config.update("jax_enable_compilation_cache", False)
    else:
        import jax
        from kernelcli import stax

        jax.config.update("jax_enable_compilation_cache", False)
    layers = [stax.Conv(1, (3, 3), padding="SAME", W_std=SQRT2, b_std=0.0), stax.Relu()]
    _, _, kernel_fn = stax.serial(*(layers * depth), stax.Flatten(),
                                  stax.Dense(1, SQRT2, 0.0))
    if tool == "nt":
        kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    x = make_inputs(n)
    imported = time.perf_counter() - t0
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = kernel_fn(x, None, ("nngp", "ntk"))
    jax.block_until_ready(tuple(out))
    first = time.perf_counter() - t0
    print(json.dumps({"tool": tool, "import_s": imported, "first_s": first,
                      "first_cpu_s": cpu_seconds() - c0, "jax": jax.__version__}), flush=True)


def cpu_seconds() -> float:
    """User + system seconds of this process, all threads: on a machine shared with
    other work a compilation's wall time is mostly waiting for a core."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(tool: str, n: int, depth: int) -> dict:
    if tool == "nt":
        venv = Path(os.environ.get("NT_VENV", BENCH / ".venv-nt"))
        python = str(venv / "bin" / "python")
    else:
        python = sys.executable
    env = {**os.environ, "KERNELCLI_CACHE_DIR": "off", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([python, __file__, "--worker", tool, "--n", str(n), "--depth",
                          str(depth)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", choices=("kc", "nt"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.worker, a.n, a.depth)
        return
    best = {"kc": None, "nt": None}
    for _ in range(a.rounds):
        for tool in ("kc", "nt"):
            got = run(tool, a.n, a.depth)
            print(json.dumps(got), flush=True)
            if best[tool] is None or got["first_s"] < best[tool]["first_s"]:
                best[tool] = got
    kc, nt = best["kc"], best["nt"]
    print("| network | N | kernelcli first call s (CPU s) | neural-tangents first call s "
          "(CPU s) | kc/NT wall | kc/NT CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| {a.depth} x (conv 3x3 + relu), flatten, dense | {a.n} | {kc['first_s']:.2f} "
          f"({kc['first_cpu_s']:.2f}) | {nt['first_s']:.2f} ({nt['first_cpu_s']:.2f}) | "
          f"{kc['first_s'] / nt['first_s']:.2f} | {kc['first_cpu_s'] / nt['first_cpu_s']:.2f} |")


if __name__ == "__main__":
    main()
