"""Compile once: on two (XLA host) devices, the mesh path (the accelerator engine's way:
one SPMD program over the devices, ``kernels/_programs.py``) compiles each program shape
once, the memory model's compilations included, and gives the per-device path's
values bit for bit; the per-device path (the cpu engine) compiles once per device and
shape, its memory model reusing the first device's executable. Compilations are
counted by JAX's own backend-compile events, in a subprocess (fresh caches)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    from jax import monitoring
    compiles = [0]

    def on_duration(name, secs, **kw):
        if name == "/jax/core/compile/backend_compile_duration":
            compiles[0] += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    import numpy as np
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.config import parse_architecture

    mesh_first = sys.argv[1] == "mesh"
    arch = parse_architecture({"layers": [
        {"conv": {"filter": [3, 3], "padding": "SAME", "b_std": 0.1}}, "relu",
        {"conv": {"filter": [3, 3], "padding": "SAME", "b_std": 0.1}}, "relu",
        "global_avg_pool", "dense"]})
    x = np.random.RandomState(0).rand(40, 6, 6, 1).astype(np.float32)
    i, j = np.tril_indices(40, -1)   # 780 pairs: 13 batches of 64, the last one padded
    devs = jax.local_devices()

    def run(mesh):
        kfn = build_kernel_fn(arch, (6, 6, 1))
        kfn.mesh_calls = mesh
        before = compiles[0]
        rows = 16  # 40 inputs: three per-device calls, or two mesh calls (one padded)
        kfn.compiled_memory(40, 40, 32, arguments=False)   # the planner's questions
        kfn.compiled_stats_memory(rows)
        s = kfn.stats(x, devs, batch=rows)
        v = kfn.pair_values(x, s, x, s, i, j, 32, devs)
        v2 = kfn.pair_values(x, s, x, s, i[:100], j[:100], 32, devs)  # same shapes again
        return compiles[0] - before, s, v, v2, rows

    first = run(mesh_first)
    second = run(not mesh_first)
    mesh, cpu = (first, second) if mesh_first else (second, first)
    same = (all(np.array_equal(a, b) for a, b in zip(mesh[1].variances, cpu[1].variances))
            and all(np.array_equal(mesh[1].diag[k], cpu[1].diag[k]) for k in cpu[1].diag)
            and all(np.array_equal(mesh[2][k], cpu[2][k]) for k in cpu[2])
            and all(np.array_equal(mesh[3][k], cpu[3][k]) for k in cpu[3]))
    print(json.dumps({"devices": len(devs), "compiles": first[0], "same": bool(same),
                      "stats_calls": -(-40 // first[4])}))
''')


def _run(script: str, *args: str) -> dict:
    """``script``'s last line of output, as JSON, from a fresh process (no XLA_FLAGS of
    the test process's, no compilation cache)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_mesh_path_compiles_each_program_once_and_gives_the_same_bits():
    got = _run(SCRIPT, "mesh")
    assert got["devices"] == 2 and got["same"]
    assert got["compiles"] == 2  # the pair program and the per-input program, once each


def test_the_per_device_path_compiles_per_device_and_the_memory_model_reuses_it():
    got = _run(SCRIPT, "cpu")
    assert got["devices"] == 2 and got["same"] and got["stats_calls"] >= 2
    # each program on each device that ran one of its calls (the pair program's 13
    # batches reach both devices; the three per-input calls may all go to one thread
    # when the machine is loaded), none for the memory model
    assert got["compiles"] in (3, 4)


def test_the_accelerator_engine_runs_on_the_mesh():
    from kernelcli.config import parse_architecture
    from kernelcli.kernels import build_kernel_fn

    kfn = build_kernel_fn(parse_architecture({"layers": ["dense", "relu", "dense"]}), (4,),
                          engine="accelerator")
    assert kfn._on_mesh(["d0", "d1"]) and not kfn._on_mesh(["d0"])


# JAX's backend compilations, one entry of ``compiles`` each (after ``import jax``)
COUNT_COMPILES = textwrap.dedent('''
    from jax import monitoring
    compiles = []

    def on_duration(name, secs, **kw):
        if name == "/jax/core/compile/backend_compile_duration":
            compiles.append(secs)

    monitoring.register_event_duration_secs_listener(on_duration)
''')


MATRIX_SCRIPT = textwrap.dedent('''
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
''') + COUNT_COMPILES + textwrap.dedent('''
    import numpy as np
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import kernel_matrix
    from kernelcli.pipeline import compute_streams
    from kernelcli.config import parse_architecture

    arch = parse_architecture({"layers": [
        {"conv": {"filter": [3, 3], "padding": "SAME"}}, "relu", "flatten", "dense"]})
    x = np.random.RandomState(0).rand(40, 6, 6, 1).astype(np.float32)
    devs = jax.local_devices()
    got = {}
    for name, where in (("two", devs), ("one", devs[:1]), ("second", devs[1:])):
        kfn = build_kernel_fn(arch, (6, 6, 1))
        before = len(compiles)
        out = kernel_matrix(kfn, x, devices=where, block=16, pair_batch=8)
        got[name] = (len(compiles) - before, out)
    accel = build_kernel_fn(arch, (6, 6, 1), engine="accelerator")
    print(json.dumps({
        "devices": len(devs), "compiles": {k: v[0] for k, v in got.items()},
        "same": all(np.array_equal(got["two"][1][k], got[o][1][k])
                    for o in ("one", "second") for k in got["two"][1]),
        "streams": [d.id for d in compute_streams(kfn, devs)],
        "accelerator_streams": [d.id for d in compute_streams(accel, devs)]}))
''')


def test_the_cpu_plan_on_two_host_devices_compiles_each_program_once():
    """``kernel_matrix`` (compute's route) on two host devices: both threads call the
    first device's programs (one compilation each: the per-input pass and the pair
    batch), and the matrix is the same bits as on either device alone."""
    got = _run(MATRIX_SCRIPT)
    assert got["devices"] == 2 and got["same"]
    # the second device alone: its own programs, and the planner's memory analysis
    # compiled for the first local device
    assert got["compiles"] == {"two": 2, "one": 2, "second": 3}
    assert got["streams"] == [0, 0] and got["accelerator_streams"] == [0, 1]


LIBRARY_SCRIPT = textwrap.dedent('''
    import json, os
    import jax
''') + COUNT_COMPILES + textwrap.dedent('''
    import numpy as np
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import kernel_matrix
    # the device count the CLI picks from the cores: set before jax starts, no public call
    from kernelcli.pipeline._devices import _cores, default_devices
    from kernelcli.config import parse_architecture

    arch = parse_architecture({"layers": [
        {"conv": {"filter": [3, 3], "padding": "SAME"}}, "relu", "flatten", "dense"]})
    x = np.random.RandomState(0).rand(40, 6, 6, 1).astype(np.float32)
    kfn = build_kernel_fn(arch, (6, 6, 1))
    streams = len(default_devices(kfn))
    out = kernel_matrix(kfn, x, block=16, pair_batch=8)
    first = len(compiles)
    alone = kernel_matrix(build_kernel_fn(arch, (6, 6, 1)), x, devices=jax.local_devices(),
                          block=16, pair_batch=8)
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    print(json.dumps({
        "devices": len(jax.local_devices()), "streams": streams, "cores": _cores(),
        "forced": len(default_devices(kfn)), "compiles": first,
        "accelerator": len(default_devices(build_kernel_fn(arch, (6, 6, 1),
                                                           engine="accelerator"))),
        "same": all(np.array_equal(out[k], alone[k]) for k in out)}))
''')


def test_the_library_on_one_host_device_runs_a_thread_per_core_with_the_same_bits():
    """Without ``configure_host_devices`` (jax's one CPU device, a neural-tangents
    user's process) ``kernel_matrix`` runs a thread per core on that device, with one
    compilation per program and the bits of one thread; a device count the user forces
    (``XLA_FLAGS``) is kept, and the accelerator engine keeps its devices."""
    got = _run(LIBRARY_SCRIPT)
    assert got["devices"] == 1 and got["same"] and got["compiles"] == 2
    assert got["streams"] == got["cores"] and got["forced"] == 1 and got["accelerator"] == 1
