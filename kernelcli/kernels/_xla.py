"""What kernelcli asks of XLA: per-program compiler options, the chunk size that fits
a core's cache, compilations one at a time, and giving freed memory back."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

import jax
import numpy as np

from .. import _env


def default_chunk_bytes(diagonals: bool = False) -> int:
    """Covariance bytes of one chunk of pairs: on CPU 512 KiB, half of a core's 1 MiB
    L2 cache, so a chunk's intermediates stay in it (networks without pooling ran
    1.4-2.1x faster per pair than with 4 MiB chunks); elsewhere 4 MiB. A full
    ``(H*W)^2`` covariance larger than this is a chunk of one pair.

    Networks whose pairs pass through spatial diagonals only (``diagonals``: no
    pooling, and not a flat input's one Gram entry per pair) take 128 KiB on CPU: a
    layer there keeps about six chunk-sized arrays alive at once (both kinds in and
    out, the two inputs' variances), which then fit in L2 together; 32 pairs of 32x32
    ran 1.2-1.4x faster per pair than 128 (cnn5_flatten, cnn21_flatten). A flat input's
    chunk sizes its per-input calls (``KernelFn.stats_batch``), where a quarter of the
    rows per call cost fc2 five times the time."""
    if jax.default_backend() != "cpu":
        return 4 << 20
    return (128 << 10) if diagonals else (512 << 10)


def compiler_options(full_cov: bool, quick: bool = False) -> dict:
    """XLA options of a kernelcli program, set per program (not per process), so the
    same bits come out wherever it is compiled: the CLI, a test, a Ray worker.

    On CPU, XLA's newer "fusion emitters" make the row loops over full
    ``(H*W)^2`` covariances (networks with pooling) about 1.8x slower than its
    classic loop emitter, and the loops over spatial diagonals (networks without
    pooling) about 1.6x faster (jax 0.10.2; per case in bench/history/BENCHMARKS-2026.md). So
    programs on full covariances ask for the classic emitter; the others keep
    XLA's default. ``KERNELCLI_XLA_FUSION_EMITTERS=0`` / ``=1`` forces one choice
    for every program (for measuring).

    ``quick``: compiled at XLA's lowest optimisation level, for calls whose work is small
    against their compilation (:data:`QUICK_WORK`). neural-tangents' WideResNet on 3
    images of 8 x 8 x 3 (float64) compiled its two programs in 9.3 s at the default
    level and 4.6 s at 0, which ran the same calls 5x slower: 0.55 s against 2.9 s on 32
    images (bench/first_call.py, BENCHMARKS.md "Whole process, and the first call").
    A run never asks for it: its programs must be the ones its recorded plan makes.
    """
    if jax.default_backend() != "cpu":
        return {}
    forced = _env.fusion_emitters()
    # a quick program takes the classic emitter too: it compiles in half the time (a
    # small network's program 0.045 s against 0.022 s), what a quick program is for
    use = forced if forced is not None else not (full_cov or quick)
    out = {} if use else {"xla_cpu_use_fusion_emitters": False}
    return {**out, "xla_backend_optimization_level": 0} if quick else out


# The most work (pairs x covariance entries per pair x layers) a call may have for its
# programs to be compiled quick: the WideResNet above on 32 images (528 pairs x 4,096
# entries x 31 layers), about 0.5 s at the default level and 2.5 s at the lowest, when
# the compilation saved 5 s.
QUICK_WORK = 1 << 26


TRIM_AFTER_S = 1.0


def release_free_memory(work_seconds: float) -> None:
    """Hand the allocator's free pages back to the system (glibc ``malloc_trim``;
    a no-op elsewhere) after a unit of work (a ``matrix`` call, a tile) that took
    ``work_seconds``.

    XLA's buffers of 10-100 MiB come from glibc's per-thread heaps, and freed ones
    stay resident: fc2 (2,000 inputs) grew 426 -> 590 MiB over three calls; with a
    trim after each it stayed at ~340-395 MiB, peak 649 -> 519 MiB. But the next
    call then faults its buffers in afresh: 15-20% slower on those 0.25 s calls.
    So only work of at least ``TRIM_AFTER_S`` is followed by a trim, where that
    cost (tens of ms) is a few percent at most.
    """
    if work_seconds < TRIM_AFTER_S or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass


def x64_scope(dtype):
    """JAX's 64-bit mode for the computations of a float64 kernel, and not beyond:
    a context manager (thread-local, like every JAX configuration context), entered
    around each trace, compilation, transfer and call, so a float64 kernel never
    switches the mode on for the rest of the process (a notebook's own arrays keep
    their dtypes), and a float32 kernel is the same program whatever the caller's
    global setting."""
    return jax.enable_x64(bool(np.dtype(dtype) == np.float64))


class SerialJit:
    """``jax.jit(fn, **options)`` whose compilations (one per device and argument
    shapes) run one at a time, then are called directly; every trace and call in the
    JAX precision mode of ``dtype`` (:func:`x64_scope`); ``check`` is called before each
    compilation and may raise (a process at another CPU level than its run's).

    Threads that call it at once (the device runner, ``_runner.py``: on different
    devices, or several on one, as the cpu engine's do) would otherwise compile
    concurrently, and XLA's CPU compiler holds
    a working set per compiling thread that it keeps: two concurrent compiles
    of a 21-layer flatten network left the process 159 MiB larger, one after the
    other 91 MiB, in the same wall time (the compiles do not overlap usefully on
    2 cores). ``lower`` passes through (for memory analysis). (One compilation for
    all devices is the mesh path's, ``_programs.py``: the program it wraps is then one
    SPMD program over the devices.)
    """

    def __init__(self, fn, dtype="float32", check=lambda: None, **options):
        self._jit = jax.jit(fn, **options)
        self._dtype = dtype
        self._check = check
        self._compiled: dict = {}
        self._lock = threading.Lock()

    def lower(self, *args):
        with x64_scope(self._dtype):
            return self._jit.lower(*args)

    def __call__(self, *args):
        with x64_scope(self._dtype):
            return self._call(args)

    def _call(self, args):
        return self._executable(args)(*args)

    def compile(self, *args):
        """The executable for arguments like ``args`` (arrays, or ``ShapeDtypeStruct``s
        with the sharding the real arguments will have), compiled once and kept: a
        call with matching arguments reuses it (the planner's memory analysis of a
        program is then the compilation of the program the run calls)."""
        with x64_scope(self._dtype):
            return self._executable(args)

    def _executable(self, args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (tree, tuple((getattr(a, "shape", None), str(getattr(a, "dtype", type(a))),
                            getattr(a, "sharding", None)) for a in leaves))
        exe = self._compiled.get(key)
        if exe is None:
            with self._lock:
                exe = self._compiled.get(key)
                if exe is None:
                    exe = self._compiled[key] = self._compile(args)
        return exe

    def _compile(self, args):
        self._check()
        return self._jit.lower(*args).compile()
