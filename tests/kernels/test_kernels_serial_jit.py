"""``SerialJit``: one compilation per device and argument shapes, never two at once,
and the same numbers as ``jax.jit``. Runs in a subprocess with two XLA host
devices, as ``kernelcli compute`` sets up, whatever the test process has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, os, threading, time
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp, numpy as np
    from kernelcli.kernels._xla import SerialJit  # the compile lock itself

    active, overlaps, compiles = [0], [0], []

    class Recording(SerialJit):
        def _compile(self, args):
            active[0] += 1
            overlaps[0] = max(overlaps[0], active[0])
            time.sleep(0.2)  # widen the window in which a second compile could start
            try:
                compiles.append(str(getattr(args[0], "sharding", "numpy")))
                return super()._compile(args)
            finally:
                active[0] -= 1

    def f(x, y):
        return jnp.sin(x) @ y + 1.0

    sj = Recording(f)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    y = np.ones((4, 2), np.float32)
    devs = jax.devices()
    results = {}

    def run(d, rep):
        args = [jax.device_put(a, devs[d]) for a in (x, y)]
        results[(d, rep)] = np.asarray(sj(*args))

    threads = [threading.Thread(target=run, args=(d, r)) for r in range(3) for d in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    small = np.asarray(sj(x[:2], y))  # another shape: one more compilation
    want = np.asarray(jax.jit(f)(x, y))
    print(json.dumps({
        "devices": len(devs), "compiles": len(compiles), "devices_compiled": len(set(compiles) - {"numpy"}),
        "max_concurrent": overlaps[0],
        "equal": all(np.array_equal(v, want) for v in results.values()),
        "small_equal": bool(np.array_equal(small, want[:2])),
    }))
''')


def _run() -> dict:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_serial_jit_compiles_once_per_device_and_shape_one_at_a_time():
    got = _run()
    assert got["devices"] == 2
    assert got["compiles"] == 3            # device 0, device 1, then the smaller shape
    assert got["devices_compiled"] == 2
    assert got["max_concurrent"] == 1      # six threads on two devices, one compile at a time
    assert got["equal"] and got["small_equal"]
