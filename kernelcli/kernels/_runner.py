"""The one device runner: independent kernel calls spread over local devices.

Every caller of a compiled program (the per-input pass, the pair batches of a
block) comes through :func:`run_on_devices`: one thread per device takes the next
job from a shared queue (XLA releases the GIL while it computes, and one XLA
computation alone leaves the other cores idle), so a slow device never holds
up the others and job ``k`` is the same work whichever device runs it.

Each thread launches its next job before it reads the previous result back (JAX
dispatches asynchronously), so the device computes while the host copies.

A stop (``stop()`` turning true, e.g. a signal handler's request) is honoured
between jobs: the threads take no new job and finish the ones in flight. No
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
    true first). A thread's error is raised here.

    ``work`` may return before its result is computed (JAX dispatches asynchronously):
    a thread launches its next job before it waits for the previous one's result
    (``block_until_ready`` on the result's leaves, outside the lock) and hands it to
    ``on_done``, so a device never idles while the host reads a result back; at most
    two jobs are in flight per device. A thread leaves only once its jobs in flight
    are finished (their results dropped after a stop or an error)."""
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for k in range(n_jobs):
        todo.put(k)
    stop = stop or (lambda: False)
    errors: list = []
    left: list = []  # set (under ``lock``) when the caller leaves: no more reports then
    lock = threading.Lock()
    delivered = [0]

    def halted() -> bool:
        return bool(errors or left or stop())

    def deliver(k: int, result) -> None:
        _ready(result)  # the device's wait, outside the lock: other threads deliver
        with lock:  # a result that arrives after a stop is dropped, not counted
            if left or stop():
                return
            if on_done is not None:
                on_done(k, result)
            delivered[0] += 1

    def worker(device, began: threading.Event) -> None:
        began.set()
        flight: list = []  # (k, result) launched, oldest first: at most two
        try:
            while True:
                k = None
                if not halted():
                    try:
                        k = todo.get_nowait()
                    except queue.Empty:
                        pass
                if k is not None:
                    flight.append((k, work(device, k)))
                if not flight:
                    return
                if k is None or len(flight) == 2:
                    deliver(*flight.pop(0))
        except BaseException as exc:  # surfaced in the calling thread
            errors.append(exc)
        finally:
            for _, result in flight:  # no computation of ours left running
                try:
                    _ready(result)
                except BaseException:  # noqa: BLE001 - its error is not the one raised
                    pass

    devices = list(devices)[:max(1, n_jobs)]
    began = [threading.Event() for _ in devices]
    threads = [threading.Thread(target=worker, args=(d, b), daemon=True)
               for d, b in zip(devices, began, strict=True)]
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
        for t, b in zip(launched, began, strict=False):
            b.wait(5.0)  # (not set only if start() was interrupted before the thread)
            while t.is_alive():
                t.join(0.2)  # a second Ctrl-C stops this wait
        raise
    if errors:
        raise errors[0]
    return delivered[0] == n_jobs


def _ready(result) -> None:
    """Wait until ``result`` (a tree of JAX arrays, or of anything else) is computed."""
    for leaf in _leaves(result):
        wait = getattr(leaf, "block_until_ready", None)
        if wait is not None:
            wait()


def _leaves(tree) -> list:
    if isinstance(tree, (list, tuple)):
        return [x for t in tree for x in _leaves(t)]
    if isinstance(tree, dict):
        return [x for t in tree.values() for x in _leaves(t)]
    return [tree]
