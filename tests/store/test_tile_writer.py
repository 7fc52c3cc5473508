"""The background tile writer: tiles published in order, one at a time, off the
computing thread; its first error raised in the computing thread (the same exception);
the tiles queued when the computation fails (an interrupt) still written. The real
full-disk and non-finite cases through the CLI are test_integrity.py's and
test_elementwise_spec.py's, unchanged."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

from helpers_cli import images, write_config
from kernelcli.errors import DiskFullError, Interrupted
from kernelcli.pipeline._tile_writer import TileWriter  # the writer thread on its own


def test_items_are_published_in_order_on_another_thread():
    got, threads = [], set()

    def publish(k):
        time.sleep(0.002)  # a slow disk: the puts queue up behind the writer
        threads.add(threading.current_thread().name)
        got.append(k)

    with TileWriter(publish) as w:
        for k in range(20):
            w.put(k)
        w.finish()
    assert got == list(range(20))
    assert threads == {"kernelcli-tile-writer"}


def test_the_queue_is_bounded():
    gate, taken = threading.Event(), threading.Event()

    def publish(k):
        taken.set()
        assert gate.wait(60), "the test never opened the gate"

    with TileWriter(publish) as w:
        w.put(0)
        assert taken.wait(60)      # taken by the writer, which waits
        w.put(1)                   # queued (depth 1)
        t = threading.Thread(target=w.put, args=(2,), daemon=True)
        t.start()
        t.join(0.3)  # a put that returns does so at once: 0.3 s shows it waits
        assert t.is_alive()        # a third waits for room
        gate.set()
        t.join(60)
        assert not t.is_alive()    # and goes in once there is room
        w.finish()


def test_the_writers_error_is_raised_in_the_computing_thread_and_stops_it():
    err = DiskFullError("disk full while writing /x/tiles/r00001c00000.h5: free some space",
                        "/x")
    got = []

    def publish(k):
        if k == 1:
            raise err
        got.append(k)

    with pytest.raises(DiskFullError) as info:
        with TileWriter(publish) as w:
            for k in range(50):
                w.put(k)
            w.finish()
    assert info.value is err
    assert got == [0]              # nothing after the failed one is published
    w2 = TileWriter(publish)
    with pytest.raises(DiskFullError):
        with w2:
            w2.put(1)
            deadline = time.monotonic() + 60  # a generous bound: only a lost error fails
            while time.monotonic() < deadline:
                w2.check()         # raised at the computing thread's next safe point
                time.sleep(0.01)


def test_tiles_queued_when_the_computation_fails_are_still_written():
    got, interrupted = [], threading.Event()

    def publish(k):  # 0 is published only once the interrupt has come
        assert interrupted.wait(60), "the interrupt never came"
        got.append(k)

    with pytest.raises(Interrupted):
        with TileWriter(publish) as w:
            w.put(0)
            w.put(1)               # queued behind 0 when the interrupt comes
            interrupted.set()
            raise Interrupted("interrupted (SIGINT)", signal.SIGINT)
    assert got == [0, 1]


def test_an_interrupt_in_a_run_keeps_every_tile_handed_to_the_writer(tmp_path, monkeypatch,
                                                                       keep_process_state):
    """A stop requested while tile 1 is published (the writer's thread): the run ends with
    Interrupted, every tile computed by then is a tile file, and a resume finishes."""
    from kernelcli.pipeline import _tile_writer as _writer
    from kernelcli.run import Stop, compute, resume
    from kernelcli.store import RunStore

    np.save(tmp_path / "x.npy", images(32, seed=5))
    cfg = write_config(tmp_path, "w", compute={"block": 8}, run_dir="run")
    handed = []
    put = _writer.TileWriter.put

    def spy(self, block, tile, reported):
        handed.append(block.key)
        put(self, block, tile, reported)

    monkeypatch.setattr(_writer.TileWriter, "put", spy)

    stop = Stop()

    def progress(p):
        if p.blocks_done == 1:
            stop.request(signal.SIGINT)

    with pytest.raises(Interrupted):
        compute(cfg, progress=progress, stop=stop)
    store = RunStore.open(tmp_path / "run")
    assert store.done_keys() == set(handed) and 1 <= len(handed) < 10
    assert resume(tmp_path / "run").assembled
