"""Kernel maths: layer maps composed into NNGP/NTK pair-batch functions (JAX only)."""

from ._engine import KernelFn, Stats, build_kernel_fn
from ._plans import resolve_engine
from ._runner import pad_rows, run_on_devices
from ._xla import release_free_memory

__all__ = ["KernelFn", "Stats", "build_kernel_fn", "pad_rows", "release_free_memory",
           "resolve_engine", "run_on_devices"]
