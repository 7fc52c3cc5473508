"""The Ray executor under faults, on a real multi-node Ray cluster on loopback.

A child process of its own runs Ray's test helper ``ray.cluster_utils.Cluster``: a head
and one more node, one CPU each, every address 127.0.0.1, Ray's health checks every
half second (a dead node is declared dead within about 2 s rather than 15). It has a
home of its own, as in test_ray_loopback.py (a cluster started in a process turns on
token authentication for that process and writes ``~/.ray/auth_token``). The test
talks to it over its stdin and stdout: ``kill`` SIGKILLs every process of the second
node at once (raylet, object store, workers), as the loss of its machine would; ``add``
starts another; ``hold`` / ``release`` take CPUs from kernelcli with actors of the
child's own. The runs are ``kernelcli`` processes, the tile files (no packs) their
observable progress, and each result is compared bit for bit with a local run of the
same configuration and plan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_ray import KERNELCLI, NEEDS_RAY, SQRT2, _kill_tree, read_kernels
from test_ray_loopback import is_loopback

from helpers_cli import cli_env

CHILD = Path(__file__).parents[1] / "helpers_ray_cluster.py"  # the cluster's process

N, BLOCK = 48, 4  # 12 row blocks of 4 rows: 78 tiles, each a few milliseconds


class Cluster:
    """The child process's cluster, driven by its commands."""

    def __init__(self, proc, address: str, env: dict):
        self.proc, self.address, self.env = proc, address, env

    def cmd(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        while True:  # Ray may print a line of its own on stdout
            text = self.proc.stdout.readline()
            if not text:
                raise AssertionError(f"the cluster's process ended on {line!r}")
            if text.startswith("{"):
                return json.loads(text)

    def driver(self, *args, wait: float = 60) -> subprocess.Popen:
        """``kernelcli ARGS --executor ray --address ADDRESS``, running."""
        env = dict(self.env, KERNELCLI_RAY_WAIT_SECONDS=str(wait))
        return subprocess.Popen([KERNELCLI, *map(str, args), "--executor", "ray", "--address",
                                 self.address], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    psutil = pytest.importorskip("psutil", reason="psutil kills a node's processes")
    home = tmp_path_factory.mktemp("home")
    ray_tmp = tempfile.mkdtemp(prefix="kf", dir="/tmp")  # short: Ray's socket paths
    env = cli_env(HOME=home, RAY_TMPDIR=ray_tmp, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0,
                  RAY_USAGE_STATS_ENABLED=0, KERNELCLI_PACK_TILES=0)
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(key, None)
    proc = subprocess.Popen([sys.executable, str(CHILD)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        if not first.startswith("{"):
            pytest.fail(f"the cluster did not start: {first!r}")
        yield Cluster(proc, json.loads(first)["address"], env)
    finally:
        try:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        _kill_tree(psutil, proc.pid)
        shutil.rmtree(ray_tmp, ignore_errors=True)


class Case:
    def __init__(self, config: Path, local: Path):
        self.config, self.local = config, local
        self.want = read_kernels(local / "kernels.h5")
        self.plan = json.loads((local / "manifest.json").read_text())["plan"]
        self.blocks = self.plan["blocks_total"]


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Case:
    """A small network on 8x8 images, and its local run."""
    folder = tmp_path_factory.mktemp("case")
    x = np.random.default_rng(3).standard_normal((N, 8, 8, 1)).astype(np.float32)
    np.save(folder / "x.npy", x)
    doc = {
        "name": "f",
        "data": {"x1": "x.npy"},
        "architecture": {"layers": [
            {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}},
            "relu", "global_avg_pool", {"dense": {"W_std": 1.0, "b_std": 0.0}}]},
        "compute": {"block": BLOCK},
        "output": {"run_dir": "run", "keep_tiles": True},
    }
    config = folder / "f.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    local = subprocess.run([KERNELCLI, "compute", str(config), "--run-dir",
                            str(folder / "local"), "--quiet"], env=cli_env(),
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    return Case(config, folder / "local")


def tiles(run_dir: Path) -> int:
    try:
        return sum(1 for name in os.listdir(run_dir / "tiles") if name.endswith(".h5"))
    except FileNotFoundError:
        return 0


def wait_for(what, timeout: float, step: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(step)
    return what()


def ray_record(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "shards" / "ray.json").read_text())
    except (OSError, ValueError):
        return {}


def assert_local_bits(case: Case, run_dir: Path) -> None:
    """The run's result is the local run's, bit for bit, from the same plan."""
    assert json.loads((run_dir / "manifest.json").read_text())["plan"] == case.plan
    got = read_kernels(run_dir / "kernels.h5")
    assert sorted(got) == sorted(case.want) == ["nngp", "ntk"]
    for kind in case.want:
        assert np.array_equal(got[kind], case.want[kind]), kind


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"no end within {timeout} s:\n{err[-3000:]}") from None


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_node_killed_at_a_random_moment_leaves_a_bit_identical_result(cluster, case,
                                                                         tmp_path, seed):
    """Whatever the lost node's actor was doing (starting, computing, idle), the run
    finishes on what is left, exit 0, with the local run's bits."""
    at = int(np.random.default_rng(seed).integers(case.blocks // 10, case.blocks * 4 // 5))
    run = tmp_path / "ray"
    driver = cluster.driver("compute", case.config, "--run-dir", run)
    try:
        assert wait_for(lambda: tiles(run) >= at or driver.poll() is not None, 120)
        assert driver.poll() is None, "the run ended before the node was killed"
        cluster.cmd("kill")
        out, err = finish(driver)
    finally:
        cluster.cmd("add")
    assert driver.returncode == 0, err[-3000:]
    assert_local_bits(case, run)
    record = ray_record(run)  # written when the driver saw the loss (it may not have)
    assert record.get("running") in (None, False)
    if record.get("requeued"):
        assert record["actors_lost"] >= 1 and "requeued" in err


@pytest.mark.slow
def test_a_node_lost_mid_tile_sends_its_blocks_to_a_new_actor_and_status_shows_it(cluster,
                                                                                  case,
                                                                                  tmp_path):
    """The run's only computing actor is on the node that dies in the middle of a tile:
    its blocks go back to the queue, the progress line and ``status`` say what is lost
    and what the run waits for, and once the cluster has room again a new actor takes
    them. Every socket of the cluster is on loopback meanwhile."""
    cluster.cmd("hold head")  # the head's CPU taken: the first actor goes to the other node
    run = tmp_path / "ray"
    driver = cluster.driver("compute", case.config, "--run-dir", run)
    try:
        assert wait_for(lambda: tiles(run) >= 3 or driver.poll() is not None, 120)
        sockets = cluster.cmd("sockets")["sockets"]
        assert {"gcs_server", "raylet"} <= {name for name, _ in sockets}, sockets
        assert [s for s in sockets if not is_loopback(s[1])] == []
        assert cluster.cmd("kill busy")["busy"], "the node's actor was never seen computing"
        record = wait_for(lambda: ray_record(run).get("nodes_lost") and ray_record(run), 60,
                          step=0.1)
        assert record["running"] is True and record["placed"] == 0, record
        assert record["actors_lost"] == 1 and record["requeued"] >= 1, record
        status = subprocess.run([KERNELCLI, "status", str(run)], capture_output=True,
                                text=True, timeout=60)
        line = [ln for ln in status.stdout.splitlines() if ln.startswith("ray: ")]
        assert line and "1 node lost (127.0.0.1 (node " in line[0], status.stdout
        assert f"{record['requeued']} block" in line[0] and "running" in line[0], line
        status = json.loads(subprocess.run([KERNELCLI, "status", str(run), "--json"],
                                           capture_output=True, text=True,
                                           timeout=60).stdout)
        assert status["ray"]["nodes_lost"] == record["nodes_lost"]
        assert not status["finished"]
        # the replacement waits (no CPU free) past the pool's grace before the progress
        # line says so: released earlier, it would be placed with nothing to say
        assert wait_for(lambda: ray_record(run).get("waiting"), 60, step=0.1), ray_record(run)
        cluster.cmd("release")  # room again, on the head: a new actor takes the blocks
        out, err = finish(driver)
    finally:
        cluster.cmd("release")
        cluster.cmd("add")
    assert driver.returncode == 0, err[-3000:]
    assert_local_bits(case, run)
    assert re.search(r"waiting for [12] actors? \(cluster has \d+ CPUs? free\)", err), err
    assert "1 node lost, " in err and " requeued" in err, err[-3000:]
    final = ray_record(run)
    assert final["running"] is False and final["requeued"] == record["requeued"]


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["a node and the driver", "the driver"])
def test_a_resume_right_after_a_loss_finishes_or_says_why_within_its_bound(cluster, case,
                                                                          tmp_path, lost):
    """The driver SIGKILLed (with a node, or alone) halfway, and ``resume --executor
    ray`` started at once on what is left: while Ray has not yet declared the dead node
    (or the dead driver's actors) gone, the resume may wait, but only within its bound
    (KERNELCLI_RAY_WAIT_SECONDS), and ends with the local run's bits or one line."""
    bound = 20
    run = tmp_path / "ray"
    driver = cluster.driver("compute", case.config, "--run-dir", run)
    node = lost != "the driver"
    try:
        assert wait_for(lambda: tiles(run) >= case.blocks // 2 or driver.poll() is not None,
                        120)
        assert driver.poll() is None, "the run ended before it was killed"
        if node:
            cluster.cmd("kill")
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        t0 = time.monotonic()
        resume = cluster.driver("resume", run, wait=bound)
        out, err = finish(resume, timeout=bound + 120)
        seconds = time.monotonic() - t0
    finally:
        if node:
            cluster.cmd("add")
    assert seconds < bound + 60, (seconds, err[-3000:])  # the bound, and starting up
    if resume.returncode == 0:
        assert_local_bits(case, run)
    else:
        assert resume.returncode == 1, err[-3000:]
        errors = [ln for ln in err.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and "the Ray cluster placed 0 of the" in errors[0], err


@pytest.mark.slow
def test_a_cluster_without_room_fails_with_one_line_and_with_room_for_one_actor_runs(
        cluster, case, tmp_path):
    """Every CPU taken: the run says what it waits for, then exits 1 within its bound
    with one line naming what the cluster lacks. One CPU taken: the run computes on the
    one actor it can place (it planned two), with the local run's bits."""
    bound = 6
    cluster.cmd("hold 2")
    try:
        t0 = time.monotonic()
        out, err = finish(cluster.driver("compute", case.config, "--run-dir",
                                         tmp_path / "full", wait=bound), timeout=120)
        seconds = time.monotonic() - t0
    finally:
        cluster.cmd("release")
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), err
    assert "f: waiting for 1 actor (cluster has 0 CPUs free)" in lines, err
    assert lines[-1] == (
        f"Error: the Ray cluster placed 0 of the 2 kernel actors the run asks for within "
        f"{bound} s: each needs 1 CPU, and the cluster has 0 CPUs free of 2 on 2 live nodes; "
        f"add nodes or free resources (or raise KERNELCLI_RAY_WAIT_SECONDS) and run the "
        f"command again; completed tiles are kept"), err
    assert seconds < bound + 45, seconds

    cluster.cmd("hold 1")
    try:
        driver = cluster.driver("compute", case.config, "--run-dir", tmp_path / "one")
        out, err = finish(driver)
    finally:
        cluster.cmd("release")
    assert driver.returncode == 0, err[-3000:]
    assert_local_bits(case, tmp_path / "one")
    record = ray_record(tmp_path / "one")
    assert record.get("placed", 1) == 1 and not record.get("actors_lost"), record
