"""What the command line changes for the whole process, and only the command line.

Signal handlers (:mod:`kernelcli._interrupt`), the host's device count, JAX's
persistent compilation cache, the quieting of JAX's own warnings and the one-line
warning about an unused NVIDIA GPU. The library (:mod:`kernelcli.run` and below)
changes none of it, so a notebook or a workflow that imports kernelcli keeps its own
settings; called in-process (``CliRunner``), :func:`cli_process` puts all of it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

import click

from .. import _env, _interrupt
from .._malloc import return_large_frees
from ..kernels import enable_compile_cache, pin_cpu_level
from . import _output

# compute, resume, estimate and extend stop at their safe points; the other commands
# have none (and write only under temporary names): a signal ends them at once
WITH_SAFE_POINTS = ("compute", "resume", "estimate", "extend")
# the commands whose solves free large arrays every iteration (:mod:`kernelcli._malloc`)
SOLVING = ("predict",)
_console = False  # run as the console script (its own process), not in-process


@contextlib.contextmanager
def cli_process(in_process: bool):
    """The signal handlers installed first thing (they only record the signal), and, for
    the console script, stdout whose failed writes are errors (:mod:`._output`). Called
    in-process (``in_process``), stdout is the caller's, and the handlers, log levels,
    warning filters and XLA's C++ log level are put back afterwards."""
    global _console
    saved = _interrupt.install()
    if not in_process:
        _output.guard_stdout()
        _console = True
    state = _ProcessState() if in_process else None
    try:
        yield
    finally:
        if state is not None:  # in process
            state.restore()
            _interrupt.uninstall(saved)


def configure_process(command: Optional[str]) -> None:
    """Before ``command`` parses its options: how signals end it, the host's device
    count and the compilation cache (both before jax is imported), and the CPU level
    (XLA's instruction set and OpenBLAS's kernels, before jax and numpy load:
    :mod:`kernelcli.kernels._cpu_level`); as the console script, a
    solving command's allocator thresholds (:mod:`kernelcli._malloc`: in-process they
    could not be put back)."""
    pin_cpu_level()
    if _console and command in SOLVING:
        return_large_frees()
    _interrupt.set_immediate(command not in WITH_SAFE_POINTS)
    from ..run import configure_host_devices

    configure_host_devices()
    enable_compile_cache()  # before jax is imported (docs/environment.md: KERNELCLI_CACHE_DIR)


def before_computing(verbosity: int) -> None:
    """What the commands that compute do as they start: JAX's warnings silenced below
    ``-vv``, and :func:`warn_once` (a GPU they would not use is worth a line)."""
    quiet_jax(verbosity)
    warn_once()


# --- JAX's own warnings ----------------------------------------------------------------

# JAX, jaxlib and absl log warnings that are not the user's business (a GPU plugin not
# found, a cache entry not written); the CLI shows them only at -vv.
_JAX_LOGGERS = ("jax", "jaxlib", "absl")
_JAX_MODULES = r"(jax|jaxlib|absl)(\.|$)"
_CPP_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"  # XLA's C++ logging: 2 shows errors only


def quiet_jax(level: int) -> None:
    """Below ``-vv``, silence JAX's and absl's warnings (logging, ``warnings`` and XLA's
    C++ log, which is read when jax is imported: commands import it later)."""
    if level >= 2:
        return
    for name in _JAX_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=_JAX_MODULES)
    if _env.get(_CPP_LOG_LEVEL) is None:
        os.environ[_CPP_LOG_LEVEL] = "2"


class _ProcessState:
    """What :func:`quiet_jax` changes for the whole process (log levels, warning
    filters, the C++ log level), as it was when made; :meth:`restore` puts it back."""

    def __init__(self):
        self.levels = {n: logging.getLogger(n).level for n in _JAX_LOGGERS}
        self.filters = list(warnings.filters)
        self.cpp = _env.get(_CPP_LOG_LEVEL)

    def restore(self) -> None:
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)
        # typeshed has warnings.filters a Sequence; it is the module's own list
        warnings.filters[:] = self.filters  # type: ignore[index]
        if self.cpp is None:
            os.environ.pop(_CPP_LOG_LEVEL, None)  # the one write: this variable only


# --- the persistent compilation cache ----------------------------------------------------
#
# --- the warning when an NVIDIA GPU is there but JAX computes on the CPU ------------------
#
# ``pip install kernelcli`` gives the CPU jaxlib, and JAX then falls back to the CPU
# with a warning of its own that the CLI hides below ``-vv``: a GPU node would run a
# long job on its CPU without a word. The check looks at the NVIDIA driver's files
# first (cheap) and asks JAX for its backend only when a GPU is there.
# ``KERNELCLI_NO_GPU_WARNING=1`` silences it. The library never prints it.

# What the NVIDIA kernel driver creates: a folder per GPU, and the device files.
NVIDIA_PATHS = (Path("/proc/driver/nvidia/gpus"), Path("/dev/nvidia0"))

INSTALL = "pip install -e '.[cuda12]'"


def nvidia_present(paths: Sequence[Path] = NVIDIA_PATHS) -> bool:
    """Whether the NVIDIA driver shows a GPU: a folder of ``paths`` with an entry, or
    a file of ``paths`` that exists."""
    for path in paths:
        try:
            if path.is_dir():
                if any(path.iterdir()):
                    return True
            elif path.exists():
                return True
        except OSError:  # unreadable: no evidence of a GPU
            continue
    return False


def warning(platform: str, paths: Sequence[Path] = NVIDIA_PATHS,
            environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The warning line when JAX's ``platform`` is the CPU while ``paths`` show an NVIDIA
    GPU (``None`` otherwise, or when ``KERNELCLI_NO_GPU_WARNING`` silences it)."""
    if platform != "cpu" or _env.no_gpu_warning(environ) or not nvidia_present(paths):
        return None
    return (f"Warning: an NVIDIA GPU is present but JAX computes on the CPU (no CUDA "
            f"jaxlib is installed, or it failed to load: -vv shows JAX's reason); install "
            f"it with `{INSTALL}` (or `pip install 'jax[cuda12]'`), or set "
            f"{_env.NO_GPU_WARNING}=1 to silence this")


# Once per process, not per command: a test's CliRunner calls many commands in one
# process, and the driver's files do not change in between.
_warned = False


def warn_once(paths: Sequence[Path] = NVIDIA_PATHS) -> Optional[str]:
    """The CLI's check (once per process): the warning line, printed to stderr, or
    ``None``. JAX's backend is asked for only when a GPU is there (that initialises
    it, which the command was about to do)."""
    global _warned
    if _warned or _env.no_gpu_warning() or not nvidia_present(paths):
        return None
    _warned = True
    import jax

    line = warning(jax.default_backend(), paths)
    if line is not None:
        click.echo(line, err=True)
    return line
