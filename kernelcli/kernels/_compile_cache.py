"""JAX's persistent compilation cache in kernelcli's cache folder: every CLI command
switches it on; a library user switches it on with :func:`kernelcli.enable_compile_cache`.

Compiled programs are kept on disk, so ``resume``, the processes of a job array
(``--shard``), repeated runs and a script's second process load them instead of
compiling again (seconds per program on the large networks; a small network's call in a
fresh process took 0.3 s, of which 0.1 s compiling: BENCHMARKS.md, "Whole process, and
the first call"). The folder is ``_env.cache_dir()``'s: ``KERNELCLI_CACHE_DIR`` (or off),
else ``JAX_COMPILATION_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernelcli/jax``.

Why the library does not switch it on by itself: the cache is one setting of the whole
process, which JAX reads at the process's first compilation and keeps; a notebook that
imports kernelcli keeps its own. Why the folder is checked: JAX loads the executables it
finds there as they are, so a folder that another user may write (or one above it, but
for a sticky ``/tmp``) is not used, as the native library's folder is not.

No jax at import: the CLI calls :func:`enable` before jax is imported, and then only
sets the environment (which the processes it starts, Ray's workers among them, inherit).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from .. import _env
from .._trust import untrusted_folder

JAX_DIR = "JAX_COMPILATION_CACHE_DIR"
MIN_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"

# Every program counts: kernelcli's small per-input programs compile in 0.02-1 s, under
# jax's default threshold of 1 s, and they are on the path to the first tile.
MIN_COMPILE_SECS = "0"


def enable() -> Optional[Path]:
    """Switch JAX's persistent compilation cache on for this process (and the processes
    it starts) in :func:`kernelcli._env.cache_dir`, or off when ``KERNELCLI_CACHE_DIR=off``
    or the folder cannot be created or may be written by another user. Returns the folder
    (``None``: off). The cache only saves time: nothing fails for it."""
    path = _env.cache_dir()
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            path = None
    if path is not None and untrusted_folder(path) is not None:
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
