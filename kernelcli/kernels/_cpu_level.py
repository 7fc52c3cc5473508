"""The CPU level: what, beyond kernelcli's sources, decides the last bits a CPU computes,
pinned in every process that computes a run and recorded by the run
(``engine.cpu_level``), so that a resume, an extend, a shard or a Ray worker continues
it only where the same bits come out.

What follows the CPU, measured (``python bench/cpu_bits.py``; docs/run-directory.md,
"What a run's bits depend on"):

* **XLA's code.** XLA:CPU compiles every program for the host's instruction set, and
  its vectorised loops and reductions add in an order that follows the vector width:
  the ``valid`` network's kernels differ between an AVX-512 and an AVX2 CPU (float32
  by up to 4.9e-7, float64 8e-16). ``--xla_cpu_max_isa`` caps it: an AVX-512 CPU
  capped at AVX2 gives bit for bit what an AVX2 CPU (an emulated Haswell) gives. XLA
  reads it once per process, when jax's CPU backend starts (as a per-program compiler
  option it changes nothing).
* **OpenBLAS's kernels.** numpy's OpenBLAS picks them by CPU when it loads: its
  SkylakeX products differ from its Haswell ones (Zen's are Haswell's). Preprocessing
  applies its fitted matrices with them to every row read. ``OPENBLAS_CORETYPE``,
  read when numpy loads, pins them; Haswell is also what AVX-512 CPUs must use, since
  SkylakeX's threaded dgemm died of SIGSEGV on plain products
  (bench/history/BENCHMARKS-2026.md, "OpenBLAS on AVX-512").
* **Not the native library:** its variants give the same bits on every CPU (its flags,
  ``_native_recipe``; tests/kernels/test_native_bits.py).
* **Not numpy's own loops on a run's path:** its AVX-512 exp, log and arctan differ from
  its AVX2 ones, but a run's rows meet only products, sums, square roots and divisions;
  the fits that use ``**`` run once per run and are stored.

So a level is an XLA instruction set and an OpenBLAS core (:data:`LEVELS`, named as the
native library's variants are). A process takes the best level its CPU runs, or
``KERNELCLI_CPU_LEVEL``: capping an AVX-512 CPU at AVX2 cost up to 11% on networks the
native engine leaves mostly to XLA (BENCHMARKS.md, "CPU levels"), so the level is not
capped by default; a cluster that mixes AVX-512 and AVX2 machines starts its runs with
``KERNELCLI_CPU_LEVEL=x86-64-v3`` and every node continues them. A continued run pins
its recorded level (:func:`pin` before jax's backend starts), and a process that
cannot run it refuses, naming both (:func:`problem`).

Where a process's jax backend started before kernelcli could pin it (a library user's
notebook), or its user set ``--xla_cpu_max_isa`` or ``OPENBLAS_CORETYPE`` themselves,
:func:`in_force` says what really runs: the level's name where it is one of
:data:`LEVELS`, else the instruction set and the core as they are.

Standard library only: :func:`pin` runs before jax and numpy are imported.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import platform
import re
import sys
from typing import MutableMapping, Optional

from .. import _env
from ..errors import ConfigError, RunDirError
from . import _native_recipe


@dataclasses.dataclass(frozen=True)
class Level:
    """A CPU level: ``xla_isa`` caps XLA:CPU's instruction set (``--xla_cpu_max_isa``),
    ``blas_core`` is numpy's OpenBLAS kernels (``OPENBLAS_CORETYPE``)."""

    name: str
    xla_isa: str
    blas_core: str


# the native library's x86 variants, each with what decides XLA's and OpenBLAS's bits
LEVELS = {level.name: level for level in (
    Level("x86-64-v4", "AVX512", "Haswell"),
    Level("x86-64-v3", "AVX2", "Haswell"),
    Level("x86-64-v2", "SSE4_2", "Nehalem"))}

_ISA_FLAG = "--xla_cpu_max_isa="
_pinned: list = []  # the ISA this module set in XLA_FLAGS (a user's own is never replaced)
_known: list = []   # in_force()'s answer, once jax's backend has started (it cannot change)


def runnable() -> tuple:
    """The levels this CPU runs, most capable first (``()`` off x86)."""
    return tuple(v for v in _native_recipe.cpu_variants() if v in LEVELS)


def chosen(environ: Optional[MutableMapping[str, str]] = None) -> Optional[Level]:
    """The level new runs compute at here: ``KERNELCLI_CPU_LEVEL``, else the best this
    CPU runs; ``None`` off x86 (nothing is pinned there: :func:`in_force` records the
    CPU itself). A level this CPU does not run is a :class:`ConfigError`."""
    levels = runnable()
    asked = _env.cpu_level(environ)
    if asked is None:
        return LEVELS[levels[0]] if levels else None
    if asked not in levels:
        accepted = ", ".join(levels) if levels else f"none on this {platform.machine()} CPU"
        raise ConfigError(f"{_env.CPU_LEVEL}: {asked!r} is not a level this CPU runs; "
                          f"accepted: {accepted}, or unset it for the best")
    return LEVELS[asked]


def backend_started() -> bool:
    """Whether jax's backends have started in this process (XLA has read its flags)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another jax: assume the worst
        return True


def pin(name: Optional[str] = None, environ: Optional[MutableMapping[str, str]] = None
        ) -> Optional[Level]:
    """Pin level ``name`` (default :func:`chosen`) where it is still possible: XLA's
    instruction set until jax's backend starts (replacing an earlier pin of this
    module's, never the user's own ``--xla_cpu_max_isa``), OpenBLAS's core until numpy
    is imported (unless the user set one). The level pinned, or ``None`` where there
    is none to pin (off x86, or ``name`` not a level this CPU runs: :func:`problem`
    then says why the run cannot continue here)."""
    environ = os.environ if environ is None else environ
    if name is None:
        level = chosen(environ)
    else:
        level = LEVELS.get(name) if name in runnable() else None
    if level is None:
        return None
    if not backend_started():
        flags = _env.get("XLA_FLAGS", environ) or ""
        given = re.findall(rf"{_ISA_FLAG}(\S*)", flags)
        if not given or given == _pinned[-1:]:
            flags = re.sub(rf"\s*{_ISA_FLAG}\S*", "", flags)
            environ["XLA_FLAGS"] = f"{flags} {_ISA_FLAG}{level.xla_isa}".strip()
            _pinned[:] = [level.xla_isa]
    if "numpy" not in sys.modules and _env.get("OPENBLAS_CORETYPE", environ) is None:
        environ["OPENBLAS_CORETYPE"] = level.blas_core
    return level


def in_force() -> str:
    """The level this process computes at, as a run records it: a name of
    :data:`LEVELS` where XLA's instruction set and OpenBLAS's core are that level's,
    else both as they are (``"XLA AVX512, OpenBLAS SkylakeX"``; ``host <cpu>`` where XLA
    is not capped: its code then follows the CPU itself). A process whose jax backend
    has not started yet, and that nothing pinned, is pinned first (:func:`pin`), as the CLI
    pins its own."""
    if _known:
        return _known[0]
    started = backend_started()
    if not started and not _pinned:
        pin()
    given = re.findall(rf"{_ISA_FLAG}(\S*)", _env.get("XLA_FLAGS") or "")
    isa = given[-1].upper() if given else f"host {_cpu_name()}"
    core = _blas_core()
    found = [lv.name for lv in LEVELS.values()
             if (lv.xla_isa, lv.blas_core) == (isa, core) and lv.name in runnable()]
    answer = found[0] if found else f"XLA {isa}, OpenBLAS {core}"
    if started:
        _known.append(answer)
    return answer


def problem(recorded: Optional[str]) -> Optional[str]:
    """Why this process cannot continue a run recorded at CPU level ``recorded`` (its
    tiles' last bits would not be the uninterrupted run's), or ``None``."""
    have = in_force()
    if recorded == have:
        return None
    if recorded is None:
        # the user's word, where a run cannot say (uncapped, XLA's code was the CPU's best)
        if _env.cpu_level() is not None:
            return None
        best = f"{_env.CPU_LEVEL}={runnable()[0]}" if runnable() else None
        how = (f"if it was started on a CPU whose best level is this one's, continue it with "
               f"{best} set; else " if best else "")
        return ("its tiles were computed before runs recorded the CPU level that decides "
                f"their last bits (this process computes at {have}); {how}continue it with "
                f"the kernelcli that started it")
    if recorded in runnable():  # this CPU runs it: the process's settings decided otherwise
        how = (f"this CPU runs {recorded}: unset this process's own --xla_cpu_max_isa "
               f"(XLA_FLAGS) and OPENBLAS_CORETYPE, or run it in a process that has not "
               f"started jax first")
    elif recorded in LEVELS:
        how = f"continue it on a CPU that runs {recorded}"
    else:
        how = f"continue it where it started ({recorded})"
    runs = "" if recorded in runnable() else \
        f" (this CPU runs {', '.join(runnable()) or 'no pinned level'})"
    return (f"its tiles were computed at CPU level {recorded} (as its manifest.json "
            f"records) and this process computes at {have}, whose last bits differ; "
            f"{how}{runs}")


def describe() -> str:
    """This machine as a price must name it: the CPU's model, its cores and the level
    this process computes at (``AMD EPYC, 2 cores, CPU level x86-64-v4``)."""
    found = _cpuinfo((b"model name", b"Model"))
    model = found.decode("ascii", "replace").strip() if found is not None else platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores, CPU level {in_force()}"


def check_compiles(recorded: Optional[str]) -> None:
    """Before XLA compiles a program for a run at level ``recorded``: on a CPU, this
    process must compute at it (XLA's code for another would give the run's tiles other
    last bits; :class:`RunDirError` says why). Elsewhere XLA's code follows the device."""
    import jax

    if jax.default_backend() == "cpu":
        why = problem(recorded)
        if why is not None:
            raise RunDirError(f"this run cannot be continued here: {why}")


def _cpuinfo(keys: tuple) -> Optional[bytes]:
    """The value of ``/proc/cpuinfo``'s first line that starts with one of ``keys``
    (``None`` where there is none, or no such file)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            for line in f.read(1 << 20).splitlines():
                if line.startswith(keys):
                    return line.partition(b":")[2]
    except OSError:
        pass
    return None


def _cpu_name() -> str:
    """This CPU as XLA's uncapped code follows it: the architecture and a digest of its
    feature flags."""
    flags = b" ".join(sorted((_cpuinfo((b"flags", b"Features")) or b"").split()))
    return f"{platform.machine()} {hashlib.sha256(flags).hexdigest()[:8]}"


_CORENAME = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
             "openblas_get_corename64_", "openblas_get_corename")


def _blas_core() -> str:
    """The kernels numpy's OpenBLAS loaded (asked of the library itself), or what stands
    in their place."""
    import numpy  # noqa: F401  (its BLAS is what is asked)

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        paths = set()
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _CORENAME:
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return (fn() or b"unknown").decode("ascii", "replace").strip()
    return "not loaded"
