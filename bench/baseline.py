"""Peak RSS of a bare jax process in this interpreter: import jax, one tiny jitted
call. The runtime floor every measurement of this venv includes, so the report can
also compare what each tool adds on top of its own jax.

    python bench/baseline.py [--host-devices N]

``--host-devices``: the XLA host device count kernelcli sets up (one per core).
Prints one JSON line (jax version, peak RSS in bytes). Numpy and jax only: runs
under both the project venv and neural-tangents' venv.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host-devices", type=int, default=None)
    a = p.parse_args(argv)
    if a.host_devices:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                                   f"{a.host_devices}").strip()
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cases import report

    x = jnp.ones((8,), jnp.float32)
    jax.block_until_ready(jax.jit(lambda v: jnp.sin(v) * 2 + 1)(x))
    report(tool="baseline", jax=jax.__version__, devices=len(jax.devices()))


if __name__ == "__main__":
    main()
