"""Cancellation is a :class:`kernelcli.run.Stop` passed to the call, not process state:
two runs in two threads are independent (stopping one leaves the other running to
completion, bit for bit what it computes alone), and a call without a stop has one of
its own that nobody requests."""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

from helpers_cli import images, write_config
from kernelcli.errors import Interrupted


def test_stopping_one_of_two_runs_in_two_threads_leaves_the_other_to_finish(tmp_path):
    import h5py

    from kernelcli.run import Stop, compute, resume
    from kernelcli.store import RunStore

    np.save(tmp_path / "x.npy", images(32, seed=7))
    configs = {name: write_config(tmp_path, name, compute={"block": 8}, run_dir=f"run_{name}")
               for name in ("a", "b")}
    stops = {name: Stop() for name in configs}
    a_ended = threading.Event()
    b_waited = []
    outcome: dict = {}

    def progress_a(p):
        if p.blocks_done >= 1:
            stops["a"].request(signal.SIGTERM)

    def progress_b(p):
        # B is mid-run when A is stopped: it waits here (once) until A has ended
        if p.blocks_done >= 1 and not b_waited:
            b_waited.append(a_ended.wait(300))

    def run(name, progress):
        try:
            outcome[name] = compute(configs[name], progress=progress, stop=stops[name])
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome[name] = exc
        finally:
            if name == "a":
                a_ended.set()

    threads = [threading.Thread(target=run, args=("a", progress_a)),
               threading.Thread(target=run, args=("b", progress_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert b_waited == [True]  # B was still running when A had been stopped
    a, b = outcome["a"], outcome["b"]
    assert isinstance(a, Interrupted) and a.exit_code == 143
    assert str(a) == (f"interrupted (SIGTERM); completed tiles are kept: continue with "
                      f"`kernelcli resume {tmp_path / 'run_a'}`")
    assert stops["b"]() is False and stops["b"].requested() is None
    assert not isinstance(b, BaseException), b
    assert b.assembled and b.blocks_missing == 0
    done = RunStore.open(tmp_path / "run_a").done_keys()
    assert 1 <= len(done) < b.blocks_total and not (tmp_path / "run_a" / "kernels.h5").exists()
    # A resumed is what B computed, bit for bit
    assert resume(tmp_path / "run_a").assembled
    with h5py.File(tmp_path / "run_a" / "kernels.h5") as fa, \
            h5py.File(tmp_path / "run_b" / "kernels.h5") as fb:
        for kind in ("nngp", "ntk"):
            if kind in fa:
                assert np.array_equal(fa[kind][...], fb[kind][...])


def test_a_requested_stop_ends_an_in_memory_kernel_matrix():
    from kernelcli import stax
    from kernelcli.config import parse_architecture
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import Stop, kernel_matrix

    arch = parse_architecture(stax.serial(stax.Flatten(), stax.Dense(8), stax.Relu(),
                                          stax.Dense(1)).to_dict())
    kfn = build_kernel_fn(arch, (4, 4, 1), ("nngp",), "float32", ())
    x = images(12, 4, 4, 1)
    stop = Stop()
    assert kernel_matrix(kfn, x, stop=stop)["nngp"].shape == (12, 12)  # never requested
    stop.request()
    with pytest.raises(Interrupted) as info:
        kernel_matrix(kfn, x, stop=stop)
    assert info.value.exit_code == 130


def test_two_in_memory_kernel_matrices_in_two_threads_are_independent():
    """The library's route of ``kernel_fn``: one call stopped (its stop requested while
    it runs) leaves the other's result whole, the bits of the same call alone."""
    from kernelcli import stax
    from kernelcli.config import parse_architecture
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import Stop, kernel_matrix

    arch = parse_architecture(stax.serial(stax.Flatten(), stax.Dense(8), stax.Relu(),
                                          stax.Dense(1)).to_dict())
    kfn = build_kernel_fn(arch, (4, 4, 1), ("nngp", "ntk"), "float32", ())
    x = images(40, 4, 4, 1, seed=3)
    alone = kernel_matrix(kfn, x, block=8)
    stops = {"a": Stop(), "b": Stop()}
    out: dict = {}

    def run(name):
        try:
            out[name] = kernel_matrix(kfn, x, block=8, stop=stops[name])
        except Interrupted as exc:
            out[name] = exc

    stops["a"].request(signal.SIGINT)
    threads = [threading.Thread(target=run, args=(n,)) for n in stops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert isinstance(out["a"], Interrupted) and out["a"].exit_code == 130
    assert str(out["a"]) == "interrupted (SIGINT) before anything was written"
    for kind in ("nngp", "ntk"):
        assert np.array_equal(out["b"][kind], alone[kind])


def test_kernel_fn_takes_a_stop_as_compute_does():
    from kernelcli import kernel_fn, stax
    from kernelcli.run import Stop

    kfn = kernel_fn(stax.serial(stax.Flatten(), stax.Dense(8), stax.Relu(), stax.Dense(1)))
    x = images(12, 4, 4, 1)
    stop = Stop()
    assert kfn(x, get="nngp", stop=stop).shape == (12, 12)  # never requested
    stop.request()
    with pytest.raises(Interrupted) as info:
        kfn(x, get="nngp", stop=stop)
    assert info.value.exit_code == 130
