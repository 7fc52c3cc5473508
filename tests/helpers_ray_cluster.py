"""A Ray cluster of two nodes on 127.0.0.1 in one machine, driven over stdin/stdout:
the cluster that tests/run/test_ray_faults.py and bench/ray_node_loss.py run kernelcli on.

Run as a process of its own (``python tests/helpers_ray_cluster.py``, with
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` so that Ray keeps 127.0.0.1, a short
``RAY_TMPDIR`` and a ``HOME`` of its own: a cluster started in a process turns on
Ray's token authentication for that process and writes ``~/.ray/auth_token``). It
starts Ray's test helper ``ray.cluster_utils.Cluster``: a head and one more node, one
CPU each, Ray's health checks every half second (a dead node is declared dead within
about 2 s rather than 15; ``--ray-health-checks``: Ray's own), and prints
``{"address": ...}``. Then, one command a line,
each answered by one JSON line (``done`` and what it found):

* ``kill`` / ``kill busy``: SIGKILL every process of the oldest added node at once
  (raylet, object store, workers), as the loss of its machine would; ``busy``: only
  once its kernel actor is seen in the middle of a tile (``busy``: whether it was);
* ``add``: start another node, and wait until a node killed before is declared dead;
* ``hold N`` / ``hold head``: take N CPUs (or the head's) with actors of this process's
  own; ``release``: give them back;
* ``sockets``: the listening sockets of this process and every process it started;
* ``quit``.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import psutil
import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ARGS = dict(num_cpus=1, num_gpus=0, node_ip_address="127.0.0.1", object_store_memory=80 << 20)


def tree(node) -> list:
    """Every process a node's raylet started (its workers among them)."""
    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    return psutil.Process(raylet).children(recursive=True)


def computing(node) -> bool:
    """Whether the node's kernel actor is in the middle of a tile (Ray titles a worker
    by the call it runs)."""
    for p in tree(node):
        try:
            if " ".join(p.cmdline()).startswith("ray::KernelWorker.tile"):
                return True
        except psutil.Error:
            pass
    return False


def kill(cluster, node, busy: bool) -> bool:
    deadline = time.monotonic() + 60
    seen = False
    while busy and not seen and time.monotonic() < deadline:
        seen = computing(node)
    for p in tree(node):
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    cluster.remove_node(node, allow_graceful=False)  # SIGKILLs the raylet and the rest
    return seen


def listening() -> list:
    me = psutil.Process()
    out = set()
    for p in [me] + me.children(recursive=True):
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((p.name(), c.laddr.ip))
        except psutil.Error:
            continue
    return sorted(out)


@ray.remote(num_cpus=1)
class Hold:
    def ready(self) -> bool:
        return True


def main() -> None:
    quick = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        ARGS, include_dashboard=False,
        _system_config={} if "--ray-health-checks" in sys.argv else quick))
    nodes, held = [cluster.add_node(**ARGS)], []
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    print(json.dumps({"address": cluster.address}), flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        out = {}
        if cmd == "add":
            nodes.append(cluster.add_node(**ARGS))
            cluster.wait_for_nodes(timeout=60)  # a node killed before: declared dead
        elif cmd == "kill":
            out["busy"] = kill(cluster, nodes.pop(0), arg == ["busy"])
        elif cmd == "hold":
            if arg == ["head"]:
                head = NodeAffinitySchedulingStrategy(cluster.head_node.node_id, soft=False)
                new = [Hold.options(scheduling_strategy=head).remote()]
            else:
                new = [Hold.remote() for _ in range(int(arg[0]))]
            ray.get([h.ready.remote() for h in new], timeout=60)
            held.extend(new)
        elif cmd == "release":
            for h in held:
                ray.kill(h)
            held.clear()
        elif cmd == "sockets":
            out["sockets"] = listening()
        elif cmd == "quit":
            break
        print(json.dumps(dict(out, done=cmd)), flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
