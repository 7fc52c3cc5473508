"""The Ray executor (`compute.executor: ray`), against a real local Ray cluster.

The cluster is started by the test on the loopback address only (`ray start --head
--num-cpus 2`, its processes killed by pid afterwards); a kernel actor's process is
SIGKILLed mid-tile, its calls go to the other actor (and a new one), and the assembled
matrix must be bit-identical to a single-process local run. In-process drivers check that
each actor compiles its programs once for any number of blocks, that the plan is
made on a worker, and that a stop kills the actors (the actor pool itself:
test_ray_pool.py; nodes lost: test_ray_faults.py). Ray is an optional extra
(`pip install 'kernelcli[ray]'`): without it these tests are skipped; the tests
that check the configuration and the missing-Ray message, in test_ray_config.py, run
anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from kernelcli.config import load_config

KERNELCLI = shutil.which("kernelcli", path=os.path.dirname(sys.executable)) or os.path.join(
    os.path.dirname(sys.executable), "kernelcli")
SQRT2 = 1.4142135623730951
NEEDS_RAY = "Ray is an optional extra (pip install 'kernelcli[ray]'); not installed here"


def write_case(folder: Path, n: int = 40, compute: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(1).standard_normal((n, 6, 6, 2)).astype(np.float32)
    np.save(folder / "x.npy", x)
    doc = {
        "name": "r",
        "data": {"x1": "x.npy"},
        "architecture": {"layers": [
            {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}},
            "relu", "global_avg_pool", {"dense": {"W_std": 1.0, "b_std": 0.0}}]},
        "compute": {"block": 8, **(compute or {})},
        "output": {"run_dir": "run", "keep_tiles": True},  # the test deletes tiles
    }
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def read_kernels(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in f.keys()}


# -- a real local cluster ----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_env(tmpdir: str) -> dict:
    env = dict(os.environ)
    env.update(
        RAY_TMPDIR=tmpdir,                       # short: Ray's socket paths must fit
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",   # every Ray address is 127.0.0.1
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


def _kill_tree(psutil, root_pid: int) -> None:
    """End the Ray head and everything it started, by pid (never `ray stop`, which would
    end every Ray process of the machine)."""
    try:
        root = psutil.Process(root_pid)
    except psutil.NoSuchProcess:
        return
    procs = [root] + root.children(recursive=True)
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=3)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


@pytest.fixture(scope="module")
def ray_cluster():
    pytest.importorskip("ray", reason=NEEDS_RAY)
    psutil = pytest.importorskip("psutil", reason="psutil finds the Ray worker to kill")
    tmpdir = tempfile.mkdtemp(prefix="kr", dir="/tmp")
    env = _ray_env(tmpdir)
    port = _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--port", str(port),
         "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--num-gpus", "0",
         "--include-dashboard=false", "--dashboard-port", str(_free_port()),
         "--object-store-memory", str(100 * 2**20), "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        lines = []
        for line in head.stdout:  # wait until the head says it is up
            lines.append(line)
            if "Ray runtime started" in line:
                break
            if time.monotonic() > deadline:
                break
        else:
            pytest.fail("ray start exited:\n" + "".join(lines))
        if not any("Ray runtime started" in ln for ln in lines):
            pytest.fail("ray start did not come up:\n" + "".join(lines))
        yield {"address": f"127.0.0.1:{port}", "env": env, "head": head, "psutil": psutil}
    finally:
        _kill_tree(psutil, head.pid)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _tile_workers(psutil, head_pid: int) -> list:
    """Ray worker processes of the cluster whose kernel actor is computing a tile now."""
    out = []
    try:
        children = psutil.Process(head_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for p in children:
        try:
            title = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith("ray::KernelWorker.tile"):
            out.append(p)
    return out


@pytest.mark.slow
def test_ray_run_survives_a_killed_worker_and_is_bit_identical_to_a_local_run(tmp_path,
                                                                             ray_cluster):
    psutil = ray_cluster["psutil"]
    # 80 images: 55 tiles, seconds of tile tasks for the loop below to see one running
    # (at 40 a loaded machine's run could end before a scan of the workers found one)
    cfg = write_case(tmp_path, n=80)
    local = subprocess.run([KERNELCLI, "compute", str(cfg), "--run-dir", str(tmp_path / "local"),
                            "--quiet"], capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stderr
    want = read_kernels(tmp_path / "local" / "kernels.h5")

    run_dir = tmp_path / "ray"
    driver = subprocess.Popen(
        [KERNELCLI, "compute", str(cfg), "--run-dir", str(run_dir), "--executor", "ray",
         "--address", ray_cluster["address"]],
        env=ray_cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and driver.poll() is None and time.monotonic() < deadline:
        for p in _tile_workers(psutil, ray_cluster["head"].pid):
            p.send_signal(signal.SIGKILL)  # a worker dies in the middle of a tile task
            killed = p.pid
            break
        time.sleep(0.01)
    out, err = driver.communicate(timeout=120)
    assert killed is not None, f"no tile task was seen running: {err}"
    assert driver.returncode == 0, err
    assert f"wrote {run_dir / 'kernels.h5'}" in err
    got = read_kernels(run_dir / "kernels.h5")
    assert sorted(got) == sorted(want) == ["nngp", "ntk"]
    for kind in want:
        assert np.array_equal(got[kind], want[kind]), kind

    # the driver wrote the run like a local run: status and resume work as usual
    status = subprocess.run([KERNELCLI, "status", str(run_dir), "--json"], capture_output=True,
                            text=True, timeout=60)
    assert json.loads(status.stdout)["finished"] is True
    (run_dir / "kernels.h5").unlink()
    for name in ("r00004c00002.h5", "r00003c00003.h5"):
        (run_dir / "tiles" / name).unlink()
    again = subprocess.run([KERNELCLI, "resume", str(run_dir), "--executor", "ray",
                            "--address", ray_cluster["address"], "--quiet"],
                           env=ray_cluster["env"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    got = read_kernels(run_dir / "kernels.h5")
    for kind in want:
        assert np.array_equal(got[kind], want[kind]), kind


# -- actors, in-process drivers on the same cluster ------------------------------------------

@pytest.fixture
def ray_driver(ray_cluster, monkeypatch):
    """This process as a Ray driver of the test cluster (what RAY_TMPDIR & co. say)."""
    import ray._private.ray_constants as constants

    for key in ("RAY_TMPDIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch.setenv(key, ray_cluster["env"][key])
    # Read by Ray when it is imported (this process imported it already): without it,
    # ray.init turns 127.0.0.1 into the machine's address, where the head does not listen.
    monkeypatch.setattr(constants, "ENABLE_RAY_CLUSTER", False)
    return ray_cluster["address"]


class _Compiles:
    """Compilations in this process while active (jax's monitoring event)."""

    n = 0
    active = False
    registered = False

    def __enter__(self):
        import jax

        if not _Compiles.registered:  # listeners cannot be removed in old jax: one, gated
            jax.monitoring.register_event_duration_secs_listener(_Compiles._count)
            _Compiles.registered = True
        _Compiles.n, _Compiles.active = 0, True
        return self

    def __exit__(self, *exc):
        _Compiles.active = False

    @staticmethod
    def _count(event, duration, **kwargs):
        if _Compiles.active and event == "/jax/core/compile/backend_compile_duration":
            _Compiles.n += 1


def _job(tmp_path, address, stop=None, **compute):
    from kernelcli.pipeline import prepare

    cfg = load_config(write_case(tmp_path, compute=dict(compute, executor="ray",
                                                        address=address)))
    return cfg, prepare(cfg, stop=stop)


def test_the_plan_is_made_on_a_worker_and_is_a_local_runs_plan_here(tmp_path, ray_driver):
    import dataclasses

    from kernelcli.pipeline import LocalBackend, prepare

    with _Compiles() as driver:
        cfg, job = _job(tmp_path, ray_driver)
    with job:
        # every compiled program of the memory model was compiled by the first actor
        assert driver.n == 0
        counters = job.backend.ray.get(job.backend.actors[0].counters.remote())
        assert counters["builds"] == 1 and counters["compiles"] >= 1
        assert counters["pid"] != os.getpid()
        assert job.backend.info["platform"] == "cpu" and len(job.backend.actors) == 1
        ray_plan = job.plan
    local = dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, executor="local",
                                                                 address=None))
    with _Compiles() as driver, prepare(local) as job:
        assert driver.n >= 1 and isinstance(job.backend, LocalBackend)
        # a CPU cluster on this machine: a local run's plan (the free memory moves a bit)
        assert job.plan.geometry == ray_plan.geometry
        assert (dataclasses.replace(job.plan.memory, budget_bytes=0)
                == dataclasses.replace(ray_plan.memory, budget_bytes=0))
        assert abs(job.plan.memory.budget_bytes / ray_plan.memory.budget_bytes - 1) < 0.1


def test_each_actor_compiles_once_for_any_number_of_blocks(tmp_path, ray_driver):
    from kernelcli.pipeline import LocalBackend

    _cfg, job = _job(tmp_path, ray_driver)
    with job:
        rows, blocks, kfn, plan = job.inputs.rows, job.plan.blocks, job.kfn, job.plan
        with job.backend as backend:
            s1 = backend.input_stats(kfn, rows)
            actors, ray = backend.actors, backend.ray
            assert len(actors) == 2  # one per CPU of the cluster
            # an actor is fed once it is placed and built: both are, before the first
            # block, so that each computes blocks in both rounds
            ray.get([a.where.remote() for a in actors])
            first = {b.key: t for b, t, _ in backend.tiles(kfn, plan, blocks, rows, rows,
                                                           s1, s1)}
            after_one = ray.get([a.counters.remote() for a in actors])
            again = {b.key: t for b, t, _ in backend.tiles(kfn, plan, blocks, rows, rows,
                                                           s1, s1)}
            after_two = ray.get([a.counters.remote() for a in actors])
        assert len(blocks) == 15 and sorted(first) == sorted(again) == sorted(b.key for b in blocks)
        # the same actors (no restart), each built once, and 15 more blocks compiled nothing
        assert after_two == after_one
        assert [c["builds"] for c in after_one] == [1, 1]
        assert all(c["compiles"] <= 8 for c in after_one), after_one
        local = LocalBackend(job.devices)
        ls1 = local.input_stats(kfn, rows)
        for block, tile, _ in local.tiles(kfn, plan, blocks, rows, rows, ls1, ls1):
            for kind in tile:
                assert np.array_equal(first[block.key][kind], tile[kind]), (block.key, kind)
                assert np.array_equal(again[block.key][kind], tile[kind]), (block.key, kind)


@pytest.mark.parametrize("attempt", range(3))
def test_a_stop_during_the_tiles_raises_interrupted_and_kills_the_actors(tmp_path, ray_driver,
                                                                         attempt):
    import ray

    from kernelcli.errors import Interrupted
    from kernelcli.run import Stop

    stop = Stop()
    _cfg, job = _job(tmp_path, ray_driver, devices=1, stop=stop)
    with job:
        rows, kfn = job.inputs.rows, job.kfn
        with pytest.raises(Interrupted):
            with job.backend as backend:
                s1 = backend.input_stats(kfn, rows)
                assert len(backend.actors) == 1  # compute.devices caps the pool
                pid = ray.get(backend.actors[0].counters.remote())["pid"]
                got = backend.tiles(kfn, job.plan, job.plan.blocks, rows, rows, s1, s1)
                next(got)
                stop.request(signal.SIGINT)
                next(got)
        assert not backend.inflight and job.backend.actors == []
        assert not ray.is_initialized()  # this driver started its connection: shut down
    psutil = ray_cluster_psutil()
    deadline = time.monotonic() + 60  # generous: only an actor left running fails
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(pid), "the actor's process outlived the stop"


def ray_cluster_psutil():
    import psutil

    return psutil


def test_an_actor_out_of_device_memory_is_the_out_of_memory_error(ray_driver):
    """XLA's RESOURCE_EXHAUSTED raised inside an actor comes back as what the run layer
    maps to the out-of-memory error (naming compute.memory), not a generic failure."""
    import ray

    from kernelcli.pipeline import is_out_of_memory

    # the driver's own connection and result gathering, with an actor it did not make
    from kernelcli.pipeline._ray import _connect, _get_all

    _connect(ray, ray_driver)
    try:
        @ray.remote(num_cpus=0)
        class Worker:
            def tile(self):
                raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to "
                                   "allocate 81.00GiB.")

        w = Worker.remote()
        with pytest.raises(RuntimeError) as exc:
            _get_all(ray, [w.tile.remote()])
        assert is_out_of_memory(exc.value)
        assert "81.00GiB" in str(exc.value)
    finally:
        ray.shutdown()

