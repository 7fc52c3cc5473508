"""neural-tangents' side of the whole-process table (bench/whole.py): the work of
``kernelcli compute`` done as a plain neural-tangents script would do it.

    bench/.venv-nt/bin/python bench/nt_whole.py cnn5_gap INPUTS.npy OUT.npy

Loads INPUTS.npy (the same file kernelcli's config points at), builds the case's
network with ``stax`` (nt_case.py's builders), computes the symmetric matrix
``kernel_fn(x, None, ('nngp', 'ntk'))`` under ``jax.jit`` and saves both kernels
to OUT.npy as one ``(2, N, N)`` float32 array: one symmetric matrix to disk.

The script splits its own time so the parent can separate start-up and
compilation from computing: it compiles ahead of time (``lower().compile()``),
so the call it times is the computation alone and compiles nothing. Prints one
JSON line: seconds from its first line to imports done, compile, compute and
write seconds, and its own peak RSS (VmHWM).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # before the heavy imports: they are start-up

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# neural_tangents.experimental needs TensorFlow; stax does not use it.
sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import CASES, report, save_result  # noqa: E402
from nt_case import network  # noqa: E402  (imports neural_tangents.stax)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("inputs", help=".npy of float32 inputs (N, 32, 32, 3)")
    p.add_argument("out", help=".npy path for the (2, N, N) kernels")
    a = p.parse_args(argv)
    imported = time.perf_counter() - T0

    _, _, kernel_fn = network(a.case)
    x = jax.device_put(np.load(a.inputs))
    t0 = time.perf_counter()
    compiled = jax.jit(lambda v: kernel_fn(v, None, ("nngp", "ntk"))).lower(x).compile()
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(x))
    compute_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    save_result(a.out, {"nngp": out.nngp, "ntk": out.ntk})
    write_s = time.perf_counter() - t0
    report(tool="neural-tangents", case=a.case, n=int(x.shape[0]), import_s=imported,
           compile_s=compile_s, compute_s=compute_s, write_s=write_s,
           script_s=time.perf_counter() - T0, jax=jax.__version__)


if __name__ == "__main__":
    main()
