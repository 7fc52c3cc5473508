"""A local Ray instance that kernelcli starts (``executor: ray`` without an address)
listens on 127.0.0.1 only: while its actors compute, no socket of the driver or of any
process Ray started listens on another address of the host. By default Ray's servers
listen on every address (``::``), reachable from the network."""

from __future__ import annotations

import ipaddress
import os
import tempfile

import pytest

from test_ray import NEEDS_RAY, read_kernels, write_case

pytestmark = pytest.mark.usefixtures("keep_process_state")


def listening(psutil) -> set:
    """``(process, address, port)`` of every listening socket of this process and its
    descendants (Ray's GCS, raylet, agents and workers of a local instance)."""
    me = psutil.Process()
    out = set()
    for p in [me] + me.children(recursive=True):
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((p.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or addr).is_loopback


@pytest.mark.slow
def test_a_local_ray_instance_listens_on_loopback_only(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason=NEEDS_RAY)
    psutil = pytest.importorskip("psutil", reason="psutil lists the Ray processes' sockets")
    from ray._private import ray_constants

    from kernelcli.run import compute

    for key in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.delenv(key, raising=False)
    ray_tmp = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # short: Ray's socket paths
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    assert ray_constants.ENABLE_RAY_CLUSTER  # Linux: Ray would take the host's address
    seen = []

    def look(progress):
        if not seen:
            seen.append(listening(psutil))

    cfg = write_case(tmp_path, n=24, compute={"executor": "ray", "devices": 1})
    try:
        out = compute(cfg, run_dir=tmp_path / "run", progress=look)
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert out.result is not None and "nngp" in read_kernels(tmp_path / "run" / "kernels.h5")
    assert ray_constants.ENABLE_RAY_CLUSTER  # Ray's switch as it was
    (sockets,) = seen
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # Ray's own servers were seen
    assert [s for s in sockets if not is_loopback(s[1])] == []
