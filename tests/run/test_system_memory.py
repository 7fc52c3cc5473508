"""``memory: auto`` under a scheduler: the memory a process can take is the smaller of the
host's MemAvailable and what its cgroup's limit leaves (cgroup v2 ``memory.max`` less
``memory.current``, v1 ``memory.limit_in_bytes`` less ``memory.usage_in_bytes``, over the
cgroup and its ancestors). The files are laid out in tmp folders as the kernel lays them
out; where this machine allows creating a real cgroup, a real process is confined in one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from helpers_cli import KERNELCLI, cli_env, images, invoke, write_config

# the readers of /proc and cgroup files, given files made here
from kernelcli._system import available_ram_bytes, cgroup_memory_available, memory_available

GiB = 1 << 30
V1_UNLIMITED = 0x7FFFFFFFFFFFF000  # what cgroup v1 writes for "no limit" (4 KiB pages)

pytestmark = pytest.mark.usefixtures("keep_process_state")


def meminfo(tmp_path: Path, available: int) -> str:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {64 * GiB // 1024} kB\nMemFree:        1024 kB\n"
                    f"MemAvailable:   {available // 1024} kB\n")
    return str(path)


def proc_cgroup(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "cgroup"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def cgroup_dir(root: Path, rel: str, files: dict) -> Path:
    folder = root / rel.strip("/") if rel.strip("/") else root
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (folder / name).write_text(f"{value}\n")
    return folder


def v2_root(tmp_path: Path) -> Path:
    """A unified (v2 only) hierarchy: ``cgroup.controllers`` at its root."""
    root = tmp_path / "sys" / "fs" / "cgroup"
    cgroup_dir(root, "", {"cgroup.controllers": "cpuset cpu io memory pids",
                          "memory.stat": "anon 0"})  # the root cgroup has no memory.max
    return root


def test_a_v2_limit_below_memavailable_binds_and_is_named(tmp_path):
    root = v2_root(tmp_path)
    job = cgroup_dir(root, "system.slice/slurm/job_42",
                     {"memory.max": 4 * GiB, "memory.current": GiB})
    got = memory_available(meminfo(tmp_path, 32 * GiB),
                           proc_cgroup(tmp_path, "0::/system.slice/slurm/job_42"), str(root))
    assert got == (3 * GiB, f"cgroup {job}")


def test_a_tighter_parent_binds_its_children(tmp_path):
    root = v2_root(tmp_path)
    parent = cgroup_dir(root, "kubepods/pod1", {"memory.max": 2 * GiB,
                                                 "memory.current": GiB + GiB // 2})
    cgroup_dir(root, "kubepods/pod1/ctr", {"memory.max": "max", "memory.current": GiB})
    cgroup_dir(root, "kubepods", {"memory.max": "max", "memory.current": 5 * GiB})
    got = memory_available(meminfo(tmp_path, 32 * GiB),
                           proc_cgroup(tmp_path, "0::/kubepods/pod1/ctr"), str(root))
    assert got == (GiB // 2, f"cgroup {parent}")


def test_max_everywhere_leaves_memavailable(tmp_path):
    root = v2_root(tmp_path)
    cgroup_dir(root, "user.slice", {"memory.max": "max", "memory.current": GiB})
    cgroup = proc_cgroup(tmp_path, "0::/user.slice")
    assert cgroup_memory_available(cgroup, str(root)) is None
    assert memory_available(meminfo(tmp_path, 7 * GiB), cgroup, str(root)) == (
        7 * GiB, "MemAvailable")


def test_a_limit_above_memavailable_leaves_memavailable(tmp_path):
    root = v2_root(tmp_path)
    job = cgroup_dir(root, "job", {"memory.max": 64 * GiB, "memory.current": GiB})
    cgroup = proc_cgroup(tmp_path, "0::/job")
    assert cgroup_memory_available(cgroup, str(root)) == (63 * GiB, str(job))
    assert memory_available(meminfo(tmp_path, 8 * GiB), cgroup, str(root)) == (
        8 * GiB, "MemAvailable")


def test_usage_above_the_limit_leaves_nothing(tmp_path):
    root = v2_root(tmp_path)
    job = cgroup_dir(root, "job", {"memory.max": GiB, "memory.current": GiB + 4096})
    got = memory_available(meminfo(tmp_path, 8 * GiB), proc_cgroup(tmp_path, "0::/job"),
                           str(root))
    assert got == (0, f"cgroup {job}")


def test_cgroup_v1_limit_and_usage_with_a_hybrid_unified_hierarchy(tmp_path):
    """Hybrid: v1 controllers under cgroup_fs/<controller>, a unified hierarchy without
    the memory controller at cgroup_fs/unified (as on this project's CI machines)."""
    root = tmp_path / "sys" / "fs" / "cgroup"
    cgroup_dir(root, "unified", {"cgroup.controllers": ""})
    cgroup_dir(root, "memory", {"memory.limit_in_bytes": V1_UNLIMITED,
                                "memory.usage_in_bytes": 9 * GiB})
    cgroup_dir(root, "memory/slurm", {"memory.limit_in_bytes": V1_UNLIMITED,
                                      "memory.usage_in_bytes": 3 * GiB})
    job = cgroup_dir(root, "memory/slurm/uid_0/job_7",
                     {"memory.limit_in_bytes": 6 * GiB, "memory.usage_in_bytes": 2 * GiB})
    cgroup = proc_cgroup(tmp_path, "12:pids:/slurm/uid_0/job_7", "4:memory:/slurm/uid_0/job_7",
                         "1:name=systemd:/", "0::/")
    assert memory_available(meminfo(tmp_path, 20 * GiB), cgroup, str(root)) == (
        4 * GiB, f"cgroup {job}")


def test_cgroup_v1_unlimited_is_no_limit(tmp_path):
    root = tmp_path / "cg"
    cgroup_dir(root, "memory/docker/abc", {"memory.limit_in_bytes": V1_UNLIMITED,
                                           "memory.usage_in_bytes": GiB})
    cgroup = proc_cgroup(tmp_path, "9:memory:/docker/abc")
    assert cgroup_memory_available(cgroup, str(root)) is None


def test_a_container_sees_its_own_cgroup_at_the_mount_point(tmp_path):
    """Without a cgroup namespace /proc/self/cgroup names the host's path, but the
    container's mount holds only its own subtree: the limit is found at the mount."""
    root = tmp_path / "cg"
    cgroup_dir(root, "", {"cgroup.controllers": "memory"})
    cgroup_dir(root, "", {"memory.max": 3 * GiB, "memory.current": GiB})
    cgroup = proc_cgroup(tmp_path, "0::/docker/0123456789abcdef")
    assert memory_available(meminfo(tmp_path, 32 * GiB), cgroup, str(root)) == (
        2 * GiB, f"cgroup {root}")


@pytest.mark.parametrize("text", ["", "garbage\n", "0::/gone\n"])
def test_no_readable_cgroup_leaves_memavailable(tmp_path, text):
    cgroup = tmp_path / "cgroup"
    cgroup.write_text(text)
    assert memory_available(meminfo(tmp_path, 5 * GiB), str(cgroup),
                            str(tmp_path / "nothing")) == (5 * GiB, "MemAvailable")
    assert memory_available(meminfo(tmp_path, 5 * GiB), str(tmp_path / "no-such-file"),
                            str(tmp_path / "nothing")) == (5 * GiB, "MemAvailable")


def test_available_ram_bytes_is_the_same_figure(tmp_path):
    root = v2_root(tmp_path)
    cgroup_dir(root, "job", {"memory.max": 2 * GiB, "memory.current": 0})
    args = (meminfo(tmp_path, 32 * GiB), proc_cgroup(tmp_path, "0::/job"), str(root))
    assert available_ram_bytes(*args) == memory_available(*args)[0] == 2 * GiB


# --------------------------------------------------------------------------- a real cgroup

def _own_memory_cgroup():
    """``(folder, version)`` of this process's own memory cgroup, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    fs = Path("/sys/fs/cgroup")
    for line in lines:
        ident, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = fs / "memory" / path.lstrip("/")
            if (folder / "memory.limit_in_bytes").is_file():
                return folder, 1
        if ident == "0" and controllers == "" and (fs / "cgroup.controllers").is_file():
            folder = fs / path.lstrip("/")
            try:
                if "memory" in (folder / "cgroup.subtree_control").read_text().split():
                    return folder, 2
            except OSError:
                pass
    return None


@pytest.fixture
def real_cgroup():
    """A new memory cgroup under this process's own, limited to 1 GiB, and the shell
    prefix that starts a command inside it; skipped where cgroups cannot be made."""
    own = _own_memory_cgroup()
    if own is None:
        pytest.skip("no writable memory cgroup hierarchy here")
    parent, version = own
    folder = parent / f"kernelcli-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"creating a cgroup is not permitted here ({exc.strerror})")
    try:
        limit = "memory.limit_in_bytes" if version == 1 else "memory.max"
        try:
            (folder / limit).write_text(str(GiB))
        except OSError as exc:
            pytest.skip(f"setting a cgroup memory limit is not permitted ({exc.strerror})")
        yield folder
    finally:
        for _ in range(50):  # the cgroup goes once its last process has exited
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def run_in(folder: Path, *argv, env=None) -> subprocess.CompletedProcess:
    """Run ``argv`` as a process that first moves itself into the cgroup ``folder``."""
    script = f'echo $$ > "{folder}/cgroup.procs" && exec "$@"'
    return subprocess.run(["sh", "-c", script, "sh", *map(str, argv)], capture_output=True,
                          text=True, env=env or cli_env(), timeout=300)


def test_a_process_in_a_limited_cgroup_plans_by_its_limit(real_cgroup):
    code = ("import json; from kernelcli._system import memory_available; "
            "from kernelcli.solvers import choose_solver; "
            "print(json.dumps([*memory_available(), choose_solver(10000)]))")
    out = run_in(real_cgroup, sys.executable, "-c", code)
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip("moving a process into a cgroup is not permitted here")
    assert out.returncode == 0, out.stderr
    available, source, solver = json.loads(out.stdout)
    assert source == f"cgroup {real_cgroup}"
    assert 0 < available < GiB
    # a 10,000 x 10,000 Cholesky solve (1.6 GB) fits the host but not the cgroup
    assert solver == "cg"


@pytest.mark.slow
def test_estimate_in_a_limited_cgroup_names_it(real_cgroup, tmp_path):
    np.save(tmp_path / "x.npy", images(6, seed=1))
    cfg = write_config(tmp_path, "cg", compute={"block": 4, "memory": "auto"})
    out = run_in(real_cgroup, KERNELCLI, "estimate", cfg, "--memory", "--json")
    if out.returncode != 0 and "Permission denied" in out.stderr:
        pytest.skip("moving a process into a cgroup is not permitted here")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["memory_source"] == f"cgroup {real_cgroup}"
    assert plan["memory_budget_bytes"] * plan["devices"] < GiB
    text = run_in(real_cgroup, KERNELCLI, "estimate", cfg, "--memory")
    assert (f"  {'memory budget from':<30} cgroup {real_cgroup} (its limit less its "
            f"usage, below MemAvailable), less headroom") in text.stdout.splitlines()


# --------------------------------------------------------------------------- estimate

def test_estimate_says_what_bound_the_budget(tmp_path):
    np.save(tmp_path / "x.npy", images(6, seed=2))
    auto = write_config(tmp_path, "auto", compute={"block": 4})
    out = json.loads(invoke("estimate", auto, "--memory", "--json").stdout)
    assert out["memory_source"] == memory_available()[1]
    given = write_config(tmp_path, "given", compute={"block": 4, "memory": "2GiB"})
    result = invoke("estimate", given, "--memory")
    assert result.exit_code == 0, result.stderr
    assert f"  {'memory budget from':<30} compute.memory of the configuration" in (
        result.stdout.splitlines())
    assert json.loads(invoke("estimate", given, "--memory", "--json").stdout)[
        "memory_source"] == "compute.memory"
