"""Kernel maths: layer maps composed into NNGP/NTK pair-batch functions (JAX only)."""

from ._cost import (
    H200_BANDWIDTH,
    H200_LAUNCH_LATENCY,
    CostModel,
    LayerCost,
    cost_model,
    count_launches,
    describe_cost,
    pairs_program_text,
)
from ._engines import engine_reason, resolve_engine
from ._kernel_fn import KernelFn, Stats, build_kernel_fn
from ._native import REVISION as NATIVE_REVISION
from ._native_library import describe as describe_native
from ._native_library import identity_problem as native_identity_problem
from ._native_library import library as native_library
from ._native_library import unavailable as native_unavailable
from ._runner import pad_rows, run_on_devices
from ._xla import release_free_memory

__all__ = ["H200_BANDWIDTH", "H200_LAUNCH_LATENCY", "NATIVE_REVISION", "CostModel", "KernelFn",
           "LayerCost", "Stats",
           "build_kernel_fn", "cost_model", "count_launches", "describe_cost",
           "describe_native", "engine_reason", "native_identity_problem", "native_library", "native_unavailable", "pad_rows", "pairs_program_text", "release_free_memory",
           "resolve_engine", "run_on_devices"]
