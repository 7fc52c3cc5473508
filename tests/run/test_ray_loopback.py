"""A local Ray instance that kernelcli starts (``executor: ray`` without an address)
listens on 127.0.0.1 only: while its actors compute, no socket of the driver or of any
process Ray started listens on another address of the host. By default Ray's servers
listen on every address (``::``), reachable from the network.

The run is a child process of its own, with its own home: a new local instance of Ray
2.60 turns on token authentication for the process that starts it (its environment
and cached config) and writes ``~/.ray/auth_token``, after which the other Ray tests'
cluster refuses their drivers."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest
from test_ray import NEEDS_RAY, write_case

from helpers_cli import cli_env

_CHILD = r"""
import ipaddress, json, sys
import psutil
from ray._private import ray_constants
from kernelcli.run import compute

def listening():
    me = psutil.Process()
    out = set()
    for p in [me] + me.children(recursive=True):
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((p.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(out)

seen = []
switch = ray_constants.ENABLE_RAY_CLUSTER  # Linux: Ray would take the host's address
out = compute(sys.argv[1], run_dir=sys.argv[2],
              progress=lambda p: seen or seen.append(listening()))
print(json.dumps({"sockets": seen[0], "switch": [switch, ray_constants.ENABLE_RAY_CLUSTER],
                  "result": out.result}))
"""


def is_loopback(ip: str) -> bool:
    import ipaddress

    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or addr).is_loopback


@pytest.mark.slow
def test_a_local_ray_instance_listens_on_loopback_only(tmp_path):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    pytest.importorskip("psutil", reason="psutil lists the Ray processes' sockets")
    cfg = write_case(tmp_path, n=24, compute={"executor": "ray", "devices": 1})
    home = tmp_path / "home"
    home.mkdir()
    with tempfile.TemporaryDirectory(prefix="kr", dir="/tmp") as ray_tmp:  # short paths
        env = cli_env(HOME=home, RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED=0)
        for key in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE"):
            env.pop(key, None)
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(cfg), str(tmp_path / "run")],
                              env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["result"] == str(tmp_path / "run" / "kernels.h5")
    assert out["switch"] == [True, True]  # Ray's switch on, and as it was after the run
    sockets = [tuple(s) for s in out["sockets"]]
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # Ray's own servers were seen
    assert [s for s in sockets if not is_loopback(s[1])] == []
