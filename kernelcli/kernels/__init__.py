"""Kernel maths: layer maps composed into NNGP/NTK pair-batch functions (JAX only).

The names below load on first use, so that importing a module of this package that
needs neither (``_cpu_level``, ``_native_recipe``) imports neither jax nor numpy: the
CLI pins the CPU level before both load."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

# name -> the module that defines it (and the name there, where it differs)
_LAZY = {
    "H200_BANDWIDTH": "._cost", "H200_LAUNCH_LATENCY": "._cost", "CostModel": "._cost",
    "LayerCost": "._cost", "cost_model": "._cost", "count_launches": "._cost",
    "describe_cost": "._cost", "pairs_program_text": "._cost",
    "enable_compile_cache": ("._compile_cache", "enable"),
    "engine_reason": "._engines", "resolve_engine": "._engines",
    "KernelFn": "._kernel_fn", "Stats": "._kernel_fn", "build_kernel_fn": "._kernel_fn",
    "NATIVE_REVISION": ("._native", "REVISION"),
    "describe_native": ("._native_library", "describe"),
    "native_identity_problem": ("._native_library", "identity_problem"),
    "native_library": ("._native_library", "library"),
    "native_unavailable": ("._native_library", "unavailable"),
    "pad_rows": "._runner", "run_on_devices": "._runner",
    "release_free_memory": "._xla", "QUICK_WORK": "._xla",
    "cpu_level_in_force": ("._cpu_level", "in_force"),
    "cpu_level_problem": ("._cpu_level", "problem"),
    "describe_cpu": ("._cpu_level", "describe"),
    "pin_cpu_level": ("._cpu_level", "pin"),
}

__all__ = ["CostModel", "H200_BANDWIDTH", "H200_LAUNCH_LATENCY", "KernelFn",
           "LayerCost", "NATIVE_REVISION", "QUICK_WORK", "Stats", "build_kernel_fn",
           "cost_model", "count_launches", "cpu_level_in_force", "cpu_level_problem",
           "describe_cost", "describe_cpu", "describe_native", "enable_compile_cache",
           "engine_reason",
           "native_identity_problem", "native_library", "native_unavailable",
           "pad_rows", "pairs_program_text", "pin_cpu_level", "release_free_memory",
           "resolve_engine", "run_on_devices"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

if TYPE_CHECKING:  # the names as type checkers see them (_LAZY's, loaded on first use)
    from ._compile_cache import enable as enable_compile_cache
    from ._cost import H200_BANDWIDTH as H200_BANDWIDTH
    from ._cost import H200_LAUNCH_LATENCY as H200_LAUNCH_LATENCY
    from ._cost import CostModel as CostModel
    from ._cost import LayerCost as LayerCost
    from ._cost import cost_model as cost_model
    from ._cost import count_launches as count_launches
    from ._cost import describe_cost as describe_cost
    from ._cost import pairs_program_text as pairs_program_text
    from ._cpu_level import describe as describe_cpu
    from ._cpu_level import in_force as cpu_level_in_force
    from ._cpu_level import pin as pin_cpu_level
    from ._cpu_level import problem as cpu_level_problem
    from ._engines import engine_reason as engine_reason
    from ._engines import resolve_engine as resolve_engine
    from ._kernel_fn import KernelFn as KernelFn
    from ._kernel_fn import Stats as Stats
    from ._kernel_fn import build_kernel_fn as build_kernel_fn
    from ._native import REVISION as NATIVE_REVISION
    from ._native_library import describe as describe_native
    from ._native_library import identity_problem as native_identity_problem
    from ._native_library import library as native_library
    from ._native_library import unavailable as native_unavailable
    from ._runner import pad_rows as pad_rows
    from ._runner import run_on_devices as run_on_devices
    from ._xla import QUICK_WORK as QUICK_WORK
    from ._xla import release_free_memory as release_free_memory
