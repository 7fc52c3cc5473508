"""The one device runner: independent kernel calls spread over local devices.

Every caller of a compiled program (the per-input pass, the pair batches of a
block) comes through :func:`run_on_devices`: one thread per device takes the next
job from a shared queue (XLA releases the GIL while it computes, and one XLA
computation alone leaves the other cores idle), so a slow device never holds
up the others and job ``k`` is the same work whichever device runs it.

A stop (``stop()`` turning true, e.g. a signal handler's request) is honoured
between jobs: the threads take no new job and finish the one they are in. No
thread is left inside XLA when the caller leaves -- an interpreter that exits
with one there aborts the process -- so on any exception in the calling thread
(Ctrl-C's ``KeyboardInterrupt`` in a notebook) it waits for them before
re-raising.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Optional, Sequence

import numpy as np


def pad_rows(a, n: int):
    """``a`` (numpy or jax, traced or not) with its last row repeated up to ``n`` rows:
    every call of a program gets one shape, so it compiles once."""
    m = a.shape[0]
    if m == n:
        return a
    if isinstance(a, np.ndarray):
        return np.concatenate([a, np.repeat(a[-1:], n - m, axis=0)])
    import jax.numpy as jnp

    return jnp.concatenate([a, jnp.repeat(a[-1:], n - m, axis=0)])


def run_on_devices(devices: Sequence, n_jobs: int, work: Callable,
                   on_done: Optional[Callable] = None,
                   stop: Optional[Callable[[], object]] = None) -> bool:
    """``work(device, k)`` for every ``k < n_jobs``, one thread per device taking jobs
    from a queue; ``on_done(k, result)`` after each, one at a time (under a lock) and
    never once ``stop()`` is true or the caller has left (such a result is dropped).
    Returns whether every job's result was delivered (``False``: ``stop()`` became
    true first). A thread's error is raised here."""
    todo: "queue.SimpleQueue" = queue.SimpleQueue()
    for k in range(n_jobs):
        todo.put(k)
    stop = stop or (lambda: False)
    errors: list = []
    left: list = []  # set (under ``lock``) when the caller leaves: no more reports then
    lock = threading.Lock()
    delivered = [0]

    def worker(device, began: threading.Event) -> None:
        began.set()
        try:
            while not errors and not left and not stop():
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                result = work(device, k)
                with lock:  # a result that arrives after a stop is dropped, not counted
                    if left or stop():
                        return
                    if on_done is not None:
                        on_done(k, result)
                    delivered[0] += 1
        except BaseException as exc:  # surfaced in the calling thread
            errors.append(exc)

    devices = list(devices)[:max(1, n_jobs)]
    began = [threading.Event() for _ in devices]
    threads = [threading.Thread(target=worker, args=(d, b), daemon=True)
               for d, b in zip(devices, began)]
    launched = []
    try:
        for t in threads:
            launched.append(t)
            t.start()  # a signal can arrive while start() waits for the thread
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short waits keep the calling thread responsive to signals
    except BaseException:
        with lock:
            left.append(True)
        for t, b in zip(launched, began):
            b.wait(5.0)  # (not set only if start() was interrupted before the thread)
            while t.is_alive():
                t.join(0.2)  # a second Ctrl-C stops this wait
        raise
    if errors:
        raise errors[0]
    return delivered[0] == n_jobs
