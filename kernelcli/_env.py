"""Every environment variable kernelcli reads, read and checked here and nowhere else.

docs/environment.md documents each name in :data:`VARIABLES` (tests/project/test_docs.py
keeps the two in step, and tests/project/test_env.py that no other module reads the
environment). None of them changes a kernel's value beyond its last bits: the chunk
size does that (XLA compiles each chunk size differently), so a run records its chunk
and a resume or extend uses the recorded one. A value kernelcli cannot
use is a :class:`~kernelcli.errors.ConfigError` (exit 2) naming the variable,
the value and what is accepted -- never silently ignored, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from .errors import ConfigError

CACHE_DIR = "KERNELCLI_CACHE_DIR"
CHUNK_BYTES = "KERNELCLI_CHUNK_BYTES"
FUSION_EMITTERS = "KERNELCLI_XLA_FUSION_EMITTERS"
NO_GPU_WARNING = "KERNELCLI_NO_GPU_WARNING"
PACK_TILES = "KERNELCLI_PACK_TILES"
NATIVE_BUILD_SECONDS = "KERNELCLI_NATIVE_BUILD_SECONDS"
RAY_WAIT_SECONDS = "KERNELCLI_RAY_WAIT_SECONDS"
CPU_LEVEL = "KERNELCLI_CPU_LEVEL"

#: name -> the module that uses it (as docs/environment.md's "read by" column says).
VARIABLES = {
    CACHE_DIR: "kernelcli/_env.py",
    "JAX_COMPILATION_CACHE_DIR": "kernelcli/_env.py",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "kernelcli/cli/_setup.py",
    "XDG_CACHE_HOME": "kernelcli/_env.py",
    "XLA_FLAGS": "kernelcli/pipeline/_devices.py",
    CPU_LEVEL: "kernelcli/kernels/_cpu_level.py",
    CHUNK_BYTES: "kernelcli/kernels/_kernel_fn.py",
    FUSION_EMITTERS: "kernelcli/kernels/_xla.py",
    "HDF5_EXTFILE_PREFIX": "kernelcli/data/_h5.py",
    "HDF5_VDS_PREFIX": "kernelcli/data/_h5.py",
    "TF_CPP_MIN_LOG_LEVEL": "kernelcli/cli/_setup.py",
    NO_GPU_WARNING: "kernelcli/cli/_setup.py",
    PACK_TILES: "kernelcli/pipeline/_executor.py",
    NATIVE_BUILD_SECONDS: "kernelcli/kernels/_native_build.py",
    "OPENBLAS_CORETYPE": "kernelcli/kernels/_cpu_level.py",
    "RAY_ADDRESS": "kernelcli/pipeline/_ray.py",
    RAY_WAIT_SECONDS: "kernelcli/pipeline/_ray_pool.py",
}


def get(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The raw value of one of :data:`VARIABLES` (``None`` when unset)."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of kernelcli's environment variables")
    return (os.environ if environ is None else environ).get(name)


def chunk_bytes(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """``KERNELCLI_CHUNK_BYTES``: covariance bytes per chunk of pairs, or ``None`` (the
    engine's default) when unset or empty."""
    value = get(CHUNK_BYTES, environ)
    if value is None or not value.strip():
        return None
    try:
        n = int(value.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{CHUNK_BYTES}: {value!r} is not a byte count; expected a positive "
                          f"integer (bytes), or unset it for the default")
    return n


def fusion_emitters(environ: Optional[Mapping[str, str]] = None) -> Optional[bool]:
    """``KERNELCLI_XLA_FUSION_EMITTERS``: ``0`` / ``1`` force XLA:CPU's fusion emitters
    off / on for every program; ``None`` (unset or empty): per program, kernelcli's
    choice."""
    value = get(FUSION_EMITTERS, environ)
    if value is None or not value.strip():
        return None
    if value.strip() not in ("0", "1"):
        raise ConfigError(f"{FUSION_EMITTERS}: {value!r} is not accepted; expected 0 (classic "
                          f"loop emitter) or 1 (fusion emitters), or unset it")
    return value.strip() == "1"


def no_gpu_warning(environ: Optional[Mapping[str, str]] = None) -> bool:
    """``KERNELCLI_NO_GPU_WARNING``: ``1`` silences the CLI's warning that an NVIDIA GPU is
    present but JAX computes on the CPU; unset, empty or ``0``: the warning is shown."""
    value = get(NO_GPU_WARNING, environ)
    if value is None or value.strip() in ("", "0"):
        return False
    if value.strip() != "1":
        raise ConfigError(f"{NO_GPU_WARNING}: {value!r} is not accepted; expected 1 (no "
                          f"warning) or 0, or unset it")
    return True


def pack_tiles(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """``KERNELCLI_PACK_TILES``: tiles per pack file of a run directory (``0``: no packs,
    every tile stays a file of its own); ``None`` (unset or empty): the store's default."""
    value = get(PACK_TILES, environ)
    if value is None or not value.strip():
        return None
    try:
        n = int(value.strip())
    except ValueError:
        n = -1
    if n < 0:
        raise ConfigError(f"{PACK_TILES}: {value!r} is not a tile count; expected an integer "
                          f">= 0 (0: no packs), or unset it for the default")
    return n


def native_build_seconds(environ: Optional[Mapping[str, str]] = None) -> float:
    """``KERNELCLI_NATIVE_BUILD_SECONDS``: how long a build of the native library at first
    use may take before its compiler is killed (default 300)."""
    value = get(NATIVE_BUILD_SECONDS, environ)
    if value is None or not value.strip():
        return 300.0
    try:
        n = float(value.strip())
    except ValueError:
        n = -1.0
    if not 0 < n <= 86400:
        raise ConfigError(f"{NATIVE_BUILD_SECONDS}: {value!r} is not accepted; expected a "
                          f"number of seconds in (0, 86400], or unset it for 300")
    return n


def ray_wait_seconds(environ: Optional[Mapping[str, str]] = None) -> float:
    """``KERNELCLI_RAY_WAIT_SECONDS``: how long the Ray executor waits for the cluster to
    place a kernel actor before it gives that actor up, or fails the run when it has no
    actor at all (default 120: beyond Ray's own detection of a dead node)."""
    value = get(RAY_WAIT_SECONDS, environ)
    if value is None or not value.strip():
        return 120.0
    try:
        n = float(value.strip())
    except ValueError:
        n = -1.0
    if not 0 < n <= 86400:
        raise ConfigError(f"{RAY_WAIT_SECONDS}: {value!r} is not accepted; expected a "
                          f"number of seconds in (0, 86400], or unset it for 120")
    return n


CACHE_OFF = ("off", "0", "none", "false", "no", "")


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """kernelcli's cache folder (the CLI's JAX compilation cache, and the native engine's
    library in it), or ``None`` when switched off: ``KERNELCLI_CACHE_DIR`` (``off``,
    ``0``, ``none``, ``false``, ``no`` or empty: off), else ``JAX_COMPILATION_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/kernelcli/jax`` (default ``~/.cache/kernelcli/jax``)."""
    value = get(CACHE_DIR, environ)
    if value is not None:
        if value.strip().lower() in CACHE_OFF:
            return None
        return Path(value).expanduser()
    jax_dir = get("JAX_COMPILATION_CACHE_DIR", environ)
    if jax_dir:
        return Path(jax_dir).expanduser()
    base = get("XDG_CACHE_HOME", environ) or str(Path.home() / ".cache")
    return Path(base).expanduser() / "kernelcli" / "jax"


def cpu_level(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``KERNELCLI_CPU_LEVEL``: the CPU level new runs compute at (``x86-64-v2``,
    ``-v3`` or ``-v4``: :mod:`kernelcli.kernels._cpu_level`); ``None`` (unset or empty):
    the best level this CPU runs. Whether this CPU runs it is checked there."""
    value = get(CPU_LEVEL, environ)
    if value is None or not value.strip():
        return None
    return value.strip()
