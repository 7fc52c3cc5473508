"""Device memory as the budget on accelerators, XLA's out of memory as the
out-of-memory error, and the accelerator engine's pair batch and cost model.

There is no GPU here: the device budget's arithmetic is checked on a stub exposing
``memory_stats()`` (as a GPU device does), the fallback on the real CPU devices; the
out-of-memory error is a real ``RESOURCE_EXHAUSTED`` from XLA's CPU allocator, provoked
through the real CLI by an address-space limit on the process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers_cli import GAP2_NET, KERNELCLI, cli_env, write_config

MiB = 1 << 20
GiB = 1 << 30


class FakeDevice:
    """What the budget reads of a device: its platform and ``memory_stats()``."""

    def __init__(self, stats, platform="gpu"):
        self.platform, self._stats = platform, stats

    def memory_stats(self):
        if isinstance(self._stats, Exception):
            raise self._stats
        return self._stats


def test_device_budget_is_the_least_free_device_of_the_pool():
    from kernelcli.pipeline._devices import device_memory_available  # given stats made here

    # preallocated pools (bytes_limit) of 75% of 141 GiB, one device busier
    devices = [FakeDevice({"bytes_limit": 105 * GiB, "bytes_in_use": 5 * GiB}),
               FakeDevice({"bytes_limit": 105 * GiB, "bytes_in_use": 25 * GiB})]
    assert device_memory_available(devices) == (80 * GiB, "device memory_stats")
    assert device_memory_available([FakeDevice({"bytes_limit": GiB})]) == (GiB, "device memory_stats")
    # over-used (another process's buffers counted): nothing left, never negative
    assert device_memory_available([FakeDevice({"bytes_limit": GiB, "bytes_in_use": 2 * GiB})])[0] == 0


@pytest.mark.parametrize("stats", [None, {}, {"bytes_in_use": 1}, NotImplementedError("no"),
                                   RuntimeError("UNIMPLEMENTED")])
def test_a_device_without_memory_stats_falls_back_to_host_memory(stats):
    from kernelcli.pipeline._devices import device_memory_available  # given stats made here

    assert device_memory_available([FakeDevice({"bytes_limit": GiB}), FakeDevice(stats)]) is None


def test_real_cpu_devices_plan_by_host_memory():
    import jax

    from kernelcli.pipeline._devices import device_memory_available  # given stats made here

    devices = jax.local_devices()
    assert devices[0].platform == "cpu"
    assert device_memory_available(devices) is None


def _cfg(memory=None):
    """What ``memory_budget`` reads of a configuration: ``compute.memory``."""
    import dataclasses
    import types

    from kernelcli.config import ComputeSpec

    return types.SimpleNamespace(compute=dataclasses.replace(ComputeSpec(), memory=memory))


def test_memory_budget_says_which_memory_it_is():
    import jax

    # the budget's headroom below what the device reports
    from kernelcli.pipeline._budget import DEVICE_HEADROOM, memory_budget
    from kernelcli.plan import auto_budget

    gpus = [FakeDevice({"bytes_limit": 100 * GiB, "bytes_in_use": 0})] * 2
    assert memory_budget(_cfg().compute.memory, gpus) == (
        auto_budget(100 * GiB, *DEVICE_HEADROOM), "device memory_stats", "device")
    assert auto_budget(100 * GiB, *DEVICE_HEADROOM) == 90 * GiB
    assert memory_budget(_cfg(8 * GiB).compute.memory, gpus) == (
        8 * GiB, "compute.memory", "device")
    cpus = jax.local_devices()
    assert memory_budget(_cfg(8 * GiB).compute.memory, cpus) == (8 * GiB, "compute.memory", "host")
    budget, source, memory = memory_budget(_cfg().compute.memory, cpus)
    assert memory == "host" and (source == "MemAvailable" or source.startswith("cgroup "))
    # an accelerator that does not report its memory: host memory, as on CPU
    budget, source, memory = memory_budget(_cfg().compute.memory, [FakeDevice(None)])
    assert memory == "host" and source != "device memory_stats"


def test_the_budget_error_names_device_memory_on_accelerators():
    from kernelcli.errors import BudgetError
    from kernelcli.plan import make_plan

    with pytest.raises(BudgetError) as info:
        make_plan(100, 100, symmetric=True, bytes_per_pair=MiB, fixed_bytes=GiB,
                  budget_bytes=GiB, kinds=("nngp",), itemsize=4, block=64, memory="device")
    assert str(info.value).startswith("the memory budget (`compute.memory`, device memory) "
                                      "of 1 GiB cannot hold one pair evaluation")


# -- the accelerator engine's pair batch ---------------------------------------------------

def _costs(engine, per_pair=10 * MiB, fixed=GiB):
    from kernelcli.plan import EngineCosts

    return EngineCosts(chunk=1, flat_input=False, cov_elements=1024**2, layers=21,
                       kinds=("nngp", "ntk"), itemsize=4, engine=engine,
                       compiled_memory=lambda r, c, p: fixed + p * per_pair)


def test_accelerator_pair_batch_is_what_device_memory_holds():
    from kernelcli.plan import ACCELERATOR_MAX_PAIR_BATCH, plan_run

    # 64-edge blocks (a heavy pair): 2,080 pairs in a diagonal block, 4,096 in others
    cpu = plan_run(1000, 1000, symmetric=True, costs=_costs("cpu"), budget_bytes=100 * GiB)
    assert cpu.block == 64 and cpu.pair_batch == 64  # the cpu engine: 64 chunks of one pair
    acc = plan_run(1000, 1000, symmetric=True, costs=_costs("accelerator"),
                   budget_bytes=100 * GiB, block=64)
    assert acc.pair_batch == 4096 // 2  # two batches of the largest block on one device
    # memory-bound: (20 GiB - 1 GiB) / 10 MiB
    tight = plan_run(1000, 1000, symmetric=True, costs=_costs("accelerator"),
                     budget_bytes=20 * GiB, devices=1, block=64)
    assert tight.pair_batch == 19 * 1024 // 10
    assert tight.peak_bytes_per_device <= 20 * GiB
    # eight devices: still about two batches each of a block
    many = plan_run(1000, 1000, symmetric=True, costs=_costs("accelerator"),
                    budget_bytes=100 * GiB, devices=8, block=64)
    assert many.pair_batch == 4096 // 16
    # never beyond the cap, however light a pair
    light = plan_run(100000, 100000, symmetric=True, costs=_costs("accelerator", per_pair=1),
                     budget_bytes=100 * GiB, block=1024)
    assert light.pair_batch == ACCELERATOR_MAX_PAIR_BATCH


def test_accelerator_blocks_hold_a_thousand_times_the_work_of_a_cpu_block():
    """A block is about half a minute of work either way; a GPU does that much about a
    thousand times faster, so its blocks are larger (their file and fsync are then a
    small share of the device's time)."""
    from kernelcli.plan import plan_run

    cpu = plan_run(5000, 5000, symmetric=True, costs=_costs("cpu"), budget_bytes=100 * GiB)
    acc = plan_run(5000, 5000, symmetric=True, costs=_costs("accelerator"),
                   budget_bytes=100 * GiB)
    # 2e11 operations a block, 6.6e8 a pair: 303 pairs (the 64 floor) on CPU, x1000 here
    assert (cpu.block, acc.block) == (64, 552)
    assert acc.pair_batch == 4096


# -- out of memory -----------------------------------------------------------------------

def test_resource_exhausted_is_recognised_by_message_and_base_class():
    import jax

    from kernelcli.run import is_out_of_memory

    real = getattr(jax.errors, "JaxRuntimeError", None)
    if real is not None:
        assert is_out_of_memory(real("RESOURCE_EXHAUSTED: Out of memory allocating 9 bytes."))
    assert is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: out of memory"))
    assert not is_out_of_memory(RuntimeError("INTERNAL: something else"))
    assert not is_out_of_memory(ValueError("RESOURCE_EXHAUSTED"))


_MEASURE_VM = r"""
import atexit, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmPeak:"):
            sys.stderr.write("VMPEAK %d\n" % (int(line.split()[1]) * 1024))
atexit.register(peak)
from kernelcli.cli import main
main(sys.argv[1:])
"""


# A fresh process limits its own address space, then becomes the CLI (no fork of this
# multithreaded one with a preexec function).
_CONFINED = r"""
import os, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
os.execv(sys.argv[2], sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS, /proc")
def test_xla_out_of_memory_is_the_out_of_memory_error_naming_how_to_resume(tmp_path):
    """A real RESOURCE_EXHAUSTED: XLA's CPU allocator fails under an address-space limit
    that the planning (estimate: compiles, allocates no pair batch) stays under and the
    pair batch (about 1.3 GiB of covariances) does not. No GPU is needed for the
    mapping: XLA:GPU raises the same error class and status."""
    np.save(tmp_path / "x.npy",
            np.random.default_rng(0).standard_normal((24, 32, 32, 3)).astype(np.float32))
    cfg = write_config(tmp_path, "oom", layers=GAP2_NET,  # XLA's own buffers: the cpu engine
                       compute={"memory": "64GiB", "devices": 1, "engine": "cpu"})
    # one chunk for the whole batch: its buffers are allocated at once
    env = dict(cli_env(), KERNELCLI_CHUNK_BYTES=str(GiB), KERNELCLI_CACHE_DIR="off")
    est = subprocess.run([sys.executable, "-c", _MEASURE_VM, "estimate", str(cfg), "--json"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert est.returncode == 0, est.stderr
    peak = int(est.stderr.rsplit("VMPEAK ", 1)[1].split()[0])
    batch = json.loads(est.stdout)["peak_bytes_per_device"]
    assert batch > GiB
    # Mid-way between the two: when the pair pass's worker thread starts, the process
    # holds about 0.4 GiB more address space in some runs than in others (2 of 8: 1.89
    # against 1.49 GiB), freed before the batch; a limit a third of a batch over the
    # planning's peak left that thread's 8 MiB stack no room about one run in five (the
    # one-line thread error, not XLA's).
    limit = peak + 2 * batch // 3
    out = subprocess.run([sys.executable, "-c", _CONFINED, str(limit), KERNELCLI, "compute",
                          str(cfg), "--quiet"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 1, out.stderr
    run = tmp_path / "run"
    assert out.stderr.strip().splitlines()[-1] == (
        "Error: out of memory (RESOURCE_EXHAUSTED): lower `compute.memory` in the "
        "configuration (now 64 GiB per device), or set XLA_PYTHON_CLIENT_MEM_FRACTION (the "
        "share of a GPU's memory JAX takes, default 0.75) / "
        f"XLA_PYTHON_CLIENT_PREALLOCATE=false; completed tiles are kept: continue with "
        f"`kernelcli resume {run}`")
    assert "Traceback" not in out.stderr


def test_the_device_message_names_device_memory_and_the_preallocation_variables():
    from kernelcli.run import out_of_memory_error

    exc = out_of_memory_error(80 * GiB, "device", False, "runs/x", (1, 4))
    assert exc.exit_code == 1
    assert str(exc) == (
        "out of device memory (RESOURCE_EXHAUSTED): lower `compute.memory` in the "
        "configuration (now 80 GiB per device, from auto), or set "
        "XLA_PYTHON_CLIENT_MEM_FRACTION (the share of a GPU's memory JAX takes, default "
        "0.75) / XLA_PYTHON_CLIENT_PREALLOCATE=false; completed tiles are kept: continue "
        "with `kernelcli resume runs/x --shard 1/4`")


# -- the cost model ----------------------------------------------------------------------

def _kfn(layers, kinds=("nngp", "ntk")):
    """The kernel of ``layers`` on 8x8x3 images, from a configuration as a user writes it."""
    import tempfile

    from kernelcli.config import load_config
    from kernelcli.kernels import build_kernel_fn

    folder = tempfile.mkdtemp()
    arch = load_config(write_config(__import__("pathlib").Path(folder), "c",
                                    layers=layers)).architecture
    return build_kernel_fn(arch, (8, 8, 3), kinds, "float32")


def test_cost_model_bytes_per_layer_follow_the_covariance_sizes():
    from kernelcli.kernels import cost_model

    kfn = _kfn(GAP2_NET)
    m = cost_model(kfn, pair_batch=100, bandwidth=1e12, launch_latency=1e-5)
    names = [c.name for c in m.layers]
    # a convolution and the nonlinearity after it are one pass (the engines' blocks)
    assert names == ["input", "0:conv+relu", "2:conv+relu", "4:global_avg_pool", "5:dense",
                     "output"]
    full = 64 * 64 * 4 * 2  # (H*W)^2 float32 entries, NNGP and NTK, while a pool lies ahead
    variances = 2 * 64 * 4  # both inputs' own variances, on the diagonal
    by = {c.name: c for c in m.layers}
    assert by["0:conv+relu"].read_bytes == full // 2 + variances  # the input has no NTK yet
    assert by["2:conv+relu"].read_bytes == full + variances
    assert by["0:conv+relu"].write_bytes == by["2:conv+relu"].write_bytes == full
    assert by["4:global_avg_pool"].write_bytes == 2 * 4
    assert by["input"].read_bytes == 2 * 8 * 8 * 3 * 4
    assert m.launches_source == "structural" and m.launches_per_batch == 6
    assert m.seconds_per_entry == pytest.approx(m.bytes_per_pair / 1e12 + 6 * 1e-5 / 100)
    assert [c.name for c in m.top(2)] == ["2:conv+relu", "0:conv+relu"]
    # an NNGP alone moves one array, not two
    nngp = cost_model(_kfn(GAP2_NET, kinds=("nngp",)), 100)
    assert {c.name: c for c in nngp.layers}["2:conv+relu"].read_bytes == full // 2 + variances


def test_cost_model_counts_each_flip_of_an_augmented_pair():
    """Under kernel.augment a pair is |G| evaluations of the network: the bytes per
    evaluation are the plain kernel's, the bandwidth term counts them |G| times."""
    from kernelcli.kernels import build_kernel_fn, cost_model

    plain = _kfn(GAP2_NET)
    flipped = build_kernel_fn(plain.arch, (8, 8, 3), ("nngp", "ntk"), "float32",
                              ("hflip", "vflip"))
    m, g = (cost_model(k, 100, bandwidth=1e12, launch_latency=1e-5) for k in (plain, flipped))
    assert (m.evaluations, g.evaluations) == (1, 4)
    assert g.bytes_per_pair == m.bytes_per_pair
    assert g.bandwidth_seconds_per_entry == pytest.approx(4 * m.bandwidth_seconds_per_entry)
    assert g.to_dict()["cost_evaluations_per_pair"] == 4


HLO = """HloModule m

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]) parameter(0)
  %g = f32[4] get-tuple-element(%p), index=1
  %fusion.1 = f32[4] fusion(%g), kind=kLoop, calls=%fused_computation
  %fusion.2 = f32[4] fusion(%fusion.1), kind=kLoop, calls=%fused_computation.1
  ROOT %t = (s32[], f32[4]) tuple(%i, %fusion.2)
}

%cond (p.1: (s32[], f32[4])) -> pred[] {
  %p.1 = (s32[], f32[4]) parameter(0)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}

ENTRY %main (x: f32[4], /*index=1*/y: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %w = (s32[], f32[4]) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"32"}}
  %d = f32[4] dot(%x, %x), lhs_contracting_dims={0}
  ROOT %r = f32[4] get-tuple-element(%w), index=1
}
"""


def test_launches_count_loop_bodies_times_their_trip_counts():
    from kernelcli.kernels import count_launches

    assert count_launches(HLO) == 32 * (2 + 1) + 1  # body's two fusions + the condition
    assert count_launches(HLO.replace('backend_config={"known_trip_count":{"n":"32"}}',
                                      "")) == 3 + 1


def test_launches_of_a_real_compiled_loop_grow_with_its_trip_count():
    import jax
    import jax.numpy as jnp

    from kernelcli.kernels import count_launches

    def loop(n):
        f = jax.jit(lambda x: jax.lax.fori_loop(0, n, lambda i, y: jnp.sin(y) * y + i, x))
        return count_launches(f.lower(jnp.ones(1000)).compile().as_text())

    assert loop(20) - loop(10) >= 10


def test_the_cpu_plan_launches_thousands_of_kernels_per_batch():
    """What the issue found: the cpu engine's chunk and row loops, counted in its program."""
    from kernelcli.kernels import cost_model, pairs_program_text

    kfn = _kfn(GAP2_NET)
    text = pairs_program_text(kfn, 8, 8, 4)
    m = cost_model(kfn, 4, hlo_text=text)
    assert m.launches_source == "hlo cpu"
    assert m.launches_per_batch > 4 * 8  # per pair, row loops over the 8 rows


def test_estimate_prints_the_cost_model_on_the_accelerator_engine(tmp_path):
    np.save(tmp_path / "x.npy",
            np.random.default_rng(0).standard_normal((6, 8, 8, 3)).astype(np.float32))
    cfg = write_config(tmp_path, "acc", layers=GAP2_NET,
                       compute={"engine": "accelerator", "devices": 1})
    out = subprocess.run([KERNELCLI, "estimate", str(cfg), "--bandwidth", "1e12",
                          "--launch-latency", "1e-5"], capture_output=True, text=True,
                         env=cli_env(), timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("  cost model: launches") and "per pair batch of" in line
               for line in lines)
    assert any("ms per entry at 1 TB/s and 10 us a launch" in line for line in lines)
    assert any(line.startswith("  peak memory of the process") for line in lines)  # CPU
