"""The one-writer rule at the entry of every command that writes a run directory.

:func:`writes_run` wraps ``compute``-like entry points whose first argument is the run
directory: the call holds the run directory's lock (:meth:`RunStore.lock`) throughout,
shared when it is one process of a job array (``shard=``). Another kernelcli process
writing the same run directory makes it fail at once (exit 2), before anything is
read or written; a call made within one that holds the lock (``extend`` finishing as
``resume`` does) holds it once.
"""

from __future__ import annotations

import functools
import inspect

from ..store import RunStore


def writes_run(fn):
    """``fn(run_dir, ...)``, called holding the lock of ``run_dir``."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def locked(run_dir, *args, **kwargs):
        shard = signature.bind(run_dir, *args, **kwargs).arguments.get("shard")
        with RunStore(run_dir).lock(shared=shard is not None):
            return fn(run_dir, *args, **kwargs)
    return locked
