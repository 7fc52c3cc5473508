"""One program for all local devices: a per-device program mapped over a device mesh.

The cpu engine runs one thread per device, each calling the program compiled for its
device (XLA binds an executable to its devices, so that is one compilation per
device; the persistent compilation cache keys CPU programs by device too). The
accelerator engine instead compiles the per-device program once, as one SPMD program
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

from ..config import Engine
from ._xla import SerialJit

AXIS = "devices"


def _shard_map():
    if hasattr(jax, "shard_map"):  # jax >= 0.6
        return jax.shard_map
    from jax.experimental.shard_map import shard_map  # jax 0.4.30 .. 0.5

    return shard_map


def device_mesh(devices) -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.asarray(list(devices), dtype=object), (AXIS,))


def split(mesh) -> jax.sharding.NamedSharding:
    """Leading axis split over the mesh's devices."""
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicated(mesh) -> jax.sharding.NamedSharding:
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


def on_mesh(devices, mesh_calls: Optional[bool], engine: Engine) -> bool:
    """Whether calls on ``devices`` are one SPMD program over their mesh: on several
    devices, when ``mesh_calls`` says so, or (``None``) on the accelerator engine."""
    devices = [d for d in (devices or []) if d is not None]
    on = mesh_calls
    if on is None:
        on = engine.batched
    return bool(on) and len(devices) > 1


class Programs:
    """The compiled programs of one kernel function, each a ``SerialJit`` (compiled
    once per shape, kept): ``stats`` (the per-input pass), ``pairs`` (a pair batch),
    ``grid`` (a flat-input block), and through :meth:`mesh` the first two as one
    program over a device mesh. ``traced``: the functions they trace
    (``_layer_pass.Traced``); ``check``: called before each compilation, may raise
    (the CPU level's check, ``KernelFn._check_level``)."""

    def __init__(self, traced, dtype, options, check=lambda: None):
        self.stats = SerialJit(traced.stats_fn, dtype, check, compiler_options=options)
        self.pairs = SerialJit(traced.pairs_fn, dtype, check, compiler_options=options)
        self.grid = SerialJit(traced.grid_fn, dtype, check, compiler_options=options)
        self._traced = traced
        self._dtype = dtype
        self._options = options
        self._check = check
        self._mesh_jits: dict = {}  # (program, device ids) -> SerialJit over that mesh

    def mesh(self, program: str, mesh) -> SerialJit:
        """The per-device ``program`` ("pairs" or "stats") as one program over ``mesh``,
        compiled once per shape (kept)."""
        key = (program, tuple(d.id for d in mesh.devices.flat))
        if key not in self._mesh_jits:
            if program == "pairs":  # inputs and variances replicated, indices split
                fn = mapped(self._traced.pairs_fn, mesh,
                            (False, False, False, False, True, True))
            else:
                fn = mapped(self._traced.stats_fn, mesh, (True,))
            self._mesh_jits[key] = SerialJit(fn, self._dtype, self._check,
                                             compiler_options=self._options)
        return self._mesh_jits[key]
