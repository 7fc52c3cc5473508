"""kernelcli: infinite-width NNGP and NTK kernel matrices for convolutional networks.

The Python API (README, "Python API"): :func:`kernel_fn`, :mod:`kernelcli.stax`,
:func:`compute`, :func:`resume`, :func:`extend`, :func:`estimate`, :func:`open_run`.
They are loaded on first use, so ``import kernelcli`` imports neither jax nor h5py (the
CLI sets up the host devices before jax is imported).
"""

__version__ = "0.1.0"

__all__ = ["compute", "estimate", "extend", "kernel_fn", "open_run", "resume", "stax"]

_LAZY = {"kernel_fn": "._library", "open_run": "._library", "compute": ".run",
         "resume": ".run", "estimate": ".run", "extend": ".run", "stax": None}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kernelcli' has no attribute {name!r}")
    import importlib

    if _LAZY[name] is None:
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
