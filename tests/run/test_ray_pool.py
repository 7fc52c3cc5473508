"""The Ray executor's actor pool (kernelcli/pipeline/_ray_pool.py) on a real local Ray
cluster (test_ray.py's: 2 CPUs on 127.0.0.1), with plain actors that need no JAX: a lost
actor's calls go to the others and a call lost with four actors fails the run naming
it; an actor that cannot be placed fails the run with one line within the bound, one
that cannot start with its cause. The runs of kernelcli on a cluster that loses nodes
are in test_ray_faults.py.
"""

from __future__ import annotations

import os
import time

import pytest
import test_ray

# test_ray.py's fixtures: its cluster (one of this module's own), and this process its driver
ray_cluster, ray_driver = test_ray.ray_cluster, test_ray.ray_driver


def _pool_actor(ray, **options):
    @ray.remote(**options)
    class Worker:
        def __init__(self, fail: bool = False):
            if fail:
                raise ValueError("no kernel here")

        def where(self):
            return ray.get_runtime_context().get_node_id(), "127.0.0.1"

        def work(self, i, die=()):
            if i in die:
                os._exit(1)  # the process dies in the middle of the call, as with its node
            time.sleep(0.05)
            return i * i

    return Worker


@pytest.mark.parametrize("lose", ["one call's actor", "every actor that computes item 3"])
def test_a_lost_actors_calls_go_to_the_others_and_a_block_lost_four_times_fails(ray_driver,
                                                                               lose):
    import ray

    from kernelcli.errors import ComputeError
    from kernelcli.pipeline._ray import _connect
    from kernelcli.pipeline._ray_pool import MAX_RETRIES, ActorPool

    _connect(ray, ray_driver)
    try:
        worker = _pool_actor(ray, num_cpus=1, max_restarts=0, max_task_retries=0)
        pool = ActorPool(ray, worker.remote, 2, "CPU", wait=60)
        pool.grow(2)
        states = []
        pool.watch = states.append
        die = {3} if lose != "one call's actor" else set()
        killed = []

        def submit(actor, i):
            if i == 5 and not killed and not die:  # one actor killed with a call on it
                ref = actor.work.remote(i)
                killed.append(actor)
                ray.kill(actor)
                return ref
            return actor.work.remote(i, die)

        items = range(12)
        if die:
            with pytest.raises(ComputeError, match=rf"^item 3 was lost with {MAX_RETRIES + 1} "
                                                   r"kernel actors on the Ray cluster"):
                dict(pool.run(items, submit, name=lambda i: f"item {i}"))
            # one more when the first actor's answer to the call before item 3 was lost
            # with it: that loss counts against that call (the oldest not answered); item
            # 3, sent again alone, counts each of its own
            assert MAX_RETRIES + 1 <= len(pool.lost) <= MAX_RETRIES + 2
        else:
            got = dict(pool.run(items, submit, name=lambda i: f"item {i}"))
            assert got == {i: i * i for i in items}  # every call answered once
            assert len(pool.lost) == 1 and pool.requeued >= 1
            assert states[-1].actors_lost == 1 and "1 actor lost" in states[-1].note
        pool.close()
    finally:
        ray.shutdown()


def test_a_pool_that_places_no_actor_fails_with_one_line_within_its_bound(ray_driver):
    import ray

    from kernelcli.errors import ComputeError
    from kernelcli.pipeline._ray import _connect
    from kernelcli.pipeline._ray_pool import ActorPool

    _connect(ray, ray_driver)
    try:
        big = _pool_actor(ray, num_cpus=64)  # more than the cluster has
        pool = ActorPool(ray, big.remote, 3, "CPU", wait=1.5)
        pool.grow(1)
        t0 = time.monotonic()
        with pytest.raises(ComputeError) as exc:
            pool.call("where")
        assert time.monotonic() - t0 < 10
        text = str(exc.value)
        assert "\n" not in text and text.startswith(
            "the Ray cluster placed 0 of the 3 kernel actors the run asks for within 1.5 s: "
            "each needs 1 CPU, and the cluster has "), text
        assert text.endswith(" CPUs free of 2 on 1 live node; add nodes or free resources (or "
                             "raise KERNELCLI_RAY_WAIT_SECONDS) and run the command again; "
                             "completed tiles are kept"), text
        pool.close()

        broken = _pool_actor(ray, num_cpus=1)
        pool = ActorPool(ray, lambda: broken.remote(True), 1, "CPU", wait=60)
        pool.grow(1)
        with pytest.raises(ComputeError, match="^a kernel actor could not start on the Ray "
                                               "cluster: .*no kernel here"):
            pool.call("where")
        pool.close()
    finally:
        ray.shutdown()
