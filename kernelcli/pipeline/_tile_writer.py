"""Tiles published by one background thread, so the devices never wait for the disk.

A tile's publication (the checks of :func:`~._checks.check_tile`, the store's atomic
write with its two fsyncs, then the progress tally) takes a few milliseconds to
seconds per tile; done in the computing thread it leaves every device idle meanwhile.
:class:`TileWriter` hands it to one thread through a bounded queue, in order, while
the next block is computed:

* the store's integrity rules are untouched: the thread calls the same
  ``publish`` (check, atomic write, then tally) the computing thread did, one tile at
  a time, in the order computed; a tile is reported done only after its file is
  durable;
* at most ``depth`` tiles wait (plus the one being written): memory stays bounded,
  and a disk slower than the devices holds the computation back rather than
  piling tiles up;
* the writer's first error (a full disk, a tile that is not finite) stops it (the
  tiles behind it are dropped, as the computation would have stopped there), and is
  raised in the computing thread at its next safe point (:meth:`check`: before a
  block and after each pair batch) and by :meth:`put` and :meth:`finish`;
* when the computation ends with an error (a signal's ``Interrupted``, an
  out-of-memory error), the tiles already queued are still written before it
  propagates: completed work is kept.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Optional

_END = object()


class TileWriter:
    """``with TileWriter(publish) as w: w.put(item) ...; w.finish()``: ``publish(*item)``
    for every item, in order, on one background thread."""

    def __init__(self, publish: Callable, depth: int = 1):
        self._publish = publish
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="kernelcli-tile-writer",
                                        daemon=True)

    def __enter__(self) -> TileWriter:
        self._thread.start()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is not None:  # the computation failed: what it finished is still written
            self._close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            try:
                self._publish(*item)
            except BaseException as exc:  # surfaced in the computing thread
                self._error = exc
                return

    def check(self) -> None:
        """Raise the writer's error, if it had one."""
        if self._error is not None:
            raise self._error

    def put(self, *item) -> None:
        """Queue ``item`` for ``publish``; waits while the queue is full."""
        while True:
            self.check()
            try:
                self._queue.put(item, timeout=0.2)  # short waits: a dead writer is seen
                return
            except queue.Full:
                continue

    def _close(self) -> None:
        """Let the writer finish what is queued (none after its error), and wait for it."""
        while self._thread.is_alive():
            try:
                self._queue.put(_END, timeout=0.2)
                break
            except queue.Full:
                continue
        while self._thread.is_alive():
            self._thread.join(0.2)  # short waits keep the thread responsive to signals

    def finish(self) -> None:
        """Wait until every queued item is published; raise the writer's error."""
        self._close()
        self.check()
