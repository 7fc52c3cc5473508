"""Kernel maths: layer maps composed into NNGP/NTK pair-batch functions (JAX only)."""

from ._engine import KernelFn, Stats, build_kernel_fn
from ._xla import release_free_memory

__all__ = ["KernelFn", "Stats", "build_kernel_fn", "release_free_memory"]
