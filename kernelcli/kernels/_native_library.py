"""The native library's targets, and the library itself once per process: loaded (and
checked, or built at first use: :mod:`._native_build`), registered with XLA under the
names of :data:`SYMBOLS`, and what a run needs of it (its identity, why it cannot run,
how estimate and status say it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import jax
import numpy as np

from .. import _env
from .._stop import Stop
from . import _native_build

# (dtype, pooled) -> the XLA target: the tail with the global pool, or the layer alone
TARGETS = {(np.dtype(t), pooled): f"kernelcli_{'tail' if pooled else 'layer'}_{name}"
           for t, name in ((np.float32, "f32"), (np.float64, "f64")) for pooled in (True, False)}
# (dtype, self, pooled) -> the XLA target of the chain (3 x 3 SAME layers, then the
# global pool, or a 2 x 2 pool when not ``pooled``) on pairs, or on each input with
# itself (the per-input pass)
CHAIN_TARGETS = {
    (np.dtype(t), self, pooled):
        f"kernelcli_{'self' if self else 'chain'}{'' if pooled else '_pool'}_{name}"
    for t, name in ((np.float32, "f32"), (np.float64, "f64"))
    for self in (False, True) for pooled in (True, False)}
# (dtype, self) -> the XLA target of the diagonal chain (3 x 3 SAME layers on a spatial
# diagonal) on pairs, or on each input with itself
DIAG_TARGETS = {(np.dtype(t), self): f"kernelcli_diag{'_self' if self else ''}_{name}"
                for t, name in ((np.float32, "f32"), (np.float64, "f64"))
                for self in (False, True)}
# what the library exports
SYMBOLS = (*TARGETS.values(), *CHAIN_TARGETS.values(), *DIAG_TARGETS.values())


_LOAD = threading.Lock()
_LOADED: list = []  # (library, why not) once known: like XLA's registry, one per process


def _load(stop: Optional[Stop] = None):
    """Find (or build), check, load and register the library once per process:
    ``(Library, None)`` or ``(None, why not)``. A ``stop`` requested during a build
    raises ``Interrupted`` and leaves the outcome unknown (a later call tries again)."""
    with _LOAD:
        if not _LOADED:
            lib, why = _native_build.load(SYMBOLS, _kept_folder(), stop)
            if lib is not None:
                for name in SYMBOLS:
                    jax.ffi.register_ffi_target(
                        name, jax.ffi.pycapsule(getattr(lib.handle, name)), platform="cpu")
            _LOADED.append((lib, why))
        return _LOADED[0]


def _kept_folder() -> Optional[Path]:
    """kernelcli's cache folder (``KERNELCLI_CACHE_DIR``; the CLI's compilation cache),
    unless it is switched off: where a library built at first use is kept, so the
    CLI's runs, a library's calls and Ray's workers on one machine build it once."""
    return _env.cache_dir()


def unavailable(stop: Optional[Stop] = None) -> Optional[str]:
    """Why the native engine cannot run in this process (loading it, or building it at
    first use, which a requested ``stop`` ends with ``Interrupted``), or ``None``."""
    return _load(stop)[1]


def library(stop: Optional[Stop] = None):
    """The loaded :class:`~._native_build.Library` (identity, variant, origin), or
    ``None`` where the native engine cannot run (:func:`unavailable` says why)."""
    return _load(stop)[0]


def identity_problem(recorded: Optional[str]) -> Optional[str]:
    """Why tiles that the native library of identity ``recorded`` computed cannot be
    continued in this process (``None``: a run from before runs recorded it), or
    ``None`` when this process's library is that one. One library's bits are another's
    only where their identities agree, so a run never mixes them."""
    why = unavailable()
    if why is not None:
        return (f"the run computes with the native engine (as its "
                f"manifest.json records), which cannot run here: {why}")
    have = library().identity
    if recorded is None:
        return ("its tiles were computed by a native library built on its own machine "
                "before runs recorded the library's identity in their manifest.json, "
                f"whose last bits no other build reproduces (this "
                f"kernelcli's library is {have}); continue it with the kernelcli that "
                f"started it, or start it again")
    if recorded != have:
        return (f"its tiles were computed by native library {recorded} (as its "
                f"manifest.json records) and this kernelcli's is {have}, whose last bits "
                f"differ; continue it with the kernelcli that started it")
    return None


def describe(stop: Optional[Stop] = None) -> str:
    """The native library as estimate, status and -v say it: its identity and where
    it came from, or why there is none."""
    lib, why = _load(stop)
    return why if lib is None else f"library {lib.identity}, {lib.origin}"
