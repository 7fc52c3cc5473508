"""A notebook session with kernelcli, as a script (CI runs it: tests/stax/test_api.py).

A network is built with neural-tangents' stax names, its kernels computed in memory,
then the same network becomes a batch job through ``to_yaml()``, the job is run, and
its result opened and compared with the in-memory kernels. Run it from any folder:

    python examples/notebook.py

It writes ``notebook.yaml``, ``digits40.npy`` and ``runs/notebook/`` in the current folder.
"""

from pathlib import Path

import kernelcli.run

kernelcli.run.configure_host_devices()  # before jax is imported: one CPU device per core

import numpy as np  # noqa: E402

import kernelcli  # noqa: E402
from kernelcli import stax  # noqa: E402

DIGITS = Path(__file__).resolve().parent.parent / "configs" / "data" / "digits.npz"

# 1. A CNN with global average pooling, as a neural-tangents user writes it.
net = stax.serial(
    stax.Conv(64, (3, 3), padding="SAME", W_std=2 ** 0.5, b_std=0.05), stax.Relu(),
    stax.Conv(64, (3, 3), padding="SAME", W_std=2 ** 0.5, b_std=0.05), stax.Relu(),
    stax.GlobalAvgPool(), stax.Dense(10, W_std=1.0, b_std=0.0))
kfn = kernelcli.kernel_fn(net)

# 2. Its kernels on 40 digits, in memory: (40, 40) numpy arrays.
with np.load(DIGITS) as z:
    x = z["x"][:40].astype(np.float32) / 16.0
nngp, ntk = kfn(x, None, ("nngp", "ntk"))
print("NNGP", nngp.shape, "NTK", ntk.shape, "symmetric:", bool((ntk == ntk.T).all()))

# 3. The same network as a batch job: a config from to_yaml(), run by compute().
np.save("digits40.npy", x)
Path("notebook.yaml").write_text("name: notebook\ndata: {x1: digits40.npy}\n" + net.to_yaml()
                                 + "output: {run_dir: runs/notebook}\n")
result = kernelcli.compute("notebook.yaml", overwrite=True)
print("run:", result.result)

# 4. Open the finished run: kernels.h5's datasets, memory-mapped.
run = kernelcli.open_run("runs/notebook")
print("datasets:", run.names)
print("max |K_python - K_run|:", float(np.abs(run["ntk"] - ntk).max()))
