"""The CLI's one-line warning when an NVIDIA GPU is there but JAX computes on the CPU.

``pip install kernelcli`` gives the CPU jaxlib, and JAX then falls back to the CPU
with a warning of its own that the CLI hides below ``-vv``: a GPU node would run a
long job on its CPU without a word. The commands that compute (``compute``,
``resume``, ``estimate``, ``extend``) call :func:`warn_once` as they start; it looks at
the NVIDIA driver's files first (cheap) and asks JAX for its backend only when a GPU
is there. ``KERNELCLI_NO_GPU_WARNING=1`` silences it. The library never prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

from . import _env

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


_warned = False


def warn_once(paths: Sequence[Path] = NVIDIA_PATHS) -> Optional[str]:
    """The CLI's check (once per process): the warning line, printed to stderr, or
    ``None``. JAX's backend is asked for only when a GPU is there (that initialises
    it, which the command was about to do)."""
    global _warned
    if _warned or _env.no_gpu_warning() or not nvidia_present(paths):
        return None
    _warned = True
    import click
    import jax

    line = warning(jax.default_backend(), paths)
    if line is not None:
        click.echo(line, err=True)
    return line
