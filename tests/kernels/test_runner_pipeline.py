"""The device runner pipelines: a device's next job is launched before the previous
result is read back, at most two jobs are in flight per device, and a stop or an error
still leaves no job of ours running and delivers nothing after it. Fake devices and
fake asynchronous results (``block_until_ready`` records when a result is read)."""

from __future__ import annotations

import threading
import time

import pytest

from kernelcli.kernels import run_on_devices


class Log:
    def __init__(self):
        self.events: list = []
        self.lock = threading.Lock()

    def add(self, *event):
        with self.lock:
            self.events.append(event)


class Result:
    """A job's result, computed when first waited for (like a dispatched XLA call)."""

    def __init__(self, log: Log, device, k: int, fail: bool = False, delay: float = 0.0):
        self.log, self.device, self.k, self.fail, self.delay = log, device, k, fail, delay
        self.ready = False

    def block_until_ready(self):
        if not self.ready:
            time.sleep(self.delay)
            self.log.add("ready", self.device, self.k)
            self.ready = True
        if self.fail:
            raise RuntimeError(f"job {self.k} failed on the device")
        return self


def run(devices, n, stop=None, fail_at=None, delay=0.0, on_done_extra=None):
    log = Log()
    launched = {}

    def work(device, k):
        r = Result(log, device, k, fail=k == fail_at, delay=delay)
        log.add("launch", device, k)
        launched[k] = r
        return r

    def done(k, r):
        assert r.ready, "delivered before it was ready"
        log.add("done", r.device, k)
        if on_done_extra is not None:
            on_done_extra(k)

    complete = run_on_devices(devices, n, work, done, stop)
    return complete, log.events, launched


def test_the_next_job_is_launched_before_the_previous_result_is_read():
    complete, events, _ = run(["d0"], 5)
    assert complete
    order = [(e[0], e[2]) for e in events]
    assert order == [("launch", 0), ("launch", 1), ("ready", 0), ("done", 0),
                     ("launch", 2), ("ready", 1), ("done", 1),
                     ("launch", 3), ("ready", 2), ("done", 2),
                     ("launch", 4), ("ready", 3), ("done", 3),
                     ("ready", 4), ("done", 4)]


def test_at_most_two_jobs_in_flight_per_device_and_every_job_once():
    complete, events, _ = run(["d0", "d1", "d2"], 40, delay=0.001)
    assert complete
    for d in ("d0", "d1", "d2"):
        flight = peak = 0
        for e in events:
            if e[1] != d:
                continue
            flight += {"launch": 1, "ready": -1}.get(e[0], 0)
            peak = max(peak, flight)
        assert peak <= 2
    assert sorted(e[2] for e in events if e[0] == "done") == list(range(40))


def test_a_stop_delivers_nothing_after_it_and_waits_for_the_jobs_in_flight():
    stopped = threading.Event()

    def after(k):
        if k == 3:
            stopped.set()

    complete, events, launched = run(["d0", "d1"], 50, stop=stopped.is_set,
                                     on_done_extra=after, delay=0.002)
    assert not complete
    done = [e[2] for e in events if e[0] == "done"]
    assert 3 in done and len(done) < 50
    last_done = max(i for i, e in enumerate(events) if e[0] == "done")
    assert all(e[0] != "done" for e in events[last_done + 1:])
    assert all(r.ready for r in launched.values())  # nothing of ours left running
    assert len(launched) <= len(done) + 2 * 2        # no new job after the stop


def test_an_error_of_a_job_is_raised_and_nothing_is_left_in_flight():
    log_devices = ["d0", "d1"]
    launched: dict = {}
    log = Log()

    def work(device, k):  # the other jobs take time, so the error is read while they run
        launched[k] = r = Result(log, device, k, fail=k == 6, delay=0.0 if k == 6 else 0.05)
        return r

    with pytest.raises(RuntimeError, match="job 6 failed on the device"):
        run_on_devices(log_devices, 30, work, lambda k, r: None)
    assert all(r.ready for r in launched.values())
    assert len(launched) < 30


def test_job_k_is_the_same_work_whichever_device():
    seen = {}

    def work(device, k):
        seen[k] = device
        return k * k

    got = {}
    assert run_on_devices(["a", "b"], 20, work, lambda k, r: got.__setitem__(k, r))
    assert got == {k: k * k for k in range(20)}
