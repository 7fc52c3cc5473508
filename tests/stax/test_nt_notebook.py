"""neural-tangents' Myrtle notebook (``notebooks/myrtle_kernel_with_neural_tangents.ipynb``
of neural-tangents 0.6.5, Copyright 2020 Google LLC, Apache License 2.0) run cell by
cell with kernelcli: its code cells as they are, with the two imports of
neural-tangents changed and, in the fast loop, fewer images (2 and 3 where the notebook
draws 10 and 50; ``--slow`` runs its own sizes).

``%%timeit`` cells run their body once, and the shell cells (``!pip``,
``!nvidia-smi``) are not Python. What differs is held here: the notebook's
``jit(ker_fn, static_argnames='get')`` is refused at the first call, in one line that
says to call ``kernel_fn`` itself, and the cells run as that line says; the notebook
before 0.6.5 (``W_std=np.sqrt(2.0)`` with ``import jax.numpy as np``, and
``static_argnums=(2,)``) builds the same network.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from kernelcli.errors import DataError

# The notebook's code cells, in order, as neural-tangents 0.6.5 ships them (less the
# trailing spaces of three lines, which the linter refuses and Python ignores).
CELLS = [
    '''\
!pip install -q --upgrade pip
!pip install -q --upgrade jax[cuda11_cudnn82] -f https://storage.googleapis.com/jax-releases/jax_cuda_releases.html
!pip install -q git+https://www.github.com/google/neural-tangents''',
    '''\
# Check which device you are running  before benchmarking
# For examples V100 can perform 40x double precision flops compared to P4
!nvidia-smi --query-gpu=gpu_name,driver_version,memory.total --format=csv''',
    '''\
from jax import config
# Enable float64 for JAX
config.update("jax_enable_x64", True)

from jax import jit
import functools
from jax import random

import neural_tangents as nt
from neural_tangents import stax
''',
    '''\
key = random.PRNGKey(0)''',
    '''\
# Network architecture described in
# Shankar et al., Neural Kernels Without Tangents, 2020.
# https://arxiv.org/abs/2003.02237

def MyrtleNetwork(depth, W_std=2**0.5, b_std=0.):
  layer_factor = {5: [2, 1, 1], 7: [2, 2, 2], 10: [3, 3, 3]}
  width = 1
  activation_fn = stax.Relu()
  layers = []
  conv = functools.partial(stax.Conv, W_std=W_std, b_std=b_std, padding='SAME')

  layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][0]
  layers += [stax.AvgPool((2, 2), strides=(2, 2))]
  layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][1]
  layers += [stax.AvgPool((2, 2), strides=(2, 2))]
  layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][2]
  layers += [stax.AvgPool((2, 2), strides=(2, 2))] * 3

  layers += [stax.Flatten(), stax.Dense(10, W_std, b_std)]

  return stax.serial(*layers)''',
    '''\
_, _, ker_fn = MyrtleNetwork(5)
ker_fn = jit(ker_fn, static_argnames='get')''',
    '''\
key1, key2 = random.split(key)
input_x1 = random.normal(key1, shape=(10, 32, 32, 3))
input_x2 = random.normal(key2, shape=(10, 32, 32, 3))''',
    '''\
# Note that library computes the full matrix thus lead to 2x inefficiency.
# With custom batching, only compute upper triangles.
# First loop during timing run includes jit compilation time and maybe slower.
%%timeit
kdd = ker_fn(input_x1, None, 'nngp').block_until_ready()''',
    '''\
%%timeit
ktd = ker_fn(input_x2, input_x1, 'nngp').block_until_ready()''',
    '''\
# Compute NNGP and NTK
%%timeit
kdd = ker_fn(input_x1, None, ('nngp', 'ntk'))
kdd.nngp.block_until_ready()''',
    '''\
_, _, ker_fn = MyrtleNetwork(5)
ker_fn = nt.batch(ker_fn, batch_size=10)''',
    '''\
input_x = random.normal(key, shape=(50, 32, 32, 3))''',
    '''\
# Note that library computes the full matrix thus lead to 2x inefficiency.
# With custom batching, only compute upper triangles.
# First loop during timing run includes jit compilation time and maybe slower.
%%timeit
kdd = ker_fn(input_x, None, 'nngp').block_until_ready()''',
    '''\
# Compute NNGP and NTK
%%timeit
kdd = ker_fn(input_x, None, ('nngp', 'ntk'))
kdd.nngp.block_until_ready()''',
]

# The notebook before neural-tangents 0.6.5 (2020 to 2023) wrote these two cells so.
OLDER = {
    4: CELLS[4].replace("def MyrtleNetwork(depth, W_std=2**0.5, b_std=0.):",
                        "import jax.numpy as np\n\n"
                        "def MyrtleNetwork(depth, W_std=np.sqrt(2.0), b_std=0.):"),
    5: CELLS[5].replace("static_argnames='get'", "static_argnums=(2,)"),
}

IMPORTS = {"import neural_tangents as nt": "import kernelcli.nt as nt",
           "from neural_tangents import stax": "from kernelcli import stax"}
REFUSED = ("x1: a traced value (DynamicJaxprTracer, inside jax.jit, vmap or grad) is not "
           "accepted: kernelcli's kernel_fn computes its matrices tiled, on the host, with "
           "programs it compiles itself, so it cannot be traced; call it without jit (write "
           "ker_fn = kernel_fn where neural-tangents code writes ker_fn = jit(kernel_fn, "
           "static_argnames='get')): its results are arrays that answer block_until_ready()")


def python(cell: str, small: bool) -> str:
    """The cell's Python: the imports changed, ``%%timeit`` run once, shell lines out."""
    for old, new in IMPORTS.items():
        cell = cell.replace(old, new)
    if small:
        cell = cell.replace("shape=(10, 32, 32, 3)", "shape=(2, 32, 32, 3)")
        cell = cell.replace("shape=(50, 32, 32, 3)", "shape=(3, 32, 32, 3)")
    return "\n".join(line for line in cell.splitlines()
                     if not line.startswith(("!", "%%timeit")))


@pytest.fixture
def namespace():
    """The notebook's globals; it switches on JAX's 64-bit mode, switched back after."""
    x64 = jax.config.jax_enable_x64
    yield {}
    jax.config.update("jax_enable_x64", x64)


def run(cells, namespace, small=True):
    for cell in cells:
        exec(python(cell, small), namespace)  # noqa: S102 - the notebook's own code


def check_notebook(cells, namespace, small):
    run(cells[:7], namespace, small)  # imports, the network, jit, the inputs
    with pytest.raises(DataError) as e:
        run(cells[7:8], namespace, small)
    assert str(e.value) == REFUSED
    # as the refusal says: ker_fn = kernel_fn
    exec("_, _, ker_fn = MyrtleNetwork(5)", namespace)  # noqa: S102
    run(cells[7:10], namespace, small)
    n = namespace["input_x1"].shape[0]
    assert namespace["ktd"].shape == (n, n) and namespace["ktd"].dtype == np.float64
    nngp, ntk = namespace["kdd"]
    assert nngp.shape == ntk.shape == (n, n) and nngp.dtype == np.float64
    run(cells[10:13], namespace, small)  # nt.batch: the kernel function itself
    nngp = namespace["kdd"]
    run(cells[13:], namespace, small)
    m = namespace["input_x"].shape[0]
    assert namespace["kdd"].ntk.shape == (m, m)
    np.testing.assert_array_equal(namespace["kdd"].nngp, nngp)


def test_the_myrtle_notebook_runs_as_the_jit_refusal_says(namespace):
    check_notebook(CELLS, namespace, small=True)


@pytest.mark.slow
def test_the_myrtle_notebook_at_its_own_sizes(namespace):
    check_notebook(CELLS, namespace, small=False)


def test_the_notebook_before_0_6_5_builds_the_same_network(namespace):
    """``W_std=np.sqrt(2.0)`` with ``import jax.numpy as np``: a 0-d jax array where a
    number goes; ``jit(ker_fn, static_argnums=(2,))``: refused as the other form."""
    run(CELLS[:4] + [OLDER[4], OLDER[5]] + CELLS[6:7], namespace)
    with pytest.raises(DataError) as e:
        run(CELLS[7:8], namespace)
    assert str(e.value) == REFUSED
    older, = namespace["MyrtleNetwork"](5)[2:]
    x = np.asarray(namespace["input_x1"])
    run(CELLS[4:5], namespace)  # 0.6.5's W_std=2**0.5
    *_, current = namespace["MyrtleNetwork"](5)
    np.testing.assert_array_equal(older(x, None, "ntk"), current(x, None, "ntk"))
