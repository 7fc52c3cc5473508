"""kernelcli: infinite-width NNGP and NTK kernel matrices for convolutional networks.

The Python API (docs/python-api.md): :func:`kernel_fn`, :mod:`kernelcli.stax`,
:func:`compute`, :func:`resume`, :func:`extend`, :func:`estimate`, :func:`open_run`,
:func:`enable_compile_cache`.
They are loaded on first use, so ``import kernelcli`` imports neither jax nor h5py (the
CLI sets up the host devices before jax is imported).
"""

from ._lazy import lazy_names

__version__ = "0.1.0"

__all__ = ["compute", "enable_compile_cache", "estimate", "extend", "kernel_fn", "nt",
           "open_run", "resume", "stax"]

_LAZY = {"kernel_fn": ".stax._library", "open_run": ".stax._library", "compute": ".run",
         "resume": ".run", "estimate": ".run", "extend": ".run", "stax": None, "nt": None,
         "enable_compile_cache": (".kernels._compile_cache", "enable")}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
