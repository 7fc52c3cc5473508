"""One program for all local devices: a per-device program mapped over a device mesh.

The CPU plan runs one thread per device, each calling the program compiled for its
device (XLA binds an executable to its devices, so that is one compilation per
device; the persistent compilation cache keys CPU programs by device too). The
accelerator plan instead compiles the per-device program once, as one SPMD program
over a 1-D mesh of the devices (``shard_map``): the batch axis (pairs, or rows of
the per-input pass) is split into one shard per device, the block's inputs and
variances are replicated. Each device runs exactly the per-device program on its
shard, with no communication, so shard ``d`` of call ``c`` is the same work, and the
same bits, as job ``c * devices + d`` of the per-device path.
"""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np

from ._xla import SerialJit

AXIS = "devices"


def _shard_map():
    if hasattr(jax, "shard_map"):  # jax >= 0.6
        return jax.shard_map
    from jax.experimental.shard_map import shard_map  # jax 0.4.30 .. 0.5

    return shard_map


def device_mesh(devices) -> "jax.sharding.Mesh":
    return jax.sharding.Mesh(np.asarray(list(devices), dtype=object), (AXIS,))


def split(mesh) -> "jax.sharding.NamedSharding":
    """Leading axis split over the mesh's devices."""
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicated(mesh) -> "jax.sharding.NamedSharding":
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def mapped(fn, mesh, in_split, out_split=True):
    """``fn`` run on every device of ``mesh`` on its shard: ``in_split`` says per
    argument (a pytree prefix) whether its leading axis is split (else replicated);
    every output is split."""
    P = jax.sharding.PartitionSpec
    in_specs = jax.tree_util.tree_map(lambda s: P(AXIS) if s else P(), in_split)
    out_specs = P(AXIS) if out_split else P()
    shard_map = _shard_map()
    # No replication checking: the per-device program's loops carry values that start
    # replicated and become per-device, which the checker refuses; nothing is shared.
    try:
        return shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)
    except TypeError:  # jax < 0.6: the same switch's earlier name
        return shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_rep=False)


class MeshCalls:
    """The mesh path of a ``KernelFn`` (which has ``_pairs_fn``, ``_stats_fn``,
    ``dtype``, ``engine``, ``_options`` and ``_mesh_jits``)."""

    # Whether pair batches and per-input calls on several devices are one SPMD program
    # over their mesh (``_mesh.py``): the accelerator plan's way (one compilation for
    # all devices); None: by ``engine``. Tests set it to run the CPU plan's programs so.
    mesh_calls: Optional[bool] = None

    def _on_mesh(self, devices) -> bool:
        devices = [d for d in (devices or []) if d is not None]
        on = self.mesh_calls
        if on is None:
            on = self.engine == "accelerator"
        return bool(on) and len(devices) > 1

    def _mesh_jit(self, program: str, mesh) -> SerialJit:
        """The per-device ``program`` ("pairs" or "stats") as one program over ``mesh``,
        compiled once per shape (kept)."""
        key = (program, tuple(d.id for d in mesh.devices.flat))
        if key not in self._mesh_jits:
            if program == "pairs":  # inputs and variances replicated, indices split
                fn = mapped(self._pairs_fn, mesh, (False, False, False, False, True, True))
            else:
                fn = mapped(self._stats_fn, mesh, (True,))
            self._mesh_jits[key] = SerialJit(fn, self.dtype, compiler_options=self._options)
        return self._mesh_jits[key]
