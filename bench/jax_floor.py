"""The floor under a first call: the README's fully connected network's kernel written in
plain jax (no kernelcli, no neural-tangents), one jitted program, its whole process timed
under each jax the bench runs: kernelcli's (this interpreter's) and neural-tangents'
(``bench/.venv-nt``, or ``NT_VENV``).

    python bench/jax_floor.py [--rounds 5]

What it answers: how much of kernelcli's first process on a tiny fully connected call
(bench/first_call.py --example fc) is jax's own start-up, lowering and compilation under
its version, which no change of kernelcli's can take away. The program is the network's
work (its inputs' Gram matrix, then two ReLU layers' arc-cosine map), float64, on 3
inputs of 12 features; fresh processes alternate, best of ``--rounds`` by wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = r"""
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
def kernel(x):
    g = x @ x.T / x.shape[1]
    for _ in range(2):
        d = jnp.sqrt(jnp.diag(g))
        c = jnp.clip(g / (d[:, None] * d[None, :]), -1, 1)
        t = jnp.arccos(c)
        g = d[:, None] * d[None, :] * (jnp.sin(t) + (jnp.pi - t) * c) / (2 * jnp.pi)
    return g
np.asarray(jax.jit(kernel)(np.random.default_rng(0).standard_normal((3, 12))))
print(jax.__version__)
"""


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    nt_venv = Path(os.environ.get("NT_VENV", Path(__file__).resolve().parent / ".venv-nt"))
    pythons = {"kernelcli's jax": sys.executable,
               "neural-tangents' jax": str(nt_venv / "bin" / "python")}
    best: dict = {}
    versions: dict = {}
    for _ in range(a.rounds):
        for name, python in pythons.items():
            start = time.perf_counter()
            out = subprocess.run([python, "-c", PROGRAM], capture_output=True, text=True,
                                 check=True)
            seconds = time.perf_counter() - start
            versions[name] = out.stdout.strip().splitlines()[-1]
            best[name] = min(best.get(name, seconds), seconds)
    print(f"plain jax, the fully connected net's kernel on 3 inputs, whole process, best of "
          f"{a.rounds}\n\n| jax | process s |\n|---|---:|")
    for name in pythons:
        print(f"| {versions[name]} ({name}) | {best[name]:.2f} |")


if __name__ == "__main__":
    main()
