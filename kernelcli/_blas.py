"""The OpenBLAS kernels numpy and scipy load, chosen before either is imported (stdlib
only: importing this module must not load numpy).

The OpenBLAS that numpy's and scipy's wheels bundle picks its kernels by CPU when it
loads (``DYNAMIC_ARCH``). On AVX-512 CPUs it picks ``SkylakeX``, whose threaded dgemm
was seen to die of SIGSEGV on plain float64 products such as ``a @ a.T`` of a
20,000 x 200 array, and whose Cholesky died at N = 16,000 (bench/history/BENCHMARKS-2026.md,
"OpenBLAS on AVX-512"); the ``Haswell`` (AVX2) kernels run the same calls. jax's CPU
factorisations call scipy's LAPACK, so they share the choice. The environment
variable is read once, when the library loads: a process that imported numpy
already keeps its kernels, and a user's own ``OPENBLAS_CORETYPE`` wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import MutableMapping, Optional

from . import _env

SAFE_CORE = "Haswell"
_CPUINFO = Path("/proc/cpuinfo")


def avx512(cpuinfo: Path = _CPUINFO) -> bool:
    """Whether the CPU reports ``avx512f`` (False where ``cpuinfo`` cannot be read)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def choose_blas_core(environ: Optional[MutableMapping[str, str]] = None,
                     cpuinfo: Path = _CPUINFO) -> Optional[str]:
    """Set ``OPENBLAS_CORETYPE`` to ``Haswell`` on an AVX-512 CPU when neither the user
    nor an earlier import decided it; the core set, or None."""
    environ = os.environ if environ is None else environ
    if _env.get("OPENBLAS_CORETYPE", environ) is not None or "numpy" in sys.modules or not avx512(cpuinfo):
        return None
    environ["OPENBLAS_CORETYPE"] = SAFE_CORE
    return SAFE_CORE
