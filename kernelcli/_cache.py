"""JAX's persistent compilation cache for the CLI: compiled programs kept on disk, so
``resume``, the processes of a job array (``--shard``) and repeated runs of the same
configuration load them instead of compiling again (seconds per program).

Only the CLI's ``main`` calls :func:`enable_compile_cache`; importing kernelcli as a
library changes nothing. Where the folder is:

- ``KERNELCLI_CACHE_DIR=PATH``: that folder;
- ``KERNELCLI_CACHE_DIR=off`` (also ``0``, ``none``, ``false``, empty): no cache;
- unset: ``JAX_COMPILATION_CACHE_DIR`` if the user set it, else
  ``$XDG_CACHE_HOME/kernelcli/jax`` (default ``~/.cache/kernelcli/jax``).

The settings go into the environment when jax is not imported yet (the CLI imports it
later), so Ray workers started by this process inherit them too; when jax is already
imported (the CLI called in-process, e.g. from a test) they go to ``jax.config``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from . import _env

ENV = _env.CACHE_DIR
JAX_DIR = "JAX_COMPILATION_CACHE_DIR"
MIN_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
OFF = ("off", "0", "none", "false", "no", "")

# Every program counts: kernelcli's small per-input programs compile in 0.2-1 s, under
# jax's default threshold of 1 s, and they are on the path to the first tile.
MIN_COMPILE_SECS = "0"


def cache_dir(environ=None) -> Optional[Path]:
    """The folder the CLI's compilation cache uses, or None when it is switched off
    (see the module docstring for the order of the variables)."""
    value = _env.get(ENV, environ)
    if value is not None:
        if value.strip().lower() in OFF:
            return None
        return Path(value).expanduser()
    if _env.get(JAX_DIR, environ):
        return Path(_env.get(JAX_DIR, environ)).expanduser()
    base = _env.get("XDG_CACHE_HOME", environ) or str(Path.home() / ".cache")
    return Path(base).expanduser() / "kernelcli" / "jax"


def enable_compile_cache() -> Optional[Path]:
    """Switch JAX's persistent compilation cache on for this process (and the processes
    it starts) in :func:`cache_dir`, or off when ``KERNELCLI_CACHE_DIR=off``. Returns
    the folder (None: off). A folder that cannot be created leaves the cache off: the
    cache only saves time, a run never fails for it."""
    path = cache_dir()
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            path = None
    settings = ({"JAX_ENABLE_COMPILATION_CACHE": "false"} if path is None else
                {"JAX_ENABLE_COMPILATION_CACHE": "true",
                 JAX_DIR: str(path), MIN_TIME: MIN_COMPILE_SECS})
    users_min = _env.get(MIN_TIME)
    if path is not None and users_min is not None:
        del settings[MIN_TIME]  # the user's wins
    if "jax" not in sys.modules:
        os.environ.update(settings)
        return path
    import jax

    jax.config.update("jax_enable_compilation_cache", path is not None)
    if path is not None:
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(users_min or MIN_COMPILE_SECS))
    return path
