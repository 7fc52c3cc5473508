"""The streamed operator's two lanes (``H5KernelOperator._product``): each reads its row
blocks while the other multiplies; the same bits as a sequential pass, a lane's error
raised in the caller, a stop or Ctrl-C ending the pass with no lane left running."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import h5py
import numpy as np
import pytest

from kernelcli.errors import Interrupted
from kernelcli.run import Stop
from kernelcli.solvers import H5KernelOperator

# the lanes themselves and the block product they share are what is tested
from kernelcli.solvers._operator import LANES, block_product, transposed


def lanes_alive() -> list:
    return [t.name for t in threading.enumerate() if t.name.startswith("kernelcli-rows")]


def sequential(path, name, block_rows, v, dtype):
    """The pass before the lanes: every block in turn, one product each."""
    with h5py.File(path, "r") as f:
        k = f[name][...]
    v = np.asarray(v, dtype=dtype)
    vt = transposed(v)
    out = np.empty((k.shape[0],) + v.shape[1:])
    for s in range(0, k.shape[0], block_rows):
        block = np.ascontiguousarray(k[s:s + block_rows], dtype=dtype)
        out[s:s + block.shape[0]] = block_product(block, vt).reshape(
            (block.shape[0],) + v.shape[1:])
    return out


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("overlap") / "kernels.h5"
    x = rng.standard_normal((61, 40))
    with h5py.File(path, "w") as f:
        f.create_dataset("k32", data=(x @ x.T / 40).astype(np.float32))
        f.create_dataset("rect", data=rng.standard_normal((37, 61)))  # float64, not square
        y = rng.standard_normal((64, 40))  # rows of 256 bytes: held blocks used in place
        f.create_dataset("k64", data=(y @ y.T / 40).astype(np.float32))
    return path


@pytest.mark.parametrize("name, block_rows", [("k32", 5), ("k32", 61), ("rect", 4)])
def test_the_lanes_give_the_sequential_pass_bit_for_bit(kernels, name, block_rows):
    op = H5KernelOperator(kernels, name, block_rows=block_rows)  # ragged last blocks
    v = np.random.default_rng(1).standard_normal((op.shape[1], 7))
    for dtype, product in ((np.float64, op.matmul), (np.float32, op.matmul32)):
        want = sequential(kernels, name, block_rows, v, dtype)
        assert np.array_equal(product(v), want)
        assert np.array_equal(product(v[:, 2]), sequential(kernels, name, block_rows, v[:, 2],
                                                           dtype))
    assert lanes_alive() == []


@pytest.mark.parametrize("name, block_rows", [("k32", 5), ("k64", 8), ("k64", 64),
                                              ("rect", 4)])
def test_a_held_kernel_gives_the_streamed_pass_bit_for_bit(kernels, name, block_rows):
    """Held in memory as float32 (``held``), a pass multiplies the same blocks: the same
    bits for the float32 and float64 products, a float64 kernel's float32 pass (its
    rows rounded in memory instead of by HDF5) and float64 pass (streamed) too."""
    op = H5KernelOperator(kernels, name, block_rows=block_rows)
    v = np.random.default_rng(1).standard_normal((op.shape[1], 7))
    want = (op.matmul(v), op.matmul32(v))
    with op.held() as held:
        assert held is op and op._held is not None
        assert np.array_equal(op.matmul(v), want[0])
        assert np.array_equal(op.matmul32(v), want[1])
    assert op._held is None  # released with the block
    assert lanes_alive() == []


def test_an_error_in_a_lane_is_raised_in_the_caller(tmp_path):
    path = tmp_path / "kernels.h5"
    data = np.arange(48 * 48, dtype=np.float32).reshape(48, 48)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("k", data=data, chunks=(4, 48), compression="gzip")
        info = ds.id.get_chunk_info(7)  # rows 28-31: a block the second lane reads
    with open(path, "r+b") as f:  # a damaged chunk: HDF5 fails to inflate it
        f.seek(info.byte_offset)
        f.write(b"\xff" * info.size)
    op = H5KernelOperator(path, "k", block_rows=4)
    with pytest.raises(OSError, match="(?i)read|inflate|filter"):
        op.matmul32(np.ones(48))
    assert lanes_alive() == []


class Counted(Stop):
    """A stop that counts the questions the lanes ask it (from both threads) and acts at
    the ``at``-th (``ask`` gives each question's number)."""

    def __init__(self, at: int):
        super().__init__()
        self.at, self.asked = at, 0
        self._count = threading.Lock()

    def ask(self) -> int:
        with self._count:
            self.asked += 1
            return self.asked


class StopAt(Counted):
    """A stop requested by the lane that asks it the ``at``-th time (a request from
    another thread, at a known block)."""

    def __call__(self) -> bool:
        if self.ask() == self.at:
            self.request(signal.SIGTERM)
        return super().__call__()


def test_a_stop_ends_the_pass_at_the_next_block(kernels):
    op = H5KernelOperator(kernels, "k32", block_rows=1, stop=StopAt(5))  # 61 blocks
    with pytest.raises(Interrupted, match=r"interrupted \(SIGTERM\)"):
        op.matmul(np.ones(61))
    assert op.stop.asked <= 5 + LANES  # each lane asks once more, then ends
    assert lanes_alive() == []
    assert H5KernelOperator(kernels, "k32", stop=Stop()).matmul(np.ones(61)).shape == (61,)


class SigintAt(Counted):
    """Never requested; the ``at``-th question sends the process SIGINT (Ctrl-C reaches
    the caller, waiting for its lanes) and every later one takes 200 ms: the blocks
    left would take 11 s, while the caller sees the signal at its next bytecode (a
    loaded machine delays that by far less), and each lane is held at most once more."""

    def __call__(self) -> bool:
        asked = self.ask()
        if asked == self.at:
            os.kill(os.getpid(), signal.SIGINT)
        if asked > self.at:
            time.sleep(0.2)
        return False


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler (``KeyboardInterrupt``), as a terminal or a notebook
    has it: a process started in the background by a non-interactive shell inherits
    SIGINT ignored, and Python then leaves it ignored. The garbage collector is off
    meanwhile: a KeyboardInterrupt raised inside a gc callback (hypothesis installs one
    in the worker) is printed and dropped by Python, and the test would lose its signal."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    collecting = gc.isenabled()
    gc.disable()
    yield
    if collecting:
        gc.enable()
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("default_sigint")
def test_ctrl_c_in_the_caller_ends_every_lane_before_it_returns(kernels):
    op = H5KernelOperator(kernels, "k32", block_rows=1, stop=SigintAt(3))
    with pytest.raises(KeyboardInterrupt):
        op.matmul32(np.ones((61, 2)))
    assert lanes_alive() == []  # joined in the caller: none left running
    assert op.stop.asked < 61
