"""``build_kernel_fn``: an architecture turned into compiled pair-batch kernels.

The work splits in two passes:

* ``stats(x)`` runs once per input: the self-pair ``(x, x)`` through the
  network, recording at every nonlinearity (and ``layer_norm``) the spatial
  diagonal of the input's own covariance, and the final ``K(x, x)``. Those
  per-input variances are all a pair evaluation needs from the single inputs,
  so they are never recomputed per pair or per tile.
* ``pairs(x1, s1, x2, s2, i, j)`` evaluates the kernels of an arbitrary batch of
  index pairs ``(x1[i[p]], x2[j[p]])``; a diagonal block of a symmetric matrix
  therefore costs ``n(n-1)/2`` pair evaluations, and a batch can be sized to a
  memory budget exactly. Diagonal entries come from ``stats``, so ``K(x, x)`` is
  by construction the value the variances were derived from.

With ``architecture.readouts`` both passes walk the body once, up to the last
readout, and apply the head to the state after each readout's layers; with
``kernel.augment`` they average over the flip group. What one traced program
evaluates is ``_layer_pass``' (``LayerPass``: the network on states; ``Traced``: the
functions the programs trace); the programs themselves are ``_programs.Programs`` and
XLA's memory estimate of them ``_memory_model.CompiledMemory``, parts that
``KernelFn`` holds and wires together with explicit arguments.

Each is one ``jax.jit`` program, compiled once per array shape; callers keep
shapes fixed (pad the last batch) so a long run compiles once. Networks that
flatten the raw input first evaluate a pair batch from its block's Gram matrix
(``_flat.py``). Calls are spread over devices by the one runner (``_runner.py``);
whole matrices are assembled tile by tile in the run layer
(:func:`kernelcli.run.kernel_matrix`), by the route ``compute`` takes.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import _env
from ..config import (
    ENGINE_NAMES,
    KINDS,
    Architecture,
    Engine,
    base_kind,
    bind_architecture,
    check_augment,
    flip_group,
    walk,
)
from ..errors import ConfigError, RunDirError
from . import _cpu_level, _native
from ._compose import SLAB_BYTES, any_full, count_variance_layers, live_states
from ._flat import is_flat_input
from ._input_stats import Stats
from ._layer_pass import LayerPass, Traced, trace
from ._memory_model import CompiledMemory, call_pairs
from ._programs import Programs, device_mesh, on_mesh, replicated, split
from ._runner import pad_rows, run_on_devices
from ._xla import compiler_options, default_chunk_bytes, x64_scope

# Live covariance bytes of one per-input call on the accelerator engine (no chunk loop:
# the call's rows are one program step).
STATS_CALL_BYTES = 256 << 20
STATS_CALL_ROWS = 1024  # and at most this many rows (the executor reads 1024 at a time)


class KernelFn:
    """NNGP/NTK of one architecture on inputs of one example shape.

    Args:
      arch: the validated architecture.
      input_shape: one example's shape: spatial sizes then channels, ``(L, C)``,
        ``(H, W, C)`` or ``(D, H, W, C)``; or ``(D,)`` for vectors.
      kinds: subset of ``("nngp", "ntk")``.
      dtype: ``"float32"`` (fast angle polynomial) or ``"float64"`` (the angle within a
        few units in the last place: ``_angle``).
      augment: flips (``"hflip"``, ``"vflip"``) whose group the kernel is averaged
        over (``kernel.augment``; ``_flip_group.py``); ``()``: the plain kernel.
      engine: the execution engine's name, ``"cpu"``, ``"native"`` or ``"accelerator"``
        (resolved: :func:`resolve_engine`); the kernels agree to rounding, not bit for bit.
      chunk: pairs per chunk of the cpu engine (``None``: from ``KERNELCLI_CHUNK_BYTES`` or
        the default); XLA compiles each chunk size's program differently, so its
        kernels differ in the last bits: a run records it and a resume passes it back.
      native_revision: the native engine's revision (``None``: ``_native.REVISION``); an
        earlier one's calls take fewer layers, so other bits: a run records it, a resume
        passes it.
      native_library: the identity of the native library the run's tiles were computed
        with (``None``: this process's); another is refused, never mixed.
      cpu_level: the CPU level the run's tiles were computed at (``None``: this
        process's, :func:`~._cpu_level.in_force`); on a CPU, a process at another level
        refuses to compile (:class:`RunDirError`), so it never adds other bits.

    ``engine`` (the attribute) is the :class:`~kernelcli.config.Engine` it computes with:
    the name, and for the native engine the revision and this process's library.
    """

    def __init__(self, arch: Architecture, input_shape: Sequence[int],
                 kinds: Sequence[str] = KINDS, dtype: str = "float32",
                 augment: Sequence[str] = (), engine: str = "cpu",
                 chunk: Optional[int] = None, native_revision: Optional[int] = None,
                 native_library: Optional[str] = None, cpu_level: Optional[str] = None):
        if engine not in ENGINE_NAMES:
            raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINE_NAMES)} "
                             f"(resolve 'auto' with resolve_engine first)")
        self.input_shape = tuple(int(s) for s in input_shape)
        # every filter/window/strides with one entry per spatial axis of the input
        self.arch = arch = bind_architecture(arch, self.input_shape)
        self.augment = tuple(augment)
        check_augment(arch.layers, self.input_shape, self.augment)
        self.n_spatial = len(self.input_shape) - 1
        # the flip group, identity first; ((),) without augment
        self.group = flip_group(self.augment, self.n_spatial) if self.augment else ((),)
        # ``kinds`` may name readouts' datasets (``nngp_d3``): their kinds are meant
        self.base_kinds = tuple(k for k in KINDS
                                if any(base_kind(n) == k for n in kinds))
        # the datasets computed: the kinds, or with readouts each readout's of each kind
        self.kinds = arch.kernel_names(self.base_kinds)
        self.dtype = np.dtype(dtype)
        ro = arch.readouts
        # the layers one pass evaluates: with readouts the body up to the last readout,
        # and the head once per readout
        evaluated = list(arch.layers if ro is None
                         else arch.layers[:ro.after[-1]] + ro.head * len(ro.after))
        spatial = len(self.input_shape) >= 2
        if engine == "native":
            why = _native.unavailable()
            if why is not None:
                raise ConfigError(f"compute.engine: 'native' cannot run here: {why}; "
                                  f"use auto, cpu or accelerator")
            library = _native.library().identity
            if native_library is not None and native_library != library:
                raise RunDirError(_native.identity_problem(native_library))  # a shard, a worker
            self.engine = Engine("native", int(native_revision or _native.REVISION), library,
                                 cpu_level or _cpu_level.in_force())
        else:
            self.engine = Engine(engine, cpu_level=cpu_level or _cpu_level.in_force())
        self._want_ntk = "ntk" in self.base_kinds
        self._net = LayerPass(arch, self.input_shape, self.base_kinds, self.group,
                              self.n_spatial, standard=arch.parameterization == "standard",
                              dtype=self.dtype, engine=self.engine)
        self.full_cov = spatial and any_full(evaluated)  # any layer's, branches included
        self.n_variances = count_variance_layers(evaluated)
        self.n_layers = sum(1 for _ in walk(evaluated))  # branches' layers included
        self._trace = trace(self._net, self.input_shape)
        self._check_output_is_flat()
        # Networks that flatten the raw input first (or take vectors) depend on a pair
        # only through the inputs' dot product: a block's Gram matrix is one GEMM.
        self.flat_input = is_flat_input(arch.layers, self.input_shape)
        self.cov_elements = self._max_cov_elements()
        chunk_bytes = _env.chunk_bytes() or default_chunk_bytes(
            spatial and not (self.full_cov or self.flat_input))
        per_pair = self.cov_elements * self.dtype.itemsize
        slab = max(1, SLAB_BYTES // per_pair)  # a chunk is whole slabs (see _compose)
        # accelerator: 1, no chunk loop at all (a call's pairs are one program step)
        self.chunk = (1 if self.engine.batched else int(chunk) if chunk is not None
                      else slab * max(1, chunk_bytes // (slab * per_pair)))
        self._traced = Traced(self._net, self.chunk, self.flat_input, self._trace.runs)
        self._use_programs(Programs(self._traced, self.dtype,
                                    compiler_options(self.full_cov), self._check_level))

    def _use_programs(self, programs: Programs) -> None:
        self._programs = programs
        self._stats_jit = self._programs.stats
        self._pairs_jit = self._programs.pairs
        self._grid_jit = self._programs.grid
        self._memory = CompiledMemory(self._programs, self.input_shape, self.dtype,
                                      self.variance_shapes, self.live_bytes_per_pair,
                                      self.uses_grid, self._on_mesh, self._whole_chunks,
                                      (len(self.kinds) * self.dtype.itemsize, 2 * 4))

    def work(self, pairs: int) -> int:
        """What ``pairs`` pairs cost, as the choice of quick programs counts it: pairs x
        the largest covariance's entries x layers (``_xla.QUICK_WORK``)."""
        return pairs * self.cov_elements * self.n_layers

    def quick(self) -> KernelFn:
        """A copy of this kernel function whose programs are compiled at XLA's lowest
        optimisation level (``_xla.compiler_options``): the same kernels to rounding, in
        half the compilation and several times the run time, for a library call of little
        work. A run never uses one: its programs are the ones its plan records."""
        other = copy.copy(self)
        other._use_programs(Programs(self._traced, self.dtype,
                                     compiler_options(self.full_cov, quick=True),
                                     other._check_level))
        return other

    def _whole_chunks(self, pairs: int) -> bool:
        """Whether a pairs call of ``pairs`` pairs (as :meth:`call_batch` makes them) is
        two or more whole chunks of the cpu engine's loop, one pair per index (no flip
        group, which evaluates each pair several times): the calls whose memory
        ``CompiledMemory`` relates without compiling each."""
        return (not self.engine.batched and not self.flat_input and len(self.group) == 1
                and pairs % self.chunk == 0 and pairs >= 2 * self.chunk)

    # Whether pair batches and per-input calls on several devices are one SPMD program
    # over their mesh (``_programs.py``): the accelerator engine's way (one compilation
    # for all devices); None: by ``engine``. Tests set it to run the cpu engine's
    # programs so.
    mesh_calls: Optional[bool] = None

    def _on_mesh(self, devices) -> bool:
        return on_mesh(devices, self.mesh_calls, self.engine)

    def _mesh_jit(self, program: str, mesh):
        return self._programs.mesh(program, mesh)

    # -- the memory model (``_memory_model``) ---------------------------------
    def compiled_memory(self, n_rows: int, n_cols: int, pair_batch: int,
                        arguments: bool = True) -> int:
        """See :meth:`CompiledMemory.compiled_memory` (of the call that batches of
        ``pair_batch`` pairs make: :meth:`call_batch`)."""
        return self._memory.compiled_memory(n_rows, n_cols, self.call_batch(pair_batch),
                                            arguments)

    def pairs_executable(self, n_rows: int, n_cols: int, pair_batch: int):
        """See :meth:`CompiledMemory.pairs_executable` (as :meth:`compiled_memory`)."""
        return self._memory.pairs_executable(n_rows, n_cols, self.call_batch(pair_batch))

    def call_batch(self, pair_batch: int) -> int:
        """Pairs one compiled call evaluates for batches of ``pair_batch`` pairs: on the
        cpu engine :func:`~._memory_model.call_pairs` (small batches padded to one
        program, larger ones to whole chunks); the accelerator engine and flat-input
        networks (a Gram matrix per block) call with the batch as it is."""
        if self.engine.batched or self.flat_input:
            return max(1, int(pair_batch))
        return call_pairs(pair_batch, self.chunk)

    def compiled_stats_memory(self, rows: int) -> int:
        """See :meth:`CompiledMemory.compiled_stats_memory`."""
        return self._memory.compiled_stats_memory(rows)

    def _scope(self):
        """JAX's precision mode of this kernel, for this thread (see ``x64_scope``)."""
        return x64_scope(self.dtype)

    def _check_level(self) -> None:
        _cpu_level.check_compiles(self.engine.cpu_level)

    def _check_output_is_flat(self):
        for s in self._trace.shapes[1].values():
            if s.shape != (1,):
                raise ConfigError(
                    "architecture.layers: the network's output still has spatial axes "
                    f"(per-example kernel shape {s.shape[1:]}); end it with flatten or "
                    "global_avg_pool (and usually a dense readout)")

    def _max_cov_elements(self) -> int:
        """Largest number of covariance entries one pair holds in any layer: the
        input's, or a later layer's where a layer grows the image (``conv_transpose``)
        or the full covariance starts after the input (``conv_local``)."""
        if len(self.input_shape) < 2:
            return 1
        return int(self._trace.largest)

    @property
    def variance_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Per-example shape of each recorded variance, e.g. ``((32, 32), (16, 16))``."""
        return tuple(s.shape[1:] for s in self._trace.shapes[0])

    @property
    def live_bytes_per_pair(self) -> int:
        """Bytes that must be alive per pair: each kind's covariance in and out of a layer
        (and, where the network branches, the branches' inputs and outputs too)."""
        live = live_states(self.arch.layers)
        if self.arch.readouts is not None:  # a head's input is kept for the body's next layer
            live = max(live, 1 + live_states(self.arch.readouts.head))
        arrays = live * (2 if self._want_ntk else 1)
        return arrays * self.cov_elements * self.dtype.itemsize

    # -- public API -------------------------------------------------------
    def _cast(self, x):
        with self._scope():
            return jnp.asarray(np.asarray(x, dtype=self.dtype))

    @property
    def stats_batch(self) -> int:
        """Most rows per call of the per-input pass: a few chunks; on the accelerator
        engine as many as hold ``STATS_CALL_BYTES`` of live covariances (at least 1)."""
        if self.engine.batched:
            return max(1, STATS_CALL_BYTES // max(1, self.live_bytes_per_pair))
        return max(self.chunk, 1) * 8

    def stats_rows(self, n: int) -> int:
        """Rows per call for ``n`` inputs: :attr:`stats_batch`, or fewer so that a short
        set still makes several calls (one per device, whatever the devices), but never
        less than a chunk: a call's chunks then have one shape whatever ``n``, so each
        input's numbers are the same bits whichever call it is in.

        On the accelerator engine a call is one program step: always
        ``min(stats_batch, STATS_CALL_ROWS)`` rows, the last call padded, whatever
        ``n``. A GPU's reductions (global pooling, flatten) may be tiled by the shape of
        the whole call, so one shape for every call of every run is what keeps an
        input's numbers the same bits in a run, its resume, a shard and a grown run
        (``kernelcli extend``)."""
        if self.engine.batched:
            return max(1, min(self.stats_batch, STATS_CALL_ROWS))
        if self.flat_input:  # a squared norm per input: not worth a compile per device
            return max(1, min(self.stats_batch, n))
        spread = max(self.chunk, -(-n // 8))
        return max(1, min(self.stats_batch, spread, n))

    def stats(self, x, devices=None, batch: Optional[int] = None) -> Stats:
        """Per-input variances and self-kernels of ``x`` (``(n, *input_shape)``), in
        calls of ``batch`` rows (default: up to :attr:`stats_batch`, see ``stats_rows``;
        the last call padded, so one compiled program), spread over ``devices``
        (default: the default device).
        The calls, and so the numbers, are the same whatever the devices."""
        x = np.asarray(x, dtype=self.dtype)
        n = x.shape[0]
        batch = max(1, min(batch, n)) if batch else self.stats_rows(n)
        if self._on_mesh(devices):  # call c: the per-device calls c*D .. c*D + D-1
            mesh = device_mesh(devices)
            batch *= len(mesh.devices.flat)
        starts = list(range(0, n, batch))
        parts: list[Any] = [None] * len(starts)  # each set by done()

        def work(device, b: int):
            rows = pad_rows(x[starts[b]:starts[b] + batch], batch)
            with self._scope():  # per thread: the runner's threads are not the caller's
                if isinstance(device, jax.sharding.Mesh):
                    return self._mesh_jit("stats", device)(jax.device_put(rows, split(device)))
                arg = jnp.asarray(rows) if device is None else jax.device_put(rows, device)
                return self._stats_jit(arg)

        def done(b: int, got) -> None:
            m = min(batch, n - starts[b])
            v, diag = got
            parts[b] = ([np.asarray(a)[:m] for a in v],
                        {k: np.asarray(diag[k])[:m] for k in self.kinds})

        where = [mesh] if self._on_mesh(devices) else list(devices or [None])
        run_on_devices(where, len(starts), work, done)
        return Stats.concat([Stats(tuple(p[0]), p[1]) for p in parts])

    def pairs(self, x1, s1: Stats, x2, s2: Stats, i, j) -> dict[str, jax.Array]:
        """Kernels of the pairs ``(x1[i[p]], x2[j[p]])``, each of shape ``(P,)``, in one
        call. ``x1``: ``(n1, *input_shape)``, ``s1`` its ``Stats``; likewise ``x2``,
        ``s2``; ``i``, ``j``: ``(P,)`` int32 row indices. Compiled once per shape tuple.
        """
        with self._scope():
            return self._pairs_jit(self._cast(x1), tuple(map(self._cast, s1.variances)),
                                   self._cast(x2), tuple(map(self._cast, s2.variances)),
                                   jnp.asarray(i, jnp.int32), jnp.asarray(j, jnp.int32))

    def uses_grid(self, n_rows: int, n_cols: int, pair_batch: int) -> bool:
        """Whether batches of ``pair_batch`` pairs of an ``n_rows x n_cols`` block are
        one call of the grid program (:meth:`grid_values`): a flat-input network whose
        batch holds the whole block."""
        return self.flat_input and pair_batch >= n_rows * n_cols

    def grid_values(self, x1, s1: Stats, x2, s2: Stats, device=None) -> dict[str, np.ndarray]:
        """Every pair of ``x1`` and ``x2`` of a flat-input network, ``{kind: (n1, n2)}``,
        in one call on ``device`` (default: the default device)."""
        cast = functools.partial(np.asarray, dtype=self.dtype)
        with self._scope():
            put = jnp.asarray if device is None else (lambda a: jax.device_put(a, device))
            got = self._grid_jit(put(cast(x1)), tuple(put(cast(v)) for v in s1.variances),
                                 put(cast(x2)), tuple(put(cast(v)) for v in s2.variances))
        return {k: np.asarray(got[k]) for k in self.kinds}

    def pair_values(self, x1, s1: Stats, x2, s2: Stats, i, j, pair_batch: int,
                    devices=None, on_batch: Optional[Callable[[int], None]] = None,
                    stop: Optional[Callable[[], object]] = None
                    ) -> Optional[dict[str, np.ndarray]]:
        """``pairs`` over any number of pairs, in calls of exactly ``pair_batch`` pairs
        (the last one padded with a repeat of its last pair: one compiled shape; a small
        batch padded to :meth:`call_batch`) spread
        over ``devices`` (default: the default device). Call ``k`` is always pairs
        ``[k*pair_batch, (k+1)*pair_batch)``, whichever device runs it, so the values
        are the same bits whatever the devices.

        ``on_batch(m)`` after each call of ``m`` real pairs; ``stop()`` true: no new
        call starts, and the result is ``None`` (some pairs were not evaluated).
        """
        total = len(i)
        out = {k: np.empty(total, self.dtype) for k in self.kinds}
        pb = max(1, int(pair_batch))
        size = self.call_batch(pb)  # the pairs of one call: ``pb`` and their padding
        where = list(devices or [None])
        if self._on_mesh(devices):  # call k: the per-device calls k*D .. k*D + D-1
            where = [device_mesh(devices)]
            pb *= len(devices)
            size *= len(devices)
        i = np.asarray(i, np.int32)
        j = np.asarray(j, np.int32)
        cast = functools.partial(np.asarray, dtype=self.dtype)
        inputs = (cast(x1), tuple(map(cast, s1.variances)),
                  cast(x2), tuple(map(cast, s2.variances)))
        placed: dict = {}  # device -> the inputs on it (each device has one thread)

        def work(device, k: int):
            put = jnp.asarray if device is None else (lambda a: jax.device_put(a, device))
            put_index, program = put, self._pairs_jit
            if isinstance(device, jax.sharding.Mesh):  # inputs on every device, pairs split
                put = functools.partial(jax.device_put, device=replicated(device))
                put_index = functools.partial(jax.device_put, device=split(device))
                program = self._mesh_jit("pairs", device)
            ii = pad_rows(i[k * pb:(k + 1) * pb], size)
            jj = pad_rows(j[k * pb:(k + 1) * pb], size)
            with self._scope():  # per thread: the runner's threads are not the caller's
                if device not in placed:
                    a1, v1, a2, v2 = inputs
                    placed[device] = (put(a1), tuple(map(put, v1)), put(a2),
                                      tuple(map(put, v2)))
                return program(*placed[device], put_index(ii), put_index(jj))

        def done(k: int, got) -> None:
            s = k * pb
            m = min(pb, total - s)
            for kind in self.kinds:
                out[kind][s:s + m] = np.asarray(got[kind])[:m]
            if on_batch is not None:
                on_batch(m)

        complete = run_on_devices(where, -(-total // pb), work, done, stop)
        return out if complete else None


def build_kernel_fn(arch: Architecture, input_shape: Sequence[int], kinds: Sequence[str] = KINDS,
                    dtype: str = "float32", augment: Sequence[str] = (), engine: str = "cpu",
                    chunk: Optional[int] = None, native_revision: Optional[int] = None,
                    native_library: Optional[str] = None, cpu_level: Optional[str] = None
                    ) -> KernelFn:
    """The compiled NNGP/NTK of ``arch`` for examples of shape ``input_shape``; with
    ``augment``, averaged over that flip group (``kernel.augment``); ``engine``: the
    execution engine (``"cpu"``, ``"native"`` or ``"accelerator"``, see :func:`resolve_engine`);
    ``chunk``, ``native_revision``, ``native_library``, ``cpu_level``: see :class:`KernelFn`."""
    return KernelFn(arch, input_shape, kinds, dtype, augment, engine, chunk, native_revision,
                    native_library, cpu_level)

