"""Time one benchmark case with kernelcli (run with /work/venv's python).

    python bench/kc_case.py cnn5_gap --n 6 --reps 2 --mode rect --out kc.npy

Loads ``bench/configs/<case>.yaml``, builds the kernel function for float32
``(32, 32, 3)`` inputs, makes one warm-up call, times ``reps`` calls and prints
one JSON line (case, n, mode, seconds per call, the process's CPU seconds per call
(all its threads: on a machine shared with other work they move less than wall time),
warm-up seconds (the first call: compilations included) and CPU seconds, how
many XLA compilations the first call made, entries evaluated, bytes_per_pair, peak
RSS in bytes).

``--mode rect`` times ``kernel_matrix(kfn, x1, x1_copy)``: all N*N entries, the
same work as neural-tangents' single ``kernel_fn(x1)`` call. ``--mode tri`` times
``kernel_matrix(kfn, x1)``: the symmetric matrix from its lower triangle.
``kernel_matrix`` is ``kernelcli compute``'s own route (planner, per-input pass,
blocks, pair batches) less the store, so this times what users run. The kernels go
to ``--out`` as a ``(2, N, N)`` float32 array (nngp, ntk).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import (  # noqa: E402
    CASES,
    KINDS,
    RECIPES,
    case_augment,
    case_input_shape,
    config_path,
    device_peak_bytes,
    make_inputs,
    report,
    save_result,
)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted({**CASES, **RECIPES}))
    p.add_argument("--n", type=int, default=None, help="number of inputs (default: the case's)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=("rect", "tri", "memory"), default="rect",
                   help="memory: no timing; XLA's compiled peak per pair in flight over "
                        "the covariances that must be alive")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--out", default=None, help=".npy path for the (2, N, N) kernels")
    p.add_argument("--engine", default=os.environ.get("KC_BENCH_ENGINE", "auto"),
                   choices=("auto", "cpu", "native", "accelerator"),
                   help="the execution engine (default: KC_BENCH_ENGINE, else auto: the engine "
                        "compute takes here), so engine_ab.py's --variant "
                        "'cpu:KC_BENCH_ENGINE=cpu' times another beside it")
    p.add_argument("--library", action="store_true",
                   help="leave jax's one CPU device, as a library user's process does "
                        "(default: one host device per core, as `kernelcli compute`)")
    a = p.parse_args(argv)
    n = a.n or (CASES[a.case][0] if a.case in CASES else RECIPES[a.case])
    shape, flips = case_input_shape(a.case), case_augment(a.case)

    from kernelcli.run import configure_host_devices

    if not a.library:
        from kernelcli.kernels import pin_cpu_level

        pin_cpu_level()  # KERNELCLI_CPU_LEVEL, else this CPU's best, as `kernelcli compute`
        configure_host_devices()  # one XLA host device per core, as `kernelcli compute`
    import jax
    from jax import monitoring

    from kernelcli.config import check_architecture, load_config
    from kernelcli.kernels import build_kernel_fn, resolve_engine
    from kernelcli.run import kernel_matrix

    cfg = load_config(config_path(a.case))
    check_architecture(cfg.architecture, shape)
    platform = jax.devices()[0].platform
    try:
        a.engine = resolve_engine(a.engine, platform, cfg.architecture.layers, shape)
    except TypeError:  # a checkout from before auto weighed the network (roofline.py --old)
        a.engine = resolve_engine(a.engine, platform)
    kfn = build_kernel_fn(cfg.architecture, input_shape=shape, kinds=KINDS,
                          dtype=a.dtype, augment=flips, engine=a.engine)
    if a.mode == "memory":
        report_memory(kfn, a.case, n)
        return
    x1 = make_inputs(n, a.seed, shape).astype(a.dtype)
    args = (x1, x1.copy()) if a.mode == "rect" else (x1,)

    compilations = []  # XLA compilations of the first call (per program and device)
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: compilations.append(secs)
        if name == "/jax/core/compile/backend_compile_duration" else None)
    t0, c0 = time.perf_counter(), time.process_time()
    out = kernel_matrix(kfn, *args)
    warmup, warmup_cpu = time.perf_counter() - t0, time.process_time() - c0
    first_compilations = len(compilations)
    times, cpu = [], []
    for _ in range(a.reps):
        t0, c0 = time.perf_counter(), time.process_time()
        out = kernel_matrix(kfn, *args)  # returns host numpy arrays: already synchronised
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if a.out:
        save_result(a.out, out)
    entries = n * n if a.mode == "rect" else n * (n + 1) // 2
    report(tool="kernelcli", case=a.case, n=n, mode=a.mode, engine=a.engine, entries=entries,
           seconds=times,
           cpu_seconds=cpu,
           warmup_s=warmup, warmup_cpu_s=warmup_cpu, compilations=first_compilations,
           bytes_per_pair=getattr(kfn, "bytes_per_pair", None),
           dtype=str(out["nngp"].dtype), jax=jax.__version__,
           device=jax.devices()[0].platform, device_peak=device_peak_bytes(jax))


def report_memory(kfn, case: str, n: int) -> None:
    """XLA's peak bytes of one pair call with one chunk of pairs in flight: the
    block's inputs and variances (shared by all its pairs) and the rest (outputs
    and temporaries, what grows with the pairs in flight), against the live
    covariances of those pairs (each kind's into and out of a layer)."""
    if kfn.flat_input:  # one Gram matrix per block: no covariances per pair
        report(tool="kernelcli", case=case, n=n, mode="memory", ratio=None)
        return
    chunk = kfn.chunk
    live = chunk * kfn.live_bytes_per_pair
    total = kfn.compiled_memory(n_rows=n, n_cols=n, pair_batch=chunk)
    per_pairs = kfn.compiled_memory(n_rows=n, n_cols=n, pair_batch=chunk, arguments=False)
    report(tool="kernelcli", case=case, n=n, mode="memory", chunk=chunk, live=live,
           arguments=total - per_pairs, pairs=per_pairs, ratio=per_pairs / live)


if __name__ == "__main__":
    main()
