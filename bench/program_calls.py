"""Per call of one compiled program: wall, user and system CPU, minor page faults
(where float64's cost beyond its arithmetic goes).

    python bench/program_calls.py myrtle5 --dtype float64 [--program pairs|stats]
        [--calls 20]

Builds ``bench/configs/<case>.yaml`` for (32, 32, 3) inputs on one device (no host
device split: run it under ``taskset -c N`` to pin it to a core), and calls the
per-input program (``stats``: one input) or the pair program (``pairs``: one call of
the cpu engine's batch) ``--calls`` times after a warm-up, twice. Prints, per round, the
best and median wall ms per call and the process's user and system CPU ms and minor
page faults per call (``getrusage``), and the program's XLA temporaries in MiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import CASES, INPUT_SHAPE, KINDS, config_path, make_inputs  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--program", choices=("pairs", "stats"), default="pairs")
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from kernelcli.config import load_config
    from kernelcli.kernels import build_kernel_fn

    cfg = load_config(config_path(a.case))
    kfn = build_kernel_fn(cfg.architecture, input_shape=INPUT_SHAPE, kinds=KINDS,
                          dtype=a.dtype)
    x = make_inputs(8).astype(a.dtype)
    s = kfn.stats(x)
    with kfn._scope():
        if a.program == "stats":
            args = (jnp.asarray(x[:1]),)
            program = kfn._stats_jit
        else:
            size = kfn.call_batch(1)
            i = jnp.asarray(np.arange(size) % 8, jnp.int32)
            j = jnp.asarray((np.arange(size) + 1) % 8, jnp.int32)
            xs, vs = jnp.asarray(x), tuple(map(jnp.asarray, s.variances))
            args = (xs, vs, xs, vs, i, j)
            program = kfn._pairs_jit
        temp = program.lower(*args).compile().memory_analysis().temp_size_in_bytes
        jax.block_until_ready(program(*args))
        for _ in range(2):
            times = []
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(a.calls):
                t0 = time.perf_counter()
                jax.block_until_ready(program(*args))
                times.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            n = a.calls
            print(f"{a.case} {a.dtype} {a.program}: best {min(times) * 1e3:.2f} ms, median "
                  f"{np.median(times) * 1e3:.2f} ms; user {(r1.ru_utime - r0.ru_utime) / n * 1e3:.2f}"
                  f" ms, system {(r1.ru_stime - r0.ru_stime) / n * 1e3:.2f} ms, "
                  f"{(r1.ru_minflt - r0.ru_minflt) / n:.0f} minor faults per call; "
                  f"temporaries {temp / 2**20:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
