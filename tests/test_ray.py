"""The Ray executor (`compute.executor: ray`), against a real local Ray cluster.

The cluster is started by the test on the loopback address only (`ray start --head
--num-cpus 2`, its processes killed by pid afterwards); a tile task's worker process
is SIGKILLed mid-run, Ray retries the task, and the assembled matrix must be
bit-identical to a single-process local run. Ray is an optional extra
(`pip install 'kernelcli[ray]'`): without it these tests are skipped, and the tests
that check the configuration and the missing-Ray message run anyway.
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

from kernelcli.errors import ConfigError, UsageError
from kernelcli.spec import load_config

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
        "output": {"run_dir": "run"},
    }
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def read_kernels(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in f.keys()}


# -- configuration (no Ray needed) ---------------------------------------------------

def test_executor_and_address_default_to_local_and_none(tmp_path):
    cfg = load_config(write_case(tmp_path))
    assert (cfg.compute.executor, cfg.compute.address) == ("local", None)


def test_executor_ray_with_an_address_is_read(tmp_path):
    cfg = load_config(write_case(tmp_path, compute={"executor": "Ray",
                                                    "address": "head:6379"}))
    assert (cfg.compute.executor, cfg.compute.address) == ("ray", "head:6379")


@pytest.mark.parametrize("compute, message", [
    ({"executor": "spark"},
     "compute.executor: 'spark' is not an executor; expected one of local, ray"),
    ({"address": "head:6379"},
     "compute.address: 'head:6379' is given but compute.executor is local; expected "
     "executor: ray as well, or no address"),
    ({"executor": "ray", "address": 6379}, "compute.address: 6379 is not a string"),
])
def test_bad_executor_settings_are_config_errors(tmp_path, compute, message):
    with pytest.raises(ConfigError) as info:
        load_config(write_case(tmp_path, compute=compute))
    assert str(info.value).startswith(f"r.yaml: {message}")


def test_without_ray_the_ray_executor_says_how_to_install_it(tmp_path, monkeypatch):
    from kernelcli.run import compute

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    cfg = write_case(tmp_path)
    with pytest.raises(ConfigError) as info:
        compute(cfg, executor="ray")
    assert "pip install 'kernelcli[ray]'" in str(info.value)
    assert not (tmp_path / "run").exists()


def test_address_without_the_ray_executor_is_a_usage_error(tmp_path):
    from kernelcli.run import compute

    with pytest.raises(UsageError, match="address=: 'x:1' is given but the executor is local"):
        compute(write_case(tmp_path), address="x:1")


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
    """Ray worker processes of the cluster that are running a kernelcli tile task now."""
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
        if title.startswith("ray::kernelcli_tile"):
            out.append(p)
    return out


@pytest.mark.slow
def test_ray_run_survives_a_killed_worker_and_is_bit_identical_to_a_local_run(tmp_path,
                                                                             ray_cluster):
    psutil = ray_cluster["psutil"]
    cfg = write_case(tmp_path)
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
